#include "rdmacm/cm_message.h"

#include <cstring>

namespace braid::cm {
namespace {

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
uint16_t get16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}
uint32_t get32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

bool known(uint8_t t) {
  return t >= 1 && t <= 7;
}

}  // namespace

size_t max_private(Type t) {
  switch (t) {
    case Type::kReq:
      return 56;
    case Type::kRep:
      return 196;
    case Type::kRej:
      return 148;
    case Type::kMra:
      return 222;
    case Type::kDreq:
      return 220;
    case Type::kRtu:
    case Type::kDrep:
      return 224;
  }
  return 0;
}

// Layout (network byte order), 40 bytes and the private data:
//   0 version  1 type  2 reason(16)  4 local_id(32)  8 remote_id(32)
//  12 port_space(16)  14 src_port(16)  16 dst_port(16)  18 private_len(8)
//  19 qp_type(8)  20 qp_num(32, 24 used)  24 psn(32, 24 used)
//  28 responder_resources  29 initiator_depth  30 retry(3 bits)
//  31 rnr_retry(3 bits)  32 flags (bit 0 flow_control, bit 1 srq)  33..35 0
//  36 src_ip(32): the sender's IPv4 address, as its GRH's source GID says
size_t encode(const Message& m, uint8_t* out) {
  if (m.private_len > max_private(m.type) || m.qp_num > 0xffffff || m.psn > 0xffffff ||
      m.local_id == 0 || m.retry_count > 7 || m.rnr_retry_count > 7) {
    return 0;
  }
  std::memset(out, 0, kHeaderSize);
  out[0] = kVersion;
  out[1] = static_cast<uint8_t>(m.type);
  put16(out + 2, m.reason);
  put32(out + 4, m.local_id);
  put32(out + 8, m.remote_id);
  put16(out + 12, m.port_space);
  put16(out + 14, m.src_port);
  put16(out + 16, m.dst_port);
  out[18] = m.private_len;
  out[19] = m.qp_type;
  put32(out + 20, m.qp_num);
  put32(out + 24, m.psn);
  out[28] = m.responder_resources;
  out[29] = m.initiator_depth;
  out[30] = m.retry_count;
  out[31] = m.rnr_retry_count;
  out[32] = static_cast<uint8_t>((m.flow_control ? 1 : 0) | (m.srq ? 2 : 0));
  put32(out + 36, m.src_ip);
  std::memcpy(out + kHeaderSize, m.private_data, m.private_len);
  return kHeaderSize + m.private_len;
}

const char* to_string(DecodeError e) {
  switch (e) {
    case DecodeError::kNone:
      return "none";
    case DecodeError::kShort:
      return "short";
    case DecodeError::kVersion:
      return "version";
    case DecodeError::kType:
      return "type";
    case DecodeError::kPrivateLen:
      return "private data length";
    case DecodeError::kField:
      return "field out of range";
  }
  return "?";
}

DecodeError decode(const uint8_t* in, size_t len, Message* m) {
  if (len < kHeaderSize) return DecodeError::kShort;
  if (in[0] != kVersion) return DecodeError::kVersion;
  if (!known(in[1])) return DecodeError::kType;
  m->type = static_cast<Type>(in[1]);
  m->private_len = in[18];
  if (m->private_len > max_private(m->type)) return DecodeError::kPrivateLen;
  if (len < kHeaderSize + m->private_len) return DecodeError::kShort;
  m->reason = get16(in + 2);
  m->local_id = get32(in + 4);
  m->remote_id = get32(in + 8);
  m->port_space = get16(in + 12);
  m->src_port = get16(in + 14);
  m->dst_port = get16(in + 16);
  m->qp_type = in[19];
  m->qp_num = get32(in + 20);
  m->psn = get32(in + 24);
  m->responder_resources = in[28];
  m->initiator_depth = in[29];
  m->retry_count = in[30];
  m->rnr_retry_count = in[31];
  m->flow_control = in[32] & 1;
  m->srq = (in[32] >> 1) & 1;
  m->src_ip = get32(in + 36);
  if (m->local_id == 0 || m->qp_num > 0xffffff || m->psn > 0xffffff || m->retry_count > 7 ||
      m->rnr_retry_count > 7 || (in[32] & ~3u) != 0) {
    return DecodeError::kField;
  }
  // Every type but a REQ names the receiver's id; a REJ may not (a client
  // withdrawing its REQ before any answer names the server's id).
  if ((m->remote_id == 0 && m->type != Type::kReq && m->type != Type::kRej) ||
      (m->remote_id != 0 && m->type == Type::kReq)) {
    return DecodeError::kField;
  }
  std::memcpy(m->private_data, in + kHeaderSize, m->private_len);
  return DecodeError::kNone;
}

}  // namespace braid::cm
