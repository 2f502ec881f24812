// Shared receive queues (create, modify, query, destroy; their receives are
// posted in post.cc) and the device's asynchronous events.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "braid/verbs.h"
#include "verbs/calls.h"
#include "verbs/verbs_internal.h"
using namespace braid::calls;

namespace {

constexpr uint32_t kMaxSrqWr = 1u << 20;

void srq_limit_reached(void* arg) {
  auto* srq = static_cast<braid_srq*>(arg);
  braid_async_event ev{};
  ev.event_type = BRAID_EVENT_SRQ_LIMIT_REACHED;
  ev.srq = srq;
  ev.context = srq->srq_context;
  raise_async_event(srq->context, ev);
}

// The eventfd stops being readable once the queue is empty (async_lock held).
void quiet_if_empty(braid_context* c) {
  if (c->async_events.empty() && c->async_signalled) {
    uint64_t n = 0;
    if (read(c->async_fd, &n, sizeof n) == sizeof n) c->async_signalled = false;
  }
}

}  // namespace

void forget_async_events(braid_context* c, const braid_qp* qp, const braid_cq* cq,
                         const braid_srq* srq) {
  std::lock_guard<std::mutex> g(c->async_lock);
  std::erase_if(c->async_events, [&](const braid_async_event& e) {
    return (qp != nullptr && e.qp == qp) || (cq != nullptr && e.cq == cq) ||
           (srq != nullptr && e.srq == srq);
  });
  quiet_if_empty(c);
}

// Raised by whichever thread found the event (an engine's, for an SRQ's
// limit or a QP's error): to the handler, or into the queue.
void raise_async_event(braid_context* c, const braid_async_event& ev) {
  std::lock_guard<std::mutex> g(c->async_lock);
  if (c->async_handler != nullptr) {
    c->async_handler(c->async_arg, &ev);
    return;
  }
  c->async_events.push_back(ev);
  if (c->async_fd >= 0 && !c->async_signalled) {
    const uint64_t one = 1;
    if (write(c->async_fd, &one, sizeof one) == sizeof one) c->async_signalled = true;
  }
}

// The port's state is every engine's (each looks at its queue of the port
// in its polls): read under the lock, so that of two engines that changed
// at once the later event says the later state.
void raise_port_event(braid_context* c, uint16_t k) {
  c->slots[k]->port_changes_seen = c->slots[k]->engine->port_changes();
  std::lock_guard<std::mutex> g(c->port_event_lock);
  const bool ok = c->port_ok();
  if (ok == c->port_reported_ok) return;
  c->port_reported_ok = ok;
  braid_async_event ev{};
  ev.event_type = ok ? BRAID_EVENT_PORT_ACTIVE : BRAID_EVENT_PORT_ERR;
  raise_async_event(c, ev);
}

extern "C" {

struct braid_srq* braid_create_srq(struct braid_pd* pd, struct braid_srq_init_attr* a) {
  if (pd == nullptr || a == nullptr) return fail_null<braid_srq>(EINVAL, "create_srq: no PD");
  if (a->attr.max_wr == 0 || a->attr.max_wr > kMaxSrqWr || a->attr.max_sge > braid::kMaxSge) {
    return fail_null<braid_srq>(EINVAL, "create_srq: max_wr or max_sge beyond the device's");
  }
  braid_context* c = pd->context;
  Guard g(c);
  auto* srq =
      new braid_srq(c, pd, a->srq_context, std::max<uint32_t>(a->attr.max_sge, 1), a->attr.max_wr);
  srq->queue.set_limit_hook(srq_limit_reached, srq);
  // What the queue really holds, as a NIC reports its rounded sizes.
  a->attr.max_sge = srq->max_sge;
  ++pd->users;
  ++c->open_objects;
  c->srqs.push_back(srq);
  return srq;
}

int braid_modify_srq(struct braid_srq* srq, struct braid_srq_attr* a, int mask) {
  if (srq == nullptr || a == nullptr) return EINVAL;
  if (mask & ~(BRAID_SRQ_MAX_WR | BRAID_SRQ_LIMIT)) return fail(EINVAL, "modify_srq: unknown mask");
  const uint32_t max_wr = (mask & BRAID_SRQ_MAX_WR) ? a->max_wr : srq->queue.max_wr();
  if ((mask & BRAID_SRQ_MAX_WR) && (a->max_wr == 0 || a->max_wr > kMaxSrqWr)) {
    return fail(EINVAL, "modify_srq: max_wr beyond the device's");
  }
  if ((mask & BRAID_SRQ_LIMIT) && a->srq_limit > max_wr) {
    return fail(EINVAL, "modify_srq: srq_limit above max_wr");
  }
  if ((mask & BRAID_SRQ_MAX_WR) && !srq->queue.resize(a->max_wr)) {
    return fail(EINVAL, "modify_srq: max_wr below the receives waiting");
  }
  if (mask & BRAID_SRQ_LIMIT) srq->queue.arm_limit(a->srq_limit);
  return 0;
}

int braid_query_srq(struct braid_srq* srq, struct braid_srq_attr* a) {
  if (srq == nullptr || a == nullptr) return EINVAL;
  a->max_wr = srq->queue.max_wr();
  a->max_sge = srq->max_sge;
  a->srq_limit = srq->queue.limit();
  return 0;
}

int braid_destroy_srq(struct braid_srq* srq) {
  if (srq == nullptr) return EINVAL;
  braid_context* c = srq->context;
  Guard g(c);
  if (srq->users > 0) return fail(EBUSY, "destroy_srq: QPs still use it");
  c->srqs.erase(std::remove(c->srqs.begin(), c->srqs.end(), srq), c->srqs.end());
  forget_async_events(c, nullptr, nullptr, srq);
  --srq->pd->users;
  --c->open_objects;
  delete srq;
  return 0;
}

int braid_get_async_event(struct braid_context* c, struct braid_async_event* ev) {
  if (c == nullptr || ev == nullptr) return EINVAL;
  std::lock_guard<std::mutex> g(c->async_lock);
  if (c->async_events.empty()) return EAGAIN;
  *ev = c->async_events.front();
  c->async_events.pop_front();
  quiet_if_empty(c);
  return 0;
}

int braid_async_event_fd(struct braid_context* c) {
  if (c == nullptr) return -EINVAL;
  std::lock_guard<std::mutex> g(c->async_lock);
  if (c->async_fd < 0) {
    c->async_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->async_fd < 0) return -errno;
    if (!c->async_events.empty()) {
      const uint64_t one = 1;
      if (write(c->async_fd, &one, sizeof one) == sizeof one) c->async_signalled = true;
    }
  }
  return c->async_fd;
}

int braid_set_async_handler(struct braid_context* c, braid_async_handler fn, void* arg) {
  if (c == nullptr) return EINVAL;
  std::lock_guard<std::mutex> g(c->async_lock);
  c->async_handler = fn;
  c->async_arg = arg;
  // Events already waiting go to it now.
  if (fn != nullptr) {
    for (const braid_async_event& ev : c->async_events) fn(arg, &ev);
    c->async_events.clear();
  }
  return 0;
}

}  // extern "C"
