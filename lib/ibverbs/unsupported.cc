// Public verbs Braid does not provide: address handles and multicast (UD),
// shared receive queues, device memory, object import, ECE, dma-buf
// memory, asynchronous events, and the kernel-structure helpers. Each fails
// cleanly: NULL or an error, with errno set, never a crash.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ibverbs/ibverbs_internal.h"

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

template <typename T>
T* unsupported_null() {
  errno = EOPNOTSUPP;
  return nullptr;
}
int unsupported() {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

}  // namespace

// Multicast.
BRAID_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
  return unsupported();
}
BRAID_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
  return unsupported();
}
BRAID_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) {
  return unsupported();
}

// Sharing objects between processes, device memory, ECE, dma-buf.
BRAID_EXPORT ibv_context* ibv_import_device(int) {
  return unsupported_null<ibv_context>();
}
BRAID_EXPORT ibv_pd* ibv_import_pd(ibv_context*, uint32_t) {
  return unsupported_null<ibv_pd>();
}
BRAID_EXPORT void ibv_unimport_pd(ibv_pd*) {}
BRAID_EXPORT ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) {
  return unsupported_null<ibv_mr>();
}
BRAID_EXPORT void ibv_unimport_mr(ibv_mr*) {}
BRAID_EXPORT ibv_dm* ibv_import_dm(ibv_context*, uint32_t) {
  return unsupported_null<ibv_dm>();
}
BRAID_EXPORT void ibv_unimport_dm(ibv_dm*) {}
BRAID_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) {
  return unsupported();
}
BRAID_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) {
  return unsupported();
}
BRAID_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  return unsupported_null<ibv_mr>();
}

// Helpers for kernel structures and sysfs (declared in rdma-core's private
// headers): there is no kernel device behind Braid.
BRAID_EXPORT void ibv_copy_qp_attr_from_kern(void*, const void*) {}
BRAID_EXPORT void ibv_copy_ah_attr_from_kern(void*, const void*) {}
BRAID_EXPORT void ibv_copy_path_rec_from_kern(void*, const void*) {}
BRAID_EXPORT void ibv_copy_path_rec_to_kern(void*, const void*) {}
BRAID_EXPORT const char* ibv_get_sysfs_path(void) {
  return "/sys";
}
BRAID_EXPORT int ibv_read_sysfs_file(const char*, const char*, char*, size_t) {
  errno = ENOENT;
  return -1;
}
