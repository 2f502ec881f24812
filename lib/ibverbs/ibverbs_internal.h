// The objects behind the libibverbs-compatible library: rdma-core's structs
// (what programs read) wrapping Braid's (what does the work).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "braid/verbs.h"
#include "ibverbs/config.h"

namespace braid::ibv {

struct Device {
  ibv_device dev;  // what ibv_get_device_list hands out
  const DeviceSettings* settings = nullptr;
  // Every context of the device shares one Braid device (its DPDK port,
  // engine and progress thread), as every context of a kernel device shares
  // its hardware: the first ibv_open_device opens it, the last
  // ibv_close_device closes it (stopping the port).
  std::mutex open_lock;
  braid_context* shared = nullptr;
  int contexts = 0;
  // The open contexts: each gets the port's events (route_async_event).
  std::mutex listeners_lock;
  std::vector<struct Context*> listeners;
};

struct Context {
  verbs_context vctx;  // ends with the ibv_context programs hold
  Device* device = nullptr;
  braid_context* braid = nullptr;  // the device's, shared with its other contexts
  // What the program created on this context and has not destroyed: like a
  // kernel device, closing the context releases it (programs do leave
  // objects behind), and objects of one context cannot be used with
  // another's.
  std::unordered_set<ibv_qp*> qps;
  std::unordered_set<ibv_mr*> mrs;
  std::unordered_set<ibv_cq*> cqs;
  std::unordered_set<ibv_comp_channel*> channels;
  std::unordered_set<ibv_pd*> pds;
  std::unordered_set<ibv_srq*> srqs;
  std::unordered_set<ibv_ah*> ahs;
  // Guards the sets: libibverbs lets any thread create and destroy objects,
  // and Braid's own lock (threaded contexts) covers only its own objects.
  std::mutex objects_lock;
  // Asynchronous events about this context's objects (srq.cc), waiting for
  // ibv_get_async_event; async_fd is readable while any does.
  std::mutex events_lock;
  std::deque<ibv_async_event> events;
  bool events_signalled = false;
  // ibv_close_device is releasing what the program left: no destroy waits
  // for events to be acknowledged.
  std::atomic<bool> closing{false};
};

// Records an object in (or removes it from) one of the context's sets.
template <typename T>
void track(Context* c, std::unordered_set<T*>& set, T* obj) {
  std::lock_guard<std::mutex> g(c->objects_lock);
  set.insert(obj);
}
template <typename T>
void untrack(Context* c, std::unordered_set<T*>& set, T* obj) {
  std::lock_guard<std::mutex> g(c->objects_lock);
  set.erase(obj);
}

struct Pd {
  ibv_pd pd;
  braid_pd* b;
  // A parent domain (ibv_alloc_parent_domain): the protection domain it
  // stands for (whose braid_pd `b` is). Null for a protection domain.
  ibv_pd* protection = nullptr;
  int parents = 0;  // parent domains standing for this one
  int users = 0;    // a parent domain's QPs, MRs and CQs: it cannot go first
};
// Counts an object made on `pd` if it is a parent domain (+1 or -1).
void count_parent_user(ibv_pd* pd, int delta);
// Whether `pd` is a parent domain of this library.
bool is_parent_domain(ibv_pd* pd);
ibv_pd* alloc_parent_domain(ibv_context* ctx, ibv_parent_domain_init_attr* attr);
struct Mr {
  ibv_mr mr;
  braid_mr* b;
};
struct Ah {
  ibv_ah ah;
  braid_ah* b = nullptr;
};
struct Srq {
  ibv_srq srq;
  braid_srq* b = nullptr;
  uint32_t events_reported = 0;  // events about it the program took (Context::events_lock)
};
// Where the device's asynchronous events go: the context of the object
// each is about (braid_set_async_handler).
void route_async_event(void* arg, const braid_async_event* ev);
// For ibv_destroy_qp, _cq and _srq (srq.cc): events about `element` that
// the program has not taken go with it; it waits until the program has
// acknowledged those it took (*completed reaches *reported), as libibverbs
// does, unless the context is closing.
void settle_events(Context* c, const void* element, const uint32_t* reported, pthread_mutex_t* m,
                   pthread_cond_t* cv, const uint32_t* completed);
struct Channel {
  ibv_comp_channel ch;
  braid_comp_channel* b;
};

// One object for both views of a CQ: ibv_cq_ex starts with ibv_cq's fields
// (libibverbs' ibv_cq_ex_to_cq is a cast).
struct Cq {
  ibv_cq_ex cqx;
  braid_cq* b = nullptr;
  // The completion ibv_start_poll / ibv_next_poll stand on.
  braid_wc cur{};
  ibv_pd* parent_domain = nullptr;  // ibv_create_cq_ex's, if given
  uint32_t events_reported = 0;     // asynchronous events about it taken (Srq's)
  ibv_cq* cq() { return reinterpret_cast<ibv_cq*>(&cqx); }
};

// A QP with its extended view (ibv_qp_ex starts with the ibv_qp).
struct Qp {
  ibv_qp_ex qpx;
  braid_qp* b = nullptr;
  // ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: the IBV_QP_EX_WITH_*
  // operations granted; 0 otherwise (ibv_qp_to_qp_ex then gives NULL).
  uint64_t send_ops = 0;
  // The ibv_wr_* batch since ibv_wr_start, posted by ibv_wr_complete: room
  // for max_send_wr requests, made at creation (nothing allocated per post).
  std::vector<braid_send_wr> batch;
  std::vector<braid_sge> batch_sge;   // sge_per_wr per request
  std::vector<uint8_t> batch_inline;  // max_inline per request
  uint32_t staged = 0;
  uint32_t sge_per_wr = 0, max_inline = 0;
  int batch_error = 0;           // the first errno a builder or setter met
  uint32_t events_reported = 0;  // asynchronous events about it taken (Srq's)
  ibv_qp* qp() { return &qpx.qp_base; }
};

// Null unless `d` is the device this library listed.
Device* device_of(ibv_device* d);
uint64_t node_guid(const Device& d);  // network byte order

inline Context* context_of(ibv_context* c) {
  if (c == nullptr || c->abi_compat != __VERBS_ABI_IS_EXTENDED) return nullptr;
  auto* v = reinterpret_cast<verbs_context*>(reinterpret_cast<char*>(c) -
                                             offsetof(verbs_context, context));
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(v) - offsetof(Context, vctx));
}

// BRAID_IBV_TRACE=1: each object verb and its result on stderr.
void trace(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Fills the context's operation tables (classic ops and verbs_context's
// extended ones) and descriptors.
void init_context(Context* c);
// The part of init_context for PDs, MRs, CQs and QPs (object.cc).
void install_object_ops(Context* c);
// ibv_create_qp_ex / ibv_create_cq_ex and the ibv_wr_* / ibv_start_poll
// operations (extended.cc).
void install_extended_ops(Context* c);
void init_qp_ex(Qp* q);
void init_cq_ex(Cq* q);
// The common part of ibv_create_qp and ibv_create_qp_ex, ibv_create_cq and
// ibv_create_cq_ex (object.cc); errno set on failure.
Qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr, bool cm = false);
Cq* create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
              int comp_vector);
// Destroys what the program left on the context, QPs first.
void release_objects(Context* c);

}  // namespace braid::ibv
