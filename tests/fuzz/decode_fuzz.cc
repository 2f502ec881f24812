// libFuzzer target for Braid's receive path: decode_frame, decode_udp_payload
// and every per-header decoder, each followed by a re-encode / re-decode
// check of whatever decoded successfully; decode_frame's short path for data
// requests and READ responses is checked against decode_frame_generic on
// every input.
//
// Input layout: byte 0 selects the options, the rest is the packet.
//   bit 0     crc_trailer (the last 4 bytes of the UDP payload are CRC-32C)
//   bit 1     trimming on, with trim_dscp = bits 7..2 (decode_frame only)
// The rest is handed to decode_frame as an Ethernet frame and, independently,
// to decode_udp_payload and to each header decoder as if it began there.
//
// Seeds (tests/fuzz/corpus/): the frames of tests/data/uet-vectors/*.pcap
// prefixed with 0x00; a few of them with a CRC-32C trailer appended (UDP and
// IP lengths and the IP checksum fixed up) prefixed with 0x01; and a few bare
// UDP payloads prefixed with 0x00.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "rdmacm/cm_message.h"
#include "wire/byte_order.h"
#include "wire/crc32c.h"
#include "wire/frame.h"
#include "wire/pds.h"
#include "wire/ses.h"
#include "wire/tss.h"

namespace braid::wire {
namespace {

[[noreturn]] void mismatch(const char* what) {
  std::fprintf(stderr, "braid_decode_fuzz: re-decoded packet differs in %s\n", what);
  std::abort();
}

#define FUZZ_CHECK_EQ(a, b)                 \
  do {                                      \
    if ((a) != (b)) mismatch(#a " vs " #b); \
  } while (0)

void check_pro(const Prologue& a, const Prologue& b) {
  FUZZ_CHECK_EQ(a.type, b.type);
  FUZZ_CHECK_EQ(a.next_hdr, b.next_hdr);
  FUZZ_CHECK_EQ(a.flags, b.flags);
}

void check_request(const RequestHeader& a, const RequestHeader& b) {
  check_pro(a.pro, b.pro);
  FUZZ_CHECK_EQ(a.clear_psn_offset, b.clear_psn_offset);
  FUZZ_CHECK_EQ(a.psn, b.psn);
  FUZZ_CHECK_EQ(a.spdcid, b.spdcid);
  FUZZ_CHECK_EQ(a.dpdcid, b.dpdcid);
  FUZZ_CHECK_EQ(a.pdc_info, b.pdc_info);
  FUZZ_CHECK_EQ(a.psn_offset, b.psn_offset);
  FUZZ_CHECK_EQ(a.ccc_id, b.ccc_id);
  FUZZ_CHECK_EQ(a.credit_target, b.credit_target);
}

void check_ack(const AckHeader& a, const AckHeader& b) {
  check_pro(a.pro, b.pro);
  FUZZ_CHECK_EQ(a.ack_psn_offset, b.ack_psn_offset);
  FUZZ_CHECK_EQ(a.cack_psn, b.cack_psn);
  FUZZ_CHECK_EQ(a.spdcid, b.spdcid);
  FUZZ_CHECK_EQ(a.dpdcid, b.dpdcid);
  FUZZ_CHECK_EQ(a.has_sack, b.has_sack);
  if (!a.has_sack) return;
  FUZZ_CHECK_EQ(a.cc_type, b.cc_type);
  FUZZ_CHECK_EQ(a.cc_flags, b.cc_flags);
  FUZZ_CHECK_EQ(a.mpr, b.mpr);
  FUZZ_CHECK_EQ(a.sack_psn_offset, b.sack_psn_offset);
  FUZZ_CHECK_EQ(a.sack_bitmap, b.sack_bitmap);
  if (a.pro.type == static_cast<uint8_t>(PdsType::kAckCcx)) {
    FUZZ_CHECK_EQ(a.ccx_state, b.ccx_state);
    return;
  }
  FUZZ_CHECK_EQ(a.credit, b.credit);
  FUZZ_CHECK_EQ(a.nscc.service_time, b.nscc.service_time);
  FUZZ_CHECK_EQ(a.nscc.restore_cwnd, b.nscc.restore_cwnd);
  FUZZ_CHECK_EQ(a.nscc.rcv_cwnd_pend, b.nscc.rcv_cwnd_pend);
  FUZZ_CHECK_EQ(a.nscc.rcvd_bytes, b.nscc.rcvd_bytes);
  FUZZ_CHECK_EQ(a.nscc.ooo_count, b.nscc.ooo_count);
}

void check_nack(const NackHeader& a, const NackHeader& b) {
  check_pro(a.pro, b.pro);
  FUZZ_CHECK_EQ(a.nack_code, b.nack_code);
  FUZZ_CHECK_EQ(a.vendor_code, b.vendor_code);
  FUZZ_CHECK_EQ(a.nack_psn, b.nack_psn);
  FUZZ_CHECK_EQ(a.spdcid, b.spdcid);
  FUZZ_CHECK_EQ(a.dpdcid, b.dpdcid);
  FUZZ_CHECK_EQ(a.payload, b.payload);
  FUZZ_CHECK_EQ(a.has_ccx, b.has_ccx);
  if (!a.has_ccx) return;
  FUZZ_CHECK_EQ(a.nccx_type, b.nccx_type);
  FUZZ_CHECK_EQ(a.nccx_state1, b.nccx_state1);
  FUZZ_CHECK_EQ(a.nccx_state2, b.nccx_state2);
}

void check_ctrl(const CtrlHeader& a, const CtrlHeader& b) {
  check_pro(a.pro, b.pro);
  FUZZ_CHECK_EQ(a.probe_opaque, b.probe_opaque);
  FUZZ_CHECK_EQ(a.psn, b.psn);
  FUZZ_CHECK_EQ(a.spdcid, b.spdcid);
  FUZZ_CHECK_EQ(a.dpdcid, b.dpdcid);
  FUZZ_CHECK_EQ(a.pdc_info, b.pdc_info);
  FUZZ_CHECK_EQ(a.psn_offset, b.psn_offset);
}

void check_ses_request(const SesRequest& a, const SesRequest& b) {
  FUZZ_CHECK_EQ(a.opcode, b.opcode);
  FUZZ_CHECK_EQ(a.version, b.version);
  FUZZ_CHECK_EQ(a.flags, b.flags);
  FUZZ_CHECK_EQ(a.message_id, b.message_id);
  FUZZ_CHECK_EQ(a.ri_generation, b.ri_generation);
  FUZZ_CHECK_EQ(a.job_id, b.job_id);
  FUZZ_CHECK_EQ(a.pid_on_fep, b.pid_on_fep);
  FUZZ_CHECK_EQ(a.resource_index, b.resource_index);
  FUZZ_CHECK_EQ(a.buffer_offset, b.buffer_offset);
  FUZZ_CHECK_EQ(a.initiator, b.initiator);
  FUZZ_CHECK_EQ(a.memory_key, b.memory_key);
  FUZZ_CHECK_EQ(a.header_data, b.header_data);
  FUZZ_CHECK_EQ(a.payload_length, b.payload_length);
  FUZZ_CHECK_EQ(a.message_offset, b.message_offset);
  FUZZ_CHECK_EQ(a.request_length, b.request_length);
}

void check_ses_response(const SesResponse& a, const SesResponse& b) {
  FUZZ_CHECK_EQ(a.list, b.list);
  FUZZ_CHECK_EQ(a.opcode, b.opcode);
  FUZZ_CHECK_EQ(a.version, b.version);
  FUZZ_CHECK_EQ(a.return_code, b.return_code);
  FUZZ_CHECK_EQ(a.message_id, b.message_id);
  FUZZ_CHECK_EQ(a.ri_generation, b.ri_generation);
  FUZZ_CHECK_EQ(a.job_id, b.job_id);
  FUZZ_CHECK_EQ(a.read_request_message_id, b.read_request_message_id);
  FUZZ_CHECK_EQ(a.payload_length, b.payload_length);
  FUZZ_CHECK_EQ(a.modified_length, b.modified_length);
  FUZZ_CHECK_EQ(a.message_offset, b.message_offset);
}

bool is_ack_type(uint8_t t) {
  return t == static_cast<uint8_t>(PdsType::kAck) || t == static_cast<uint8_t>(PdsType::kAckCc) ||
         t == static_cast<uint8_t>(PdsType::kAckCcx);
}
bool is_nack_type(uint8_t t) {
  return t == static_cast<uint8_t>(PdsType::kNack) || t == static_cast<uint8_t>(PdsType::kNackCcx);
}

// PDS/SES/payload of a decoded packet, as the UDP payload Braid would send.
std::vector<uint8_t> encode_udp_payload(const ParsedPacket& p, bool crc_trailer) {
  std::vector<uint8_t> out(kAckCcSize + kSesStandardSize + p.payload_len + kCrcTrailerSize);
  uint8_t* w = out.data();
  const uint8_t t = p.pro.type;
  if (is_request_type(t)) {
    w += encode_request(w, p.req);
  } else if (is_ack_type(t)) {
    w += encode_ack(w, p.ack);
  } else if (is_nack_type(t)) {
    w += encode_nack(w, p.nack);
  } else if (t == static_cast<uint8_t>(PdsType::kCtrl)) {
    w += encode_ctrl(w, p.ctrl);
  } else if (t == static_cast<uint8_t>(PdsType::kUudReq)) {
    w += encode_uud(w, p.pro);
  } else {
    mismatch("PDS type accepted by the decoder but not encodable");
  }
  if (p.has_ses_request) {
    w += encode_ses_request(w, p.ses);
  } else if (p.has_ses_response) {
    w += p.pro.next_hdr == static_cast<uint8_t>(NextHeader::kSesResponse)
             ? encode_ses_response(w, p.resp)
             : encode_ses_response_data(w, p.resp);
  }
  if (p.payload_len != 0) std::memcpy(w, p.payload, p.payload_len);
  w += p.payload_len;
  size_t n = static_cast<size_t>(w - out.data());
  if (crc_trailer) {
    store_be32(w, crc32c(out.data(), n));
    n += kCrcTrailerSize;
  }
  out.resize(n);
  return out;
}

void check_upper_layers(const ParsedPacket& a, const ParsedPacket& b) {
  check_pro(a.pro, b.pro);
  const uint8_t t = a.pro.type;
  if (is_request_type(t)) check_request(a.req, b.req);
  if (is_ack_type(t)) check_ack(a.ack, b.ack);
  if (is_nack_type(t)) check_nack(a.nack, b.nack);
  if (t == static_cast<uint8_t>(PdsType::kCtrl)) check_ctrl(a.ctrl, b.ctrl);
  FUZZ_CHECK_EQ(a.has_ses_request, b.has_ses_request);
  FUZZ_CHECK_EQ(a.has_ses_response, b.has_ses_response);
  if (a.has_ses_request) check_ses_request(a.ses, b.ses);
  if (a.has_ses_response) check_ses_response(a.resp, b.resp);
  FUZZ_CHECK_EQ(a.payload_len, b.payload_len);
  if (a.payload_len != 0 && std::memcmp(a.payload, b.payload, a.payload_len) != 0) {
    mismatch("payload bytes");
  }
}

// A sealed packet (TSS): opened with a key the input cannot know, within
// the packet's bounds (ASan), and never authentic.
void fuzz_open(const ParsedPacket& p) {
  static const std::unique_ptr<TssKey> key =
      TssKey::derive(TssSecret{7, 7, 7}, TssDirection{1, 2, 3, 4, 5, {}}, 1);
  std::vector<uint8_t> out(p.sealed_len);
  if (key->open(p.sealed_at, p.sealed_len, p.tss, p.ip.src, p.ip.dst, out.data()) != 0) {
    mismatch("a sealed packet authenticated under a key nobody used");
  }
}

void fuzz_udp_payload(const uint8_t* data, size_t size, bool crc) {
  ParsedPacket p;
  if (decode_udp_payload(data, size, crc, &p) != DropReason::kNone) return;
  if (p.sealed) {
    fuzz_open(p);
    return;
  }
  const std::vector<uint8_t> again = encode_udp_payload(p, (p.pro.flags & kFlagCrcTrailer) != 0);
  FUZZ_CHECK_EQ(again.size(), size);  // every byte is a header, payload or the trailer
  ParsedPacket q;
  if (decode_udp_payload(again.data(), again.size(), crc, &q) != DropReason::kNone) {
    mismatch("drop reason of the re-encoded UDP payload");
  }
  check_upper_layers(p, q);
}

void check_frame(const ParsedPacket& p, const ParsedPacket& q) {
  FUZZ_CHECK_EQ(p.dst_mac, q.dst_mac);
  FUZZ_CHECK_EQ(p.src_mac, q.src_mac);
  FUZZ_CHECK_EQ(p.ip.src, q.ip.src);
  FUZZ_CHECK_EQ(p.ip.dst, q.ip.dst);
  FUZZ_CHECK_EQ(p.ip.dscp, q.ip.dscp);
  FUZZ_CHECK_EQ(p.ip.ecn, q.ip.ecn);
  FUZZ_CHECK_EQ(p.ip.ttl, q.ip.ttl);
  FUZZ_CHECK_EQ(p.entropy, q.entropy);
  FUZZ_CHECK_EQ(p.dst_port, q.dst_port);
  FUZZ_CHECK_EQ(p.trimmed, q.trimmed);
  check_upper_layers(p, q);
}

void fuzz_frame(const uint8_t* data, size_t size, const DecodeOptions& opt) {
  ParsedPacket p;
  const DropReason r = decode_frame(data, size, opt, &p);
  // decode_frame's short path (data requests, READ responses) decodes as the
  // general one.
  ParsedPacket g;
  FUZZ_CHECK_EQ(r, decode_frame_generic(data, size, opt, &g));
  if (r != DropReason::kNone) return;
  check_frame(p, g);
  FUZZ_CHECK_EQ(p.sealed, g.sealed);
  if (p.sealed) {
    fuzz_open(p);
    return;
  }
  FUZZ_CHECK_EQ(p.crc_checked, g.crc_checked);
  FUZZ_CHECK_EQ(p.payload, g.payload);
  // (CTRL is exempt: decode_udp_payload hands its tail over before looking at
  // `trimmed`.)
  if (p.trimmed && p.pro.type != static_cast<uint8_t>(PdsType::kCtrl) &&
      (p.has_ses_request || p.has_ses_response || p.payload_len != 0)) {
    mismatch("a trimmed packet kept more than its PDS header");
  }
  // A trimmed packet is re-sent as what is left of it: the PDS header.
  const std::vector<uint8_t> udp =
      encode_udp_payload(p, (p.pro.flags & kFlagCrcTrailer) != 0 && !p.trimmed);
  std::vector<uint8_t> frame(kL2L4Size + udp.size());
  const FrameTemplate t(p.src_mac, p.dst_mac, p.ip.src, p.ip.dst, p.dst_port, p.ip.ttl);
  t.write(frame.data(), p.entropy, static_cast<uint32_t>(udp.size()),
          static_cast<uint8_t>((p.ip.dscp << 2) | p.ip.ecn));
  std::memcpy(frame.data() + kL2L4Size, udp.data(), udp.size());
  ParsedPacket q;
  if (decode_frame(frame.data(), frame.size(), opt, &q) != DropReason::kNone) {
    mismatch("drop reason of the re-encoded frame");
  }
  check_frame(p, q);
}

// Each header decoder on its own, whatever the prologue says.
template <typename H, typename Dec, typename Enc, typename Check>
void fuzz_header(const uint8_t* data, size_t size, Dec dec, Enc enc, Check check) {
  H h{};
  const size_t n = dec(data, size, &h);
  if (n == 0) return;
  if (n > size) mismatch("decoder consumed more than it was given");
  uint8_t buf[64];
  FUZZ_CHECK_EQ(enc(buf, h), n);
  H h2{};
  FUZZ_CHECK_EQ(dec(buf, n, &h2), n);
  check(h, h2);
}

void fuzz_headers(const uint8_t* data, size_t size) {
  fuzz_header<RequestHeader>(data, size, decode_request, encode_request, check_request);
  fuzz_header<AckHeader>(data, size, decode_ack, encode_ack, check_ack);
  fuzz_header<NackHeader>(data, size, decode_nack, encode_nack, check_nack);
  fuzz_header<CtrlHeader>(data, size, decode_ctrl, encode_ctrl, check_ctrl);
  fuzz_header<SesRequest>(data, size, decode_ses_request, encode_ses_request, check_ses_request);
  fuzz_header<SesResponse>(data, size, decode_ses_response, encode_ses_response,
                           check_ses_response);
  fuzz_header<SesResponse>(data, size, decode_ses_response_data, encode_ses_response_data,
                           check_ses_response);
  UnreliableHeader u;
  const size_t n = decode_unreliable(data, size, &u);
  if (n > size) mismatch("decode_unreliable consumed more than it was given");
}

}  // namespace
}  // namespace braid::wire

// A CM message (the payload of a datagram to QP 1): what decodes encodes
// again to the same bytes' meaning (decoding that gives the same message).
static void fuzz_cm_message(const uint8_t* p, size_t len) {
  braid::cm::Message m;
  if (braid::cm::decode(p, len, &m) != braid::cm::DecodeError::kNone) return;
  uint8_t out[braid::cm::kMaxMessage];
  const size_t n = braid::cm::encode(m, out);
  if (n == 0) __builtin_trap();  // a message we take is one we could send
  braid::cm::Message again;
  if (braid::cm::decode(out, n, &again) != braid::cm::DecodeError::kNone) __builtin_trap();
  if (again.type != m.type || again.local_id != m.local_id || again.remote_id != m.remote_id ||
      again.qp_num != m.qp_num || again.psn != m.psn || again.private_len != m.private_len ||
      std::memcmp(again.private_data, m.private_data, m.private_len) != 0) {
    __builtin_trap();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool crc = (data[0] & 1) != 0;
  braid::wire::DecodeOptions opt;
  opt.crc_trailer = crc;
  if ((data[0] & 2) != 0) opt.trim_dscp = static_cast<uint8_t>(data[0] >> 2);
  // libFuzzer's buffer ends exactly where the input does, so a read past the
  // packet is an ASan report.
  const uint8_t* pkt = data + 1;
  const size_t len = size - 1;
  braid::wire::fuzz_frame(pkt, len, opt);
  braid::wire::fuzz_udp_payload(pkt, len, crc);
  braid::wire::fuzz_headers(pkt, len);
  fuzz_cm_message(pkt, len);
  return 0;
}
