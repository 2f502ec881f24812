// Posting work requests: local key checks, send requests as the core
// takes them, flushes in the error state.
#include "braid/verbs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "verbs/calls.h"
#include "verbs/device_io.h"
#include "verbs/verbs_internal.h"
using namespace braid::calls;

namespace {

// Local key check for a work request's buffers: every SGE must lie inside a
// region of the QP's PD with the access the operation needs. (Inlined: a
// call cost every post some 13 instructions, bench/verbs_instructions.sh.)
[[gnu::always_inline]] inline bool to_sgl(braid_context* c, braid_pd* pd, const braid_sge* sges,
                                          int n, uint32_t need, braid::SgList* out) {
  if (n < 0 || static_cast<uint32_t>(n) > braid::kMaxSge) return false;
  out->num = 0;
  for (int i = 0; i < n; ++i) {
    uint8_t* p = nullptr;
    if (sges[i].length > 0 && c->memory->resolve(sges[i].lkey, sges[i].addr, sges[i].length, need,
                                                 pd->id, &p) != braid::AccessError::kNone) {
      return false;
    }
    out->sge[out->num++] = braid::Sge{p, sges[i].length, sges[i].lkey};
  }
  return true;
}

// An RC receive's buffers as posted: their keys are checked when a message
// first uses the receive (QueuePair::receive_buffers_usable), as a NIC
// checks them, so that ibv_rereg_mr and dereg_mr between the post and the
// message are seen. (The address is the pointer: a region's iova is its
// address.)
bool receive_sgl(const braid_sge* sges, int n, braid::SgList* out) {
  if (n < 0 || static_cast<uint32_t>(n) > braid::kMaxSge) return false;
  out->num = 0;
  for (int i = 0; i < n; ++i) {
    if (sges[i].length > 0 && sges[i].lkey == 0) return false;  // no region has key 0
    out->sge[out->num++] =
        braid::Sge{reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(sges[i].addr)), sges[i].length,
                   sges[i].lkey};
  }
  return true;
}

// Inline data: whether it fits max_inline_data, and its copy (made at post:
// the application may reuse its buffers when the post returns) into the
// QP's inline slot of the request numbered `seq`, as one SGE.
bool inline_fits(const braid_qp* qp, const braid_send_wr* wr) {
  uint64_t total = 0;
  for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
  return wr->num_sge >= 0 && total <= qp->init.cap.max_inline_data;
}
void copy_inline(braid_qp* qp, const braid_send_wr* wr, uint32_t seq, braid::SgList* out) {
  const size_t cap = qp->init.cap.max_inline_data;
  uint8_t* slot = qp->inline_buf.data() + (seq & (qp->inline_slots - 1)) * cap;
  size_t off = 0;
  for (int i = 0; i < wr->num_sge; ++i) {
    if (wr->sg_list[i].length == 0) continue;  // its address may be anything
    std::memcpy(slot + off, reinterpret_cast<const void*>(wr->sg_list[i].addr),
                wr->sg_list[i].length);
    off += wr->sg_list[i].length;
  }
  out->num = 1;
  out->sge[0] = braid::Sge{slot, static_cast<uint32_t>(off)};
}

// The errno of a refused post, with the reason for braid_last_error().
[[gnu::noinline, gnu::cold]] int post_failed(braid::PostError e, const char* what) {
  switch (e) {
    case braid::PostError::kOk:
      return 0;
    case braid::PostError::kQueueFull:
      return fail(ENOMEM, std::string(what) + ": queue full");
    case braid::PostError::kInvalid:
      return fail(EINVAL, std::string(what) + ": invalid work request");
    case braid::PostError::kConnectionError:
      break;
  }
  return fail(EINVAL, std::string(what) + ": QP in error");
}

// 0, or the errno of a refused post (and its message): the test inline, the
// message built out of the way (a call per post cost 20 instructions).
inline int post_error(braid::PostError e, const char* what) {
  if (e == braid::PostError::kOk) [[likely]]
    return 0;
  return post_failed(e, what);
}

// A send work request as the connection takes it, or the errno that
// refuses it. `commit` false only checks: inline data is not copied.
int prepare_send(braid_qp* qp, const braid_send_wr* wr, bool commit, braid::SendRequest* req) {
  req->wr_id = wr->wr_id;
  req->signaled = qp->sq_sig_all || (wr->send_flags & BRAID_SEND_SIGNALED);
  req->remote_addr = wr->rdma.remote_addr;
  req->rkey = wr->rdma.rkey;
  req->imm_data = ntohl(wr->imm_data);
  uint32_t need = 0;
  // Read as an int: a C caller may pass any value, and an out-of-range
  // enum must not be loaded as one.
  int opcode;
  std::memcpy(&opcode, &wr->opcode, sizeof(opcode));
  switch (opcode) {
    case BRAID_WR_RDMA_WRITE:
      req->opcode = braid::Opcode::kWrite;
      break;
    case BRAID_WR_RDMA_WRITE_WITH_IMM:
      req->opcode = braid::Opcode::kWriteImm;
      break;
    case BRAID_WR_SEND:
      req->opcode = braid::Opcode::kSend;
      break;
    case BRAID_WR_SEND_WITH_IMM:
      req->opcode = braid::Opcode::kSendImm;
      break;
    case BRAID_WR_RDMA_READ:
      req->opcode = braid::Opcode::kRead;
      need = braid::kAccessLocalWrite;
      break;
    case BRAID_WR_ATOMIC_CMP_AND_SWP:
    case BRAID_WR_ATOMIC_FETCH_AND_ADD:
      req->opcode = opcode == BRAID_WR_ATOMIC_FETCH_AND_ADD ? braid::Opcode::kAtomicFetchAdd
                                                            : braid::Opcode::kAtomicCmpSwap;
      need = braid::kAccessLocalWrite;
      req->remote_addr = wr->atomic.remote_addr;
      req->rkey = wr->atomic.rkey;
      // One 8-byte buffer for the old value, as InfiniBand asks. (The
      // operands' SGEs are past it: to_sgl leaves them.)
      if (wr->num_sge != 1 || wr->sg_list[0].length != 8) {
        return fail(EINVAL, "post_send: an atomic needs one 8-byte SGE");
      }
      if (opcode == BRAID_WR_ATOMIC_FETCH_AND_ADD) {
        req->set_atomic_operands(wr->atomic.compare_add, 0);
      } else {
        req->set_atomic_operands(wr->atomic.swap, wr->atomic.compare_add);
      }
      break;
    default:
      return fail(EINVAL, "post_send: opcode not supported");
  }
  // (In SQD a request waits for RTS.)
  if (qp->state != BRAID_QPS_RTS && qp->state != BRAID_QPS_SQD) [[unlikely]] {
    return fail(EINVAL, "post_send: QP not in RTS or SQD");
  }
  req->fence = (wr->send_flags & BRAID_SEND_FENCE) != 0;
  // The QP's own depth, not the core's (rounded up to a power of two).
  if (qp->outstanding_sends() >= qp->init.cap.max_send_wr) {
    return fail(ENOMEM, "post_send: send queue full (max_send_wr outstanding)");
  }
  if ((wr->send_flags & BRAID_SEND_INLINE) && !braid::answered_with_data(req->opcode)) {
    if (!inline_fits(qp, wr))
      return fail(EINVAL, "post_send: inline data larger than max_inline_data");
    // The slot belongs to the work request's own send queue entry (its MSN):
    // it is free until that entry completes, and a request refused after
    // the copy leaves no other request's bytes changed.
    if (commit) copy_inline(qp, wr, qp->core->next_msn(), &req->local);
    return 0;
  }
  if (!to_sgl(qp->context, qp->pd, wr->sg_list, wr->num_sge, need, &req->local)) {
    return fail(EINVAL, "post_send: a buffer is outside its MR (lkey, bounds, PD or access)");
  }
  return 0;
}

// A QP with work under way leaves new requests for the next poll, which
// sends them in one burst with the rest; but once half a burst waits, it is
// sent at once. A program that posts until its queue is full (perftest's
// tx depth) and only then polls would otherwise keep the peer idle while it
// posts, then send everything late: 64 B WRITEs at tx depth 128 went from
// 9.1 to 11.4 Mpps over virtio (a full burst: 10.2, a quarter: 10.2; fewer
// frames a burst cost more per frame).
// (Half a burst rounded down to a power of two: a mask, not a division.)
bool doorbell_due(const braid::Engine& e, uint32_t queued_before, uint32_t queued_after) {
  const uint32_t mask = ~(std::bit_floor(std::max<uint32_t>(1, e.config().burst / 2)) - 1);
  return (queued_after & mask) != (queued_before & mask);
}
// After a post that queued requests on `qp` (`queued` were waiting
// before): sends now if the QP was idle or half a burst now waits.
void ring_doorbell(braid_qp* qp, bool was_idle, uint32_t queued) {
  braid::Engine& e = *qp->context->slots[qp->engine]->engine;
  const uint32_t now_queued = qp->core != nullptr ? qp->core->unsegmented() : queued;
  if (now_queued != queued && (was_idle || doorbell_due(e, queued, now_queued))) e.transmit();
}

bool in_error(const braid_qp* qp) {
  return qp->state == BRAID_QPS_ERR || qp->in_error();
}

braid::WcOpcode wc_opcode_of(const braid_send_wr* wr) {
  int opcode;
  std::memcpy(&opcode, &wr->opcode, sizeof(opcode));
  switch (opcode) {
    case BRAID_WR_RDMA_WRITE:
    case BRAID_WR_RDMA_WRITE_WITH_IMM:
      return braid::WcOpcode::kRdmaWrite;
    case BRAID_WR_RDMA_READ:
      return braid::WcOpcode::kRdmaRead;
    case BRAID_WR_ATOMIC_CMP_AND_SWP:
      return braid::WcOpcode::kCompSwap;
    case BRAID_WR_ATOMIC_FETCH_AND_ADD:
      return braid::WcOpcode::kFetchAdd;
    default:
      return braid::WcOpcode::kSend;
  }
}

// A QP in error: every send request of the list completes at once with
// WR_FLUSH_ERR.
void flush_send_list(const braid_qp* qp, const braid_send_wr* wr) {
  for (; wr != nullptr; wr = wr->next) flush_posted(qp->send_cq, qp, wr->wr_id, wc_opcode_of(wr));
}

// A UD QP's send list: each a SEND or SEND_WITH_IMM of at most the path
// MTU to the address handle it names.
int post_send_ud(braid_qp* qp, braid_send_wr* wr, braid_send_wr** bad) {
  braid_context* c = qp->context;
  braid::Engine& e = *c->slots[qp->engine]->engine;
  for (; wr != nullptr; wr = wr->next) {
    int rc = 0;
    int opcode;
    std::memcpy(&opcode, &wr->opcode, sizeof(opcode));
    braid::DatagramRequest r;
    r.wr_id = wr->wr_id;
    r.signaled = qp->sq_sig_all || (wr->send_flags & BRAID_SEND_SIGNALED);
    braid_ah* ah = wr->ud.ah;
    if (qp->state == BRAID_QPS_ERR || (qp->ud != nullptr && qp->ud->in_error())) {
      flush_posted(qp->send_cq, qp, wr->wr_id, braid::WcOpcode::kSend);
      continue;
    }
    if (qp->state != BRAID_QPS_RTS || qp->ud == nullptr) {
      rc = fail(EINVAL, "post_send: QP not in RTS");
    } else if (opcode != BRAID_WR_SEND && opcode != BRAID_WR_SEND_WITH_IMM) {
      rc = fail(EINVAL, "post_send: a UD QP sends SEND and SEND_WITH_IMM only");
    } else if (ah == nullptr || ah->context != c) {
      rc = fail(EINVAL, "post_send: no address handle of this device");
    } else if (qp->ud->outstanding_sends() >= qp->init.cap.max_send_wr) {
      rc = fail(ENOMEM, "post_send: send queue full (max_send_wr outstanding)");
    } else if (wr->send_flags & BRAID_SEND_INLINE) {
      if (inline_fits(qp, wr)) {
        copy_inline(qp, wr, qp->ud->next_seq(), &r.local);  // the datagram's own slot
      } else {
        rc = fail(EINVAL, "post_send: inline data larger than max_inline_data");
      }
    } else if (!to_sgl(c, qp->pd, wr->sg_list, wr->num_sge, 0, &r.local)) {
      rc = fail(EINVAL, "post_send: a buffer is outside its MR (lkey, bounds, PD or access)");
    }
    if (rc == 0) {
      // The handle is only read here (QPs of other engines may use it): a
      // MAC not known at its creation is looked up on every send.
      r.dst_mac = ah->mac;
      r.deliverable = ah->resolved || e.lookup_neighbor(ah->ip, &r.dst_mac);
      // (else it completes unsent, as a datagram may be lost)
      r.dst_ip = ah->ip;
      r.dst_qpn = wr->ud.remote_qpn & 0xffffff;
      r.qkey = (wr->ud.remote_qkey & 0x80000000u) ? qp->attr.qkey : wr->ud.remote_qkey;
      r.has_imm = opcode == BRAID_WR_SEND_WITH_IMM;
      r.imm_data = ntohl(wr->imm_data);
      rc = post_error(qp->ud->post_send(r), "post_send");
    }
    if (rc != 0) {
      if (bad != nullptr) *bad = wr;
      return rc;
    }
    e.endpoint().datagram_posted(qp->qp_num);
  }
  e.transmit();  // the doorbell
  return 0;
}

}  // namespace

extern "C" {

int braid_post_recv(struct braid_qp* qp, struct braid_recv_wr* wr, struct braid_recv_wr** bad) {
  if (qp == nullptr) return EINVAL;
  braid_context* c = qp->context;
  EngineGuard g(c, qp->engine, Drives::kYes);
  for (; wr != nullptr; wr = wr->next) {
    braid::SgList sgl;
    int rc = 0;
    if (in_error(qp) || (qp->ud != nullptr && qp->ud->in_error())) {
      flush_posted(qp->recv_cq, qp, wr->wr_id, braid::WcOpcode::kRecv);
      continue;
    }
    if (qp->state == BRAID_QPS_RESET) {
      rc = fail(EINVAL, "post_recv: QP in RESET");
    } else if (qp->ud != nullptr) {
      if (wr->num_sge > static_cast<int>(qp->init.cap.max_recv_sge) && wr->num_sge > 1) {
        rc = fail(EINVAL, "post_recv: more SGEs than max_recv_sge");
      } else if (!to_sgl(c, qp->pd, wr->sg_list, wr->num_sge, braid::kAccessLocalWrite, &sgl)) {
        rc = fail(EINVAL, "post_recv: a buffer is outside its MR or lacks LOCAL_WRITE");
      } else if (qp->ud->posted_recvs() >= qp->init.cap.max_recv_wr) {
        rc = fail(ENOMEM, "post_recv: receive queue full");
      } else {
        rc = post_error(qp->ud->post_recv(wr->wr_id, sgl), "post_recv");
      }
    } else if (qp->srq != nullptr) {
      rc = fail(EINVAL, "post_recv: the QP takes its receives from its SRQ");
    } else if (wr->num_sge > static_cast<int>(qp->init.cap.max_recv_sge) && wr->num_sge > 1) {
      rc = fail(EINVAL, "post_recv: more SGEs than max_recv_sge");
    } else if (!receive_sgl(wr->sg_list, wr->num_sge, &sgl)) {
      rc = fail(EINVAL, "post_recv: more SGEs than the device has, or key 0");
    } else if (qp->conn == nullptr) {
      if (qp->early_recvs.size() >= qp->init.cap.max_recv_wr) {
        rc = fail(ENOMEM, "post_recv: receive queue full");
      } else {
        qp->early_recvs.emplace_back(wr->wr_id, sgl);
      }
    } else {
      rc = post_error(qp->conn->post_recv(qp->slot, wr->wr_id, sgl), "post_recv");
    }
    if (rc != 0) {
      if (bad != nullptr) *bad = wr;
      return rc;
    }
  }
  c->slots[qp->engine]->engine->transmit();  // the doorbell: send now
  return 0;
}

int braid_post_srq_recv(struct braid_srq* srq, struct braid_recv_wr* wr,
                        struct braid_recv_wr** bad) {
  if (srq == nullptr) return EINVAL;
  // Every engine's lock (when the device locks): the keys are resolved
  // against the region table, which reg_mr and dereg_mr change under them,
  // and a dereg_mr must find the receive in the queue once it is checked.
  // (The queue has its own lock for the engines that take from it.)
  Guard g(srq->context);
  for (; wr != nullptr; wr = wr->next) {
    braid::SgList sgl;
    int rc = 0;
    if (wr->num_sge > static_cast<int>(srq->max_sge)) {
      rc = fail(EINVAL, "post_srq_recv: more SGEs than max_sge");
    } else if (!to_sgl(srq->context, srq->pd, wr->sg_list, wr->num_sge, braid::kAccessLocalWrite,
                       &sgl)) {
      rc = fail(EINVAL, "post_srq_recv: a buffer is outside its MR or lacks LOCAL_WRITE");
    } else {
      rc = post_error(srq->queue.post(wr->wr_id, sgl), "post_srq_recv");
    }
    if (rc != 0) {
      if (bad != nullptr) *bad = wr;
      return rc;
    }
  }
  return 0;
}

int braid_post_send(struct braid_qp* qp, struct braid_send_wr* wr, struct braid_send_wr** bad) {
  if (qp == nullptr) return EINVAL;
  braid_context* c = qp->context;
  EngineGuard g(c, qp->engine, Drives::kYes);
  if (qp->is_ud()) [[unlikely]] {
    return post_send_ud(qp, wr, bad);
  }
  // An idle QP sends at once (latency); one with work under way leaves the
  // frames for the next poll, up to half a burst (doorbell_due).
  if (in_error(qp)) {
    flush_send_list(qp, wr);
    return 0;
  }
  const bool was_idle = qp->conn != nullptr && qp->outstanding_sends() == 0;
  const uint32_t queued = qp->core != nullptr ? qp->core->unsegmented() : 0;
  braid::SendRequest& req = qp->post_scratch;
  int rc = 0;
  for (; wr != nullptr; wr = wr->next) {
    rc = prepare_send(qp, wr, true, &req);
    if (rc == 0) rc = post_error(qp->conn->post_send(qp->slot, req), "post_send");
    if (rc != 0) {
      if (bad != nullptr) *bad = wr;
      break;  // the requests before it stay posted, and go as below
    }
  }
  ring_doorbell(qp, was_idle, queued);
  return rc;
}

int braid_post_send_all(struct braid_qp* qp, struct braid_send_wr* wr) {
  if (qp == nullptr) return EINVAL;
  braid_context* c = qp->context;
  EngineGuard g(c, qp->engine, Drives::kYes);
  if (qp->is_ud()) return fail(EOPNOTSUPP, "post_send_all: RC QPs only");
  if (in_error(qp)) {
    flush_send_list(qp, wr);
    return 0;
  }
  // Everything that can refuse a work request is checked first, the
  // queue's room included: then nothing below can fail.
  braid::SendRequest& req = qp->post_scratch;
  uint32_t n = 0;
  for (braid_send_wr* w = wr; w != nullptr; w = w->next, ++n) {
    if (const int rc = prepare_send(qp, w, false, &req)) return rc;
  }
  if (n == 0) return 0;
  if (qp->outstanding_sends() + n > qp->init.cap.max_send_wr) {
    return fail(ENOMEM, "post_send: queue full");
  }
  const bool was_idle = qp->outstanding_sends() == 0;
  const uint32_t queued = qp->core->unsegmented();
  for (; wr != nullptr; wr = wr->next) {
    int rc = prepare_send(qp, wr, true, &req);
    if (rc == 0) rc = post_error(qp->conn->post_send(qp->slot, req), "post_send");
    if (rc != 0) return rc;  // not reached: checked above
  }
  ring_doorbell(qp, was_idle, queued);
  return 0;
}

}  // extern "C"
