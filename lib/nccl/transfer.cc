// The NCCL plugin's transfers: irecv describes its buffers to the sender,
// isend writes into them (WRITE_WITH_IMM), test waits for completions.
#include <arpa/inet.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "nccl/plugin_internal.h"

namespace braid::nccl {

ncclResult_t isend_common(void* send_comm, void* data, uint64_t size, int tag, void* mhandle,
                          void** request) {
  *request = nullptr;
  auto* c = static_cast<Comm*>(send_comm);
  if (c->failed != ncclSuccess) return c->failed;
  const uint32_t slot = c->send_seq % kSlots;
  if (!c->have[slot] || c->got[slot].seq != c->send_seq) {
    if (const ncclResult_t r = progress(c); r != ncclSuccess) return r;
    if (!c->have[slot] || c->got[slot].seq != c->send_seq) {
      if (!peer_closed(c)) return ncclSuccess;  // not posted yet: NCCL calls again
      // What arrived before it closed counts.
      if (const ncclResult_t r = progress(c); r != ncclSuccess) return r;
      if (!c->have[slot] || c->got[slot].seq != c->send_seq) return peer_gone(c);
    }
  }
  const Descriptor& d = c->got[slot];
  int idx = -1;
  for (uint32_t i = 0; i < d.n; ++i) {
    if (d.tag[i] == tag && (c->sent_mask & (1u << i)) == 0) {
      idx = static_cast<int>(i);
      break;
    }
  }
  // No buffer of the receiver's current irecv has this tag (yet): the
  // sender is a step ahead (a grouped receive whose other sends are still
  // to come). As NCCL's own IB transport: no request, NCCL calls again.
  if (idx < 0) return ncclSuccess;
  if (size > d.size[idx]) {
    char why[128];
    std::snprintf(why, sizeof why, "isend: %llu bytes for a %llu-byte receive buffer (tag %d)",
                  static_cast<unsigned long long>(size),
                  static_cast<unsigned long long>(d.size[idx]), tag);
    return fail_comm(c, ncclInvalidArgument, why);
  }
  if (size > 0 && mhandle == nullptr) return fail_comm(c, ncclInvalidArgument, "isend: no mhandle");
  Request* r = new_request(c, 1);
  if (r == nullptr) return ncclSuccess;  // all in flight: NCCL calls again
  braid_sge sge{reinterpret_cast<uintptr_t>(data), static_cast<uint32_t>(size),
                size > 0 ? static_cast<braid_mr*>(mhandle)->lkey : 0};
  braid_send_wr wr{};
  wr.wr_id = reinterpret_cast<uintptr_t>(r);
  wr.sg_list = size > 0 ? &sge : nullptr;
  wr.num_sge = size > 0 ? 1 : 0;
  wr.opcode = BRAID_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = BRAID_SEND_SIGNALED;
  wr.imm_data = htonl((slot << 3) | static_cast<uint32_t>(idx));
  wr.rdma.remote_addr = d.addr[idx];
  wr.rdma.rkey = d.rkey[idx];
  braid_send_wr* bad = nullptr;
  if (const int err = braid_post_send(c->qp, &wr, &bad)) {
    r->used = false;
    if (err == ENOMEM) return ncclSuccess;  // the send queue is full: later
    char why[96];
    std::snprintf(why, sizeof why, "isend: posting the write failed: %s", std::strerror(err));
    return fail_comm(c, ncclSystemError, why);
  }
  r->pending = 1;
  r->sizes[0] = size;
  c->sent_mask |= 1u << idx;
  if (std::popcount(c->sent_mask) == static_cast<int>(d.n)) {
    c->sent_mask = 0;
    c->have[slot] = false;
    ++c->send_seq;
  }
  *request = r;
  return ncclSuccess;
}

ncclResult_t braid_isend_v8(void* send_comm, void* data, int size, int tag, void* mhandle,
                            void** request) {
  if (size < 0) {
    *request = nullptr;
    WARN("isend: negative size %d", size);
    return ncclInvalidArgument;
  }
  return isend_common(send_comm, data, static_cast<uint64_t>(size), tag, mhandle, request);
}
ncclResult_t braid_isend_v10(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                             void* /*phandle*/, void** request) {
  if (size > 0x7fffffff) {
    *request = nullptr;
    WARN("isend: %zu bytes is more than a Braid message carries (2^31 - 1)", size);
    return ncclInvalidArgument;
  }
  return isend_common(send_comm, data, size, tag, mhandle, request);
}

template <typename Size>
ncclResult_t irecv_common(void* recv_comm, int n, void** data, const Size* sizes, const int* tags,
                          void** mhandles, void** request) {
  *request = nullptr;
  auto* c = static_cast<Comm*>(recv_comm);
  if (c->failed != ncclSuccess) return c->failed;
  if (n < 1 || n > kMaxRecvs) {
    WARN("irecv: %d buffers (1 to %d)", n, kMaxRecvs);
    return ncclInvalidArgument;
  }
  const uint32_t slot = c->recv_seq % kSlots;
  if (c->by_slot[slot] != nullptr) return ncclSuccess;  // 32 in flight already
  Request* r = new_request(c, n);
  if (r == nullptr) return ncclSuccess;
  Descriptor& d = c->bufs[slot];
  d = Descriptor{};
  d.seq = c->recv_seq;
  d.n = static_cast<uint32_t>(n);
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0 || static_cast<uint64_t>(sizes[i]) > 0x7fffffffu ||
        (sizes[i] > 0 && mhandles[i] == nullptr)) {
      r->used = false;
      WARN("irecv: buffer %d: size %lld without a registration, or too large", i,
           static_cast<long long>(sizes[i]));
      return ncclInvalidArgument;
    }
    d.addr[i] = reinterpret_cast<uintptr_t>(data[i]);
    d.size[i] = static_cast<uint64_t>(sizes[i]);
    d.rkey[i] = mhandles[i] != nullptr ? static_cast<braid_mr*>(mhandles[i])->rkey : 0;
    d.tag[i] = tags[i];
  }
  // One zero-length receive per buffer (each WRITE_WITH_IMM takes one),
  // then the descriptor.
  braid_recv_wr rwr[kMaxRecvs]{};
  for (int i = 0; i < n; ++i) {
    rwr[i].wr_id = kWrDataRecv;
    rwr[i].next = i + 1 < n ? &rwr[i + 1] : nullptr;
  }
  braid_recv_wr* rbad = nullptr;
  if (const int err = braid_post_recv(c->qp, rwr, &rbad)) {
    r->used = false;
    char why[96];
    std::snprintf(why, sizeof why, "irecv: posting receives failed: %s", std::strerror(err));
    return fail_comm(c, ncclSystemError, why);
  }
  braid_sge sge{reinterpret_cast<uintptr_t>(&d), sizeof d, c->bufs_mr->lkey};
  braid_send_wr wr{};
  wr.wr_id = kWrDescriptorSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = BRAID_WR_SEND;
  wr.send_flags = BRAID_SEND_SIGNALED;
  braid_send_wr* bad = nullptr;
  if (const int err = braid_post_send(c->qp, &wr, &bad)) {
    r->used = false;
    char why[96];
    std::snprintf(why, sizeof why, "irecv: sending the descriptor failed: %s", std::strerror(err));
    return fail_comm(c, ncclSystemError, why);
  }
  r->pending = n;
  c->by_slot[slot] = r;
  ++c->recv_seq;
  *request = r;
  return ncclSuccess;
}

ncclResult_t braid_irecv_v8(void* recv_comm, int n, void** data, int* sizes, int* tags,
                            void** mhandles, void** request) {
  return irecv_common(recv_comm, n, data, sizes, tags, mhandles, request);
}
ncclResult_t braid_irecv_v10(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                             void** mhandles, void** /*phandles*/, void** request) {
  return irecv_common(recv_comm, n, data, sizes, tags, mhandles, request);
}

ncclResult_t braid_iflush(void* /*recv_comm*/, int /*n*/, void** /*data*/, int* /*sizes*/,
                          void** /*mhandles*/, void** request) {
  *request = nullptr;  // host memory: the data is visible when the receive completes
  return ncclSuccess;
}

ncclResult_t braid_test(void* request, int* done, int* sizes) {
  *done = 0;
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || !r->used) {
    WARN("test: not a request in flight");
    return ncclInvalidArgument;
  }
  Comm* c = r->comm;
  if (r->pending > 0) {
    if (const ncclResult_t e = progress(c); e != ncclSuccess) return e;
    if (r->pending > 0) {
      if (!peer_closed(c)) return ncclSuccess;
      // What arrived before it closed counts.
      if (const ncclResult_t e = progress(c); e != ncclSuccess) return e;
      if (r->pending > 0) return peer_gone(c);
    }
  }
  *done = 1;
  if (sizes != nullptr) {
    for (int i = 0; i < r->n; ++i) sizes[i] = static_cast<int>(r->sizes[i]);
  }
  r->used = false;
  return ncclSuccess;
}

ncclResult_t braid_close_comm(void* comm) {
  destroy_comm(static_cast<Comm*>(comm));
  return ncclSuccess;
}

}  // namespace braid::nccl
