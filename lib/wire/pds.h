// UET packet delivery sublayer (PDS) headers: prologue, RUD/ROD requests,
// ACK / ACK_CC / ACK_CCX, NACK / NACK_CCX, CTRL, RUDI and UUD. Layouts follow
// UET 1.0 (see docs/wire-format.md); every decoder is bounds-checked and
// reports how many bytes it consumed, or 0 when the buffer is too short.
#pragma once

#include <cstddef>
#include <cstdint>

#include "wire/byte_order.h"

namespace braid::wire {

enum class PdsType : uint8_t {
  kRudReq = 0x02,
  kRodReq = 0x03,
  kRudiReq = 0x04,
  kRudiResp = 0x05,
  kUudReq = 0x06,
  kAck = 0x07,
  kAckCc = 0x08,
  kAckCcx = 0x09,
  kNack = 0x0a,
  kCtrl = 0x0b,
  kNackCcx = 0x0c,
  kRudCcReq = 0x0d,
  kRodCcReq = 0x0e,
};

// The 4-bit "next header" of requests, ACKs and NACKs: which SES header follows.
enum class NextHeader : uint8_t {
  kNone = 0,
  kSesSmall = 1,
  kSesMedium = 2,
  kSesStandard = 3,
  kSesResponse = 4,
  kSesResponseData = 5,
  kSesResponseDataSmall = 6,
};

// Request flags (7 bits of the prologue).
inline constexpr uint8_t kReqFlagRetx = 0x10;
inline constexpr uint8_t kReqFlagAckReq = 0x08;
inline constexpr uint8_t kReqFlagSyn = 0x04;
// Braid's extension, in any PDS type's flags (a bit UET leaves reserved):
// the last 4 bytes of the UDP payload are a CRC-32C of the rest. The flag
// makes the trailer self-describing: each sender chooses, every receiver
// checks what carries one.
inline constexpr uint8_t kFlagCrcTrailer = 0x40;
// Braid's extension in a request's flags (a bit UET leaves reserved): the
// packet went without the receiver's credit (a speculative allowance of
// receiver-driven credit), so the receiver's credit pacer leaves its time on
// the link to it. Only senders that use credit set it.
inline constexpr uint8_t kReqFlagUnscheduled = 0x01;
// ACK and NACK flags.
inline constexpr uint8_t kAckFlagEcn = 0x20;  // "M": an ECN-CE mark was seen
inline constexpr uint8_t kAckFlagRetx = 0x10;
inline constexpr uint8_t kAckFlagProbe = 0x08;
inline constexpr uint8_t kAckReqShift = 1;  // 2-bit REQ field (CLS/CLR requests)
inline constexpr uint8_t kNackFlagType = 0x08;
// Braid's use of a TRIMMED NACK's payload (UET gives it no meaning there):
// this bit, and the UDP source port of the trimmed copy in the low 16 bits,
// so that the sender can tell which of several retransmissions was trimmed.
inline constexpr uint32_t kNackEchoesEntropy = 1u << 16;

enum class CcType : uint8_t { kNscc = 0, kCredit = 1 };

enum class NackCode : uint8_t {
  kTrimmed = 0x01,
  kTrimmedLastHop = 0x02,
  kTrimmedAck = 0x03,
  kNoPdcAvail = 0x04,
  kNoBitmap = 0x06,
  kNoPktBuf = 0x07,  // Braid: receiver not ready (no receive WQE posted)
  kPsnOorWindow = 0x0b,
  kRodOoo = 0x0d,
  kInvDpdcid = 0x0e,
  kClosing = 0x10,
  kNewStartPsn = 0x17,
  kUnexpEvent = 0x19,
  kRcvrInferLoss = 0x1a,
  kExpNackNormal = 0xfd,
  kExpNackErr = 0xfe,  // Braid: a semantic error, the reason in vendor_code
  kExpNackFatal = 0xff,
};

// vendor_code of Braid's EXP_NACK_ERR: semantic errors that UET would return
// in an SES response. Braid reports them on the PDS NACK, which the requester
// handles anyway, instead of a reliable response (docs/wire-format.md).
enum class BraidNackReason : uint8_t {
  kRemoteAccess = 0x01,    // bad key, out of bounds, no permission, wrong PD
  kInvalidRequest = 0x02,  // inconsistent lengths or offsets, unknown receive
  // With NO_PKT_BUF: the request names a queue pair a shared PDC does not
  // have yet (its peer reached RTS before it reached RTR). The receiver
  // takes only a NO_OP at that PSN; the sender fills it with one and sends
  // the part again under a new PSN after the wait (whatever its opcode).
  kQpNotReady = 0x03,
  // The responder's own error (its receive buffer's region changed):
  // IB's remote operation error at the requester.
  kRemoteOperation = 0x04,
};

enum class CtrlType : uint8_t {
  kNop = 0,
  kAckReq = 1,
  kClear = 2,
  kClearReq = 3,
  kClose = 4,
  kCloseReq = 5,
  kProbe = 6,
  kCredit = 7,
  kCreditReq = 8,
  kNegotiation = 9,
  // Braid's own (UET leaves 10..15 unused): DCQCN's congestion
  // notification, from the receiver of ECN-CE marked packets.
  kCnp = 10,
  // Braid's close of a connection as its QP goes: `psn` is the closing
  // end's cumulative received PSN (UET's CLOSE, 4, carries the sender's own
  // PSN and means something else).
  kBraidClose = 11,
};

struct Prologue {
  uint8_t type = 0;      // 5 bits
  uint8_t next_hdr = 0;  // 4 bits (control type for CTRL)
  uint8_t flags = 0;     // 7 bits
};

inline constexpr size_t kPrologueSize = 2;
inline constexpr size_t kRequestSize = 12;
inline constexpr size_t kRequestCcSize = 16;
inline constexpr size_t kAckSize = 12;
inline constexpr size_t kAckCcSize = 32;
inline constexpr size_t kNackSize = 16;
inline constexpr size_t kNackCcxSize = 24;
inline constexpr size_t kCtrlSize = 12;
inline constexpr size_t kRudiSize = 8;
inline constexpr size_t kUudSize = 4;

// RUD/ROD request (and their _CC variants, which add 4 bytes).
struct RequestHeader {
  Prologue pro;
  uint16_t clear_psn_offset = 0;
  uint32_t psn = 0;
  uint16_t spdcid = 0;
  uint16_t dpdcid = 0;         // when !SYN
  uint8_t pdc_info = 0;        // when SYN: 4 bits
  uint16_t psn_offset = 0;     // when SYN: 12 bits
  uint8_t ccc_id = 0;          // _CC only
  uint32_t credit_target = 0;  // _CC only, 24 bits
};

// Braid's unit of NsccAckState::service_time: how long the packet an ACK
// names waited at the receiver before the ACK left (up to about 0.5 ms).
inline constexpr uint32_t kServiceTimeUnitNs = 8;

// NSCC congestion state carried in ACK_CC (cc_type 0).
struct NsccAckState {
  uint16_t service_time = 0;
  bool restore_cwnd = false;
  uint8_t rcv_cwnd_pend = 0;  // 7 bits
  uint32_t rcvd_bytes = 0;    // 24 bits
  uint16_t ooo_count = 0;
};

// ACK, ACK_CC and ACK_CCX. `has_sack` is set for the two 32-byte forms.
struct AckHeader {
  Prologue pro;
  uint16_t ack_psn_offset = 0;  // PSN of the packet that triggered this ACK, minus cack_psn
  uint32_t cack_psn = 0;        // every PSN up to and including this one was received
  uint16_t spdcid = 0;
  uint16_t dpdcid = 0;
  bool has_sack = false;
  uint8_t cc_type = 0;   // ACK_CC: 4 bits; ACK_CCX: ccx_type
  uint8_t cc_flags = 0;  // ACK_CC: 4 bits
  uint8_t mpr = 0;
  uint16_t sack_psn_offset = 0;  // bitmap base = cack_psn + sack_psn_offset
  uint64_t sack_bitmap = 0;      // bit i set: base + i received
  NsccAckState nscc;             // cc_type kNscc
  uint32_t credit = 0;           // cc_type kCredit, 24 bits
  uint64_t ccx_state = 0;        // ACK_CCX
};

struct NackHeader {
  Prologue pro;
  uint8_t nack_code = 0;
  uint8_t vendor_code = 0;
  uint32_t nack_psn = 0;
  uint16_t spdcid = 0;
  uint16_t dpdcid = 0;
  uint32_t payload = 0;
  bool has_ccx = false;
  uint8_t nccx_type = 0;     // 4 bits
  uint8_t nccx_state1 = 0;   // 4 bits
  uint64_t nccx_state2 = 0;  // 56 bits
};

struct CtrlHeader {
  Prologue pro;  // next_hdr holds the control type
  uint16_t probe_opaque = 0;
  uint32_t psn = 0;
  uint16_t spdcid = 0;
  uint16_t dpdcid = 0;  // when !SYN
  uint8_t pdc_info = 0;
  uint16_t psn_offset = 0;
};

// RUDI request/response and UUD request: no connection state.
struct UnreliableHeader {
  Prologue pro;
  uint32_t pkt_id = 0;  // RUDI only
};

// RUD and ROD requests, with or without the CC extension: one bit of a mask
// (a type is 5 bits), as the receive path tests it for every packet.
inline bool is_request_type(uint8_t type) {
  constexpr uint32_t kRequests = (1u << static_cast<uint8_t>(PdsType::kRudReq)) |
                                 (1u << static_cast<uint8_t>(PdsType::kRodReq)) |
                                 (1u << static_cast<uint8_t>(PdsType::kRudCcReq)) |
                                 (1u << static_cast<uint8_t>(PdsType::kRodCcReq));
  return type < 32 && ((kRequests >> type) & 1);
}

inline Prologue decode_prologue(const uint8_t* p) {
  const uint16_t v = static_cast<uint16_t>((p[0] << 8) | p[1]);
  return Prologue{static_cast<uint8_t>(v >> 11), static_cast<uint8_t>((v >> 7) & 0xf),
                  static_cast<uint8_t>(v & 0x7f)};
}
inline void encode_prologue(uint8_t* p, const Prologue& pro) {
  const uint16_t v = static_cast<uint16_t>(((pro.type & 0x1f) << 11) | ((pro.next_hdr & 0xf) << 7) |
                                           (pro.flags & 0x7f));
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// Decoders return bytes consumed, 0 if `len` is too short.

size_t decode_ack(const uint8_t* p, size_t len, AckHeader* h);
size_t encode_ack(uint8_t* p, const AckHeader& h);
size_t decode_nack(const uint8_t* p, size_t len, NackHeader* h);
size_t encode_nack(uint8_t* p, const NackHeader& h);
size_t decode_ctrl(const uint8_t* p, size_t len, CtrlHeader* h);
size_t encode_ctrl(uint8_t* p, const CtrlHeader& h);
size_t decode_unreliable(const uint8_t* p, size_t len, UnreliableHeader* h);
// A UUD request header (a datagram): the prologue and two reserved bytes.
inline size_t encode_uud(uint8_t* p, const Prologue& pro) {
  encode_prologue(p, pro);
  p[2] = p[3] = 0;
  return kUudSize;
}

// Bytes 10..11 of requests and CTRL: the destination PDC id, or with SYN
// (no destination PDC yet) pdc_info (4 bits) and psn_offset (12 bits).
inline void decode_pdc_word(uint16_t w, uint8_t flags, uint16_t* dpdcid, uint8_t* pdc_info,
                            uint16_t* psn_offset) {
  const bool syn = flags & kReqFlagSyn;
  *dpdcid = syn ? 0 : w;
  *pdc_info = syn ? static_cast<uint8_t>(w >> 12) : 0;
  *psn_offset = syn ? w & 0xfff : 0;
}
inline uint16_t encode_pdc_word(uint8_t flags, uint16_t dpdcid, uint8_t pdc_info,
                                uint16_t psn_offset) {
  return (flags & kReqFlagSyn) ? static_cast<uint16_t>((pdc_info << 12) | (psn_offset & 0xfff))
                               : dpdcid;
}

inline bool has_cc_extension(uint8_t type) {
  return type == static_cast<uint8_t>(PdsType::kRudCcReq) ||
         type == static_cast<uint8_t>(PdsType::kRodCcReq);
}

inline size_t decode_request(const uint8_t* p, size_t len, RequestHeader* h) {
  if (len < kRequestSize) return 0;
  h->pro = decode_prologue(p);
  const bool cc = has_cc_extension(h->pro.type);
  if (cc && len < kRequestCcSize) return 0;
  h->clear_psn_offset = load_be16(p + 2);
  h->psn = load_be32(p + 4);
  h->spdcid = load_be16(p + 8);
  decode_pdc_word(load_be16(p + 10), h->pro.flags, &h->dpdcid, &h->pdc_info, &h->psn_offset);
  if (!cc) {
    h->ccc_id = 0;
    h->credit_target = 0;
    return kRequestSize;
  }
  h->ccc_id = p[12];
  h->credit_target = load_be24(p + 13);
  return kRequestCcSize;
}

inline size_t encode_request(uint8_t* p, const RequestHeader& h) {
  encode_prologue(p, h.pro);
  store_be16(p + 2, h.clear_psn_offset);
  store_be32(p + 4, h.psn);
  store_be16(p + 8, h.spdcid);
  store_be16(p + 10, encode_pdc_word(h.pro.flags, h.dpdcid, h.pdc_info, h.psn_offset));
  if (!has_cc_extension(h.pro.type)) return kRequestSize;
  p[12] = h.ccc_id;
  store_be24(p + 13, h.credit_target);
  return kRequestCcSize;
}

}  // namespace braid::wire
