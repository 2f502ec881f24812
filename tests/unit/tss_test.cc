// TSS sealing (wire/tss.h): what a sealed packet looks like, that every
// change to it is caught, and the anti-replay window.
#include <gtest/gtest.h>

#include <vector>

#include "wire/byte_order.h"
#include "wire/frame.h"
#include "wire/pds.h"
#include "wire/ses.h"
#include "wire/tss.h"

namespace braid::wire {
namespace {

constexpr TssSecret kSecret = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6,
                               7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2};
constexpr uint32_t kSrc = 0xc6120001, kDst = 0xc6120002;
const TssDirection kDir{kSrc, kDst, 5, 6, 0x3c1f77};

// A request: its PDS header, 44 bytes standing for SES, `payload` bytes.
std::vector<uint8_t> packet(size_t payload) {
  std::vector<uint8_t> p(kRequestSize + kSesStandardSize + payload + kTssOverhead);
  RequestHeader h;
  h.pro.type = static_cast<uint8_t>(PdsType::kRudReq);
  h.pro.next_hdr = static_cast<uint8_t>(NextHeader::kSesStandard);
  h.psn = 1234;
  h.spdcid = 5;
  h.dpdcid = 6;
  encode_request(p.data(), h);
  for (size_t i = kRequestSize; i < p.size() - kTssOverhead; ++i) p[i] = static_cast<uint8_t>(i);
  return p;
}

TEST(Tss, ASealedPacketOpensToWhatWasSealed) {
  auto tx = TssKey::derive(kSecret, kDir, 7);
  auto rx = TssKey::derive(kSecret, kDir, 7);
  ASSERT_TRUE(tx && rx);
  for (const size_t payload : {size_t{0}, size_t{1}, size_t{1416}, size_t{8916}}) {
    std::vector<uint8_t> p = packet(payload);
    const size_t body = p.size() - kTssOverhead;
    const std::vector<uint8_t> clear(p.begin(), p.begin() + static_cast<long>(body));
    const uint64_t counter = tx->next_counter();
    ASSERT_EQ(tx->seal(p.data(), body, kSrc, kDst), p.size());
    TssHeader h;
    ASSERT_EQ(decode_tss_header(p.data(), p.size(), &h), kTssHeaderSize);
    EXPECT_EQ(h.sdi, 7u);
    EXPECT_EQ(h.counter, counter);
    EXPECT_FALSE(h.ssi_present);
    // The PDS header is in clear after the security header; the rest is not.
    EXPECT_TRUE(std::equal(clear.begin(), clear.begin() + kRequestSize, p.begin() + 12));
    if (payload > 0) {
      EXPECT_FALSE(
          std::equal(clear.begin() + kRequestSize, clear.end(), p.begin() + 12 + kRequestSize));
    }
    std::vector<uint8_t> out(p.size());
    ASSERT_EQ(rx->open(p.data(), p.size(), h, kSrc, kDst, out.data()), body);
    EXPECT_TRUE(std::equal(clear.begin(), clear.end(), out.begin()));
  }
}

TEST(Tss, EveryChangedBitAndEveryOtherKeyOrAddressFails) {
  auto tx = TssKey::derive(kSecret, kDir, 7);
  auto rx = TssKey::derive(kSecret, kDir, 7);
  std::vector<uint8_t> p = packet(100);
  ASSERT_GT(tx->seal(p.data(), p.size() - kTssOverhead, kSrc, kDst), 0u);
  std::vector<uint8_t> out(p.size());
  TssHeader h;
  ASSERT_GT(decode_tss_header(p.data(), p.size(), &h), 0u);
  ASSERT_GT(rx->open(p.data(), p.size(), h, kSrc, kDst, out.data()), 0u);
  // Each bit after the security header's first word (the counter, the PDS
  // header, the encrypted rest, the ICV).
  for (size_t i = 4; i < p.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> f = p;
      f[i] ^= static_cast<uint8_t>(1 << bit);
      TssHeader fh;
      ASSERT_GT(decode_tss_header(f.data(), f.size(), &fh), 0u);
      EXPECT_EQ(rx->open(f.data(), f.size(), fh, kSrc, kDst, out.data()), 0u) << i << ":" << bit;
    }
  }
  EXPECT_EQ(rx->open(p.data(), p.size(), h, kSrc + 1, kDst, out.data()), 0u);
  EXPECT_EQ(rx->open(p.data(), p.size(), h, kSrc, kDst + 1, out.data()), 0u);
  TssSecret other = kSecret;
  other[31] ^= 1;
  for (const auto& [secret, dir] :
       {std::pair{other, kDir}, std::pair{kSecret, TssDirection{kSrc, kDst, 5, 6, 0x3c1f78}},
        std::pair{kSecret, TssDirection{kSrc, kDst, 6, 5, 0x3c1f77}},
        std::pair{kSecret, TssDirection{kDst, kSrc, 5, 6, 0x3c1f77}}}) {
    auto wrong = TssKey::derive(secret, dir, 7);
    EXPECT_EQ(wrong->open(p.data(), p.size(), h, kSrc, kDst, out.data()), 0u);
  }
  // Truncated: no room for the ICV.
  EXPECT_EQ(rx->open(p.data(), kTssHeaderSize + kRequestSize + 8, h, kSrc, kDst, out.data()), 0u);
}

TEST(Tss, CountersNeverRepeatAndStartAtRandom) {
  auto a = TssKey::derive(kSecret, kDir, 1);
  auto b = TssKey::derive(kSecret, kDir, 1);  // the same names again (a QP made again)
  EXPECT_NE(a->next_counter(), b->next_counter());
  std::vector<uint8_t> p = packet(10), q = packet(10);
  a->seal(p.data(), p.size() - kTssOverhead, kSrc, kDst);
  a->seal(q.data(), q.size() - kTssOverhead, kSrc, kDst);
  EXPECT_EQ(load_be64(q.data() + 4), load_be64(p.data() + 4) + 1);
  EXPECT_NE(p, q);  // the same packet twice: other counter, other bytes
}

// The decoder reads a sealed packet's security and PDS headers and leaves
// the rest to the key; cut short, or trimmed by a switch, it is dropped.
TEST(Tss, DecodingASealedPacketReadsItsClearHeadersOnly) {
  auto tx = TssKey::derive(kSecret, kDir, 1);
  std::vector<uint8_t> p = packet(200);
  ASSERT_GT(tx->seal(p.data(), p.size() - kTssOverhead, kSrc, kDst), 0u);
  ParsedPacket pkt;
  ASSERT_EQ(decode_udp_payload(p.data(), p.size(), false, &pkt), DropReason::kNone);
  EXPECT_TRUE(pkt.sealed);
  EXPECT_EQ(pkt.pro.type, static_cast<uint8_t>(PdsType::kRudReq));
  EXPECT_EQ(pkt.req.psn, 1234u);
  EXPECT_EQ(pkt.req.dpdcid, 6u);
  EXPECT_FALSE(pkt.has_ses_request);
  EXPECT_EQ(pkt.payload_len, 0u);
  EXPECT_EQ(pkt.sealed_len, p.size());
  // CRC required or not, a sealed packet has none (its ICV covers more).
  EXPECT_EQ(decode_udp_payload(p.data(), p.size(), true, &pkt), DropReason::kNone);
  for (const size_t len : {size_t{11}, kTssHeaderSize + 2, kTssHeaderSize + kRequestSize + 15}) {
    EXPECT_EQ(decode_udp_payload(p.data(), len, false, &pkt), DropReason::kTruncatedPds) << len;
  }
  EXPECT_EQ(decode_udp_payload(p.data(), p.size(), false, &pkt, true), DropReason::kSealedTrimmed);
  uint16_t id = 0;
  std::vector<uint8_t> frame(kL2L4Size, 0);
  frame.insert(frame.end(), p.begin(), p.end());
  store_be16(frame.data() + 12, kEtherTypeIpv4);
  frame[kEthernetSize] = 0x45;
  frame[kEthernetSize + 9] = kIpProtoUdp;
  ASSERT_TRUE(peek_dpdcid(frame.data(), frame.size(), &id));  // engines steer it
  EXPECT_EQ(id, 6u);
}

TEST(Tss, TheReplayWindowTakesEachCounterOnceAndNothingTooOld) {
  TssReplayWindow w;
  const uint64_t start = 0xfffffffffff00000ull;
  EXPECT_TRUE(w.fresh(start));
  w.take(start);
  EXPECT_FALSE(w.fresh(start));
  // Out of order within the window: each once.
  for (const uint64_t c : {start + 5, start + 3, start + 4, start + 1}) {
    EXPECT_TRUE(w.fresh(c)) << c - start;
    w.take(c);
    EXPECT_FALSE(w.fresh(c)) << c - start;
  }
  EXPECT_TRUE(w.fresh(start + 2));
  // A jump: the counters left behind stay takeable while in the window.
  w.take(start + 2000);
  EXPECT_TRUE(w.fresh(start + 2));
  EXPECT_FALSE(w.fresh(start + 5));
  w.take(start + 2100);
  EXPECT_FALSE(w.fresh(start + 2));  // now below the window
  EXPECT_FALSE(w.fresh(start + 2100 - TssReplayWindow::kSize));
  EXPECT_TRUE(w.fresh(start + 2100 - TssReplayWindow::kSize + 1));
  EXPECT_FALSE(w.fresh(start + 2000));
  // Far ahead: all of it new.
  w.take(start + 100000);
  EXPECT_TRUE(w.fresh(start + 100000 - 1));
  EXPECT_FALSE(w.fresh(start + 100000));
}

}  // namespace
}  // namespace braid::wire
