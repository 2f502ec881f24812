#include "wire/frame.h"

#include <cstring>

#include "wire/byte_order.h"
#include "wire/crc32c.h"

namespace braid::wire {

const char* drop_reason_name(DropReason r) {
  switch (r) {
    case DropReason::kNone:
      return "none";
    case DropReason::kTruncatedEthernet:
      return "truncated_ethernet";
    case DropReason::kNotIpv4:
      return "not_ipv4";
    case DropReason::kBadIpHeader:
      return "bad_ip_header";
    case DropReason::kBadIpChecksum:
      return "bad_ip_checksum";
    case DropReason::kIpFragment:
      return "ip_fragment";
    case DropReason::kBadIpLength:
      return "bad_ip_length";
    case DropReason::kNotUdp:
      return "not_udp";
    case DropReason::kBadUdpLength:
      return "bad_udp_length";
    case DropReason::kWrongUdpPort:
      return "wrong_udp_port";
    case DropReason::kTruncatedPds:
      return "truncated_pds";
    case DropReason::kUnknownPdsType:
      return "unknown_pds_type";
    case DropReason::kUnsupportedPdsType:
      return "unsupported_pds_type";
    case DropReason::kTruncatedSes:
      return "truncated_ses";
    case DropReason::kUnknownNextHeader:
      return "unknown_next_header";
    case DropReason::kBadCrc:
      return "bad_crc";
    case DropReason::kNoCrc:
      return "no_crc";
    case DropReason::kNotForUs:
      return "not_for_us";
    case DropReason::kUnknownConnection:
      return "unknown_connection";
    case DropReason::kSealedTrimmed:
      return "sealed_trimmed";
    case DropReason::kUnknownDatagramQp:
      return "unknown_datagram_qp";
    case DropReason::kCount:
      break;
  }
  return "?";
}

uint16_t ipv4_checksum(const uint8_t* hdr, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += load_be16(hdr + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

namespace {

// The ones' complement sum does not depend on byte order: add native 32-bit
// words and fold; a valid header sums to 0xffff. Inlined: the short paths
// below call it on every packet.
[[gnu::always_inline]] inline bool ipv4_header_checksum_ok(const uint8_t* ip, size_t ihl) {
  uint64_t sum = 0;
  size_t i = 0;
  if (ihl == kIpv4Size) {
    // Every header Braid sends has no options: two 64-bit words and one of
    // 32, their carries added back (end-around carry).
    uint64_t a, b;
    uint32_t c;
    std::memcpy(&a, ip, 8);
    std::memcpy(&b, ip + 8, 8);
    std::memcpy(&c, ip + 16, 4);
    const bool c1 = __builtin_add_overflow(a, b, &sum);
    const bool c2 = __builtin_add_overflow(sum, uint64_t{c} + c1, &sum);
    sum += c2;
    i = kIpv4Size;
  }
  for (; i < ihl; i += 4) {
    uint32_t w;
    std::memcpy(&w, ip + i, 4);
    const bool c = __builtin_add_overflow(sum, uint64_t{w}, &sum);
    sum += c;
  }
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffffffffu) + (sum >> 32);
  uint32_t s32 = static_cast<uint32_t>(sum);
  s32 = (s32 & 0xffff) + (s32 >> 16);
  s32 = (s32 & 0xffff) + (s32 >> 16);
  return s32 == 0xffff;
}

DropReason decode_ses_after(const uint8_t* p, size_t len, uint8_t next_hdr, ParsedPacket* out,
                            size_t* used) {
  switch (static_cast<NextHeader>(next_hdr)) {
    case NextHeader::kNone:
      *used = 0;
      return DropReason::kNone;
    case NextHeader::kSesStandard:
      *used = decode_ses_request(p, len, &out->ses);
      if (*used == 0) return DropReason::kTruncatedSes;
      out->has_ses_request = true;
      return DropReason::kNone;
    case NextHeader::kSesResponse:
      *used = decode_ses_response(p, len, &out->resp);
      if (*used == 0) return DropReason::kTruncatedSes;
      out->has_ses_response = true;
      return DropReason::kNone;
    case NextHeader::kSesResponseData:
      *used = decode_ses_response_data(p, len, &out->resp);
      if (*used == 0) return DropReason::kTruncatedSes;
      out->has_ses_response = true;
      return DropReason::kNone;
    default:
      // Small/medium requests and the small response are valid UET but Braid
      // never sends them; treat them as unknown rather than guess.
      return DropReason::kUnknownNextHeader;
  }
}

// A sealed packet: the security header and the clear PDS header; the rest
// waits for the key.
DropReason decode_sealed(const uint8_t* p, size_t len, ParsedPacket* out, bool trimmed) {
  if (trimmed) return DropReason::kSealedTrimmed;
  TssHeader h;
  const size_t at = decode_tss_header(p, len, &h);
  if (at == 0 || len < at + kPrologueSize + kTssIcvSize) return DropReason::kTruncatedPds;
  const uint8_t* pds = p + at;
  const size_t pds_len = pds_header_size(pds, len - at - kTssIcvSize);
  out->has_ses_request = false;
  out->has_ses_response = false;
  out->pro = decode_prologue(pds);
  if (pds_len == 0) {
    switch (static_cast<PdsType>(out->pro.type)) {
      case PdsType::kRudiReq:
      case PdsType::kRudiResp:
      case PdsType::kUudReq:
        return DropReason::kUnsupportedPdsType;
      case PdsType::kRudReq:
      case PdsType::kRodReq:
      case PdsType::kRudCcReq:
      case PdsType::kRodCcReq:
      case PdsType::kAck:
      case PdsType::kAckCc:
      case PdsType::kAckCcx:
      case PdsType::kNack:
      case PdsType::kNackCcx:
      case PdsType::kCtrl:
        return DropReason::kTruncatedPds;
      default:
        return DropReason::kUnknownPdsType;  // 0, another security header, > 0x0e
    }
  }
  switch (static_cast<PdsType>(out->pro.type)) {
    case PdsType::kAck:
    case PdsType::kAckCc:
    case PdsType::kAckCcx:
      decode_ack(pds, pds_len, &out->ack);
      break;
    case PdsType::kNack:
    case PdsType::kNackCcx:
      decode_nack(pds, pds_len, &out->nack);
      break;
    case PdsType::kCtrl:
      decode_ctrl(pds, pds_len, &out->ctrl);
      break;
    default:
      decode_request(pds, pds_len, &out->req);
      break;
  }
  out->sealed = true;
  out->tss = h;
  out->sealed_at = p;
  out->sealed_len = static_cast<uint32_t>(len);
  out->payload = nullptr;
  out->payload_len = 0;
  return DropReason::kNone;
}

}  // namespace

DropReason decode_udp_payload(const uint8_t* p, size_t len, bool crc_trailer, ParsedPacket* out,
                              bool trimmed) {
  if (len < kPrologueSize) return DropReason::kTruncatedPds;
  out->crc_checked = false;
  out->sealed = false;
  if ((p[0] >> 3) == kPdsTypeSecurity) return decode_sealed(p, len, out, trimmed);
  if (!trimmed) {
    if (p[1] & kFlagCrcTrailer) {  // the prologue's flags are byte 1's low 7 bits
      if (len < kPrologueSize + kCrcTrailerSize) return DropReason::kTruncatedPds;
      len -= kCrcTrailerSize;
      if (crc32c(p, len) != load_be32(p + len)) return DropReason::kBadCrc;
      out->crc_checked = true;
    } else if (crc_trailer) {
      return DropReason::kNoCrc;
    }
  }
  out->has_ses_request = false;
  out->has_ses_response = false;
  out->pro = decode_prologue(p);
  size_t used = 0;
  switch (static_cast<PdsType>(out->pro.type)) {
    case PdsType::kRudReq:
    case PdsType::kRodReq:
    case PdsType::kRudCcReq:
    case PdsType::kRodCcReq:
      used = decode_request(p, len, &out->req);
      break;
    case PdsType::kAck:
    case PdsType::kAckCc:
    case PdsType::kAckCcx:
      used = decode_ack(p, len, &out->ack);
      break;
    case PdsType::kNack:
    case PdsType::kNackCcx:
      used = decode_nack(p, len, &out->nack);
      break;
    case PdsType::kCtrl:
      used = decode_ctrl(p, len, &out->ctrl);
      if (used == 0) return DropReason::kTruncatedPds;
      out->payload = p + used;
      out->payload_len = static_cast<uint32_t>(len - used);
      return DropReason::kNone;
    case PdsType::kUudReq: {
      // A datagram (UD): the UUD header, then a standard SES request.
      UnreliableHeader u;
      used = decode_unreliable(p, len, &u);
      if (used != 0 && out->pro.next_hdr != static_cast<uint8_t>(NextHeader::kSesStandard)) {
        return DropReason::kUnknownNextHeader;
      }
      break;
    }
    case PdsType::kRudiReq:
    case PdsType::kRudiResp:
      return DropReason::kUnsupportedPdsType;
    default:
      return DropReason::kUnknownPdsType;
  }
  if (used == 0) return DropReason::kTruncatedPds;
  if (out->trimmed) {
    // Only the PDS header of a trimmed packet matters: its PSN gets NACKed.
    out->payload = nullptr;
    out->payload_len = 0;
    return DropReason::kNone;
  }
  size_t ses_used = 0;
  const DropReason r = decode_ses_after(p + used, len - used, out->pro.next_hdr, out, &ses_used);
  if (r != DropReason::kNone) return r;
  used += ses_used;
  out->payload = p + used;
  out->payload_len = static_cast<uint32_t>(len - used);
  return DropReason::kNone;
}

bool peek_dpdcid(const uint8_t* data, size_t len, uint16_t* dpdcid) {
  if (len < kEthernetSize + kIpv4Size || load_be16(data + 12) != kEtherTypeIpv4) return false;
  const uint8_t* ip = data + kEthernetSize;
  const size_t ihl = size_t{ip[0] & 0xfu} * 4;
  if ((ip[0] >> 4) != 4 || ihl < kIpv4Size || ip[9] != kIpProtoUdp) return false;
  size_t pds = kEthernetSize + ihl + kUdpSize;
  if (len < pds + 12) return false;
  if ((data[pds] >> 3) == kPdsTypeSecurity) {  // sealed: the PDS header follows in clear
    TssHeader h;
    const size_t at = decode_tss_header(data + pds, len - pds, &h);
    if (at == 0 || len < pds + at + 12) return false;
    pds += at;
  }
  const Prologue pro = decode_prologue(data + pds);
  switch (static_cast<PdsType>(pro.type)) {
    case PdsType::kAck:
    case PdsType::kAckCc:
    case PdsType::kAckCcx:
    case PdsType::kNack:
    case PdsType::kNackCcx:
      break;
    case PdsType::kCtrl:
    case PdsType::kRudReq:
    case PdsType::kRodReq:
    case PdsType::kRudCcReq:
    case PdsType::kRodCcReq:
      if (pro.flags & kReqFlagSyn) return false;  // no destination PDC yet
      break;
    case PdsType::kUudReq: {
      // A datagram names no PDC: its destination queue pair (the SES
      // header's two 12-bit halves), which is what a UD QP is kept under.
      const size_t ses = pds + kUudSize;
      if (len < ses + 12) return false;
      const uint32_t names = load_be32(data + ses + 8);
      *dpdcid = static_cast<uint16_t>((((names >> 16) & 0xfff) << 12) | (names & 0xfff));
      return true;
    }
    default:
      return false;
  }
  *dpdcid = load_be16(data + pds + 10);
  return true;
}

namespace {

// The frame nearly every packet is: IPv4 without options, not a fragment,
// UDP to our port, not trimmed, a RUD request (no SYN, no trailer) with the
// standard SES header, or (kResponse) with a READ response's, its data.
// Decoded as decode_frame_generic decodes it, with fewer tests; anything
// else returns false, having written nothing.
template <bool kResponse>
[[gnu::always_inline]] inline bool decode_fast(const uint8_t* data, size_t len,
                                               const DecodeOptions& opt, ParsedPacket* out) {
  constexpr size_t kSesAt = kL2L4Size + kRequestSize;
  constexpr size_t kHeaders = kSesAt + (kResponse ? kSesResponseDataSize : kSesStandardSize);
  constexpr auto kNext =
      static_cast<uint8_t>(kResponse ? NextHeader::kSesResponseData : NextHeader::kSesStandard);
  if (len < kHeaders || opt.crc_trailer) return false;
  const uint8_t* ip = data + kEthernetSize;
  const uint8_t* udp = ip + kIpv4Size;
  const uint8_t* p = udp + kUdpSize;
  const size_t total = load_be16(ip + 2);
  const Prologue pro = decode_prologue(p);
  if (load_be16(data + 12) != kEtherTypeIpv4 || ip[0] != 0x45 ||
      (load_be16(ip + 6) & 0x3fff) != 0 || ip[9] != kIpProtoUdp || total > len - kEthernetSize ||
      total < kHeaders - kEthernetSize || load_be16(udp + 4) != total - kIpv4Size ||
      load_be16(udp + 2) != opt.udp_port || (ip[1] >> 2) == opt.trim_dscp ||
      pro.type != static_cast<uint8_t>(PdsType::kRudReq) || pro.next_hdr != kNext ||
      (pro.flags & (kFlagCrcTrailer | kReqFlagSyn)) != 0 ||
      !ipv4_header_checksum_ok(ip, kIpv4Size)) {
    return false;
  }
  std::memcpy(out->dst_mac.data(), data, 6);
  std::memcpy(out->src_mac.data(), data + 6, 6);
  out->ip.dscp = ip[1] >> 2;
  out->ip.ecn = ip[1] & 3;
  out->ip.ttl = ip[8];
  out->ip.src = load_be32(ip + 12);
  out->ip.dst = load_be32(ip + 16);
  out->entropy = load_be16(udp);
  out->dst_port = opt.udp_port;
  out->trimmed = false;
  out->crc_checked = false;
  out->sealed = false;  // (the packet decoded before may have been)
  out->has_ses_request = !kResponse;
  out->has_ses_response = kResponse;
  // Each field from a register: a copy of the whole Prologue reads two of
  // its bytes at once from where they were stored one at a time, a load
  // the store buffer cannot answer; it then waits for every older store to
  // reach the cache, the previous packet's payload copy included (a third
  // of an eager receiver's time, on one instruction, when that copy went
  // to memory out of cache). Type and next header are the ones tested.
  const uint8_t flags = pro.flags;
  constexpr auto kType = static_cast<uint8_t>(PdsType::kRudReq);
  out->pro.type = kType;
  out->pro.next_hdr = kNext;
  out->pro.flags = flags;
  RequestHeader& r = out->req;
  r.pro.type = kType;
  r.pro.next_hdr = kNext;
  r.pro.flags = flags;
  r.clear_psn_offset = load_be16(p + 2);
  r.psn = load_be32(p + 4);
  r.spdcid = load_be16(p + 8);
  r.dpdcid = load_be16(p + 10);
  r.pdc_info = 0;
  r.psn_offset = 0;
  r.ccc_id = 0;
  r.credit_target = 0;
  if constexpr (kResponse) {
    decode_ses_response_data(data + kSesAt, kSesResponseDataSize, &out->resp);
  } else {
    decode_ses_request(data + kSesAt, kSesStandardSize, &out->ses);
  }
  out->payload = data + kHeaders;
  out->payload_len = static_cast<uint32_t>(total + kEthernetSize - kHeaders);
  return true;
}

// A READ response's data, the short way (a call of its own: the request's
// short path stays small enough to be inlined where frames are received).
[[gnu::noinline]] bool decode_response_fast(const uint8_t* data, size_t len,
                                            const DecodeOptions& opt, ParsedPacket* out) {
  return decode_fast<true>(data, len, opt, out);
}

// A request's data or a READ response's (the next header tells; each short
// path checks it again).
[[gnu::always_inline]] inline bool decode_data_fast(const uint8_t* data, size_t len,
                                                    const DecodeOptions& opt, ParsedPacket* out) {
  if (len < kL2L4Size + kRequestSize + kSesResponseDataSize) return false;  // (the shorter)
  const uint8_t next = decode_prologue(data + kL2L4Size).next_hdr;
  if (next == static_cast<uint8_t>(NextHeader::kSesStandard)) [[likely]] {
    return decode_fast<false>(data, len, opt, out);
  }
  return next == static_cast<uint8_t>(NextHeader::kSesResponseData) &&
         decode_response_fast(data, len, opt, out);
}

}  // namespace

DropReason decode_frame(const uint8_t* data, size_t len, const DecodeOptions& opt,
                        ParsedPacket* out) {
  if (decode_data_fast(data, len, opt, out)) return DropReason::kNone;
  return decode_frame_generic(data, len, opt, out);
}

DropReason decode_frame_generic(const uint8_t* data, size_t len, const DecodeOptions& opt,
                                ParsedPacket* out) {
  if (len < kEthernetSize) return DropReason::kTruncatedEthernet;
  std::memcpy(out->dst_mac.data(), data, 6);
  std::memcpy(out->src_mac.data(), data + 6, 6);
  if (load_be16(data + 12) != kEtherTypeIpv4) return DropReason::kNotIpv4;
  const uint8_t* ip = data + kEthernetSize;
  const size_t ip_avail = len - kEthernetSize;
  if (ip_avail < kIpv4Size) return DropReason::kBadIpHeader;
  if ((ip[0] >> 4) != 4) return DropReason::kNotIpv4;
  const size_t ihl = size_t{ip[0] & 0xfu} * 4;
  if (ihl < kIpv4Size || ihl > ip_avail) return DropReason::kBadIpHeader;
  const size_t total = load_be16(ip + 2);
  if (total < ihl + kUdpSize || total > ip_avail) return DropReason::kBadIpLength;
  if (!ipv4_header_checksum_ok(ip, ihl)) return DropReason::kBadIpChecksum;
  if ((load_be16(ip + 6) & 0x3fff) != 0) return DropReason::kIpFragment;  // MF or offset
  if (ip[9] != kIpProtoUdp) return DropReason::kNotUdp;
  out->ip.dscp = ip[1] >> 2;
  out->ip.ecn = ip[1] & 3;
  out->ip.ttl = ip[8];
  out->ip.src = load_be32(ip + 12);
  out->ip.dst = load_be32(ip + 16);
  const uint8_t* udp = ip + ihl;
  const size_t udp_len = load_be16(udp + 4);
  if (udp_len < kUdpSize || udp_len != total - ihl) return DropReason::kBadUdpLength;
  out->entropy = load_be16(udp);
  out->dst_port = load_be16(udp + 2);
  if (out->dst_port != opt.udp_port) return DropReason::kWrongUdpPort;
  out->trimmed = out->ip.dscp == opt.trim_dscp;
  return decode_udp_payload(udp + kUdpSize, udp_len - kUdpSize, opt.crc_trailer, out, out->trimmed);
}

FrameTemplate::FrameTemplate(const MacAddr& src_mac, const MacAddr& dst_mac, uint32_t src_ip,
                             uint32_t dst_ip, uint16_t dst_port, uint8_t ttl) {
  uint8_t* h = hdr_.data();
  std::memcpy(h, dst_mac.data(), 6);
  std::memcpy(h + 6, src_mac.data(), 6);
  store_be16(h + 12, kEtherTypeIpv4);
  uint8_t* ip = h + kEthernetSize;
  ip[0] = 0x45;
  ip[1] = 0;
  store_be16(ip + 2, 0);
  store_be16(ip + 4, 0);       // identification: unused, DF set
  store_be16(ip + 6, 0x4000);  // DF
  ip[8] = ttl;
  ip[9] = kIpProtoUdp;
  store_be16(ip + 10, 0);
  store_be32(ip + 12, src_ip);
  store_be32(ip + 16, dst_ip);
  uint8_t* udp = ip + kIpv4Size;
  store_be16(udp + 2, dst_port);
  store_be16(udp + 6, 0);  // UDP checksum 0, as UET
  partial_sum_ = 0;
  for (size_t i = 4; i < kIpv4Size; i += 2) partial_sum_ += load_be16(ip + i);
}

void FrameTemplate::set_dst_mac(const MacAddr& mac) {
  std::memcpy(hdr_.data(), mac.data(), 6);
}

void FrameTemplate::write(uint8_t* out, uint16_t entropy, uint32_t udp_payload_len,
                          uint8_t tos) const {
  std::memcpy(out, hdr_.data(), kL2L4Size);
  uint8_t* ip = out + kEthernetSize;
  const uint32_t total = static_cast<uint32_t>(kIpv4Size + kUdpSize + udp_payload_len);
  ip[1] = tos;
  store_be16(ip + 2, static_cast<uint16_t>(total));
  uint32_t sum = partial_sum_ + ((0x45u << 8) | tos) + total;
  // Two folds take any sum of ten 16-bit words to 16 bits.
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  store_be16(ip + 10, static_cast<uint16_t>(~sum));
  uint8_t* udp = ip + kIpv4Size;
  store_be16(udp, entropy);
  store_be16(udp + 4, static_cast<uint16_t>(kUdpSize + udp_payload_len));
}

}  // namespace braid::wire
