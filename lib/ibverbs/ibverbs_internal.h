// The objects behind the libibverbs-compatible library: rdma-core's structs
// (what programs read) wrapping Braid's (what does the work).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <unordered_set>

#include "braid/verbs.h"
#include "ibverbs/config.h"

namespace braid::ibv {

struct Device {
  ibv_device dev;  // what ibv_get_device_list hands out
  const DeviceSettings* settings = nullptr;
};

struct Context {
  verbs_context vctx;  // ends with the ibv_context programs hold
  Device* device = nullptr;
  braid_context* braid = nullptr;
  // What the program created and has not destroyed: like a kernel device,
  // closing the context releases it (programs do leave objects behind).
  std::unordered_set<ibv_qp*> qps;
  std::unordered_set<ibv_mr*> mrs;
  std::unordered_set<ibv_cq*> cqs;
  std::unordered_set<ibv_comp_channel*> channels;
  std::unordered_set<ibv_pd*> pds;
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
// Destroys what the program left on the context, QPs first.
void release_objects(Context* c);

}  // namespace braid::ibv
