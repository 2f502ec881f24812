// Single operations over a clean and a lossy simulated network.
#include <cstring>

#include "direct_pair.h"
#include "sim_pair.h"

namespace braid::test {
namespace {

TEST(BasicTransfer, WriteArrivesAndCompletes) {
  SimPairOptions o;
  o.link = four_path_link();
  SimPair p(o);
  std::vector<uint8_t> src(100'000), dst(100'000, 0);
  fill_pattern(src.data(), src.size(), 7);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), dst.size(),
                                                     kAccessLocalWrite | kAccessRemoteWrite, 0);
  SendRequest wr;
  wr.wr_id = 42;
  wr.opcode = Opcode::kWrite;
  wr.local = sgl_of(src.data(), static_cast<uint32_t>(src.size()));
  wr.remote_addr = reinterpret_cast<uintptr_t>(dst.data());
  wr.rkey = rkey;
  ASSERT_EQ(p.qa->post_send(wr), PostError::kOk);
  WorkCompletion wc;
  ASSERT_TRUE(p.run_until([&] { return p.a_scq.size() > 0; }));
  ASSERT_EQ(p.a_scq.poll(&wc, 1), 1u);
  EXPECT_EQ(wc.wr_id, 42u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(wc.opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(src, dst);
  EXPECT_EQ(p.qa->stats().retransmits, 0u);
}

}  // namespace
}  // namespace braid::test

namespace braid::test {
namespace {

// Frames whose payload stays in registered memory (Endpoint::transmit with
// TxOut::in_place_ok): the headers in the buffer followed by the referenced
// bytes are the frame a copy would have built. Large payloads go that way,
// small ones (under Connection::kExternalPayloadMin) and CRC-covered ones
// are copied.
void external_payload_transfer(bool crc) {
  ConnectionConfig cc;
  cc.mtu = 4096;
  DirectPair p(cc, 1024, crc);
  std::vector<uint8_t> src(100'000), dst(100'000, 0), small(500), inbox(500, 0);
  fill_pattern(src.data(), src.size(), 3);
  fill_pattern(small.data(), small.size(), 4);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), dst.size(),
                                                     kAccessLocalWrite | kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qb->post_recv(9, sgl_of(inbox.data(), 500)), PostError::kOk);
  SendRequest wr;
  wr.opcode = Opcode::kWrite;
  wr.local = sgl_of(src.data(), static_cast<uint32_t>(src.size()));
  wr.remote_addr = reinterpret_cast<uintptr_t>(dst.data());
  wr.rkey = rkey;
  ASSERT_EQ(p.qa->post_send(wr), PostError::kOk);
  SendRequest send;
  send.wr_id = 1;
  send.opcode = Opcode::kSend;
  send.local = sgl_of(small.data(), 500);
  ASSERT_EQ(p.qa->post_send(send), PostError::kOk);

  uint64_t in_place = 0, copied_data = 0;
  std::vector<uint8_t> buf(9216);
  for (int round = 0; round < 1000 && p.a_scq.size() < 2; ++round) {
    std::vector<Frame> ab;
    TxOut out{buf.data(), static_cast<uint32_t>(buf.size()), true};
    uint32_t n;
    while ((n = p.a.transmit(out, p.now)) > 0) {
      // Where it goes, told without parsing it.
      EXPECT_EQ(out.dst_ip, p.b.config().ip);
      EXPECT_EQ(out.dst_pdc, p.qb->config().local_id);
      Frame f(buf.begin(), buf.begin() + n);
      if (out.payload_len > 0) {
        ++in_place;
        EXPECT_GE(out.payload_len, Connection::kExternalPayloadMin);
        // It points into the posted buffer, not at a copy.
        EXPECT_GE(out.payload, src.data());
        EXPECT_LE(out.payload + out.payload_len, src.data() + src.size());
        f.insert(f.end(), out.payload, out.payload + out.payload_len);
      } else if (n > wire::kL2L4Size + 100) {
        ++copied_data;
      }
      ab.push_back(std::move(f));
    }
    p.now += 1000;
    p.deliver(p.b, ab);
    p.deliver(p.a, p.drain(p.b));
    p.a.advance(p.now);
    p.b.advance(p.now);
  }
  ASSERT_EQ(p.a_scq.size(), 2u);
  WorkCompletion wc[2];
  ASSERT_EQ(p.a_scq.poll(wc, 2), 2u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wc[1].status, WcStatus::kSuccess);
  EXPECT_EQ(src, dst);
  EXPECT_EQ(small, inbox);
  if (crc) {
    EXPECT_EQ(in_place, 0u);  // the trailer covers the payload: copied
  } else {
    // Every packet of the WRITE (24 of 4096 B and a 1696-byte tail);
    // the 500-byte SEND is copied.
    EXPECT_EQ(in_place, (src.size() + 4095) / 4096);
    EXPECT_EQ(copied_data, 1u);
  }
}

// Pacing counts a frame whole whether its payload is copied or left in
// place: the same paced WRITE leaves as many frames in the same time both
// ways. (Counting the headers alone let frames left in place go about 8
// times too fast: 252 in the millisecond against 31, the window their bound.)
uint32_t paced_frames(bool in_place) {
  ConnectionConfig cc;
  cc.mtu = 4096;
  cc.cc.algorithm = CcAlgorithm::kDcqcn;  // paced at its rate: the link's at first
  cc.cc.link_bps = 1'000'000'000;
  DirectPair p(cc);
  std::vector<uint8_t> src(4 << 20), dst(4 << 20, 0);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  EXPECT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(),
                                    static_cast<uint32_t>(src.size()), dst.data(), rkey)),
            PostError::kOk);
  std::vector<uint8_t> buf(9216);
  uint32_t frames = 0;
  // 1 ms of virtual time, looked at every microsecond; nothing is delivered
  // (no ACK opens or shrinks anything meanwhile).
  for (int us = 0; us < 1000; ++us) {
    p.now += 1000;
    p.a.advance(p.now);
    TxOut out{buf.data(), static_cast<uint32_t>(buf.size()), in_place};
    while (p.a.transmit(out, p.now) > 0) {
      if (out.payload_len > 0 || !in_place) ++frames;
      out = TxOut{buf.data(), static_cast<uint32_t>(buf.size()), in_place};
    }
  }
  return frames;
}

TEST(BasicTransfer, PacingCountsAFrameWholeWhenItsPayloadStaysInPlace) {
  const uint32_t copied = paced_frames(false);
  const uint32_t in_place = paced_frames(true);
  // 1 Gb/s for 1 ms is about 30 frames of 4 KiB.
  EXPECT_GT(copied, 10u);
  EXPECT_LT(copied, 60u);
  EXPECT_LE(in_place, copied + 1);
  EXPECT_GE(in_place + 1, copied);
}

TEST(BasicTransfer, LargePayloadsLeaveFromRegisteredMemory) {
  external_payload_transfer(false);
}
TEST(BasicTransfer, CrcCoveredPayloadsAreCopied) {
  external_payload_transfer(true);
}

}  // namespace
}  // namespace braid::test
