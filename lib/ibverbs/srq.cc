// Shared receive queues (ibv_create_srq, ibv_modify_srq, ibv_query_srq,
// ibv_destroy_srq; ibv_post_srq_recv is an op: object.cc) and asynchronous
// events (ibv_get_async_event, ibv_ack_async_event).
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "ibverbs/ibverbs_internal.h"

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

namespace braid::ibv {
namespace {

static_assert(int(BRAID_SRQ_MAX_WR) == int(IBV_SRQ_MAX_WR) &&
              int(BRAID_SRQ_LIMIT) == int(IBV_SRQ_LIMIT));
static_assert(int(BRAID_EVENT_SRQ_LIMIT_REACHED) == int(IBV_EVENT_SRQ_LIMIT_REACHED) &&
              int(BRAID_EVENT_CQ_ERR) == int(IBV_EVENT_CQ_ERR) &&
              int(BRAID_EVENT_QP_FATAL) == int(IBV_EVENT_QP_FATAL) &&
              int(BRAID_EVENT_QP_REQ_ERR) == int(IBV_EVENT_QP_REQ_ERR) &&
              int(BRAID_EVENT_QP_ACCESS_ERR) == int(IBV_EVENT_QP_ACCESS_ERR) &&
              int(BRAID_EVENT_QP_LAST_WQE_REACHED) == int(IBV_EVENT_QP_LAST_WQE_REACHED) &&
              int(BRAID_EVENT_COMM_EST) == int(IBV_EVENT_COMM_EST) &&
              int(BRAID_EVENT_SQ_DRAINED) == int(IBV_EVENT_SQ_DRAINED) &&
              int(BRAID_EVENT_PORT_ACTIVE) == int(IBV_EVENT_PORT_ACTIVE) &&
              int(BRAID_EVENT_PORT_ERR) == int(IBV_EVENT_PORT_ERR));

Srq* srq_of(ibv_srq* s) {
  return reinterpret_cast<Srq*>(s);
}

int fail(int err) {
  errno = err;
  return err;
}

bool is_qp_event(ibv_event_type t) {
  return t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR ||
         t == IBV_EVENT_QP_LAST_WQE_REACHED || t == IBV_EVENT_COMM_EST || t == IBV_EVENT_SQ_DRAINED;
}

// The object an event names (its element), whatever its kind.
const void* element_of(const ibv_async_event& e) {
  if (e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) return e.element.srq;
  if (e.event_type == IBV_EVENT_CQ_ERR) return e.element.cq;
  if (is_qp_event(e.event_type)) return e.element.qp;
  return nullptr;
}

// The count of events the program took about the object the event names
// (the wrappers start with the ibv structs).
uint32_t* reported_of(const ibv_async_event& e) {
  if (e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
    return &reinterpret_cast<Srq*>(e.element.srq)->events_reported;
  }
  if (e.event_type == IBV_EVENT_CQ_ERR)
    return &reinterpret_cast<Cq*>(e.element.cq)->events_reported;
  if (is_qp_event(e.event_type)) return &reinterpret_cast<Qp*>(e.element.qp)->events_reported;
  return nullptr;
}

// async_fd stops being readable once no event waits (events_lock held).
void quiet_if_empty(Context* c) {
  if (c->events.empty() && c->events_signalled) {
    uint64_t n = 0;
    if (read(c->vctx.context.async_fd, &n, sizeof n) == sizeof n) c->events_signalled = false;
  }
}

// Into the context's queue; async_fd becomes readable.
void deliver(Context* c, const ibv_async_event& e) {
  std::lock_guard<std::mutex> g(c->events_lock);
  c->events.push_back(e);
  if (!c->events_signalled) {
    const uint64_t one = 1;
    if (write(c->vctx.context.async_fd, &one, sizeof one) == sizeof one) {
      c->events_signalled = true;
    }
  }
}

}  // namespace

void settle_events(Context* c, const void* element, const uint32_t* reported, pthread_mutex_t* m,
                   pthread_cond_t* cv, const uint32_t* completed) {
  uint32_t taken = 0;
  {
    std::lock_guard<std::mutex> g(c->events_lock);
    std::erase_if(c->events,
                  [element](const ibv_async_event& e) { return element_of(e) == element; });
    quiet_if_empty(c);
    taken = *reported;
  }
  if (c->closing) return;
  pthread_mutex_lock(m);
  while (*completed < taken) pthread_cond_wait(cv, m);
  pthread_mutex_unlock(m);
}

void route_async_event(void* device, const braid_async_event* ev) {
  ibv_async_event out{};
  out.event_type = static_cast<ibv_event_type>(ev->event_type);
  if (ev->event_type == BRAID_EVENT_PORT_ACTIVE || ev->event_type == BRAID_EVENT_PORT_ERR) {
    // The device's port: every context of it hears (a kernel device tells
    // each of its contexts).
    out.element.port_num = 1;
    auto* d = static_cast<Device*>(device);
    std::lock_guard<std::mutex> g(d->listeners_lock);
    for (Context* c : d->listeners) deliver(c, out);
    return;
  }
  Context* c = nullptr;
  // Braid's object contexts are our wrappers (create_srq, create_cq,
  // create_qp).
  switch (ev->event_type) {
    case BRAID_EVENT_SRQ_LIMIT_REACHED: {
      Srq* s = static_cast<Srq*>(ev->context);
      out.element.srq = &s->srq;
      c = context_of(s->srq.context);
      break;
    }
    case BRAID_EVENT_CQ_ERR: {
      Cq* q = static_cast<Cq*>(ev->context);
      out.element.cq = q->cq();
      c = context_of(q->cq()->context);
      break;
    }
    case BRAID_EVENT_QP_FATAL:
    case BRAID_EVENT_QP_REQ_ERR:
    case BRAID_EVENT_QP_ACCESS_ERR:
    case BRAID_EVENT_QP_LAST_WQE_REACHED:
    case BRAID_EVENT_COMM_EST:
    case BRAID_EVENT_SQ_DRAINED: {
      Qp* q = static_cast<Qp*>(ev->context);
      out.element.qp = q->qp();
      c = context_of(q->qp()->context);
      break;
    }
    case BRAID_EVENT_PORT_ACTIVE:
    case BRAID_EVENT_PORT_ERR:
      break;  // above
  }
  if (c == nullptr) return;
  deliver(c, out);
}

}  // namespace braid::ibv

using namespace braid::ibv;  // NOLINT: the file's own types

BRAID_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (pd == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* s = new (std::nothrow) Srq{};
  if (s == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  braid_srq_init_attr b{};
  b.srq_context = s;  // events name the wrapper (route_async_event)
  b.attr = {attr->attr.max_wr, attr->attr.max_sge, 0};
  s->b = braid_create_srq(reinterpret_cast<Pd*>(pd)->b, &b);
  if (s->b == nullptr) {
    const int err = errno;
    delete s;
    errno = err;
    return nullptr;
  }
  attr->attr.max_sge = b.attr.max_sge;
  ibv_srq* srq = &s->srq;
  srq->context = pd->context;
  srq->srq_context = attr->srq_context;
  srq->pd = pd;
  pthread_mutex_init(&srq->mutex, nullptr);
  pthread_cond_init(&srq->cond, nullptr);
  Context* c = context_of(pd->context);
  track(c, c->srqs, srq);
  count_parent_user(pd, +1);
  trace("create_srq max_wr %u -> %p", attr->attr.max_wr, static_cast<void*>(srq));
  return srq;
}

BRAID_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (srq == nullptr || attr == nullptr) return fail(EINVAL);
  braid_srq_attr b{attr->max_wr, attr->max_sge, attr->srq_limit};
  if (const int rc = braid_modify_srq(srq_of(srq)->b, &b, mask)) return fail(rc);
  return 0;
}

BRAID_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (srq == nullptr || attr == nullptr) return fail(EINVAL);
  braid_srq_attr b{};
  if (const int rc = braid_query_srq(srq_of(srq)->b, &b)) return fail(rc);
  attr->max_wr = b.max_wr;
  attr->max_sge = b.max_sge;
  attr->srq_limit = b.srq_limit;
  return 0;
}

BRAID_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  if (srq == nullptr) return fail(EINVAL);
  Srq* s = srq_of(srq);
  if (const int rc = braid_destroy_srq(s->b)) return fail(rc);
  Context* c = context_of(srq->context);
  untrack(c, c->srqs, srq);
  settle_events(c, srq, &s->events_reported, &srq->mutex, &srq->cond, &srq->events_completed);
  count_parent_user(srq->pd, -1);
  pthread_cond_destroy(&srq->cond);
  pthread_mutex_destroy(&srq->mutex);
  trace("destroy_srq %p", static_cast<void*>(srq));
  delete s;
  return 0;
}

// Waits for an event unless the program made async_fd non-blocking (then
// EAGAIN when none waits), as libibverbs' read of the kernel's descriptor.
BRAID_EXPORT int ibv_get_async_event(ibv_context* ctx, ibv_async_event* event) {
  Context* c = context_of(ctx);
  if (c == nullptr || event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  const int fd = ctx->async_fd;
  for (;;) {
    {
      std::lock_guard<std::mutex> g(c->events_lock);
      if (!c->events.empty()) {
        *event = c->events.front();
        c->events.pop_front();
        if (uint32_t* n = reported_of(*event)) ++*n;
        quiet_if_empty(c);
        return 0;
      }
    }
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_NONBLOCK)) {
      errno = EAGAIN;
      return -1;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
  }
}

// Counts the event as acknowledged on its object (the count its destroy
// waits for).
BRAID_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  if (event == nullptr) return;
  const auto ack = [](pthread_mutex_t* m, pthread_cond_t* cv, uint32_t* completed) {
    pthread_mutex_lock(m);
    ++*completed;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(m);
  };
  if (event->event_type == IBV_EVENT_SRQ_LIMIT_REACHED && event->element.srq != nullptr) {
    ibv_srq* srq = event->element.srq;
    ack(&srq->mutex, &srq->cond, &srq->events_completed);
  } else if (event->event_type == IBV_EVENT_CQ_ERR && event->element.cq != nullptr) {
    ibv_cq* cq = event->element.cq;
    ack(&cq->mutex, &cq->cond, &cq->async_events_completed);
  } else if (is_qp_event(event->event_type) && event->element.qp != nullptr) {
    ibv_qp* qp = event->element.qp;
    ack(&qp->mutex, &qp->cond, &qp->events_completed);
  }
}
