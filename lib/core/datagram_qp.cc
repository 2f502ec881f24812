#include "core/datagram_qp.h"

#include <bit>
#include <cstring>

#include "core/connection.h"  // TxOut
#include "wire/crc32c.h"
#include "wire/pds.h"
#include "wire/ses.h"

namespace braid {

DatagramQueuePair::DatagramQueuePair(const DatagramConfig& cfg, CompletionQueue* send_cq,
                                     CompletionQueue* recv_cq)
    : send_cq_(send_cq), recv_cq_(recv_cq), cfg_(cfg) {
  cfg_.sq_depth = std::bit_ceil(std::max<uint32_t>(cfg_.sq_depth, 1));
  cfg_.rq_depth = std::bit_ceil(std::max<uint32_t>(cfg_.rq_depth, 1));
  cfg_.entropies = std::max<uint16_t>(cfg_.entropies, 1);
  sq_.resize(cfg_.sq_depth);
  rq_.resize(cfg_.rq_depth);
}

PostError DatagramQueuePair::post_send(const DatagramRequest& r) {
  if (error_) return PostError::kConnectionError;
  if (r.local.num > kMaxSge || r.local.total_length() > cfg_.mtu) return PostError::kInvalid;
  if (sq_tail_ - sq_head_ >= sq_.size()) return PostError::kQueueFull;
  sq_[sq_tail_++ & (sq_.size() - 1)] = r;
  return PostError::kOk;
}

PostError DatagramQueuePair::post_recv(uint64_t wr_id, const SgList& sgl) {
  if (error_) return PostError::kConnectionError;
  if (sgl.num > kMaxSge) return PostError::kInvalid;
  if (rq_tail_ - rq_head_ >= rq_.size()) return PostError::kQueueFull;
  Recv& w = rq_[rq_tail_++ & (rq_.size() - 1)];
  w.wr_id = wr_id;
  w.sgl = sgl;
  w.status = WcStatus::kSuccess;
  return PostError::kOk;
}

void DatagramQueuePair::revoke_local_key(uint32_t lkey) {
  for (uint32_t i = sq_head_; i != sq_tail_; ++i) {
    DatagramRequest& r = sq_[i & (sq_.size() - 1)];
    if (sgl_uses(r.local, lkey)) r.status = WcStatus::kLocProtErr;
  }
  for (uint32_t i = rq_head_; i != rq_tail_; ++i) {
    Recv& w = rq_[i & (rq_.size() - 1)];
    if (sgl_uses(w.sgl, lkey)) w.status = WcStatus::kLocProtErr;
  }
}

uint32_t DatagramQueuePair::produce(TxOut& out) {
  out.payload_len = 0;
  while (sq_head_ != sq_tail_) {
    const DatagramRequest& r = sq_[sq_head_ & (sq_.size() - 1)];
    const uint32_t len = static_cast<uint32_t>(r.local.total_length());
    const size_t body = wire::kUudSize + wire::kSesStandardSize + len;
    const size_t trailer = cfg_.crc_trailer ? wire::kCrcTrailerSize : 0;
    if (r.deliverable && wire::kL2L4Size + body + trailer > out.cap) return 0;
    uint32_t frame_len = 0;
    if (r.status != WcStatus::kSuccess) {
      // Its region went: not read, completed with the error.
    } else if (r.deliverable) {
      uint8_t* p = out.buf + wire::kL2L4Size;
      wire::encode_uud(p, wire::Prologue{static_cast<uint8_t>(wire::PdsType::kUudReq),
                                         static_cast<uint8_t>(wire::NextHeader::kSesStandard), 0});
      wire::SesRequest s;
      s.opcode = static_cast<uint8_t>(wire::SesOpcode::kDatagramSend);
      s.flags = wire::kSesFlagSom | wire::kSesFlagEom | (r.has_imm ? wire::kSesFlagHd : 0);
      s.message_id = static_cast<uint16_t>(sq_head_);
      s.pid_on_fep = static_cast<uint16_t>((r.dst_qpn >> 12) & 0xfff);
      s.resource_index = static_cast<uint16_t>(r.dst_qpn & 0xfff);
      s.initiator = cfg_.qp_num;  // the source QP (the receiver's src_qp)
      s.memory_key = r.qkey;
      s.header_data = r.imm_data;
      s.request_length = len;
      wire::encode_ses_request(p + wire::kUudSize, s);
      copy_from_sgl(r.local, 0, p + wire::kUudSize + wire::kSesStandardSize, len);
      if (trailer != 0) {
        p[1] |= wire::kFlagCrcTrailer;
        wire::store_be32(p + body, wire::crc32c(p, body));
      }
      const uint16_t entropy =
          static_cast<uint16_t>(0xc000 | ((cfg_.qp_num * 7 + entropy_next_++) % cfg_.entropies));
      wire::FrameTemplate(cfg_.local_mac, r.dst_mac, cfg_.local_ip, r.dst_ip, cfg_.udp_port)
          .write(out.buf, entropy, static_cast<uint32_t>(body + trailer), 0);
      frame_len = static_cast<uint32_t>(wire::kL2L4Size + body + trailer);
      out.dst_ip = r.dst_ip;
      out.dst_pdc = static_cast<uint16_t>(r.dst_qpn);
      ++stats_.sent;
    } else {
      ++stats_.undeliverable;
    }
    if (r.signaled || r.status != WcStatus::kSuccess) {
      WorkCompletion wc;
      wc.wr_id = r.wr_id;
      wc.status = r.status;
      wc.opcode = WcOpcode::kSend;
      wc.qp_num = cfg_.qp_num;
      send_cq_->push(wc);  // a full CQ drops it: counted as an overrun
    }
    ++sq_head_;
    if (frame_len > 0) return frame_len;
  }
  return 0;
}

void DatagramQueuePair::on_packet(const wire::ParsedPacket& pkt, const uint8_t* ip_header) {
  const wire::SesRequest& s = pkt.ses;
  if (!pkt.has_ses_request || s.opcode != static_cast<uint8_t>(wire::SesOpcode::kDatagramSend) ||
      !s.som() || !s.eom() || s.request_length != pkt.payload_len || s.memory_key > 0xffffffffu ||
      s.initiator == 0 || s.initiator > 0xffffff) {
    ++stats_.malformed;
    return;
  }
  if (error_) return;
  if (!receiving_) {
    ++stats_.not_ready;
    return;
  }
  if (static_cast<uint32_t>(s.memory_key) != cfg_.qkey) {
    ++stats_.wrong_qkey;
    return;
  }
  if (rq_head_ == rq_tail_) {
    ++stats_.no_receive;
    return;
  }
  const Recv w = rq_[rq_head_++ & (rq_.size() - 1)];
  WorkCompletion wc;
  wc.wr_id = w.wr_id;
  wc.opcode = WcOpcode::kRecv;
  wc.qp_num = cfg_.qp_num;
  wc.src_qp = s.initiator;
  wc.grh = true;
  const uint64_t need = uint64_t{kGrhSize} + pkt.payload_len;
  if (w.status != WcStatus::kSuccess) {  // its region went: no byte written
    wc.status = w.status;
    recv_cq_->push(wc);
    return;
  }
  if (w.sgl.total_length() < need) {
    ++stats_.too_long;
    wc.status = WcStatus::kLocLenErr;
    recv_cq_->push(wc);
    return;
  }
  // The GRH as InfiniBand lays it out (IP version 6, next header 0x1b,
  // the hop limit, the source and destination GIDs), the GIDs IPv4-mapped:
  // the destination address ends it, where RoCEv2's IPv4 layout has it too,
  // so a reader of either layout finds it there.
  uint8_t grh[kGrhSize] = {};
  grh[0] = 0x60;
  wire::store_be16(grh + 4, static_cast<uint16_t>(pkt.payload_len));
  grh[6] = 0x1b;
  grh[7] = ip_header[8];  // the TTL it arrived with
  grh[18] = grh[19] = grh[34] = grh[35] = 0xff;
  std::memcpy(grh + 20, ip_header + 12, 4);  // source address
  std::memcpy(grh + 36, ip_header + 16, 4);  // destination address
  copy_to_sgl(w.sgl, 0, grh, kGrhSize);
  if (pkt.payload_len > 0) copy_to_sgl(w.sgl, kGrhSize, pkt.payload, pkt.payload_len);
  wc.byte_len = static_cast<uint32_t>(need);
  if (s.flags & wire::kSesFlagHd) {
    wc.has_imm = true;
    wc.imm_data = static_cast<uint32_t>(s.header_data);
  }
  ++stats_.received;
  recv_cq_->push(wc);
}

void DatagramQueuePair::flush() {
  error_ = true;
  for (; sq_head_ != sq_tail_; ++sq_head_) {
    WorkCompletion wc;
    wc.wr_id = sq_[sq_head_ & (sq_.size() - 1)].wr_id;
    wc.status = WcStatus::kWrFlushErr;
    wc.opcode = WcOpcode::kSend;
    wc.qp_num = cfg_.qp_num;
    send_cq_->push(wc);
  }
  for (; rq_head_ != rq_tail_; ++rq_head_) {
    WorkCompletion wc;
    wc.wr_id = rq_[rq_head_ & (rq_.size() - 1)].wr_id;
    wc.status = WcStatus::kWrFlushErr;
    wc.opcode = WcOpcode::kRecv;
    wc.qp_num = cfg_.qp_num;
    recv_cq_->push(wc);
  }
}

}  // namespace braid
