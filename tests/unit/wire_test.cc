// Unit tests for lib/wire: every PDS and SES header form round-trips and has
// the byte layout written out by hand below, every decoder rejects every
// truncation, decode_frame reports each DropReason for a crafted bad frame,
// FrameTemplate writes consistent IPv4/UDP headers and CRC-32C gives the
// published answers.
//
// Buffers handed to decoders are copied into heap blocks of exactly the given
// length, so an over-read is an ASan error rather than a silent pass.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "wire/byte_order.h"
#include "wire/crc32c.h"
#include "wire/frame.h"
#include "wire/pds.h"
#include "wire/ses.h"

namespace braid::wire {
namespace {

using Bytes = std::vector<uint8_t>;

// A heap copy of exactly `n` bytes (a zero-length block for n == 0).
std::vector<uint8_t> exact_copy(const uint8_t* p, size_t n) {
  return std::vector<uint8_t>(p, p + n);  // capacity == size: ASan sees over-reads
}

constexpr uint8_t kSentinel = 0xee;

// Encodes with `enc` into a sentinel-filled buffer, checks the reported size
// and that nothing past it was written, and returns the encoded bytes.
template <typename H, typename Enc>
Bytes encode_checked(Enc enc, const H& h, size_t expected_size) {
  std::array<uint8_t, 128> buf;
  buf.fill(kSentinel);
  const size_t n = enc(buf.data(), h);
  EXPECT_EQ(n, expected_size);
  for (size_t i = expected_size; i < buf.size(); ++i) {
    EXPECT_EQ(buf[i], kSentinel) << "encoder wrote past its header at byte " << i;
  }
  return Bytes(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(expected_size));
}

// Decodes `bytes` from an exact-size copy and checks the consumed length.
template <typename H, typename Dec>
H decode_checked(Dec dec, const Bytes& bytes) {
  auto copy = exact_copy(bytes.data(), bytes.size());
  H h{};
  EXPECT_EQ(dec(copy.data(), bytes.size(), &h), bytes.size());
  return h;
}

// Every proper prefix of `bytes` must be rejected with 0.
template <typename H, typename Dec>
void expect_all_truncations_rejected(Dec dec, const Bytes& bytes) {
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto copy = exact_copy(bytes.data(), len);
    H h{};
    EXPECT_EQ(dec(copy.data(), len, &h), 0u)
        << "accepted a " << len << "-byte prefix of a " << bytes.size() << "-byte header";
  }
}

Prologue make_pro(PdsType type, uint8_t next_hdr, uint8_t flags) {
  return Prologue{static_cast<uint8_t>(type), next_hdr, flags};
}

void expect_pro_eq(const Prologue& a, const Prologue& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.next_hdr, b.next_hdr);
  EXPECT_EQ(a.flags, b.flags);
}

// ---------------------------------------------------------------------------
// Prologue

TEST(WirePrologue, BitPositions) {
  uint8_t b[2];
  encode_prologue(b, make_pro(PdsType::kRudReq, 3, kReqFlagRetx | kReqFlagAckReq));
  // type 00010, next_hdr 0011, flags 0011000 -> 0001 0001 1001 1000
  EXPECT_EQ(b[0], 0x11);
  EXPECT_EQ(b[1], 0x98);

  encode_prologue(b, Prologue{0x1f, 0xf, 0x7f});
  EXPECT_EQ(b[0], 0xff);
  EXPECT_EQ(b[1], 0xff);

  const uint8_t ctrl[2] = {0x5c, 0x94};  // CTRL, ctl_type 9, RETX|SYN
  const Prologue p = decode_prologue(ctrl);
  EXPECT_EQ(p.type, static_cast<uint8_t>(PdsType::kCtrl));
  EXPECT_EQ(p.next_hdr, 9);
  EXPECT_EQ(p.flags, kReqFlagRetx | kReqFlagSyn);
}

// Each named flag at its UET bit position, written out as wire bytes (the
// independent vectors never set AR, P or HD, so these literals pin them).
TEST(WirePrologue, FlagPositions) {
  struct Case {
    const char* name;
    PdsType type;
    uint8_t flags;
    uint8_t byte1;  // second prologue byte with next_hdr 0
  };
  const Case cases[] = {
      {"REQ RETX", PdsType::kRudReq, kReqFlagRetx, 0x10},
      {"REQ AR", PdsType::kRudReq, kReqFlagAckReq, 0x08},
      {"REQ SYN", PdsType::kRudReq, kReqFlagSyn, 0x04},
      {"ACK M", PdsType::kAck, kAckFlagEcn, 0x20},
      {"ACK RETX", PdsType::kAck, kAckFlagRetx, 0x10},
      {"ACK P", PdsType::kAck, kAckFlagProbe, 0x08},
      {"ACK REQ=clear", PdsType::kAck, 1 << kAckReqShift, 0x02},
      {"ACK REQ=close", PdsType::kAck, 2 << kAckReqShift, 0x04},
      {"NACK NT", PdsType::kNack, kNackFlagType, 0x08},
  };
  for (const auto& c : cases) {
    uint8_t b[2];
    encode_prologue(b, make_pro(c.type, 0, c.flags));
    EXPECT_EQ(b[0], static_cast<uint8_t>(static_cast<uint8_t>(c.type) << 3)) << c.name;
    EXPECT_EQ(b[1], c.byte1) << c.name;
  }
  // SES request byte 1: version(2) DC IE REL HD EOM SOM.
  SesRequest s;
  const std::pair<uint8_t, uint8_t> ses_flags[] = {
      {kSesFlagSom, 0x01}, {kSesFlagEom, 0x02}, {kSesFlagHd, 0x04},
      {kSesFlagRel, 0x08}, {kSesFlagIe, 0x10},  {kSesFlagDc, 0x20},
  };
  for (const auto& [flag, byte1] : ses_flags) {
    std::array<uint8_t, kSesStandardSize> b{};
    s.flags = flag;
    encode_ses_request(b.data(), s);
    EXPECT_EQ(b[1], byte1);
  }
}

TEST(WirePrologue, OutOfRangeValuesDoNotSpill) {
  uint8_t b[2];
  encode_prologue(b, Prologue{0x21, 0x13, 0x80});  // each one bit too wide
  const Prologue p = decode_prologue(b);
  EXPECT_EQ(p.type, 0x01);
  EXPECT_EQ(p.next_hdr, 0x03);
  EXPECT_EQ(p.flags, 0x00);
}

TEST(WirePrologue, RequestTypes) {
  const std::set<uint8_t> requests = {0x02, 0x03, 0x0d, 0x0e};
  for (unsigned t = 0; t < 32; ++t) {
    EXPECT_EQ(is_request_type(static_cast<uint8_t>(t)),
              requests.count(static_cast<uint8_t>(t)) == 1)
        << "type " << t;
  }
}

// ---------------------------------------------------------------------------
// RUD / ROD requests

RequestHeader make_request(PdsType type, bool syn) {
  RequestHeader h;
  h.pro = make_pro(type, static_cast<uint8_t>(NextHeader::kSesStandard),
                   static_cast<uint8_t>(kReqFlagRetx | kReqFlagAckReq | (syn ? kReqFlagSyn : 0)));
  h.clear_psn_offset = 0xfedc;
  h.psn = 0x89abcdef;
  h.spdcid = 0x1357;
  if (syn) {
    h.pdc_info = 0x9;
    h.psn_offset = 0xabc;
  } else {
    h.dpdcid = 0x2468;
  }
  if (type == PdsType::kRudCcReq || type == PdsType::kRodCcReq) {
    h.ccc_id = 0x5a;
    h.credit_target = 0xa5b6c7;
  }
  return h;
}

void expect_request_eq(const RequestHeader& a, const RequestHeader& b) {
  expect_pro_eq(a.pro, b.pro);
  EXPECT_EQ(a.clear_psn_offset, b.clear_psn_offset);
  EXPECT_EQ(a.psn, b.psn);
  EXPECT_EQ(a.spdcid, b.spdcid);
  EXPECT_EQ(a.dpdcid, b.dpdcid);
  EXPECT_EQ(a.pdc_info, b.pdc_info);
  EXPECT_EQ(a.psn_offset, b.psn_offset);
  EXPECT_EQ(a.ccc_id, b.ccc_id);
  EXPECT_EQ(a.credit_target, b.credit_target);
}

struct RequestCase {
  const char* name;
  PdsType type;
  bool syn;
  size_t size;
};

const RequestCase kRequestCases[] = {
    {"RUD", PdsType::kRudReq, false, 12},      {"RUD_SYN", PdsType::kRudReq, true, 12},
    {"ROD", PdsType::kRodReq, false, 12},      {"ROD_SYN", PdsType::kRodReq, true, 12},
    {"RUD_CC", PdsType::kRudCcReq, false, 16}, {"RUD_CC_SYN", PdsType::kRudCcReq, true, 16},
    {"ROD_CC", PdsType::kRodCcReq, false, 16}, {"ROD_CC_SYN", PdsType::kRodCcReq, true, 16},
};

TEST(WireRequest, RoundTripAllForms) {
  for (const auto& c : kRequestCases) {
    SCOPED_TRACE(c.name);
    const RequestHeader h = make_request(c.type, c.syn);
    const Bytes b = encode_checked(encode_request, h, c.size);
    expect_request_eq(decode_checked<RequestHeader>(decode_request, b), h);
  }
}

TEST(WireRequest, TruncationRejected) {
  for (const auto& c : kRequestCases) {
    SCOPED_TRACE(c.name);
    const Bytes b = encode_checked(encode_request, make_request(c.type, c.syn), c.size);
    expect_all_truncations_rejected<RequestHeader>(decode_request, b);
  }
}

TEST(WireRequest, KnownBytesRud) {
  const Bytes expected = {0x11, 0x98, 0xfe, 0xdc, 0x89, 0xab, 0xcd, 0xef, 0x13, 0x57, 0x24, 0x68};
  EXPECT_EQ(encode_checked(encode_request, make_request(PdsType::kRudReq, false), 12), expected);
}

TEST(WireRequest, KnownBytesRudCcSyn) {
  // type 13 (01101), next_hdr 3, flags RETX|AR|SYN (0011100); pdc_info 9 and
  // psn_offset 0xabc share the last 16 bits; then ccc_id and credit_target.
  const Bytes expected = {0x69, 0x9c, 0xfe, 0xdc, 0x89, 0xab, 0xcd, 0xef,
                          0x13, 0x57, 0x9a, 0xbc, 0x5a, 0xa5, 0xb6, 0xc7};
  EXPECT_EQ(encode_checked(encode_request, make_request(PdsType::kRudCcReq, true), 16), expected);
}

TEST(WireRequest, DecodeClearsFieldsOfTheOtherForm) {
  // A SYN request leaves dpdcid 0; a non-SYN one leaves pdc_info/psn_offset 0,
  // whatever the struct held before.
  RequestHeader h;
  h.dpdcid = 0xffff;
  Bytes b = encode_checked(encode_request, make_request(PdsType::kRudReq, true), 12);
  auto copy = exact_copy(b.data(), b.size());
  ASSERT_EQ(decode_request(copy.data(), b.size(), &h), 12u);
  EXPECT_EQ(h.dpdcid, 0);
  EXPECT_EQ(h.ccc_id, 0);

  h.pdc_info = 0xf;
  h.psn_offset = 0xfff;
  h.ccc_id = 0xff;
  b = encode_checked(encode_request, make_request(PdsType::kRudReq, false), 12);
  copy = exact_copy(b.data(), b.size());
  ASSERT_EQ(decode_request(copy.data(), b.size(), &h), 12u);
  EXPECT_EQ(h.pdc_info, 0);
  EXPECT_EQ(h.psn_offset, 0);
  EXPECT_EQ(h.ccc_id, 0);
  EXPECT_EQ(h.credit_target, 0u);
}

// ---------------------------------------------------------------------------
// ACK, ACK_CC (NSCC and credit), ACK_CCX

AckHeader make_ack(PdsType type, CcType cc) {
  AckHeader h;
  h.pro = make_pro(type, static_cast<uint8_t>(NextHeader::kNone),
                   static_cast<uint8_t>(kAckFlagEcn | kAckFlagRetx | (1 << kAckReqShift)));
  h.ack_psn_offset = 0x0005;
  h.cack_psn = 0x01020304;
  h.spdcid = 0x0a0b;
  h.dpdcid = 0x0c0d;
  if (type == PdsType::kAck) return h;
  h.has_sack = true;
  h.mpr = 0x40;
  h.sack_psn_offset = 0x0011;
  h.sack_bitmap = 0x8000000000000001ULL;
  if (type == PdsType::kAckCcx) {
    h.cc_type = 0xe;  // ccx_type
    h.cc_flags = 0x5;
    h.ccx_state = 0x1122334455667788ULL;
    return h;
  }
  h.cc_type = static_cast<uint8_t>(cc);
  h.cc_flags = 0x3;
  if (cc == CcType::kCredit) {
    h.credit = 0x123456;
  } else {
    h.nscc.service_time = 0x1234;
    h.nscc.restore_cwnd = true;
    h.nscc.rcv_cwnd_pend = 0x05;
    h.nscc.rcvd_bytes = 0xabcdef;
  }
  h.nscc.ooo_count = 0x0102;
  return h;
}

void expect_ack_eq(const AckHeader& a, const AckHeader& b) {
  expect_pro_eq(a.pro, b.pro);
  EXPECT_EQ(a.ack_psn_offset, b.ack_psn_offset);
  EXPECT_EQ(a.cack_psn, b.cack_psn);
  EXPECT_EQ(a.spdcid, b.spdcid);
  EXPECT_EQ(a.dpdcid, b.dpdcid);
  EXPECT_EQ(a.has_sack, b.has_sack);
  if (!a.has_sack) return;
  EXPECT_EQ(a.cc_type, b.cc_type);
  EXPECT_EQ(a.cc_flags, b.cc_flags);
  EXPECT_EQ(a.mpr, b.mpr);
  EXPECT_EQ(a.sack_psn_offset, b.sack_psn_offset);
  EXPECT_EQ(a.sack_bitmap, b.sack_bitmap);
  if (a.pro.type == static_cast<uint8_t>(PdsType::kAckCcx)) {
    EXPECT_EQ(a.ccx_state, b.ccx_state);
    return;
  }
  EXPECT_EQ(a.credit, b.credit);
  EXPECT_EQ(a.nscc.service_time, b.nscc.service_time);
  EXPECT_EQ(a.nscc.restore_cwnd, b.nscc.restore_cwnd);
  EXPECT_EQ(a.nscc.rcv_cwnd_pend, b.nscc.rcv_cwnd_pend);
  EXPECT_EQ(a.nscc.rcvd_bytes, b.nscc.rcvd_bytes);
  EXPECT_EQ(a.nscc.ooo_count, b.nscc.ooo_count);
}

struct AckCase {
  const char* name;
  PdsType type;
  CcType cc;
  size_t size;
};

const AckCase kAckCases[] = {
    {"ACK", PdsType::kAck, CcType::kNscc, 12},
    {"ACK_CC_NSCC", PdsType::kAckCc, CcType::kNscc, 32},
    {"ACK_CC_CREDIT", PdsType::kAckCc, CcType::kCredit, 32},
    {"ACK_CCX", PdsType::kAckCcx, CcType::kNscc, 32},
};

TEST(WireAck, RoundTripAllForms) {
  for (const auto& c : kAckCases) {
    SCOPED_TRACE(c.name);
    const AckHeader h = make_ack(c.type, c.cc);
    const Bytes b = encode_checked(encode_ack, h, c.size);
    expect_ack_eq(decode_checked<AckHeader>(decode_ack, b), h);
  }
}

TEST(WireAck, TruncationRejected) {
  for (const auto& c : kAckCases) {
    SCOPED_TRACE(c.name);
    const Bytes b = encode_checked(encode_ack, make_ack(c.type, c.cc), c.size);
    expect_all_truncations_rejected<AckHeader>(decode_ack, b);
  }
}

TEST(WireAck, KnownBytesAckCcNscc) {
  const Bytes expected = {
      0x40, 0x32, 0x00, 0x05, 0x01, 0x02, 0x03, 0x04,  // prologue, ack_psn_offset, cack_psn
      0x0a, 0x0b, 0x0c, 0x0d, 0x03, 0x40, 0x00, 0x11,  // pdcids, cc_type|cc_flags, mpr, sack off
      0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,  // sack_bitmap
      0x12, 0x34, 0x85, 0xab, 0xcd, 0xef, 0x01, 0x02,  // service_time, R|pend, rcvd_bytes, ooo
  };
  EXPECT_EQ(encode_checked(encode_ack, make_ack(PdsType::kAckCc, CcType::kNscc), 32), expected);
}

TEST(WireAck, KnownBytesAckCcCredit) {
  const Bytes b = encode_checked(encode_ack, make_ack(PdsType::kAckCc, CcType::kCredit), 32);
  EXPECT_EQ(b[12], 0x13);  // cc_type 1, cc_flags 3
  const Bytes tail(b.begin() + 24, b.end());
  EXPECT_EQ(tail, (Bytes{0x12, 0x34, 0x56, 0x00, 0x00, 0x00, 0x01, 0x02}));
}

TEST(WireAck, KnownBytesAckCcx) {
  const Bytes b = encode_checked(encode_ack, make_ack(PdsType::kAckCcx, CcType::kNscc), 32);
  EXPECT_EQ(b[0], 0x48);   // type 9
  EXPECT_EQ(b[12], 0xe5);  // ccx_type 14, cc_flags 5
  EXPECT_EQ(load_be64(b.data() + 24), 0x1122334455667788ULL);
}

TEST(WireAck, ReqFieldIsTwoBitsAboveTheLowestFlag) {
  // REQ = 1 (clear request) is 0x02, REQ = 2 (close request) is 0x04.
  EXPECT_EQ(1 << kAckReqShift, 0x02);
  uint8_t b[2];
  encode_prologue(b, make_pro(PdsType::kAck, 0, 2 << kAckReqShift));
  EXPECT_EQ(b[1] & 0x7f, 0x04);
}

// ---------------------------------------------------------------------------
// NACK, NACK_CCX

NackHeader make_nack(PdsType type) {
  NackHeader h;
  h.pro = make_pro(type, static_cast<uint8_t>(NextHeader::kNone),
                   static_cast<uint8_t>(kAckFlagRetx | kNackFlagType));
  h.nack_code = static_cast<uint8_t>(NackCode::kNoPktBuf);
  h.vendor_code = 0xc3;
  h.nack_psn = 0xdeadbeef;
  h.spdcid = 0x0102;
  h.dpdcid = 0x0304;
  h.payload = 0xa1b2c3d4;
  if (type == PdsType::kNackCcx) {
    h.has_ccx = true;
    h.nccx_type = 0x6;
    h.nccx_state1 = 0x9;
    h.nccx_state2 = 0x00fedcba98765432ULL;
  }
  return h;
}

void expect_nack_eq(const NackHeader& a, const NackHeader& b) {
  expect_pro_eq(a.pro, b.pro);
  EXPECT_EQ(a.nack_code, b.nack_code);
  EXPECT_EQ(a.vendor_code, b.vendor_code);
  EXPECT_EQ(a.nack_psn, b.nack_psn);
  EXPECT_EQ(a.spdcid, b.spdcid);
  EXPECT_EQ(a.dpdcid, b.dpdcid);
  EXPECT_EQ(a.payload, b.payload);
  EXPECT_EQ(a.has_ccx, b.has_ccx);
  if (!a.has_ccx) return;
  EXPECT_EQ(a.nccx_type, b.nccx_type);
  EXPECT_EQ(a.nccx_state1, b.nccx_state1);
  EXPECT_EQ(a.nccx_state2, b.nccx_state2);
}

TEST(WireNack, RoundTripAndTruncation) {
  for (PdsType t : {PdsType::kNack, PdsType::kNackCcx}) {
    SCOPED_TRACE(static_cast<int>(t));
    const size_t size = t == PdsType::kNack ? kNackSize : kNackCcxSize;
    const NackHeader h = make_nack(t);
    const Bytes b = encode_checked(encode_nack, h, size);
    expect_nack_eq(decode_checked<NackHeader>(decode_nack, b), h);
    expect_all_truncations_rejected<NackHeader>(decode_nack, b);
  }
}

TEST(WireNack, KnownBytes) {
  const Bytes expected = {0x50, 0x18, 0x07, 0xc3, 0xde, 0xad, 0xbe, 0xef,
                          0x01, 0x02, 0x03, 0x04, 0xa1, 0xb2, 0xc3, 0xd4};
  EXPECT_EQ(encode_checked(encode_nack, make_nack(PdsType::kNack), 16), expected);
  const Bytes ccx = encode_checked(encode_nack, make_nack(PdsType::kNackCcx), 24);
  EXPECT_EQ(ccx[0], 0x60);  // type 12
  const Bytes tail(ccx.begin() + 16, ccx.end());
  EXPECT_EQ(tail, (Bytes{0x69, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32}));
}

// ---------------------------------------------------------------------------
// CTRL

CtrlHeader make_ctrl(bool syn) {
  CtrlHeader h;
  h.pro = make_pro(PdsType::kCtrl, static_cast<uint8_t>(CtrlType::kProbe),
                   static_cast<uint8_t>(kReqFlagRetx | kReqFlagAckReq | (syn ? kReqFlagSyn : 0)));
  h.probe_opaque = 0x4242;
  h.psn = 0x76543210;
  h.spdcid = 0x0a0a;
  if (syn) {
    h.pdc_info = 0x8;
    h.psn_offset = 0x123;
  } else {
    h.dpdcid = 0x0b0b;
  }
  return h;
}

void expect_ctrl_eq(const CtrlHeader& a, const CtrlHeader& b) {
  expect_pro_eq(a.pro, b.pro);
  EXPECT_EQ(a.probe_opaque, b.probe_opaque);
  EXPECT_EQ(a.psn, b.psn);
  EXPECT_EQ(a.spdcid, b.spdcid);
  EXPECT_EQ(a.dpdcid, b.dpdcid);
  EXPECT_EQ(a.pdc_info, b.pdc_info);
  EXPECT_EQ(a.psn_offset, b.psn_offset);
}

TEST(WireCtrl, RoundTripAndTruncation) {
  for (bool syn : {false, true}) {
    SCOPED_TRACE(syn ? "SYN" : "plain");
    const CtrlHeader h = make_ctrl(syn);
    const Bytes b = encode_checked(encode_ctrl, h, kCtrlSize);
    expect_ctrl_eq(decode_checked<CtrlHeader>(decode_ctrl, b), h);
    expect_all_truncations_rejected<CtrlHeader>(decode_ctrl, b);
  }
}

TEST(WireCtrl, KnownBytes) {
  // type 11 (01011), ctl_type 6 (0110), flags RETX|AR|SYN: 0101 1011 0001 1100
  const Bytes expected = {0x5b, 0x1c, 0x42, 0x42, 0x76, 0x54, 0x32, 0x10, 0x0a, 0x0a, 0x81, 0x23};
  EXPECT_EQ(encode_checked(encode_ctrl, make_ctrl(true), 12), expected);
}

// ---------------------------------------------------------------------------
// RUDI / UUD (decode only: Braid never sends them)

TEST(WireUnreliable, DecodeAndTruncation) {
  const Bytes rudi = {0x21, 0xa0, 0x00, 0x00, 0x99, 0x88, 0x77, 0x66};
  UnreliableHeader h = decode_checked<UnreliableHeader>(decode_unreliable, rudi);
  EXPECT_EQ(h.pro.type, static_cast<uint8_t>(PdsType::kRudiReq));
  EXPECT_EQ(h.pro.next_hdr, 3);
  EXPECT_EQ(h.pro.flags, 0x20);
  EXPECT_EQ(h.pkt_id, 0x99887766u);
  expect_all_truncations_rejected<UnreliableHeader>(decode_unreliable, rudi);

  const Bytes uud = {0x31, 0x80, 0x00, 0x00};
  h = decode_checked<UnreliableHeader>(decode_unreliable, uud);
  EXPECT_EQ(h.pro.type, static_cast<uint8_t>(PdsType::kUudReq));
  EXPECT_EQ(h.pkt_id, 0u);
  expect_all_truncations_rejected<UnreliableHeader>(decode_unreliable, uud);
}

// ---------------------------------------------------------------------------
// SES standard request, response, response with data

SesRequest make_ses_request(bool som) {
  SesRequest h;
  h.opcode = static_cast<uint8_t>(som ? SesOpcode::kWrite : SesOpcode::kSend);
  h.version = 0;
  h.flags = som ? (kSesFlagSom | kSesFlagEom | kSesFlagHd) : (kSesFlagEom | kSesFlagDc);
  h.message_id = 0xbeef;
  h.ri_generation = 0x11;
  h.job_id = 0x223344;
  h.pid_on_fep = 0x0abc;
  h.resource_index = 0x0def;
  h.buffer_offset = 0x0102030405060708ULL;
  h.initiator = 0x090a0b0c;
  h.memory_key = 0x1112131415161718ULL;
  if (som) {
    h.header_data = 0x2122232425262728ULL;
  } else {
    h.payload_length = 0x3fff;
    h.message_offset = 0x31323334;
  }
  h.request_length = 0x41424344;
  return h;
}

void expect_ses_request_eq(const SesRequest& a, const SesRequest& b) {
  EXPECT_EQ(a.opcode, b.opcode);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.message_id, b.message_id);
  EXPECT_EQ(a.ri_generation, b.ri_generation);
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.pid_on_fep, b.pid_on_fep);
  EXPECT_EQ(a.resource_index, b.resource_index);
  EXPECT_EQ(a.buffer_offset, b.buffer_offset);
  EXPECT_EQ(a.initiator, b.initiator);
  EXPECT_EQ(a.memory_key, b.memory_key);
  EXPECT_EQ(a.header_data, b.header_data);
  EXPECT_EQ(a.payload_length, b.payload_length);
  EXPECT_EQ(a.message_offset, b.message_offset);
  EXPECT_EQ(a.request_length, b.request_length);
}

TEST(WireSes, StandardRequestRoundTripAndTruncation) {
  for (bool som : {true, false}) {
    SCOPED_TRACE(som ? "SOM" : "non-SOM");
    const SesRequest h = make_ses_request(som);
    const Bytes b = encode_checked(encode_ses_request, h, kSesStandardSize);
    const SesRequest d = decode_checked<SesRequest>(decode_ses_request, b);
    expect_ses_request_eq(d, h);
    EXPECT_EQ(d.som(), som);
    EXPECT_TRUE(d.eom());
    expect_all_truncations_rejected<SesRequest>(decode_ses_request, b);
  }
}

TEST(WireSes, KnownBytesStandardSom) {
  const Bytes expected = {
      0x01, 0x07, 0xbe, 0xef, 0x11, 0x22, 0x33, 0x44, 0x0a, 0xbc, 0x0d, 0xef,  // common
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,                          // buffer_offset
      0x09, 0x0a, 0x0b, 0x0c,                                                  // initiator
      0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,                          // memory_key
      0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,                          // header_data
      0x41, 0x42, 0x43, 0x44,                                                  // request_length
  };
  EXPECT_EQ(encode_checked(encode_ses_request, make_ses_request(true), 44), expected);
}

TEST(WireSes, KnownBytesStandardNonSom) {
  const Bytes b = encode_checked(encode_ses_request, make_ses_request(false), 44);
  EXPECT_EQ(b[0], 0x05);
  EXPECT_EQ(b[1], 0x22);  // DC | EOM
  const Bytes mid(b.begin() + 32, b.begin() + 40);
  EXPECT_EQ(mid, (Bytes{0x00, 0x00, 0x3f, 0xff, 0x31, 0x32, 0x33, 0x34}));
}

TEST(WireSes, NonSomIgnoresReservedBitsAndSomIgnoresOffsets) {
  SesRequest h = make_ses_request(false);
  Bytes b = encode_checked(encode_ses_request, h, 44);
  b[32] = 0xff;  // reserved bits above payload_length
  b[33] = 0xff;
  b[34] |= 0xc0;
  const SesRequest d = decode_checked<SesRequest>(decode_ses_request, b);
  EXPECT_EQ(d.payload_length, 0x3fff);
  EXPECT_EQ(d.message_offset, 0x31323334u);
  EXPECT_EQ(d.header_data, 0u);

  h = make_ses_request(true);
  h.payload_length = 0x1234;  // not carried by a SOM packet
  h.message_offset = 0x5678;
  const SesRequest s =
      decode_checked<SesRequest>(decode_ses_request, encode_checked(encode_ses_request, h, 44));
  EXPECT_EQ(s.payload_length, 0);
  EXPECT_EQ(s.message_offset, 0u);
  EXPECT_EQ(s.header_data, h.header_data);
}

SesResponse make_response(bool with_data) {
  SesResponse h;
  h.list = with_data ? 0 : 1;
  h.opcode = static_cast<uint8_t>(with_data ? SesResponseOpcode::kResponseWithData
                                            : SesResponseOpcode::kResponse);
  h.version = 0;
  h.return_code = with_data ? 0x01 : 0x2a;
  h.message_id = 0x7001;
  h.job_id = 0x0a0b0c;
  if (with_data) {
    h.read_request_message_id = 0x6006;
    h.payload_length = 0x2abc;
    h.modified_length = 0x00100000;
    h.message_offset = 0x0000f000;
  } else {
    h.ri_generation = 0x5e;
    h.modified_length = 0x12345678;
  }
  return h;
}

void expect_response_eq(const SesResponse& a, const SesResponse& b) {
  EXPECT_EQ(a.list, b.list);
  EXPECT_EQ(a.opcode, b.opcode);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.return_code, b.return_code);
  EXPECT_EQ(a.message_id, b.message_id);
  EXPECT_EQ(a.ri_generation, b.ri_generation);
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.read_request_message_id, b.read_request_message_id);
  EXPECT_EQ(a.payload_length, b.payload_length);
  EXPECT_EQ(a.modified_length, b.modified_length);
  EXPECT_EQ(a.message_offset, b.message_offset);
}

TEST(WireSes, ResponseRoundTripAndTruncation) {
  const SesResponse h = make_response(false);
  const Bytes b = encode_checked(encode_ses_response, h, kSesResponseSize);
  expect_response_eq(decode_checked<SesResponse>(decode_ses_response, b), h);
  expect_all_truncations_rejected<SesResponse>(decode_ses_response, b);
  const Bytes expected = {0x41, 0x2a, 0x70, 0x01, 0x5e, 0x0a, 0x0b, 0x0c, 0x12, 0x34, 0x56, 0x78};
  EXPECT_EQ(b, expected);
}

TEST(WireSes, ResponseWithDataRoundTripAndTruncation) {
  const SesResponse h = make_response(true);
  const Bytes b = encode_checked(encode_ses_response_data, h, kSesResponseDataSize);
  expect_response_eq(decode_checked<SesResponse>(decode_ses_response_data, b), h);
  expect_all_truncations_rejected<SesResponse>(decode_ses_response_data, b);
  const Bytes expected = {0x02, 0x01, 0x70, 0x01, 0x00, 0x0a, 0x0b, 0x0c, 0x60, 0x06,
                          0x2a, 0xbc, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x00};
  EXPECT_EQ(b, expected);
}

// ---------------------------------------------------------------------------
// Frames

const MacAddr kSrcMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
const MacAddr kDstMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
constexpr uint32_t kSrcIp = 0x0a000001;  // 10.0.0.1
constexpr uint32_t kDstIp = 0x0a000002;
constexpr uint16_t kEntropy = 0xbeef;
constexpr uint8_t kTosData = kEcnEct0;  // DSCP 0, ECT(0)

// RFC 1071 checksum, written independently of ipv4_checksum().
uint16_t reference_checksum(const uint8_t* p, size_t len) {
  uint64_t sum = 0;
  for (size_t i = 0; i < len; i += 2) {
    const uint32_t hi = p[i];
    const uint32_t lo = i + 1 < len ? p[i + 1] : 0;
    sum += (hi << 8) | lo;
  }
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum & 0xffff);
}

// RUD_REQ + SES standard (SOM, WRITE) + `payload_len` bytes of pattern.
Bytes make_write_udp_payload(size_t payload_len) {
  Bytes out(kRequestSize + kSesStandardSize + payload_len);
  RequestHeader req = make_request(PdsType::kRudReq, false);
  req.pro.flags = 0;
  size_t off = encode_request(out.data(), req);
  off += encode_ses_request(out.data() + off, make_ses_request(true));
  for (size_t i = 0; i < payload_len; ++i) out[off + i] = static_cast<uint8_t>(i * 7 + 1);
  return out;
}

Bytes make_frame(const Bytes& udp_payload, uint8_t tos = kTosData,
                 uint16_t dst_port = kUetUdpPort) {
  const FrameTemplate t(kSrcMac, kDstMac, kSrcIp, kDstIp, dst_port);
  Bytes f(kL2L4Size + udp_payload.size());
  t.write(f.data(), kEntropy, static_cast<uint32_t>(udp_payload.size()), tos);
  if (!udp_payload.empty()) {
    std::memcpy(f.data() + kL2L4Size, udp_payload.data(), udp_payload.size());
  }
  return f;
}

void fix_ip_checksum(Bytes& f) {
  uint8_t* ip = f.data() + kEthernetSize;
  const size_t ihl = size_t{ip[0] & 0xfu} * 4;
  store_be16(ip + 10, 0);
  store_be16(ip + 10, reference_checksum(ip, ihl));
}

// Decodes a copy of `f`. The copy is gone on return, so out->payload is reset
// to null (only payload_len stays meaningful); tests that read payload bytes
// keep their own copy.
DropReason decode(const Bytes& f, ParsedPacket* out = nullptr, bool crc = false,
                  uint16_t port = kUetUdpPort) {
  auto copy = exact_copy(f.data(), f.size());
  ParsedPacket local;
  if (out == nullptr) out = &local;
  DecodeOptions opt;
  opt.udp_port = port;
  opt.crc_trailer = crc;
  const DropReason r = decode_frame(copy.data(), f.size(), opt, out);
  out->payload = nullptr;
  return r;
}

DropReason decode_payload(const Bytes& udp_payload, bool crc = false) {
  auto copy = exact_copy(udp_payload.data(), udp_payload.size());
  ParsedPacket out;
  return decode_udp_payload(copy.data(), udp_payload.size(), crc, &out);
}

// Steering reads the destination PDC id of every type that has one (as it
// was encoded), and of nothing else.
TEST(WireFrame, PeekFindsTheDestinationPdcOfEveryConnectedType) {
  auto frame_of = [](auto encode, const auto& h, size_t size) {
    Bytes udp(size + 8, 0);  // room for a little payload after the header
    EXPECT_EQ(encode(udp.data(), h), size);
    return make_frame(udp);
  };
  auto peek = [](const Bytes& f, uint16_t* id) {
    auto copy = exact_copy(f.data(), f.size());
    return peek_dpdcid(copy.data(), f.size(), id);
  };
  struct Case {
    Bytes frame;
    bool has_id;
    uint16_t id;
  };
  const std::vector<Case> cases = {
      {frame_of(encode_request, make_request(PdsType::kRudReq, false), kRequestSize), true, 0x2468},
      {frame_of(encode_request, make_request(PdsType::kRodCcReq, false), kRequestCcSize), true,
       0x2468},
      {frame_of(encode_request, make_request(PdsType::kRudReq, true), kRequestSize), false, 0},
      {frame_of(encode_ack, make_ack(PdsType::kAck, CcType::kNscc), kAckSize), true, 0x0c0d},
      {frame_of(encode_ack, make_ack(PdsType::kAckCc, CcType::kNscc), kAckCcSize), true, 0x0c0d},
      {frame_of(encode_ack, make_ack(PdsType::kAckCcx, CcType::kNscc), kAckCcSize), true, 0x0c0d},
      {frame_of(encode_nack, make_nack(PdsType::kNack), kNackSize), true, 0x0304},
      {frame_of(encode_ctrl, make_ctrl(false), kCtrlSize), true, make_ctrl(false).dpdcid},
      {frame_of(encode_ctrl, make_ctrl(true), kCtrlSize), false, 0},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const Case& c = cases[i];
    uint16_t id = 0xffff;
    ASSERT_EQ(peek(c.frame, &id), c.has_id);
    if (!c.has_id) continue;
    EXPECT_EQ(id, c.id);
    // Truncated anywhere before the id's last byte: no id, no read past it.
    for (size_t len = 0; len < kL2L4Size + 12; ++len) {
      auto cut = exact_copy(c.frame.data(), len);
      EXPECT_FALSE(peek_dpdcid(cut.data(), len, &id)) << len;
    }
  }
  // ARP, IPv6 and non-UDP frames carry none.
  Bytes arp = cases[0].frame;
  store_be16(arp.data() + 12, kEtherTypeArp);
  uint16_t id = 0;
  EXPECT_FALSE(peek(arp, &id));
  Bytes tcp = cases[0].frame;
  tcp[kEthernetSize + 9] = 6;
  EXPECT_FALSE(peek(tcp, &id));
  Bytes v6 = cases[0].frame;
  v6[kEthernetSize] = 0x65;
  EXPECT_FALSE(peek(v6, &id));
}

TEST(WireFrame, ValidFrameDecodesEveryLayer) {
  const Bytes udp = make_write_udp_payload(100);
  const Bytes f = make_frame(udp);
  auto copy = exact_copy(f.data(), f.size());
  ParsedPacket p;
  ASSERT_EQ(decode_frame(copy.data(), f.size(), DecodeOptions{}, &p), DropReason::kNone);
  EXPECT_EQ(p.dst_mac, kDstMac);
  EXPECT_EQ(p.src_mac, kSrcMac);
  EXPECT_EQ(p.ip.src, kSrcIp);
  EXPECT_EQ(p.ip.dst, kDstIp);
  EXPECT_EQ(p.ip.dscp, 0);
  EXPECT_EQ(p.ip.ecn, kEcnEct0);
  EXPECT_EQ(p.ip.ttl, 64);
  EXPECT_EQ(p.entropy, kEntropy);
  EXPECT_EQ(p.dst_port, kUetUdpPort);
  EXPECT_EQ(p.pro.type, static_cast<uint8_t>(PdsType::kRudReq));
  RequestHeader want = make_request(PdsType::kRudReq, false);
  want.pro.flags = 0;
  expect_request_eq(p.req, want);
  ASSERT_TRUE(p.has_ses_request);
  EXPECT_FALSE(p.has_ses_response);
  expect_ses_request_eq(p.ses, make_ses_request(true));
  EXPECT_EQ(p.payload, copy.data() + kL2L4Size + kRequestSize + kSesStandardSize);
  ASSERT_EQ(p.payload_len, 100u);
  EXPECT_EQ(p.payload[0], 1);
  EXPECT_EQ(p.payload[99], static_cast<uint8_t>(99 * 7 + 1));
}

TEST(WireFrame, AckResponseAndNoneNextHeaders) {
  // ACK_CC followed by an SES response; NACK with no SES header.
  Bytes udp(kAckCcSize + kSesResponseSize);
  AckHeader ack = make_ack(PdsType::kAckCc, CcType::kNscc);
  ack.pro.next_hdr = static_cast<uint8_t>(NextHeader::kSesResponse);
  encode_ack(udp.data(), ack);
  encode_ses_response(udp.data() + kAckCcSize, make_response(false));
  ParsedPacket p;
  ASSERT_EQ(decode(make_frame(udp, kDscpAck << 2), &p), DropReason::kNone);
  EXPECT_EQ(p.ip.dscp, kDscpAck);
  expect_ack_eq(p.ack, ack);
  EXPECT_FALSE(p.has_ses_request);
  ASSERT_TRUE(p.has_ses_response);
  expect_response_eq(p.resp, make_response(false));
  EXPECT_EQ(p.payload_len, 0u);

  Bytes nack(kNackSize + 3);
  encode_nack(nack.data(), make_nack(PdsType::kNack));
  ASSERT_EQ(decode(make_frame(nack), &p), DropReason::kNone);
  expect_nack_eq(p.nack, make_nack(PdsType::kNack));
  EXPECT_FALSE(p.has_ses_request);
  EXPECT_FALSE(p.has_ses_response);
  EXPECT_EQ(p.payload_len, 3u);

  Bytes rd(kRequestSize + kSesResponseDataSize + 8);
  RequestHeader req = make_request(PdsType::kRudReq, false);
  req.pro.next_hdr = static_cast<uint8_t>(NextHeader::kSesResponseData);
  encode_request(rd.data(), req);
  encode_ses_response_data(rd.data() + kRequestSize, make_response(true));
  ASSERT_EQ(decode(make_frame(rd), &p), DropReason::kNone);
  ASSERT_TRUE(p.has_ses_response);
  expect_response_eq(p.resp, make_response(true));
  EXPECT_EQ(p.payload_len, 8u);
}

TEST(WireFrame, CtrlLeavesTheRestAsPayload) {
  Bytes udp(kCtrlSize + 4);
  encode_ctrl(udp.data(), make_ctrl(false));
  store_be32(udp.data() + kCtrlSize, 0xcafef00d);
  const Bytes f = make_frame(udp);
  auto copy = exact_copy(f.data(), f.size());
  ParsedPacket p;
  ASSERT_EQ(decode_frame(copy.data(), f.size(), DecodeOptions{}, &p), DropReason::kNone);
  expect_ctrl_eq(p.ctrl, make_ctrl(false));
  EXPECT_FALSE(p.has_ses_request);
  ASSERT_EQ(p.payload_len, 4u);
  EXPECT_EQ(load_be32(p.payload), 0xcafef00du);
}

TEST(WireFrame, EthernetPaddingIsIgnored) {
  Bytes udp(kAckSize);
  encode_ack(udp.data(), make_ack(PdsType::kAck, CcType::kNscc));
  Bytes f = make_frame(udp);
  ASSERT_LT(f.size(), 60u);
  f.resize(60, 0);  // minimum Ethernet frame without FCS
  ParsedPacket p;
  ASSERT_EQ(decode(f, &p), DropReason::kNone);
  EXPECT_EQ(p.payload_len, 0u);
}

TEST(WireFrame, IpOptionsAreSkipped) {
  const Bytes udp = make_write_udp_payload(10);
  Bytes f = make_frame(udp);
  f.insert(f.begin() + kEthernetSize + kIpv4Size, {0x01, 0x01, 0x01, 0x00});  // NOP NOP NOP EOL
  uint8_t* ip = f.data() + kEthernetSize;
  ip[0] = 0x46;
  store_be16(ip + 2, static_cast<uint16_t>(load_be16(ip + 2) + 4));
  fix_ip_checksum(f);
  ParsedPacket p;
  ASSERT_EQ(decode(f, &p), DropReason::kNone);
  EXPECT_EQ(p.entropy, kEntropy);
  EXPECT_EQ(p.payload_len, 10u);
}

// decode_frame takes a short path for data requests; whatever it accepts
// must decode exactly as the general path does, and whatever it refuses
// must reach the general path. Frames of every shape the short path might
// take, and mutations of them (each byte changed, with the IP checksum
// fixed up or not; random bytes), under several decode options.
void expect_same_decode(const Bytes& f, const DecodeOptions& opt) {
  auto copy = exact_copy(f.data(), f.size());
  ParsedPacket a, b;
  const DropReason ra = decode_frame(copy.data(), f.size(), opt, &a);
  const DropReason rb = decode_frame_generic(copy.data(), f.size(), opt, &b);
  ASSERT_EQ(ra, rb);
  if (ra != DropReason::kNone) return;
  EXPECT_EQ(a.dst_mac, b.dst_mac);
  EXPECT_EQ(a.src_mac, b.src_mac);
  EXPECT_EQ(a.ip.src, b.ip.src);
  EXPECT_EQ(a.ip.dst, b.ip.dst);
  EXPECT_EQ(a.ip.dscp, b.ip.dscp);
  EXPECT_EQ(a.ip.ecn, b.ip.ecn);
  EXPECT_EQ(a.ip.ttl, b.ip.ttl);
  EXPECT_EQ(a.entropy, b.entropy);
  EXPECT_EQ(a.dst_port, b.dst_port);
  EXPECT_EQ(a.trimmed, b.trimmed);
  EXPECT_EQ(a.crc_checked, b.crc_checked);
  expect_pro_eq(a.pro, b.pro);
  ASSERT_EQ(a.has_ses_request, b.has_ses_request);
  ASSERT_EQ(a.has_ses_response, b.has_ses_response);
  if (is_request_type(a.pro.type)) expect_request_eq(a.req, b.req);
  if (a.has_ses_request) expect_ses_request_eq(a.ses, b.ses);
  if (a.has_ses_response) expect_response_eq(a.resp, b.resp);
  const auto t = static_cast<PdsType>(a.pro.type);
  if (t == PdsType::kAck || t == PdsType::kAckCc || t == PdsType::kAckCcx) {
    expect_ack_eq(a.ack, b.ack);
  }
  EXPECT_EQ(a.payload, b.payload);
  EXPECT_EQ(a.payload_len, b.payload_len);
}

TEST(WireFrame, ShortPathForDataDecodesAsTheGeneralPath) {
  std::vector<Bytes> frames;
  for (bool som : {true, false}) {
    for (size_t len : {0, 1, 100, 1400}) {
      Bytes udp(kRequestSize + kSesStandardSize + len);
      RequestHeader req = make_request(PdsType::kRudReq, false);
      req.pro.flags = som ? kReqFlagAckReq : kReqFlagRetx;
      encode_request(udp.data(), req);
      encode_ses_request(udp.data() + kRequestSize, make_ses_request(som));
      for (size_t i = 0; i < len; ++i) udp[kRequestSize + kSesStandardSize + i] = uint8_t(i);
      frames.push_back(make_frame(udp, som ? kTosData : uint8_t((46 << 2) | kEcnCe)));
      // A READ response with its data, and the same bytes under the SES
      // header the short path does not take (a response without data).
      for (NextHeader next : {NextHeader::kSesResponseData, NextHeader::kSesResponse}) {
        Bytes r(kRequestSize + kSesResponseDataSize + len);
        req.pro.next_hdr = static_cast<uint8_t>(next);
        encode_request(r.data(), req);
        SesResponse resp = make_response(true);
        resp.payload_length = static_cast<uint16_t>(len);
        resp.message_offset = som ? 0 : 0x5000;
        encode_ses_response_data(r.data() + kRequestSize, resp);
        for (size_t i = 0; i < len; ++i) r[kRequestSize + kSesResponseDataSize + i] = uint8_t(i);
        frames.push_back(make_frame(r, som ? kTosData : uint8_t((46 << 2) | kEcnCe)));
      }
    }
  }
  // ACKs of each type, CE-marked or not: the short path hands them to the
  // general one untouched.
  for (auto [type, cc] :
       {std::pair{PdsType::kAck, CcType::kNscc}, std::pair{PdsType::kAckCc, CcType::kNscc},
        std::pair{PdsType::kAckCc, CcType::kCredit}, std::pair{PdsType::kAckCcx, CcType::kNscc}}) {
    const AckHeader h = make_ack(type, cc);
    Bytes udp(type == PdsType::kAck ? kAckSize : kAckCcSize);
    encode_ack(udp.data(), h);
    frames.push_back(make_frame(udp, type == PdsType::kAckCc ? kTosData : uint8_t(kEcnCe)));
  }
  const size_t first_ack = frames.size() - 4;
  for (size_t k : {size_t{0}, size_t{1}, first_ack}) {  // a request, a READ response, an ACK
    frames.push_back(frames[k]);
    frames.back().resize(frames.back().size() + 20, 0);  // Ethernet padding
  }
  std::vector<DecodeOptions> opts(4);
  opts[1].trim_dscp = 46;
  opts[2].crc_trailer = true;
  opts[3].udp_port = 5000;
  std::mt19937 g(13);
  uint32_t accepted = 0;
  for (size_t k = 0; k < frames.size(); ++k) {
    SCOPED_TRACE(k);
    for (const DecodeOptions& opt : opts) {
      expect_same_decode(frames[k], opt);
      // Every byte of the headers, changed.
      const size_t headers = std::min(frames[k].size(), kL2L4Size + kRequestSize + 48);
      for (size_t i = 0; i < headers; ++i) {
        for (uint8_t x : {0x01, 0x04, 0x40, 0x80, 0xff}) {
          Bytes m = frames[k];
          m[i] ^= x;
          expect_same_decode(m, opt);
          if (i >= kEthernetSize && i < kEthernetSize + kIpv4Size &&
              (m[kEthernetSize] & 0xf) >= 5 &&
              size_t{m[kEthernetSize] & 0xfu} * 4 + kEthernetSize <= m.size()) {
            fix_ip_checksum(m);
            expect_same_decode(m, opt);
          }
        }
      }
      // Cut short anywhere.
      for (size_t n = 0; n < frames[k].size(); n += 7) {
        expect_same_decode(Bytes(frames[k].begin(), frames[k].begin() + n), opt);
      }
      // A few random bytes at once.
      for (int r = 0; r < 200; ++r) {
        Bytes m = frames[k];
        for (int j = 0; j < 3; ++j) m[g() % std::min(m.size(), headers)] = uint8_t(g());
        // (The checksum of a header the frame holds whole: an ACK's frame
        // is shorter than the longest IP header.)
        const bool fix = g() % 2;
        if (fix && size_t{m[kEthernetSize] & 0xfu} * 4 + kEthernetSize <= m.size()) {
          fix_ip_checksum(m);
        }
        expect_same_decode(m, opt);
      }
    }
    ParsedPacket p;
    if (decode(frames[k], &p) == DropReason::kNone) ++accepted;
  }
  EXPECT_EQ(accepted, frames.size());  // the unchanged frames all decode
}

TEST(WireFrameDrop, TruncatedEthernet) {
  const Bytes f = make_frame(make_write_udp_payload(0));
  for (size_t len = 0; len < kEthernetSize; ++len) {
    EXPECT_EQ(decode(Bytes(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len))),
              DropReason::kTruncatedEthernet)
        << len;
  }
}

TEST(WireFrameDrop, NotIpv4) {
  for (uint16_t et : {uint16_t{0x86dd}, kEtherTypeArp, uint16_t{0x8100}, uint16_t{0x0000}}) {
    Bytes f = make_frame(make_write_udp_payload(0));
    store_be16(f.data() + 12, et);
    EXPECT_EQ(decode(f), DropReason::kNotIpv4) << std::hex << et;
  }
  Bytes f = make_frame(make_write_udp_payload(0));
  f[kEthernetSize] = 0x65;  // version 6 behind an IPv4 ethertype
  fix_ip_checksum(f);
  EXPECT_EQ(decode(f), DropReason::kNotIpv4);
}

TEST(WireFrameDrop, BadIpHeader) {
  const Bytes good = make_frame(make_write_udp_payload(0));
  // Not even a minimal IPv4 header.
  EXPECT_EQ(decode(Bytes(good.begin(), good.begin() + kEthernetSize + kIpv4Size - 1)),
            DropReason::kBadIpHeader);
  for (uint8_t ihl : {0, 1, 4}) {
    Bytes f = good;
    f[kEthernetSize] = static_cast<uint8_t>(0x40 | ihl);
    EXPECT_EQ(decode(f), DropReason::kBadIpHeader) << int{ihl};
  }
  // IHL 15 (60 bytes) but the frame ends first.
  Bytes f(good.begin(), good.begin() + kEthernetSize + 40);
  f[kEthernetSize] = 0x4f;
  EXPECT_EQ(decode(f), DropReason::kBadIpHeader);
}

TEST(WireFrameDrop, BadIpChecksum) {
  Bytes f = make_frame(make_write_udp_payload(0));
  f[kEthernetSize + 11] ^= 0x01;
  EXPECT_EQ(decode(f), DropReason::kBadIpChecksum);
  f = make_frame(make_write_udp_payload(0));
  f[kEthernetSize + 8] ^= 0x80;  // TTL changed without updating the checksum
  EXPECT_EQ(decode(f), DropReason::kBadIpChecksum);
}

TEST(WireFrameDrop, IpFragment) {
  for (uint16_t frag : {uint16_t{0x2000}, uint16_t{0x0001}, uint16_t{0x1fff}, uint16_t{0x6000}}) {
    Bytes f = make_frame(make_write_udp_payload(0));
    store_be16(f.data() + kEthernetSize + 6, frag);
    fix_ip_checksum(f);
    EXPECT_EQ(decode(f), DropReason::kIpFragment) << std::hex << frag;
  }
  // DF alone is what Braid sends, and the reserved bit is not a fragment.
  Bytes f = make_frame(make_write_udp_payload(0));
  store_be16(f.data() + kEthernetSize + 6, 0x4000);
  fix_ip_checksum(f);
  EXPECT_EQ(decode(f), DropReason::kNone);
}

TEST(WireFrameDrop, BadIpLength) {
  const Bytes good = make_frame(make_write_udp_payload(0));
  const uint16_t total = load_be16(good.data() + kEthernetSize + 2);
  for (uint16_t bad :
       {static_cast<uint16_t>(total + 1), uint16_t{0xffff}, uint16_t{27}, uint16_t{0}}) {
    Bytes f = good;
    store_be16(f.data() + kEthernetSize + 2, bad);
    fix_ip_checksum(f);
    EXPECT_EQ(decode(f), DropReason::kBadIpLength) << bad;
  }
}

TEST(WireFrameDrop, NotUdp) {
  for (uint8_t proto : {6, 1, 253}) {
    Bytes f = make_frame(make_write_udp_payload(0));
    f[kEthernetSize + 9] = proto;
    fix_ip_checksum(f);
    EXPECT_EQ(decode(f), DropReason::kNotUdp) << int{proto};
  }
}

TEST(WireFrameDrop, BadUdpLength) {
  const Bytes good = make_frame(make_write_udp_payload(0));
  const uint16_t udp_len = load_be16(good.data() + kEthernetSize + kIpv4Size + 4);
  for (uint16_t bad : {static_cast<uint16_t>(udp_len + 1), static_cast<uint16_t>(udp_len - 1),
                       uint16_t{7}, uint16_t{0}}) {
    Bytes f = good;
    store_be16(f.data() + kEthernetSize + kIpv4Size + 4, bad);
    EXPECT_EQ(decode(f), DropReason::kBadUdpLength) << bad;
  }
}

TEST(WireFrameDrop, WrongUdpPort) {
  const Bytes roce = make_frame(make_write_udp_payload(0), kTosData, 4791);
  EXPECT_EQ(decode(roce), DropReason::kWrongUdpPort);
  // The port is configurable.
  EXPECT_EQ(decode(roce, nullptr, false, 4791), DropReason::kNone);
  EXPECT_EQ(decode(make_frame(make_write_udp_payload(0)), nullptr, false, 4791),
            DropReason::kWrongUdpPort);
}

TEST(WireFrameDrop, TruncatedPds) {
  EXPECT_EQ(decode(make_frame(Bytes{})), DropReason::kTruncatedPds);
  EXPECT_EQ(decode(make_frame(Bytes{0x11})), DropReason::kTruncatedPds);

  struct Case {
    const char* name;
    Bytes full;
  };
  std::vector<Case> cases;
  {
    Bytes b(kRequestCcSize);
    encode_request(b.data(), make_request(PdsType::kRudCcReq, false));
    cases.push_back({"RUD_CC", b});
    b.assign(kRequestSize, 0);
    encode_request(b.data(), make_request(PdsType::kRodReq, false));
    cases.push_back({"ROD", b});
    b.assign(kAckSize, 0);
    encode_ack(b.data(), make_ack(PdsType::kAck, CcType::kNscc));
    cases.push_back({"ACK", b});
    b.assign(kAckCcSize, 0);
    encode_ack(b.data(), make_ack(PdsType::kAckCc, CcType::kNscc));
    cases.push_back({"ACK_CC", b});
    b.assign(kAckCcSize, 0);
    encode_ack(b.data(), make_ack(PdsType::kAckCcx, CcType::kNscc));
    cases.push_back({"ACK_CCX", b});
    b.assign(kNackSize, 0);
    encode_nack(b.data(), make_nack(PdsType::kNack));
    cases.push_back({"NACK", b});
    b.assign(kNackCcxSize, 0);
    encode_nack(b.data(), make_nack(PdsType::kNackCcx));
    cases.push_back({"NACK_CCX", b});
    b.assign(kCtrlSize, 0);
    encode_ctrl(b.data(), make_ctrl(false));
    cases.push_back({"CTRL", b});
  }
  for (const auto& c : cases) {
    for (size_t len = 2; len < c.full.size(); ++len) {
      EXPECT_EQ(decode(make_frame(
                    Bytes(c.full.begin(), c.full.begin() + static_cast<std::ptrdiff_t>(len)))),
                DropReason::kTruncatedPds)
          << c.name << " cut to " << len;
    }
  }
}

TEST(WireFrameDrop, UnknownPdsType) {
  for (unsigned t : {0u, 1u, 15u, 16u, 31u}) {
    Bytes udp(kRequestSize + kSesStandardSize, 0);
    encode_prologue(udp.data(), Prologue{static_cast<uint8_t>(t), 0, 0});
    EXPECT_EQ(decode(make_frame(udp)), DropReason::kUnknownPdsType) << t;
    EXPECT_EQ(decode_payload(udp), DropReason::kUnknownPdsType) << t;
  }
}

TEST(WireFrameDrop, UnsupportedRudi) {
  for (PdsType t : {PdsType::kRudiReq, PdsType::kRudiResp}) {
    Bytes udp(kRudiSize + kSesStandardSize, 0);
    encode_prologue(udp.data(), make_pro(t, 3, 0));
    EXPECT_EQ(decode(make_frame(udp)), DropReason::kUnsupportedPdsType) << static_cast<int>(t);
  }
}

// A datagram (UUD) decodes with the standard SES request only; short ones
// are truncated.
TEST(WireFrameDrop, UudTakesTheStandardRequestOnly) {
  Bytes udp(kUudSize + kSesStandardSize + 10, 0);
  encode_prologue(udp.data(), make_pro(PdsType::kUudReq, 3, 0));
  ParsedPacket pkt;
  const Bytes f = make_frame(udp);
  ASSERT_EQ(decode_frame(f.data(), f.size(), DecodeOptions{}, &pkt), DropReason::kNone);
  EXPECT_TRUE(pkt.has_ses_request);
  EXPECT_EQ(pkt.payload_len, 10u);
  encode_prologue(udp.data(), make_pro(PdsType::kUudReq, 1, 0));
  EXPECT_EQ(decode(make_frame(udp)), DropReason::kUnknownNextHeader);
  encode_prologue(udp.data(), make_pro(PdsType::kUudReq, 3, 0));
  udp.resize(kUudSize + kSesStandardSize - 1);
  EXPECT_EQ(decode(make_frame(udp)), DropReason::kTruncatedSes);
  udp.resize(kUudSize - 1);
  EXPECT_EQ(decode(make_frame(udp)), DropReason::kTruncatedPds);
}

TEST(WireFrameDrop, TruncatedSes) {
  const Bytes full = make_write_udp_payload(0);
  for (size_t len = kRequestSize; len < full.size(); ++len) {
    EXPECT_EQ(
        decode(make_frame(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len)))),
        DropReason::kTruncatedSes)
        << len;
  }
  for (NextHeader nh : {NextHeader::kSesResponse, NextHeader::kSesResponseData}) {
    const size_t ses = nh == NextHeader::kSesResponse ? kSesResponseSize : kSesResponseDataSize;
    Bytes udp(kAckSize + ses - 1);
    AckHeader ack = make_ack(PdsType::kAck, CcType::kNscc);
    ack.pro.next_hdr = static_cast<uint8_t>(nh);
    encode_ack(udp.data(), ack);
    EXPECT_EQ(decode(make_frame(udp)), DropReason::kTruncatedSes) << static_cast<int>(nh);
    udp.push_back(0);
    EXPECT_EQ(decode(make_frame(udp)), DropReason::kNone) << static_cast<int>(nh);
  }
}

TEST(WireFrameDrop, UnknownNextHeader) {
  for (unsigned nh : {1u, 2u, 6u, 7u, 15u}) {
    Bytes udp = make_write_udp_payload(16);
    Prologue p = decode_prologue(udp.data());
    p.next_hdr = static_cast<uint8_t>(nh);
    encode_prologue(udp.data(), p);
    EXPECT_EQ(decode(make_frame(udp)), DropReason::kUnknownNextHeader) << nh;
  }
}

// Appends the big-endian CRC-32C of `udp` (the trailer Braid optionally adds).
Bytes with_crc(Bytes udp) {
  if (udp.size() > 1) udp[1] |= kFlagCrcTrailer;  // the prologue says a trailer follows
  const uint32_t c = crc32c(udp.data(), udp.size());
  udp.resize(udp.size() + 4);
  store_be32(udp.data() + udp.size() - 4, c);
  return udp;
}

TEST(WireFrameDrop, BadCrc) {
  const Bytes udp = with_crc(make_write_udp_payload(33));
  ParsedPacket p;
  ASSERT_EQ(decode(make_frame(udp), &p, true), DropReason::kNone);
  EXPECT_EQ(p.payload_len, 33u);
  // The prologue's flag says a trailer follows: it is checked and removed
  // whether or not the receiver requires one.
  ASSERT_EQ(decode(make_frame(udp), &p, false), DropReason::kNone);
  EXPECT_EQ(p.payload_len, 33u);
  Bytes bad_unrequired = udp;
  bad_unrequired[kRequestSize + 3] ^= 0x10;
  EXPECT_EQ(decode(make_frame(bad_unrequired), nullptr, false), DropReason::kBadCrc);
  // A packet without one is refused only where one is required.
  const Bytes plain = make_write_udp_payload(33);
  EXPECT_EQ(decode(make_frame(plain), nullptr, false), DropReason::kNone);
  EXPECT_EQ(decode(make_frame(plain), nullptr, true), DropReason::kNoCrc);

  for (size_t i :
       {size_t{0}, size_t{5}, kRequestSize + 3, udp.size() - 40, udp.size() - 5, udp.size() - 1}) {
    Bytes bad = udp;
    bad[i] ^= 0x10;
    EXPECT_EQ(decode(make_frame(bad), nullptr, true), DropReason::kBadCrc) << i;
    EXPECT_EQ(decode_payload(bad, true), DropReason::kBadCrc) << i;
  }
  // A payload too short to hold a prologue and a trailer.
  EXPECT_EQ(
      decode(make_frame(Bytes{0x11, 0x98 | kFlagCrcTrailer, 0x00, 0x00, 0x00}), nullptr, true),
      DropReason::kTruncatedPds);
}

TEST(WireFrameDrop, CrcIsCheckedBeforeTheHeaders) {
  // A correct CRC over a truncated request still reports the truncation...
  const Bytes cut = with_crc(Bytes{0x11, 0x98, 0x00});
  EXPECT_EQ(decode(make_frame(cut), nullptr, true), DropReason::kTruncatedPds);
  // ...and a corrupted trailer on a good packet is bad_crc, nothing else.
  Bytes udp = with_crc(make_write_udp_payload(0));
  udp.back() ^= 0xff;
  EXPECT_EQ(decode(make_frame(udp), nullptr, true), DropReason::kBadCrc);
}

// What a trimming switch leaves of `frame`: the first `keep` bytes of the UDP
// payload, with the IP DSCP re-marked to `dscp` and the lengths fixed up.
Bytes trim(const Bytes& frame, size_t keep, uint8_t dscp) {
  Bytes f(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(kL2L4Size + keep));
  uint8_t* ip = f.data() + kEthernetSize;
  ip[1] = static_cast<uint8_t>((dscp << 2) | (ip[1] & 3));
  store_be16(ip + 2, static_cast<uint16_t>(kIpv4Size + kUdpSize + keep));
  store_be16(ip + kIpv4Size + 4, static_cast<uint16_t>(kUdpSize + keep));
  fix_ip_checksum(f);
  return f;
}

DropReason decode_with(const Bytes& f, const DecodeOptions& opt, ParsedPacket* out) {
  auto copy = exact_copy(f.data(), f.size());
  const DropReason r = decode_frame(copy.data(), f.size(), opt, out);
  out->payload = nullptr;  // the copy is gone
  return r;
}

TEST(WireFrame, TrimmedPacketsKeepOnlyThePdsHeader) {
  constexpr uint8_t kTrimDscp = 0x0b;
  const Bytes full = make_frame(with_crc(make_write_udp_payload(200)));
  const Bytes cut = trim(full, kRequestSize + 10, kTrimDscp);  // cut inside the SES header
  DecodeOptions opt;
  opt.crc_trailer = true;
  opt.trim_dscp = kTrimDscp;
  ParsedPacket p;
  ASSERT_EQ(decode_with(cut, opt, &p), DropReason::kNone);
  EXPECT_TRUE(p.trimmed);
  EXPECT_EQ(p.ip.dscp, kTrimDscp);
  EXPECT_EQ(p.req.psn, make_request(PdsType::kRudReq, false).psn);
  EXPECT_FALSE(p.has_ses_request);
  EXPECT_EQ(p.payload_len, 0u);

  // The untrimmed packet is unaffected by the option.
  ASSERT_EQ(decode_with(full, opt, &p), DropReason::kNone);
  EXPECT_FALSE(p.trimmed);
  EXPECT_TRUE(p.has_ses_request);
  EXPECT_EQ(p.payload_len, 200u);

  // Without trimming configured the cut packet is just damaged.
  opt.trim_dscp = 0xff;
  EXPECT_EQ(decode_with(cut, opt, &p), DropReason::kBadCrc);
  opt.crc_trailer = false;  // its flag still says a trailer follows
  EXPECT_EQ(decode_with(cut, opt, &p), DropReason::kBadCrc);

  // A trimmed packet must still hold its whole PDS header.
  opt.trim_dscp = kTrimDscp;
  opt.crc_trailer = true;
  EXPECT_EQ(decode_with(trim(full, kRequestSize - 1, kTrimDscp), opt, &p),
            DropReason::kTruncatedPds);
}

TEST(WireFrame, DropReasonNamesAreDistinct) {
  std::set<std::string> names;
  for (int r = 0; r < static_cast<int>(DropReason::kCount); ++r) {
    const std::string n = drop_reason_name(static_cast<DropReason>(r));
    EXPECT_NE(n, "?") << r;
    EXPECT_TRUE(names.insert(n).second) << "duplicate name " << n;
  }
  EXPECT_STREQ(drop_reason_name(DropReason::kBadCrc), "bad_crc");
}

// ---------------------------------------------------------------------------
// FrameTemplate and the IPv4 checksum

TEST(WireChecksum, KnownAnswer) {
  // A classic worked example: 192.168.0.1 -> 192.168.0.199, UDP, DF.
  uint8_t hdr[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                     0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(ipv4_checksum(hdr, sizeof hdr), 0xb861);
  store_be16(hdr + 10, 0xb861);
  EXPECT_EQ(ipv4_checksum(hdr, sizeof hdr), 0);
}

TEST(WireFrameTemplate, WritesConsistentHeaders) {
  const FrameTemplate t(kSrcMac, kDstMac, kSrcIp, kDstIp, kUetUdpPort, 17);
  for (uint32_t len : {0u, 1u, 12u, 1000u, 4096u, 8958u, 65507u}) {
    for (uint8_t tos : {uint8_t{0x00}, uint8_t{0x02}, uint8_t{kDscpAck << 2}, uint8_t{0xff}}) {
      SCOPED_TRACE(testing::Message() << "len " << len << " tos " << int{tos});
      std::array<uint8_t, kL2L4Size> f;
      f.fill(0xaa);
      const uint16_t entropy = static_cast<uint16_t>(0x8000 | len);
      t.write(f.data(), entropy, len, tos);
      EXPECT_TRUE(std::equal(kDstMac.begin(), kDstMac.end(), f.begin()));
      EXPECT_TRUE(std::equal(kSrcMac.begin(), kSrcMac.end(), f.begin() + 6));
      EXPECT_EQ(load_be16(f.data() + 12), kEtherTypeIpv4);
      const uint8_t* ip = f.data() + kEthernetSize;
      EXPECT_EQ(ip[0], 0x45);
      EXPECT_EQ(ip[1], tos);
      EXPECT_EQ(load_be16(ip + 2), 28 + len);
      EXPECT_EQ(load_be16(ip + 6), 0x4000);  // DF, offset 0
      EXPECT_EQ(ip[8], 17);
      EXPECT_EQ(ip[9], kIpProtoUdp);
      EXPECT_EQ(load_be32(ip + 12), kSrcIp);
      EXPECT_EQ(load_be32(ip + 16), kDstIp);
      EXPECT_EQ(ipv4_checksum(ip, kIpv4Size), 0);
      std::array<uint8_t, kIpv4Size> zeroed;
      std::memcpy(zeroed.data(), ip, kIpv4Size);
      store_be16(zeroed.data() + 10, 0);
      EXPECT_EQ(load_be16(ip + 10), reference_checksum(zeroed.data(), kIpv4Size));
      const uint8_t* udp = ip + kIpv4Size;
      EXPECT_EQ(load_be16(udp), entropy);
      EXPECT_EQ(load_be16(udp + 2), kUetUdpPort);
      EXPECT_EQ(load_be16(udp + 4), 8 + len);
      EXPECT_EQ(load_be16(udp + 6), 0);
    }
  }
}

TEST(WireFrameTemplate, SetDstMacAndDecode) {
  FrameTemplate t(kSrcMac, kDstMac, 0xc0a80102, 0xc0a80103, 5000);
  const MacAddr other = {0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f};
  t.set_dst_mac(other);
  const Bytes udp = make_write_udp_payload(3);
  Bytes f(kL2L4Size + udp.size());
  t.write(f.data(), 1234, static_cast<uint32_t>(udp.size()), kEcnCe);
  std::memcpy(f.data() + kL2L4Size, udp.data(), udp.size());
  ParsedPacket p;
  ASSERT_EQ(decode(f, &p, false, 5000), DropReason::kNone);
  EXPECT_EQ(p.dst_mac, other);
  EXPECT_EQ(p.ip.src, 0xc0a80102u);
  EXPECT_EQ(p.ip.ecn, kEcnCe);
  EXPECT_EQ(p.entropy, 1234);
  EXPECT_EQ(p.payload_len, 3u);
}

// ---------------------------------------------------------------------------
// CRC-32C

uint32_t crc32c_bitwise(const uint8_t* p, size_t n, uint32_t crc = 0) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

Bytes pattern(size_t n, uint32_t seed) {
  Bytes b(n);
  uint32_t x = seed;
  for (auto& v : b) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(x >> 24);
  }
  return b;
}

TEST(WireCrc32c, CheckValue) {
  const char* s = "123456789";
  const auto* p = reinterpret_cast<const uint8_t*>(s);
  EXPECT_EQ(crc32c(p, 9), 0xe3069283u);
  EXPECT_EQ(crc32c_bitwise(p, 9), 0xe3069283u);
}

TEST(WireCrc32c, Rfc3720Vectors) {
  Bytes zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
  for (size_t i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62a8ab43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46dd794eu);
  EXPECT_EQ(crc32c(dec.data(), 32), 0x113fdb5cu);
}

// Lengths on both sides of where the three-stream rounds start and end
// (3 x 128 and 3 x 1024 bytes) and whole frames (MTU 1500 and 9000).
TEST(WireCrc32c, MatchesBitwiseReference) {
  const Bytes data = pattern(9018 + 8, 42);
  for (size_t len :
       {0u,   1u,   7u,   8u,    9u,    15u,   16u,   17u,   63u,   383u,  384u,  385u,  391u,
        392u, 767u, 768u, 1514u, 3071u, 3072u, 3073u, 3455u, 3456u, 3457u, 4096u, 6144u, 9018u}) {
    for (size_t misalign = 0; misalign < 8; ++misalign) {
      const uint8_t* p = data.data() + misalign;
      EXPECT_EQ(crc32c(p, len), crc32c_bitwise(p, len)) << "len " << len << " at +" << misalign;
    }
  }
  EXPECT_EQ(crc32c(data.data(), 0), 0u);
}

TEST(WireCrc32c, Chaining) {
  const Bytes data = pattern(9000, 7);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t split : {0u, 1u, 7u, 8u, 100u, 1499u, 1500u, 3072u, 5000u, 8999u, 9000u}) {
    const uint32_t a = crc32c(data.data(), split);
    EXPECT_EQ(crc32c(data.data() + split, data.size() - split, a), whole) << split;
  }
  EXPECT_EQ(crc32c_bitwise(data.data(), data.size()), whole);
}

// The atomic extension header as UET lays it out (code, datatype,
// semantic control, reserved; a compare-and-swap's values in 16-byte
// fields), with the two atomics Braid carries.
TEST(SesAtomic, EncodesUetsExtensionHeaderAndDecodesOnlyWhatBraidCarries) {
  uint8_t buf[64];
  SesAtomic a;
  a.code = kSesAtomicSum;
  a.operand = 0x0102030405060708ull;
  ASSERT_EQ(encode_ses_atomic(buf, a), 12u);
  const uint8_t sum[12] = {0x02, 0x07, 0x40, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(std::memcmp(buf, sum, 12), 0);
  SesAtomic d;
  ASSERT_EQ(decode_ses_atomic(buf, 12, &d), 12u);
  EXPECT_EQ(d.code, kSesAtomicSum);
  EXPECT_EQ(d.operand, a.operand);
  a.code = kSesAtomicCompareSwap;
  a.compare = 0x1111;
  a.operand = 0x2222;
  ASSERT_EQ(encode_ses_atomic(buf, a), 36u);
  EXPECT_EQ(buf[0], 0x0d);
  EXPECT_EQ(load_be64(buf + 4), 0x1111u);
  EXPECT_EQ(load_be64(buf + 20), 0x2222u);
  ASSERT_EQ(decode_ses_atomic(buf, 36, &d), 36u);
  EXPECT_EQ(d.compare, 0x1111u);
  EXPECT_EQ(d.operand, 0x2222u);
  // Refused: a length that is not the code's, a value beyond 64 bits, an
  // operation or datatype Braid does not carry, the reserved byte set.
  EXPECT_EQ(decode_ses_atomic(buf, 35, &d), 0u);
  buf[4 + 9] = 1;
  EXPECT_EQ(decode_ses_atomic(buf, 36, &d), 0u);
  buf[4 + 9] = 0;
  for (auto [at, value] : {std::pair{0, 0x0a}, std::pair{1, 0x05}, std::pair{3, 0x01}}) {
    uint8_t copy[36];
    std::memcpy(copy, buf, 36);
    copy[at] = static_cast<uint8_t>(value);
    EXPECT_EQ(decode_ses_atomic(copy, 36, &d), 0u) << at;
  }
  // The independent vectors' compare-and-swap header (code 0x11, FLOAT_COMPLEX).
  const uint8_t vector[4] = {0x11, 0x0c, 0xc7, 0x00};
  EXPECT_EQ(decode_ses_atomic(vector, 4, &d), 0u);
  EXPECT_EQ(d.code, 0x11);
  EXPECT_EQ(d.datatype, 0x0c);
  EXPECT_EQ(d.control, 0xc7);
}

}  // namespace
}  // namespace braid::wire
