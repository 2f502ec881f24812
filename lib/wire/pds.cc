#include "wire/pds.h"

#include "wire/byte_order.h"

namespace braid::wire {

size_t decode_ack(const uint8_t* p, size_t len, AckHeader* h) {
  if (len < kAckSize) return 0;
  h->pro = decode_prologue(p);
  h->ack_psn_offset = load_be16(p + 2);
  h->cack_psn = load_be32(p + 4);
  h->spdcid = load_be16(p + 8);
  h->dpdcid = load_be16(p + 10);
  const auto type = static_cast<PdsType>(h->pro.type);
  if (type == PdsType::kAck) {
    h->has_sack = false;
    return kAckSize;
  }
  if (len < kAckCcSize) return 0;
  h->has_sack = true;
  h->mpr = p[13];
  h->sack_psn_offset = load_be16(p + 14);
  h->sack_bitmap = load_be64(p + 16);
  h->cc_type = p[12] >> 4;  // ACK_CCX: ccx_type
  h->cc_flags = p[12] & 0xf;
  if (type == PdsType::kAckCcx) {
    h->ccx_state = load_be64(p + 24);
    return kAckCcSize;
  }
  if (h->cc_type == static_cast<uint8_t>(CcType::kCredit)) {
    h->credit = load_be24(p + 24);
    h->nscc = NsccAckState{};
    h->nscc.ooo_count = load_be16(p + 30);
  } else {
    h->nscc.service_time = load_be16(p + 24);
    h->nscc.restore_cwnd = p[26] & 0x80;
    h->nscc.rcv_cwnd_pend = p[26] & 0x7f;
    h->nscc.rcvd_bytes = load_be24(p + 27);
    h->nscc.ooo_count = load_be16(p + 30);
    h->credit = 0;
  }
  return kAckCcSize;
}

size_t encode_ack(uint8_t* p, const AckHeader& h) {
  encode_prologue(p, h.pro);
  store_be16(p + 2, h.ack_psn_offset);
  store_be32(p + 4, h.cack_psn);
  store_be16(p + 8, h.spdcid);
  store_be16(p + 10, h.dpdcid);
  const auto type = static_cast<PdsType>(h.pro.type);
  if (type == PdsType::kAck) return kAckSize;
  p[13] = h.mpr;
  store_be16(p + 14, h.sack_psn_offset);
  store_be64(p + 16, h.sack_bitmap);
  p[12] = static_cast<uint8_t>((h.cc_type << 4) | (h.cc_flags & 0xf));
  if (type == PdsType::kAckCcx) {
    store_be64(p + 24, h.ccx_state);
    return kAckCcSize;
  }
  if (h.cc_type == static_cast<uint8_t>(CcType::kCredit)) {
    store_be24(p + 24, h.credit);
    store_be24(p + 27, 0);
  } else {
    store_be16(p + 24, h.nscc.service_time);
    p[26] = static_cast<uint8_t>((h.nscc.restore_cwnd ? 0x80 : 0) | (h.nscc.rcv_cwnd_pend & 0x7f));
    store_be24(p + 27, h.nscc.rcvd_bytes);
  }
  store_be16(p + 30, h.nscc.ooo_count);
  return kAckCcSize;
}

size_t decode_nack(const uint8_t* p, size_t len, NackHeader* h) {
  if (len < kNackSize) return 0;
  h->pro = decode_prologue(p);
  h->nack_code = p[2];
  h->vendor_code = p[3];
  h->nack_psn = load_be32(p + 4);
  h->spdcid = load_be16(p + 8);
  h->dpdcid = load_be16(p + 10);
  h->payload = load_be32(p + 12);
  if (static_cast<PdsType>(h->pro.type) != PdsType::kNackCcx) {
    h->has_ccx = false;
    return kNackSize;
  }
  if (len < kNackCcxSize) return 0;
  h->has_ccx = true;
  h->nccx_type = p[16] >> 4;
  h->nccx_state1 = p[16] & 0xf;
  h->nccx_state2 = load_be64(p + 16) & 0x00ffffffffffffffULL;
  return kNackCcxSize;
}

size_t encode_nack(uint8_t* p, const NackHeader& h) {
  encode_prologue(p, h.pro);
  p[2] = h.nack_code;
  p[3] = h.vendor_code;
  store_be32(p + 4, h.nack_psn);
  store_be16(p + 8, h.spdcid);
  store_be16(p + 10, h.dpdcid);
  store_be32(p + 12, h.payload);
  if (static_cast<PdsType>(h.pro.type) != PdsType::kNackCcx) return kNackSize;
  store_be64(p + 16, h.nccx_state2 & 0x00ffffffffffffffULL);
  p[16] = static_cast<uint8_t>((h.nccx_type << 4) | (h.nccx_state1 & 0xf));
  return kNackCcxSize;
}

size_t decode_ctrl(const uint8_t* p, size_t len, CtrlHeader* h) {
  if (len < kCtrlSize) return 0;
  h->pro = decode_prologue(p);
  h->probe_opaque = load_be16(p + 2);
  h->psn = load_be32(p + 4);
  h->spdcid = load_be16(p + 8);
  decode_pdc_word(load_be16(p + 10), h->pro.flags, &h->dpdcid, &h->pdc_info, &h->psn_offset);
  return kCtrlSize;
}

size_t encode_ctrl(uint8_t* p, const CtrlHeader& h) {
  encode_prologue(p, h.pro);
  store_be16(p + 2, h.probe_opaque);
  store_be32(p + 4, h.psn);
  store_be16(p + 8, h.spdcid);
  store_be16(p + 10, encode_pdc_word(h.pro.flags, h.dpdcid, h.pdc_info, h.psn_offset));
  return kCtrlSize;
}

size_t decode_unreliable(const uint8_t* p, size_t len, UnreliableHeader* h) {
  if (len < kUudSize) return 0;
  h->pro = decode_prologue(p);
  if (static_cast<PdsType>(h->pro.type) == PdsType::kUudReq) {
    h->pkt_id = 0;
    return kUudSize;
  }
  if (len < kRudiSize) return 0;
  h->pkt_id = load_be32(p + 4);
  return kRudiSize;
}

}  // namespace braid::wire
