// QueuePair, responder side: the memory-key check before any byte is
// touched, placement of every packet where it belongs (in any order), and
// the in-order work done when the cumulative point advances (deferred
// tails, receive completions, READ execution).
#include <algorithm>
#include <cstring>

#include "core/connection.h"
#include "core/queue_pair.h"

namespace braid {

bool QueuePair::receive_slot(uint32_t initiator, uint32_t* rsn, bool* done, Refusal* why) {
  *done = false;
  if (!(initiator & kRsnFlag)) return refused_invalid(why);
  // The wire carries 31 bits; rebuild the full number next to rq_head_.
  const uint32_t full = rq_head_ + ((initiator - rq_head_) & ~kRsnFlag);
  if (full - rq_head_ >= rq_tail_ - rq_head_) {
    if (full - rq_head_ < (1u << 30)) {
      if (cfg_.srq != nullptr && bind_shared(full)) {
        *rsn = full;
        return usable_receive(full, why);
      }
      ++stats_->rnr_nacks;
      *why = Refusal::kNotReady;
      return false;
    }
    // Behind the oldest receive: one that has completed. Its request came
    // again (a part refused for want of a receive is sent again under a
    // new PSN, while a copy of it may have been taken meanwhile): taken,
    // not placed (the receive's buffer is the program's again).
    ++stats_->duplicate_messages;
    *done = true;
    return true;
  }
  *rsn = full;
  return usable_receive(full, why);
}

bool QueuePair::bind_shared(uint32_t rsn) {
  // A peer has no more receive-consuming messages under way than PSNs in
  // its window: one naming a receive further ahead is not believed (it
  // would take the shared queue's receives from every other queue pair).
  if (rsn - rq_head_ >= std::min(cfg_.max_tails, cfg_.rq_depth)) return false;
  while (rq_tail_ - rq_head_ <= rsn - rq_head_) {
    if (rq_tail_ - rq_head_ >= rq_.size())
      grow_ring(rq_, &rq_mask_, rq_head_, rq_tail_, 2 * rq_.size());
    SharedReceiveQueue::Entry e;
    if (!cfg_.srq->take(&e)) return false;
    RecvWqe& w = rq_[rq_tail_ & rq_mask_];
    w.start(e.wr_id, e.sgl);
    w.status = e.status;
    ++rq_tail_;
  }
  return true;
}

// What a packet tells the receive WQE it belongs to: the immediate (on the
// first packet), the message's length (on the last), and its bytes and PSN,
// for completion.
void QueuePair::note_receive(RecvWqe& w, const wire::SesRequest& s, uint32_t psn, uint32_t len,
                             bool rdma_imm) {
  if (s.som() && (s.flags & wire::kSesFlagHd)) {
    w.has_imm = true;
    w.imm = static_cast<uint32_t>(s.header_data);
  }
  w.placed += len;
  if (!w.any || psn_lt(w.last_psn, psn)) w.last_psn = psn;
  w.any = true;
  if (s.eom()) {
    w.eom_seen = true;
    w.byte_len = s.request_length;
    w.rdma_imm = rdma_imm;
  }
}

bool QueuePair::place_request_other(const wire::ParsedPacket& pkt, uint32_t msg_offset,
                                    Refusal* why) {
  const wire::SesRequest& s = pkt.ses;
  const uint32_t len = pkt.payload_len;
  switch (static_cast<wire::SesOpcode>(s.opcode)) {
    case wire::SesOpcode::kSend: {
      uint32_t rsn = 0;
      bool done = false;
      if (!receive_slot(s.initiator, &rsn, &done, why)) return false;
      if (done) return true;
      RecvWqe& w = rq_[rsn & rq_mask_];
      if (s.buffer_offset != msg_offset) return refused_invalid(why);
      // (An SRQ's receives were checked against its own PD when posted.)
      if (!w.any && cfg_.srq == nullptr && !receive_buffers_usable(w.sgl)) [[unlikely]] {
        w.status = WcStatus::kLocProtErr;
        ++stats_->access_errors;
        *why = Refusal::kRemoteOp;
        return false;
      }
      if (s.request_length > w.length) {
        // The message does not fit the posted buffer: the receive completes
        // with LOC_LEN_ERR, our own sends are flushed, the sender learns it
        // from the NACK.
        w.status = WcStatus::kLocLenErr;
        refusal_in_receive_ = true;
        return refused_invalid(why);
      }
      if (len > 0)
        copy_to_sgl(w.sgl, msg_offset, pkt.payload, len, next_packet_bytes(s, msg_offset, len));
      stats_->bytes_placed += len;
      note_receive(w, s, pkt.req.psn, len, false);
      return true;
    }
    case wire::SesOpcode::kRead: {
      if (len != 0 || !s.som() || !s.eom()) return refused_invalid(why);
      if (!(cfg_.remote_access & kAccessRemoteRead)) return refused_access(why);
      if (s.memory_key > 0xffffffffu) return refused_access(why);
      uint8_t* src = nullptr;
      // A zero-length READ (a fence) reads nothing: no key check.
      if (s.request_length > 0 &&
          mrs_->resolve(static_cast<uint32_t>(s.memory_key), s.buffer_offset, s.request_length,
                        kAccessRemoteRead, cfg_.pd, &src) != AccessError::kNone) {
        return refused_access(why);
      }
      return accept_read(pkt, 0, 0, 0, why);
    }
    case wire::SesOpcode::kFetchAtomic: {
      // One packet, 8 bytes at an 8-byte aligned address (InfiniBand: an
      // invalid request otherwise), in a region that allows atomics.
      wire::SesAtomic a;
      if (!s.som() || !s.eom() || s.request_length != 8 ||
          wire::decode_ses_atomic(pkt.payload, len, &a) == 0) {
        return refused_invalid(why);
      }
      if (!(cfg_.remote_access & kAccessRemoteAtomic)) return refused_access(why);
      if (s.buffer_offset % 8 != 0) return refused_invalid(why);
      uint8_t* target = nullptr;
      if (s.memory_key > 0xffffffffu ||
          mrs_->resolve(static_cast<uint32_t>(s.memory_key), s.buffer_offset, 8,
                        kAccessRemoteAtomic, cfg_.pd, &target) != AccessError::kNone) {
        return refused_access(why);
      }
      ++stats_->atomics_received;
      return accept_read(pkt, a.code, a.operand, a.compare, why);
    }
    case wire::SesOpcode::kNoOp:
      // Fills the PSN of a request refused for want of a receive (sent
      // again under a new PSN): nothing to place.
      if (len != 0 || !s.som() || !s.eom() || s.request_length != 0) return refused_invalid(why);
      ++stats_->nops_received;
      return true;
    default:
      return refused_invalid(why);
  }
}

bool QueuePair::accept_read(const wire::ParsedPacket& pkt, uint8_t atomic_code, uint64_t operand,
                            uint64_t compare, Refusal* why) {
  const wire::SesRequest& s = pkt.ses;
  // Over what this responder accepts (max_dest_rd_atomic): READs and
  // atomics not yet answered, queued or with response packets still to
  // send. (One the requester has completed was wholly sent: an IB
  // requester within its own max_rd_atomic never trips this.)
  if ((reads_tail_ - reads_head_) + (rr_tail_ - rr_tx_) >= cfg_.max_dest_rd_atomic) {
    return refused_invalid(why);
  }
  // (Fewer than max_dest_rd_atomic wait: the ring is below its cap.)
  if (reads_tail_ - reads_head_ >= reads_.size()) grow_read_rings();
  reads_[reads_tail_ & rr_mask_] = PendingRead{pkt.req.psn,
                                               s.message_id,
                                               static_cast<uint16_t>(s.initiator),
                                               static_cast<uint32_t>(s.memory_key),
                                               s.buffer_offset,
                                               s.request_length,
                                               atomic_code,
                                               operand,
                                               compare};
  ++reads_tail_;
  return true;
}

bool QueuePair::place_read_response(const wire::ParsedPacket& pkt, Refusal* why) {
  const wire::SesResponse& s = pkt.resp;
  const uint32_t len = pkt.payload_len;
  // The READ with this 16-bit message id among those segmented and not done.
  const uint32_t msn = sq_head_ + ((uint32_t{s.read_request_message_id} - sq_head_) & 0xffff);
  if (msn - sq_head_ >= sq_tx_ - sq_head_) {
    ++stats_->stale_responses;
    return false;
  }
  SendWqe& w = sq_[msn & sq_mask_];
  if (!answered_with_data(w.wr.opcode) || w.read_done) {
    ++stats_->stale_responses;
    return false;
  }
  if (s.opcode != static_cast<uint8_t>(wire::SesResponseOpcode::kResponseWithData)) {
    return refused_invalid(why);
  }
  if (s.return_code != wire::kSesRcOk) {
    w.failed = true;
    w.fail_status = WcStatus::kRemAccessErr;
    return true;
  }
  if (s.payload_length != len || s.modified_length != w.length ||
      uint64_t{s.message_offset} + len > w.length) {
    return refused_invalid(why);
  }
  if (is_atomic(w.wr.opcode)) [[unlikely]] {
    // The old value, whole in one packet, in the requester's byte order.
    if (len != 8 || s.message_offset != 0) return refused_invalid(why);
    const uint64_t old = wire::load_be64(pkt.payload);
    copy_to_sgl(w.wr.local, 0, reinterpret_cast<const uint8_t*>(&old), 8);
  } else if (len > 0) {
    copy_to_sgl(w.wr.local, s.message_offset, pkt.payload, len,
                std::min<uint32_t>(len, w.length - s.message_offset - len));
  }
  stats_->bytes_placed += len;
  w.read_bytes += len;
  if (w.read_bytes == w.length) w.read_done = true;
  return true;
}

uint32_t QueuePair::defer_tail(const wire::ParsedPacket& pkt, uint8_t* dst) {
  const uint32_t len = pkt.payload_len;
  if (len == 0) return 0;
  // Every tail held is of a PSN in the receive window: a window's worth at
  // most. The store doubles when full (it allocates only then).
  if (tail_count_ == tails_.size()) {
    tails_.resize(std::min<size_t>(std::max<size_t>(32, 2 * tails_.size()), cfg_.max_tails));
    if (tail_count_ == tails_.size()) return len;  // (cannot happen) placed at once
  }
  const uint32_t t = std::min(len, kTailBytes);
  const uint32_t now_len = len - t;
  DeferredTail& d = tails_[tail_count_++];
  d.psn = pkt.req.psn;
  d.rkey = static_cast<uint32_t>(pkt.ses.memory_key);
  d.addr = pkt.ses.buffer_offset + now_len;
  d.local = dst + now_len;
  d.len = static_cast<uint8_t>(t);
  std::memcpy(d.bytes, pkt.payload + now_len, t);
  ++stats_->tails_deferred;
  return now_len;
}

void QueuePair::update_held_tails(uint32_t psn, const uint8_t* dst, const uint8_t* src,
                                  uint32_t len) {
  for (uint32_t i = 0; i < tail_count_; ++i) {
    DeferredTail& d = tails_[i];
    if (!psn_lt(d.psn, psn)) continue;  // a newer tail wins over these bytes anyway
    const uint8_t* lo = std::max(d.local, dst);
    const uint8_t* hi = std::min(d.local + d.len, dst + len);
    if (lo < hi) std::memcpy(d.bytes + (lo - d.local), src + (lo - dst), hi - lo);
  }
}

void QueuePair::place_deferred_tails(uint32_t cack) {
  // Those now in order go, oldest first (a newer tail over the same bytes
  // wins); the rest stay.
  const auto end = tails_.begin() + tail_count_;
  const auto ready = std::partition(tails_.begin(), end,
                                    [cack](const DeferredTail& d) { return !psn_lt(cack, d.psn); });
  std::sort(tails_.begin(), ready,
            [](const DeferredTail& x, const DeferredTail& y) { return psn_lt(x.psn, y.psn); });
  for (auto it = tails_.begin(); it != ready; ++it) {
    // Resolved again: the region may have gone meanwhile.
    uint8_t* dst = nullptr;
    if (mrs_->resolve(it->rkey, it->addr, it->len, kAccessRemoteWrite, cfg_.pd, &dst) ==
        AccessError::kNone) {
      std::memcpy(dst, it->bytes, it->len);
    } else {
      ++stats_->access_errors;
    }
  }
  std::move(ready, end, tails_.begin());
  tail_count_ -= static_cast<uint32_t>(ready - tails_.begin());
}

void QueuePair::execute_reads(uint32_t cack) {
  while (reads_head_ != reads_tail_) {
    if (rr_tail_ - rr_head_ >= rr_.size()) {
      if (rr_.size() >= rd_cap_) break;  // responses kept until acknowledged
      grow_read_rings();
    }
    const PendingRead& pr = reads_[reads_head_ & rr_mask_];
    if (psn_lt(cack, pr.psn)) break;
    ReadResponse& job = rr_[rr_tail_ & rr_mask_];
    job = ReadResponse{};
    uint8_t* src = nullptr;
    // Checked again (and again for every packet built): the region may have
    // gone since the request arrived.
    job.return_code =
        pr.length == 0
            ? wire::kSesRcOk
            : ses_return_code(mrs_->resolve(
                  pr.rkey, pr.addr, pr.length,
                  pr.atomic != 0 ? kAccessRemoteAtomic : kAccessRemoteRead, cfg_.pd, &src));
    if (job.return_code == wire::kSesRcOk) {
      job.rkey = pr.rkey;
      job.addr = pr.addr;
      job.length = pr.length;
    } else {
      ++stats_->access_errors;
    }
    if (pr.atomic != 0 && job.return_code == wire::kSesRcOk) execute_atomic(pr, src, &job);
    job.message_id = pr.message_id;
    job.requester = pr.requester;
    ++rr_tail_;
    ++reads_head_;
  }
}

void QueuePair::execute_atomic(const PendingRead& pr, uint8_t* target, ReadResponse* job) {
  // Once, when everything before it is in: a copy of the request that
  // comes again is a duplicate PSN and never gets here, and a lost
  // response is sent again from old_value. Atomic with respect to every
  // other atomic on the device (any engine's: IBV_ATOMIC_HCA), and to the
  // CPU's own atomics on the same word.
  auto* word = reinterpret_cast<uint64_t*>(target);
  uint64_t old = 0;
  if (pr.atomic == wire::kSesAtomicSum) {
    old = __atomic_fetch_add(word, pr.operand, __ATOMIC_SEQ_CST);
  } else {
    old = pr.compare;
    __atomic_compare_exchange_n(word, &old, pr.operand, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  }
  job->atomic = true;
  wire::store_be64(job->old_value, old);
  ++stats_->atomics_executed;
}

WcStatus QueuePair::in_order_work(uint32_t cack) {
  // Message tails first: a WRITE_IMM completes only with its last bytes in.
  if (tail_count_ > 0) place_deferred_tails(cack);
  const WcStatus err = complete_recvs(cack);
  if (err != WcStatus::kSuccess) return err;
  if (reads_head_ != reads_tail_ && state_ == ConnectionState::kActive) execute_reads(cack);
  return WcStatus::kSuccess;
}

void QueuePair::release_read_responses(uint32_t snd_una, uint32_t cack) {
  bool freed = false;
  while (rr_head_ != rr_tx_) {
    const ReadResponse& job = rr_[rr_head_ & rr_mask_];
    if (!job.segmented || !psn_lt(job.last_psn, snd_una)) break;
    ++rr_head_;
    freed = true;
  }
  if (freed) execute_reads(cack);
}

}  // namespace braid
