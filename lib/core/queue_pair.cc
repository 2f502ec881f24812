// QueuePair, requester side: posting, segmentation into packets, the SES
// header of each, completions in RC order, the error state's flush.
#include "core/queue_pair.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/connection.h"

namespace braid {

uint8_t ses_return_code(AccessError e) {
  switch (e) {
    case AccessError::kNone:
      return wire::kSesRcOk;
    case AccessError::kBadKey:
      return wire::kSesRcBadMkey;
    case AccessError::kOutOfBounds:
      return wire::kSesRcBadAddr;
    case AccessError::kWrongPd:
    case AccessError::kNoPermission:
      break;
  }
  return wire::kSesRcPermViolation;
}

namespace {

WcOpcode wc_opcode_of(Opcode op) {
  switch (op) {
    case Opcode::kRead:
      return WcOpcode::kRdmaRead;
    case Opcode::kSend:
    case Opcode::kSendImm:
      return WcOpcode::kSend;
    case Opcode::kAtomicFetchAdd:
      return WcOpcode::kFetchAdd;
    case Opcode::kAtomicCmpSwap:
      return WcOpcode::kCompSwap;
    case Opcode::kWrite:
    case Opcode::kWriteImm:
      break;
  }
  return WcOpcode::kRdmaWrite;
}

bool consumes_receive(Opcode op) {
  return op == Opcode::kSend || op == Opcode::kSendImm || op == Opcode::kWriteImm;
}

}  // namespace

QueuePair::QueuePair(const QpConfig& cfg, ConnectionStats* stats, MemoryRegionTable* mrs,
                     CompletionQueue* send_cq, CompletionQueue* recv_cq)
    : cfg_(cfg), stats_(stats), mrs_(mrs), send_cq_(send_cq), recv_cq_(recv_cq) {
  const uint32_t entries = cfg_.grow_rings ? kInitialQueueEntries : ~0u;
  sq_.resize(std::min(cfg_.sq_depth, entries));
  sq_mask_ = static_cast<uint32_t>(sq_.size()) - 1;
  // The responder's queues: the READs it accepts (max_dest_rd_atomic, up
  // to 256: a QP granted many starts small and grows as READs come).
  rd_cap_ = std::bit_ceil(std::max<uint32_t>(cfg_.max_dest_rd_atomic, 1));
  const uint32_t rd = std::min(rd_cap_, entries);
  rr_.resize(rd);
  rr_mask_ = rd - 1;
  reads_.resize(rd);
  rq_.resize(std::min(cfg_.rq_depth, entries));
  rq_mask_ = static_cast<uint32_t>(rq_.size()) - 1;
  // At most one part per PSN of the window waits to go again.
  if (!cfg_.grow_rings) resend_.resize(cfg_.max_tails);
}

void QueuePair::grow_read_rings() {
  // Both double together: they share rr_mask_.
  const size_t n = 2 * rr_.size();
  uint32_t mask = rr_mask_;
  grow_ring(rr_, &mask, rr_head_, rr_tail_, n);
  grow_ring(reads_, &rr_mask_, reads_head_, reads_tail_, n);
}

size_t QueuePair::memory_footprint() const {
  return sq_.capacity() * sizeof(SendWqe) + rq_.capacity() * sizeof(RecvWqe) +
         resend_.capacity() * sizeof(Slice) + rr_.capacity() * sizeof(ReadResponse) +
         reads_.capacity() * sizeof(PendingRead) + tails_.capacity() * sizeof(DeferredTail);
}

PostError QueuePair::post_send(const SendRequest& wr, uint64_t* length) {
  if (state_ != ConnectionState::kActive) return PostError::kConnectionError;
  if (sq_tail_ - sq_head_ >= cfg_.sq_depth) return PostError::kQueueFull;
  if (wr.local.num > kMaxSge) return PostError::kInvalid;
  *length = wr.local.total_length();
  if (*length > 0xffffffffu) return PostError::kInvalid;  // SES request_length is 32 bits
  if (is_atomic(wr.opcode) && *length != 8) [[unlikely]] {
    return PostError::kInvalid;  // the old value's room
  }
  if (sq_tail_ - sq_head_ >= sq_.size())
    grow_ring(sq_, &sq_mask_, sq_head_, sq_tail_, 2 * sq_.size());
  sq_[sq_tail_ & sq_mask_].start(wr, *length, sq_tail_,
                                 consumes_receive(wr.opcode) ? next_rsn_++ : 0);
  ++sq_tail_;
  return PostError::kOk;
}

PostError QueuePair::post_recv(uint64_t wr_id, const SgList& sgl) {
  if (state_ != ConnectionState::kActive) return PostError::kConnectionError;
  if (cfg_.srq != nullptr) return PostError::kInvalid;  // receives come from the SRQ
  if (rq_tail_ - rq_head_ >= cfg_.rq_depth) return PostError::kQueueFull;
  if (sgl.num > kMaxSge) return PostError::kInvalid;
  if (rq_tail_ - rq_head_ >= rq_.size())
    grow_ring(rq_, &rq_mask_, rq_head_, rq_tail_, 2 * rq_.size());
  rq_[rq_tail_ & rq_mask_].start(wr_id, sgl);
  ++rq_tail_;
  return PostError::kOk;
}

uint32_t QueuePair::next_payload_len() const {
  if (rr_tx_ != rr_tail_) {
    const ReadResponse& job = rr_[rr_tx_ & rr_mask_];
    return std::min(cfg_.mtu, job.length - job.bytes_sent);
  }
  if (resend_count_ > 0) return resend_[resend_head_].len;
  if (sq_tx_ == sq_tail_) return 0;
  const SendWqe& w = sq_[sq_tx_ & sq_mask_];
  if (answered_with_data(w.wr.opcode)) return static_cast<uint32_t>(atomic_payload(w.wr.opcode));
  return static_cast<uint32_t>(std::min<uint64_t>(cfg_.mtu, w.length - w.bytes_sent));
}

bool QueuePair::next_packet(uint32_t psn, Slice* r, bool requests_ok) {
  if (rr_tx_ != rr_tail_) {
    ReadResponse& job = rr_[rr_tx_ & rr_mask_];
    r->kind = TxKind::kReadResponse;
    r->seq = rr_tx_;
    r->offset = job.bytes_sent;
    r->len = static_cast<uint16_t>(std::min(cfg_.mtu, job.length - job.bytes_sent));
    job.bytes_sent += r->len;
    if (job.bytes_sent == job.length) {
      job.segmented = true;
      job.last_psn = psn;
      ++rr_tx_;
    }
    return true;
  }
  if (!requests_ok) return false;
  while (resend_count_ > 0) [[unlikely]] {
      *r = resend_[resend_head_];
      resend_head_ = (resend_head_ + 1) % resend_.size();
      --resend_count_;
      SendWqe* w = wqe_for_msn(r->seq);
      if (w == nullptr) continue;  // (flushed: cannot happen while it waits)
      --w->resends;
      // The newest PSN of its request: it completes once this is acknowledged.
      if (w->segmented) w->last_psn = psn;
      return true;
    }
  if (sq_tx_ == sq_tail_) return false;
  SendWqe& w = sq_[sq_tx_ & sq_mask_];
  // A fenced request waits for the data of every READ before it: a WRITE
  // after a READ of the same bytes must not be placed before they are read.
  // SQD: a request not started waits for RTS.
  if (start_gate_ > 0 && !w.started && (draining_ || w.wr.fence)) {
    return false;
  }
  r->kind = TxKind::kRequest;
  r->seq = w.msn;
  if (answered_with_data(w.wr.opcode)) {
    if (reads_outstanding_ >= cfg_.max_rd_atomic) return false;
    ++reads_outstanding_;
    ++start_gate_;
    ++*reads_sum_;
    r->offset = 0;
    r->len = static_cast<uint16_t>(atomic_payload(w.wr.opcode));
    w.started = w.segmented = true;
    w.last_psn = psn;
    ++sq_tx_;
    return true;
  }
  r->offset = static_cast<uint32_t>(w.bytes_sent);
  r->len = static_cast<uint16_t>(std::min<uint64_t>(cfg_.mtu, w.length - w.bytes_sent));
  w.started = true;
  w.bytes_sent += r->len;
  if (w.bytes_sent == w.length) {
    w.segmented = true;
    w.last_psn = psn;
    ++sq_tx_;
  }
  return true;
}

bool QueuePair::resend(const Slice& s, bool any_opcode) {
  SendWqe* w = wqe_for_msn(s.seq);
  if (w == nullptr || s.kind != TxKind::kRequest ||
      (!any_opcode && !consumes_receive(w->wr.opcode))) {
    return false;
  }
  if (resend_count_ == resend_.size()) {
    // Grown in order from the head (doubling; at most a window's worth).
    std::vector<Slice> bigger(std::max<size_t>(16, 2 * resend_.size()));
    for (uint32_t i = 0; i < resend_count_; ++i) {
      bigger[i] = resend_[(resend_head_ + i) % resend_.size()];
    }
    resend_.swap(bigger);
    resend_head_ = 0;
  }
  resend_[(resend_head_ + resend_count_) % resend_.size()] = s;
  ++resend_count_;
  ++w->resends;
  return true;
}

bool QueuePair::can_resend(uint32_t msn16) const {
  const SendWqe* w = const_cast<QueuePair*>(this)->wqe_for_msn(msn16);
  return w != nullptr && consumes_receive(w->wr.opcode);
}

bool QueuePair::rnr_try(uint32_t msn16, uint8_t limit) {
  SendWqe* w = wqe_for_msn(msn16);
  if (w == nullptr || limit == 7) return true;
  if (w->rnr_tries < 255) ++w->rnr_tries;
  return w->rnr_tries <= limit;
}

QueuePair::Source QueuePair::source(const Slice& r) {
  Source s;
  s.payload_len = r.len;
  s.read_rc = wire::kSesRcOk;
  if (r.kind != TxKind::kReadResponse) return s;
  const ReadResponse& job = rr_[r.seq & rr_mask_];
  s.read_rc = job.return_code;
  if (job.atomic) {
    s.read_src = job.old_value;  // as it was when the atomic ran
    return s;
  }
  if (s.read_rc == wire::kSesRcOk && r.len > 0) {
    uint8_t* src = nullptr;
    const AccessError err =
        mrs_->resolve(job.rkey, job.addr + r.offset, r.len, kAccessRemoteRead, cfg_.pd, &src);
    if (err == AccessError::kNone) {
      s.read_src = src;
    } else {
      ++stats_->access_errors;
      s.read_rc = ses_return_code(err);
      s.payload_len = 0;  // no data: the requester fails the READ
    }
  }
  return s;
}

bool QueuePair::write_packet(const Slice& r, const Source& src, uint32_t job_id, bool by_reference,
                             uint8_t* ses_at, const uint8_t** in_place) const {
  *in_place = nullptr;
  uint8_t* payload = ses_at + ses_size(r);
  if (r.kind == TxKind::kNop) [[unlikely]] {
    wire::SesRequest s;
    s.opcode = static_cast<uint8_t>(wire::SesOpcode::kNoOp);
    s.flags = wire::kSesFlagSom | wire::kSesFlagEom;
    s.message_id = static_cast<uint16_t>(r.seq);
    s.job_id = job_id;
    s.pid_on_fep = static_cast<uint16_t>(cfg_.remote_qpn >> 12);
    s.resource_index = static_cast<uint16_t>(cfg_.remote_qpn & 0xfff);
    wire::encode_ses_request(ses_at, s);
    return false;
  }
  if (r.kind == TxKind::kReadResponse) {
    const ReadResponse& job = rr_[r.seq & rr_mask_];
    wire::SesResponse s;
    s.opcode = static_cast<uint8_t>(wire::SesResponseOpcode::kResponseWithData);
    s.return_code = src.read_rc;
    s.message_id = job.requester;
    s.job_id = job_id;
    s.read_request_message_id = job.message_id;
    s.payload_length = static_cast<uint16_t>(src.payload_len);
    s.modified_length = job.length;
    s.message_offset = r.offset;
    wire::encode_ses_response_data(ses_at, s);
    if (src.payload_len > 0) {
      if (by_reference && src.payload_len >= kExternalPayloadMin) {
        *in_place = src.read_src;
      } else {
        std::memcpy(payload, src.read_src, src.payload_len);
      }
    }
    return false;
  }
  const SendWqe& w = sq_[r.seq & sq_mask_];
  const Opcode op = w.wr.opcode;
  wire::SesRequest s;
  const bool som = r.offset == 0;
  const bool eom = answered_with_data(op) || r.offset + r.len == w.length;
  s.flags = (som ? wire::kSesFlagSom : 0) | (eom ? wire::kSesFlagEom : 0);
  s.message_id = static_cast<uint16_t>(w.msn);
  s.job_id = job_id;
  s.pid_on_fep = static_cast<uint16_t>(cfg_.remote_qpn >> 12);
  s.resource_index = static_cast<uint16_t>(cfg_.remote_qpn & 0xfff);
  s.request_length = static_cast<uint32_t>(w.length);
  // One dispatch on the opcode: what it names, and whether it consumes a
  // receive (its RSN) or carries immediate data (in the first packet).
  const uint32_t rsn = kRsnFlag | (w.rsn & ~kRsnFlag);
  switch (op) {
    case Opcode::kWrite:
      s.opcode = static_cast<uint8_t>(wire::SesOpcode::kWrite);
      s.buffer_offset = w.wr.remote_addr + r.offset;
      s.memory_key = w.wr.rkey;
      break;
    case Opcode::kWriteImm:
      s.opcode = static_cast<uint8_t>(wire::SesOpcode::kWrite);
      s.buffer_offset = w.wr.remote_addr + r.offset;
      s.memory_key = w.wr.rkey;
      s.initiator = rsn;
      break;
    case Opcode::kSend:
    case Opcode::kSendImm:
      s.opcode = static_cast<uint8_t>(wire::SesOpcode::kSend);
      s.buffer_offset = r.offset;
      s.initiator = rsn;
      break;
    case Opcode::kRead:
      s.opcode = static_cast<uint8_t>(wire::SesOpcode::kRead);
      s.buffer_offset = w.wr.remote_addr;
      s.memory_key = w.wr.rkey;
      s.initiator = cfg_.slot;  // the response names it
      break;
    case Opcode::kAtomicFetchAdd:
    case Opcode::kAtomicCmpSwap: {
      s.opcode = static_cast<uint8_t>(wire::SesOpcode::kFetchAtomic);
      s.buffer_offset = w.wr.remote_addr;
      s.memory_key = w.wr.rkey;
      s.initiator = cfg_.slot;
      wire::SesAtomic a;
      a.code = op == Opcode::kAtomicFetchAdd ? wire::kSesAtomicSum : wire::kSesAtomicCompareSwap;
      a.operand = w.wr.atomic_operand();
      a.compare = w.wr.atomic_compare();
      s.payload_length = r.len;
      wire::encode_ses_request(ses_at, s);
      wire::encode_ses_atomic(payload, a);
      return true;
    }
  }
  if ((op == Opcode::kSendImm || op == Opcode::kWriteImm) && som) [[unlikely]] {
    s.flags |= wire::kSesFlagHd;
    s.header_data = w.wr.imm_data;
  }
  s.payload_length = r.len;
  s.message_offset = r.offset;
  wire::encode_ses_request(ses_at, s);
  if (r.len > 0) {
    const uint8_t* span = by_reference && r.len >= kExternalPayloadMin
                              ? sgl_span(w.wr.local, r.offset, r.len)
                              : nullptr;
    if (span != nullptr) {
      *in_place = span;
    } else {
      copy_from_sgl(w.wr.local, r.offset, payload, r.len);
    }
  }
  return op == Opcode::kRead;
}

size_t QueuePair::atomic_payload(Opcode op) {
  switch (op) {
    case Opcode::kAtomicFetchAdd:
      return wire::ses_atomic_size(wire::kSesAtomicSum);
    case Opcode::kAtomicCmpSwap:
      return wire::ses_atomic_size(wire::kSesAtomicCompareSwap);
    default:
      return 0;
  }
}

bool QueuePair::first_read(uint16_t* message_id) const {
  for (uint32_t i = sq_head_; i != sq_tx_; ++i) {
    const SendWqe& w = sq_[i & sq_mask_];
    if (!answered_with_data(w.wr.opcode)) continue;
    *message_id = static_cast<uint16_t>(w.msn);
    return true;
  }
  return false;
}

bool QueuePair::oldest_read_psn(uint32_t* psn) const {
  for (uint32_t i = sq_head_; i != sq_tx_; ++i) {
    const SendWqe& w = sq_[i & sq_mask_];
    if (!answered_with_data(w.wr.opcode) || !w.segmented || w.read_done) continue;
    *psn = w.last_psn;
    return true;
  }
  return false;
}

void QueuePair::push_send_completion(SendWqe& w, WcStatus status, WcStatus* err) {
  if (!w.wr.signaled && status == WcStatus::kSuccess) return;
  WorkCompletion wc;
  wc.wr_id = w.wr.wr_id;
  wc.status = status;
  wc.qp_num = cfg_.qp_num;
  switch (w.wr.opcode) {
    case Opcode::kWrite:
    case Opcode::kWriteImm:
      wc.opcode = WcOpcode::kRdmaWrite;
      break;
    case Opcode::kSend:
    case Opcode::kSendImm:
      wc.opcode = WcOpcode::kSend;
      break;
    case Opcode::kRead:
      wc.opcode = WcOpcode::kRdmaRead;
      wc.byte_len = static_cast<uint32_t>(w.length);
      break;
    case Opcode::kAtomicFetchAdd:
    case Opcode::kAtomicCmpSwap:
      wc.opcode = wc_opcode_of(w.wr.opcode);
      wc.byte_len = 8;
      break;
  }
  if (!send_cq_->push(wc)) {  // CQ overrun
    *err = WcStatus::kWrFlushErr;
    note_fault(QpFault::kSendCqOverrun);
  }
}

WcStatus QueuePair::complete_sends(uint32_t snd_una) {
  while (sq_head_ != sq_tx_) {
    SendWqe& w = sq_[sq_head_ & sq_mask_];
    if (w.failed) return w.fail_status;
    if (answered_with_data(w.wr.opcode)) {
      if (!w.segmented || !w.read_done) break;
      --reads_outstanding_;
      --start_gate_;
      --*reads_sum_;
    } else if (!w.segmented || w.resends > 0 || !psn_lt(w.last_psn, snd_una)) {
      break;
    }
    ++sq_head_;  // before the push: a full CQ moves us to the error state
    WcStatus err = WcStatus::kSuccess;
    push_send_completion(w, WcStatus::kSuccess, &err);
    if (err != WcStatus::kSuccess) return err;
  }
  return WcStatus::kSuccess;
}

WcStatus QueuePair::fail_request(uint32_t msn, WcStatus status, uint32_t snd_una) {
  SendWqe* w = wqe_for_msn(msn);
  if (w == nullptr) return status;
  if (!w->failed) {
    w->failed = true;
    w->fail_status = status;
  }
  return complete_sends(snd_una);
}

WcStatus QueuePair::complete_recvs(uint32_t cack) {
  while (rq_head_ != rq_tail_) {
    RecvWqe& w = rq_[rq_head_ & rq_mask_];
    if (!w.eom_seen || w.placed != w.byte_len || psn_lt(cack, w.last_psn)) break;
    WorkCompletion wc;
    wc.wr_id = w.wr_id;
    wc.status = w.status;
    wc.opcode = w.rdma_imm ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv;
    wc.byte_len = w.byte_len;
    wc.has_imm = w.has_imm;
    wc.imm_data = w.imm;
    wc.qp_num = cfg_.qp_num;
    ++rq_head_;
    if (!recv_cq_->push(wc)) {  // CQ overrun
      note_fault(QpFault::kRecvCqOverrun);
      return WcStatus::kWrFlushErr;
    }
  }
  return WcStatus::kSuccess;
}

QueuePair::SendWqe* QueuePair::wqe_for_msn(uint32_t msn16) {
  const uint32_t msn = sq_head_ + ((msn16 - sq_head_) & 0xffff);
  if (msn - sq_head_ >= sq_tail_ - sq_head_) return nullptr;  // completed, or never posted
  SendWqe& w = sq_[msn & sq_mask_];
  return w.msn == msn && w.started ? &w : nullptr;
}

void QueuePair::flush(WcStatus status, uint32_t snd_una) {
  const bool entering = state_ != ConnectionState::kError;
  state_ = ConnectionState::kError;
  bool error_given = false;
  for (; sq_head_ != sq_tail_; ++sq_head_) {
    SendWqe& w = sq_[sq_head_ & sq_mask_];
    WcStatus s = WcStatus::kWrFlushErr;
    if (!error_given) {
      const bool done = answered_with_data(w.wr.opcode)
                            ? w.segmented && w.read_done
                            : w.segmented && w.resends == 0 && psn_lt(w.last_psn, snd_una);
      if (w.failed) {
        s = w.fail_status;
        error_given = true;
      } else if (done) {
        s = WcStatus::kSuccess;
      } else {
        s = status;
        error_given = true;
      }
    } else if (w.failed && w.fail_status == WcStatus::kLocProtErr) {
      s = w.fail_status;  // its region was deregistered: it says so (dereg_mr)
    }
    if (s == WcStatus::kSuccess) {
      WcStatus ignored = WcStatus::kSuccess;
      push_send_completion(w, s, &ignored);  // a full CQ drops it: counted as overrun
      continue;
    }
    WorkCompletion wc;
    wc.wr_id = w.wr.wr_id;
    wc.status = s;
    wc.qp_num = cfg_.qp_num;
    wc.opcode = wc_opcode_of(w.wr.opcode);
    send_cq_->push(wc);
  }
  sq_tx_ = sq_tail_;
  resend_count_ = 0;
  *reads_sum_ -= reads_outstanding_;
  if (reads_outstanding_ > 0) abandoned_reads_ = true;  // their responses may still come
  reads_outstanding_ = 0;                               // (their READ timer must not run on)
  start_gate_ = draining_ ? 1 : 0;
  if (cfg_.srq != nullptr) give_back_unused();
  for (; rq_head_ != rq_tail_; ++rq_head_) {
    RecvWqe& w = rq_[rq_head_ & rq_mask_];
    if (cfg_.srq != nullptr && unused(w)) continue;  // given back
    WorkCompletion wc;
    wc.wr_id = w.wr_id;
    wc.status = w.status != WcStatus::kSuccess ? w.status : WcStatus::kWrFlushErr;
    wc.opcode = WcOpcode::kRecv;
    wc.qp_num = cfg_.qp_num;
    recv_cq_->push(wc);
  }
  if (entering && cfg_.on_error != nullptr) cfg_.on_error(cfg_.on_error_arg, fault_);
}

void QueuePair::give_back_unused() {
  // The newest first: each goes back in front of the queue, so they keep
  // their order there. A receive some of whose message was placed, or that
  // failed, completes on this queue pair (flush) instead.
  for (uint32_t r = rq_tail_; r != rq_head_; --r) {
    const RecvWqe& w = rq_[(r - 1) & rq_mask_];
    if (unused(w)) cfg_.srq->give_back(SharedReceiveQueue::Entry{w.wr_id, w.sgl, w.status});
  }
}

bool QueuePair::revoke_local_key(uint32_t lkey) {
  if (lkey == 0) return false;
  bool used = false;
  for (uint32_t m = sq_head_; m != sq_tail_; ++m) {
    SendWqe& w = sq_[m & sq_mask_];
    if (!sgl_uses(w.wr.local, lkey)) continue;
    used = true;
    if (!w.failed) {
      w.failed = true;
      w.fail_status = WcStatus::kLocProtErr;
    }
  }
  for (uint32_t r = rq_head_; r != rq_tail_; ++r) {
    RecvWqe& w = rq_[r & rq_mask_];
    if (!sgl_uses(w.sgl, lkey)) continue;
    used = true;
    w.status = WcStatus::kLocProtErr;
  }
  return used;
}

}  // namespace braid
