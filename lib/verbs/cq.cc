// Completion channels and completion queues: create, poll, arm, events.
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

extern "C" {

struct braid_comp_channel* braid_create_comp_channel(struct braid_context* c) {
  if (c == nullptr) return fail_null<braid_comp_channel>(EINVAL, "no device");
  // Blocking, as rdma-core's channel fd: the application may make it
  // non-blocking (fcntl O_NONBLOCK), and get_cq_event then returns EAGAIN.
  const int fd = eventfd(0, EFD_CLOEXEC);
  if (fd < 0) return fail_null<braid_comp_channel>(errno, "eventfd failed");
  // Events need someone to make progress while the application sleeps.
  braid::start_progress_thread(c);
  Guard g(c);
  ++c->open_objects;
  return new braid_comp_channel{c, fd, {}, false};
}

int braid_destroy_comp_channel(struct braid_comp_channel* ch) {
  if (ch == nullptr) return EINVAL;
  braid_context* c = ch->context;
  Guard g(c);
  for (braid_cq* cq : c->cqs) {
    if (cq->channel == ch) return fail(EBUSY, "a CQ still uses this channel");
  }
  close(ch->fd);
  --c->open_objects;
  delete ch;
  return 0;
}

int braid_comp_channel_fd(struct braid_comp_channel* ch) {
  return ch == nullptr ? -1 : ch->fd;
}

struct braid_cq* braid_create_cq(struct braid_context* c, int cqe, void* cq_context,
                                 struct braid_comp_channel* channel, int comp_vector) {
  if (comp_vector != 0) return fail_null<braid_cq>(EINVAL, "create_cq: one completion vector (0)");
  if (c == nullptr || cqe < 1 || cqe > (1 << 20)) {
    return fail_null<braid_cq>(EINVAL, "create_cq: cqe must be 1..2^20");
  }
  Guard g(c);
  auto* cq = new braid_cq(c, static_cast<uint32_t>(cqe), cq_context, channel);
  c->cqs.push_back(cq);
  ++c->open_objects;
  return cq;
}

int braid_destroy_cq(struct braid_cq* cq) {
  if (cq == nullptr) return EINVAL;
  braid_context* c = cq->context;
  Guard g(c);
  if (cq->users > 0) return fail(EBUSY, "destroy_cq: QPs still use this CQ");
  forget_async_events(c, nullptr, cq, nullptr);
  std::lock_guard<std::mutex> e(c->event_lock);
  c->cqs.erase(std::remove(c->cqs.begin(), c->cqs.end(), cq), c->cqs.end());
  if (cq->armed) {
    (cq->internal ? c->armed_internal : c->armed).fetch_sub(1, std::memory_order_relaxed);
  }
  if (cq->channel != nullptr) {
    auto& f = cq->channel->fired;
    f.erase(std::remove(f.begin(), f.end(), cq), f.end());
    channel_drain_if_empty(cq->channel);
  }
  --c->open_objects;
  delete cq;
  return 0;
}

int braid_poll_cq(struct braid_cq* cq, int n, struct braid_wc* out) {
  if (cq == nullptr || n < 0 || (n > 0 && out == nullptr)) return -EINVAL;
  braid_context* c = cq->context;
  const uint16_t engines = c->engines();
  // The engines' rings in turn, from a different one each call; each
  // engine whose ring is empty is driven once (with several engines, all
  // of them: a QP's packets may arrive on any engine's queue).
  const uint16_t first = cq->next_ring.load(std::memory_order_relaxed);
  if (engines > 1) {
    cq->next_ring.store(static_cast<uint16_t>((first + 1) % engines), std::memory_order_relaxed);
  }
  int got = 0;
  bool worked = false;
  for (uint16_t i = 0; i < engines; ++i) {
    const auto k = static_cast<uint16_t>((first + i) % engines);
    bool first_look = true;
    for (;;) {
      uint32_t taken = 0;
      // Converted as they leave the ring, under the engine's lock.
      auto convert = [out, got](const braid::WorkCompletion& wc) mutable {
        braid_wc& w = out[got++];
        w = braid_wc{};
        w.wr_id = wc.wr_id;
        w.status = static_cast<braid_wc_status>(wc.status);
        w.opcode = static_cast<braid_wc_opcode>(wc.opcode);
        w.byte_len = wc.byte_len;
        w.qp_num = wc.qp_num;
        w.src_qp = wc.src_qp;
        if (wc.has_imm) {
          w.imm_data = htonl(wc.imm_data);
          w.wc_flags = BRAID_WC_WITH_IMM;
        }
        if (wc.grh) w.wc_flags |= BRAID_WC_GRH;
      };
      {
        // An engine none of this CQ's QPs run on is driven only if no
        // other thread is at it already (its progress thread, or a thread
        // polling a CQ of its own): threads on different engines do not
        // queue up for each other's locks.
        const bool ours = cq->has_ring[k].load(std::memory_order_acquire);
        EngineGuard g(c, k, Drives::kYes,
                      ours ? EngineGuard::Wait::kBlock : EngineGuard::Wait::kTry);
        if (!g.owns()) break;
        braid::CompletionQueue* r = cq->rings[k].get();
        if (first_look && (r == nullptr || r->size() == 0)) {
          worked |= progress_locked(c, k) > 0;
        }
        first_look = false;
        if (r != nullptr)
          taken = r->poll_each(static_cast<uint32_t>(std::min(n - got, 64)), convert);
      }
      got += static_cast<int>(taken);
      if (taken < 64 || got == n) break;
    }
  }
  idle_pass(c, worked || got > 0);
  return got;
}

int braid_req_notify_cq(struct braid_cq* cq, int solicited_only) {
  (void)solicited_only;
  if (cq == nullptr || cq->channel == nullptr) return EINVAL;
  braid_context* c = cq->context;
  Guard g(c);  // every engine's ring stands still
  std::lock_guard<std::mutex> e(c->event_lock);
  if (!cq->armed) {
    cq->armed = true;
    for (uint16_t k = 0; k < c->engines(); ++k) {
      cq->armed_at[k] = cq->rings[k] ? cq->rings[k]->pushed() : 0;
    }
    // The application is about to wait for an event: from now on only the
    // threads drive the device. (The CM's CQ: not the application.)
    if (cq->internal) {
      c->armed_internal.fetch_add(1, std::memory_order_relaxed);
    } else if (c->armed.fetch_add(1, std::memory_order_relaxed) == 0 && c->threaded) {
      std::lock_guard<std::mutex> w(c->wake_lock);
      c->wake.notify_all();
    }
  }
  return 0;
}

int braid_get_cq_event(struct braid_comp_channel* ch, struct braid_cq** cq, void** cq_context) {
  if (ch == nullptr || cq == nullptr || cq_context == nullptr) return EINVAL;
  for (;;) {
    {
      std::lock_guard<std::mutex> e(ch->context->event_lock);
      if (!ch->fired.empty()) {
        *cq = ch->fired.front();
        ch->fired.pop_front();
        channel_drain_if_empty(ch);
        *cq_context = (*cq)->cq_context;
        ++(*cq)->events;
        return 0;
      }
    }
    // None pending: a non-blocking fd says so, a blocking one waits for one.
    // A signal ends the wait with EINTR, as rdma-core's read() of the
    // channel does: programs stop a blocked event loop with an alarm
    // (qperf's test timer).
    const int flags = fcntl(ch->fd, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK)) return EAGAIN;
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0) return errno;
  }
}

void braid_ack_cq_events(struct braid_cq* cq, unsigned int n) {
  if (cq == nullptr) return;
  std::lock_guard<std::mutex> e(cq->context->event_lock);
  cq->acked += n;
}

}  // extern "C"
