// What the verbs calls share (lib/verbs, internal): errors for
// braid_last_error(), the engines' locks, the idle yield, completion
// channels and one engine's progress. The calls are split by concern:
// verbs.cc (device, PD, MR), progress.cc, cq.cc, qp.cc, post.cc, stats.cc.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <string>

#include "braid/verbs.h"
#include "verbs/verbs_internal.h"

namespace braid::calls {

inline thread_local std::string g_last_error;

inline int fail(int err, std::string why) {
  g_last_error = std::move(why);
  return err;
}

template <typename T>
inline T* fail_null(int err, std::string why) {
  g_last_error = std::move(why);
  errno = err;
  return nullptr;
}

inline uint64_t steady_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// A call that drives an engine itself (poll, post, progress) tells the
// engine's progress thread the application is active; other calls
// (queries, registrations, modify) do not: an application that only queries
// while it waits for a WRITE would otherwise starve the thread.
enum class Drives : bool { kNo, kYes };

// Every engine's lock, in index order: calls that change what all engines
// share (memory regions, the lists of QPs and CQs) or read all of them.
// Taken only when the device locks (a progress thread, several engines).
class Guard {
 public:
  explicit Guard(braid_context* c) : c_(c), locked_(c->locking.load()) {
    if (!locked_) return;
    for (auto& s : c_->slots) s->lock.lock();
  }
  ~Guard() {
    if (!locked_) return;
    for (size_t i = c_->slots.size(); i-- > 0;) c_->slots[i]->lock.unlock();
  }

 private:
  braid_context* c_;
  bool locked_;
};

// One engine's lock: calls about one QP, or one engine's part of a CQ.
class EngineGuard {
 public:
  // kTry: only if no other thread holds it (owns() says).
  enum class Wait : bool { kBlock, kTry };
  EngineGuard(braid_context* c, uint16_t k, Drives drives = Drives::kNo, Wait wait = Wait::kBlock)
      : s_(c->locking ? c->slots[k].get() : nullptr) {
    if (s_ == nullptr) return;
    if (wait == Wait::kTry) {
      if (!s_->lock.try_lock()) {
        s_ = nullptr;
        owns_ = false;
        return;
      }
    } else {
      s_->lock.lock();
    }
    // Only the lock holder writes it: no read-modify-write needed.
    if (drives == Drives::kYes) {
      s_->calls.store(s_->calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  }
  ~EngineGuard() {
    if (s_ != nullptr) s_->lock.unlock();
  }
  bool owns() const { return owns_; }

 private:
  braid::EngineSlot* s_;
  bool owns_ = true;  // (without locking, the caller is the only thread)
};

// config.idle_yield for the calling thread: calls in a row that found no
// work (outside every lock: the thread may give its core away).
inline void idle_pass(const braid_context* c, bool worked) {
  const uint32_t after = c->config.idle_yield;
  if (after == 0) return;  // the default: no thread-local access (a call in a shared library)
  thread_local braid::IdleYield idle;
  idle.pass(worked, after);
}

// A completion channel's fd is readable exactly while an event is pending,
// as rdma-core's: the eventfd's counter is 1 while `fired` holds a CQ and 0
// when it is empty. (Both change under the device's event_lock.)
inline void channel_push(braid_comp_channel* ch, braid_cq* cq) {
  ch->fired.push_back(cq);
  if (ch->signalled) return;
  const uint64_t one = 1;
  ch->signalled = write(ch->fd, &one, sizeof(one)) == sizeof(one);
}

// The counter is cleared with the read alone, no syscall before it: a
// thread that returns from a syscall may give the core to the thread
// waiting in poll(2) on the fd, which would find it still readable and
// then no event (a destroy_cq dropped it) -- Gloo aborts on that EAGAIN;
// it did 7 runs in 100 under load while this poll(2)ed before reading.
inline void channel_drain_if_empty(braid_comp_channel* ch) {
  if (!ch->fired.empty() || !ch->signalled) return;
  uint64_t v;
  // The counter is 1: the read does not block, even on a blocking fd.
  if (read(ch->fd, &v, sizeof(v)) == sizeof(v)) ch->signalled = false;
}

// After engine k completed: fires the armed CQs it completed into (under
// k's lock, which keeps the list of CQs and k's rings still).
inline void signal_armed_cqs(braid_context* c, uint16_t k) {
  if (c->armed.load(std::memory_order_relaxed) == 0 &&
      c->armed_internal.load(std::memory_order_relaxed) == 0) {
    return;  // most polls: none armed
  }
  std::lock_guard<std::mutex> e(c->event_lock);
  for (braid_cq* cq : c->cqs) {
    const braid::CompletionQueue* r = cq->rings[k].get();
    if (!cq->armed || cq->channel == nullptr || r == nullptr || r->pushed() == cq->armed_at[k]) {
      continue;
    }
    cq->armed = false;
    (cq->internal ? c->armed_internal : c->armed).fetch_sub(1, std::memory_order_relaxed);
    channel_push(cq->channel, cq);
  }
}

inline int progress_locked(braid_context* c, uint16_t k, braid::TimeNs ack_hold_ns = 0) {
  braid::EngineSlot& s = *c->slots[k];
  const int n = static_cast<int>(s.engine->poll(ack_hold_ns));
  signal_armed_cqs(c, k);
  if (!s.comm_est.empty()) [[unlikely]]
    raise_comm_est(c, k);
  if (!s.sq_draining.empty()) [[unlikely]]
    raise_sq_drained(c, k);
  if (s.engine->port_changes() != s.port_changes_seen) [[unlikely]]
    raise_port_event(c, k);
  return n;
}

// The IB MTU enum that a payload of this many bytes reaches.
inline braid_mtu ib_mtu_for(uint32_t payload) {
  if (payload >= 4096) return BRAID_MTU_4096;
  if (payload >= 2048) return BRAID_MTU_2048;
  if (payload >= 1024) return BRAID_MTU_1024;
  if (payload >= 512) return BRAID_MTU_512;
  return BRAID_MTU_256;
}

// Work requests posted to a QP in the error state complete at once with
// WR_FLUSH_ERR, as on InfiniBand (the drain pattern: post a marker, wait
// for its flush). A full CQ drops the completion (an overrun).
// (Into the ring of the QP's engine: after the QP's own completions.)
inline void flush_posted(braid_cq* cq, const braid_qp* qp, uint64_t wr_id, braid::WcOpcode op) {
  braid::WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.status = braid::WcStatus::kWrFlushErr;
  wc.opcode = op;
  wc.qp_num = qp->qp_num;
  cq->ring(qp->engine).push(wc);
}

}  // namespace braid::calls
