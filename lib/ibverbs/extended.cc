// The extended verbs: ibv_create_qp_ex with the work-request builders
// (ibv_wr_start ... ibv_wr_complete), and ibv_create_cq_ex with its polling
// functions (ibv_start_poll, ibv_next_poll, ibv_wc_read_*). libibverbs'
// inline wrappers reach them through verbs_context and the function
// pointers in ibv_qp_ex / ibv_cq_ex.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "ibverbs/ibverbs_internal.h"

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

namespace braid::ibv {
namespace {

// The operations Braid carries (RC: no memory windows, invalidation, TSO
// or atomic writes).
constexpr uint64_t kSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                              IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                              IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                              IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
constexpr unsigned kWrFlags = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
// What a completion carries on Ethernet RC; timestamps, VLAN, flow tags and
// tag matching are not provided.
constexpr uint64_t kWcFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                              IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                              IBV_WC_EX_WITH_DLID_PATH_BITS;

Qp* qp_of(ibv_qp_ex* q) {
  return reinterpret_cast<Qp*>(q);
}
Cq* cq_of(ibv_cq_ex* c) {
  return reinterpret_cast<Cq*>(c);
}

template <typename T>
T* fail_null(int err) {
  errno = err;
  return nullptr;
}

// ---- Work-request builders: each stages a request, posted at complete ----

void batch_fail(Qp* q, int err) {
  if (q->batch_error == 0) q->batch_error = err;
}

braid_send_wr* begin_wr(ibv_qp_ex* qx, braid_wr_opcode op, uint64_t needs) {
  Qp* q = qp_of(qx);
  if (q->batch_error != 0) return nullptr;
  if (!(q->send_ops & needs)) {
    batch_fail(q, EOPNOTSUPP);  // not asked for in send_ops_flags
    return nullptr;
  }
  if (q->staged == q->batch.size()) {
    batch_fail(q, ENOMEM);  // more than the send queue holds
    return nullptr;
  }
  const uint32_t i = q->staged++;
  braid_send_wr& w = q->batch[i];
  w = braid_send_wr{};
  w.wr_id = qx->wr_id;
  w.opcode = op;
  w.send_flags = qx->wr_flags & kWrFlags;
  w.sg_list = &q->batch_sge[size_t{i} * q->sge_per_wr];
  return &w;
}

// The request the setters apply to: the last one built.
braid_send_wr* last_wr(ibv_qp_ex* qx) {
  Qp* q = qp_of(qx);
  if (q->batch_error != 0) return nullptr;
  if (q->staged == 0) {
    batch_fail(q, EINVAL);  // a setter before any builder
    return nullptr;
  }
  return &q->batch[q->staged - 1];
}

void wr_rdma_write(ibv_qp_ex* qx, uint32_t rkey, uint64_t remote_addr) {
  if (braid_send_wr* w = begin_wr(qx, BRAID_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE)) {
    w->rdma.rkey = rkey;
    w->rdma.remote_addr = remote_addr;
  }
}
void wr_rdma_write_imm(ibv_qp_ex* qx, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
  if (braid_send_wr* w =
          begin_wr(qx, BRAID_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)) {
    w->rdma.rkey = rkey;
    w->rdma.remote_addr = remote_addr;
    w->imm_data = imm;
  }
}
void wr_rdma_read(ibv_qp_ex* qx, uint32_t rkey, uint64_t remote_addr) {
  if (braid_send_wr* w = begin_wr(qx, BRAID_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ)) {
    w->rdma.rkey = rkey;
    w->rdma.remote_addr = remote_addr;
  }
}
void wr_send(ibv_qp_ex* qx) {
  begin_wr(qx, BRAID_WR_SEND, IBV_QP_EX_WITH_SEND);
}
void wr_send_imm(ibv_qp_ex* qx, __be32 imm) {
  if (braid_send_wr* w = begin_wr(qx, BRAID_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM)) {
    w->imm_data = imm;
  }
}

void wr_set_sge_list(ibv_qp_ex* qx, size_t n, const ibv_sge* list) {
  braid_send_wr* w = last_wr(qx);
  if (w == nullptr) return;
  Qp* q = qp_of(qx);
  if (n > q->sge_per_wr) {
    batch_fail(q, EINVAL);  // more than max_send_sge
    return;
  }
  for (size_t i = 0; i < n; ++i) w->sg_list[i] = {list[i].addr, list[i].length, list[i].lkey};
  w->num_sge = static_cast<int>(n);
}
void wr_set_sge(ibv_qp_ex* qx, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge one{addr, length, lkey};
  wr_set_sge_list(qx, 1, &one);
}

// Inline data is copied now (the program may reuse its buffers at once)
// into the request's own slot.
void wr_set_inline_data_list(ibv_qp_ex* qx, size_t n, const ibv_data_buf* bufs) {
  braid_send_wr* w = last_wr(qx);
  if (w == nullptr) return;
  Qp* q = qp_of(qx);
  if (w->opcode == BRAID_WR_RDMA_READ || w->opcode == BRAID_WR_ATOMIC_CMP_AND_SWP ||
      w->opcode == BRAID_WR_ATOMIC_FETCH_AND_ADD) {
    batch_fail(q, EINVAL);  // inline is for SEND and WRITE
    return;
  }
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += bufs[i].length;
  if (total > q->max_inline) {
    batch_fail(q, EINVAL);  // more than max_inline_data
    return;
  }
  uint8_t* slot = q->batch_inline.data() + size_t{q->staged - 1} * q->max_inline;
  size_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bufs[i].length > 0) std::memcpy(slot + off, bufs[i].addr, bufs[i].length);
    off += bufs[i].length;
  }
  w->sg_list[0] = {reinterpret_cast<uintptr_t>(slot), static_cast<uint32_t>(total), 0};
  w->num_sge = 1;
  w->send_flags |= BRAID_SEND_INLINE;
}
void wr_set_inline_data(ibv_qp_ex* qx, void* addr, size_t length) {
  const ibv_data_buf one{addr, length};
  wr_set_inline_data_list(qx, 1, &one);
}

// A UD QP's destination, for the last request built.
void wr_set_ud_addr(ibv_qp_ex* qx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  braid_send_wr* w = last_wr(qx);
  if (w == nullptr) return;
  w->ud.ah = ah != nullptr ? reinterpret_cast<Ah*>(ah)->b : nullptr;
  w->ud.remote_qpn = remote_qpn;
  w->ud.remote_qkey = remote_qkey;
}

void wr_start(ibv_qp_ex* qx) {
  Qp* q = qp_of(qx);
  q->staged = 0;
  q->batch_error = 0;
}

int wr_complete(ibv_qp_ex* qx) {
  Qp* q = qp_of(qx);
  int rc = q->batch_error;
  if (rc == 0 && q->staged > 0) {
    for (uint32_t i = 0; i + 1 < q->staged; ++i) q->batch[i].next = &q->batch[i + 1];
    q->batch[q->staged - 1].next = nullptr;
    if (qx->qp_base.qp_type == IBV_QPT_UD) {
      // Datagrams are posted in order up to the first refused (a UD QP
      // has no all-or-none post; nothing before it is taken back).
      braid_send_wr* bad = nullptr;
      rc = braid_post_send(q->b, q->batch.data(), &bad);
    } else {
      rc = braid_post_send_all(q->b, q->batch.data());  // all or none
    }
  }
  trace("wr_complete %p: %u requests -> %d", static_cast<void*>(qx), q->staged, rc);
  q->staged = 0;
  q->batch_error = 0;
  return rc;
}

void wr_abort(ibv_qp_ex* qx) {
  wr_start(qx);
}

void wr_atomic_cmp_swp(ibv_qp_ex* qx, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
  if (braid_send_wr* w =
          begin_wr(qx, BRAID_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)) {
    w->atomic = {remote_addr, compare, swap, rkey};
  }
}
void wr_atomic_fetch_add(ibv_qp_ex* qx, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  if (braid_send_wr* w =
          begin_wr(qx, BRAID_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)) {
    w->atomic = {remote_addr, add, 0, rkey};
  }
}

// Builders and setters for what Braid does not carry: the batch fails at
// ibv_wr_complete (they cannot be requested at creation either).
void wr_bind_mw(ibv_qp_ex* qx, ibv_mw*, uint32_t, const ibv_mw_bind_info*) {
  batch_fail(qp_of(qx), EOPNOTSUPP);
}
void wr_local_inv(ibv_qp_ex* qx, uint32_t) {
  batch_fail(qp_of(qx), EOPNOTSUPP);
}
void wr_send_inv(ibv_qp_ex* qx, uint32_t) {
  batch_fail(qp_of(qx), EOPNOTSUPP);
}
void wr_send_tso(ibv_qp_ex* qx, void*, uint16_t, uint16_t) {
  batch_fail(qp_of(qx), EOPNOTSUPP);
}
void wr_set_xrc_srqn(ibv_qp_ex* qx, uint32_t) {
  batch_fail(qp_of(qx), EOPNOTSUPP);
}
void wr_atomic_write(ibv_qp_ex* qx, uint32_t, uint64_t, const void*) {
  batch_fail(qp_of(qx), EOPNOTSUPP);
}

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  if (context_of(ctx) == nullptr || attr == nullptr) return fail_null<ibv_qp>(EINVAL);
  constexpr uint32_t kKnownMask =
      IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr) {
    return fail_null<ibv_qp>(EINVAL);  // a QP needs its protection domain
  }
  if (attr->pd->context != ctx) return fail_null<ibv_qp>(EINVAL);
  // XRC domains, TSO headers, RSS, source QPNs, DC: not in Braid.
  if (attr->comp_mask & ~kKnownMask) return fail_null<ibv_qp>(EOPNOTSUPP);
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags != 0) {
    return fail_null<ibv_qp>(EOPNOTSUPP);
  }
  uint64_t ops = 0;
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    ops = attr->send_ops_flags;
    if (ops & ~kSendOps) return fail_null<ibv_qp>(EOPNOTSUPP);  // atomics, MW, TSO...
  }
  // ibv_qp_init_attr_ex starts with ibv_qp_init_attr (libibverbs casts it).
  Qp* q = create_qp(attr->pd, reinterpret_cast<ibv_qp_init_attr*>(attr));
  if (q == nullptr) return nullptr;
  if (ops != 0) {
    q->send_ops = ops;
    q->qpx.comp_mask = 0;
    const ibv_qp_cap& cap = attr->cap;  // as create_qp granted it
    q->sge_per_wr = std::max(1u, cap.max_send_sge);
    q->max_inline = cap.max_inline_data;
    try {
      q->batch.resize(cap.max_send_wr);
      q->batch_sge.resize(size_t{cap.max_send_wr} * q->sge_per_wr);
      q->batch_inline.resize(size_t{cap.max_send_wr} * q->max_inline);
    } catch (const std::bad_alloc&) {
      ibv_destroy_qp(q->qp());
      return fail_null<ibv_qp>(ENOMEM);
    }
  }
  return q->qp();
}

// ---- Extended CQ: one completion at a time, read field by field ----

int take(Cq* q) {
  const int got = braid_poll_cq(q->b, 1, &q->cur);
  if (got < 0) return -got;
  if (got == 0) return ENOENT;
  q->cqx.status = static_cast<ibv_wc_status>(q->cur.status);
  q->cqx.wr_id = q->cur.wr_id;
  return 0;
}

int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  return take(cq_of(cq));
}
int next_poll(ibv_cq_ex* cq) {
  return take(cq_of(cq));
}
void end_poll(ibv_cq_ex*) {}

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) {
  return static_cast<ibv_wc_opcode>(cq_of(cq)->cur.opcode);
}
uint32_t read_vendor_err(ibv_cq_ex* cq) {
  return cq_of(cq)->cur.vendor_err;
}
uint32_t read_byte_len(ibv_cq_ex* cq) {
  return cq_of(cq)->cur.byte_len;
}
__be32 read_imm_data(ibv_cq_ex* cq) {
  return cq_of(cq)->cur.imm_data;
}
uint32_t read_qp_num(ibv_cq_ex* cq) {
  return cq_of(cq)->cur.qp_num;
}
uint32_t read_src_qp(ibv_cq_ex* cq) {
  return cq_of(cq)->cur.src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex* cq) {
  return cq_of(cq)->cur.wc_flags;
}
// Ethernet has no LIDs or service levels: zero, as RoCE devices report.
uint32_t read_slid(ibv_cq_ex*) {
  return 0;
}
uint8_t read_sl(ibv_cq_ex*) {
  return 0;
}
uint8_t read_dlid_path_bits(ibv_cq_ex*) {
  return 0;
}

ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  if (attr == nullptr) return fail_null<ibv_cq_ex>(EINVAL);
  if (attr->comp_mask & ~uint32_t{IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD}) {
    return fail_null<ibv_cq_ex>(EOPNOTSUPP);
  }
  // A CQ's parent domain (its allocators: never called) must be one.
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
      (!is_parent_domain(attr->parent_domain) || attr->parent_domain->context != ctx)) {
    return fail_null<ibv_cq_ex>(EINVAL);
  }
  // Single-threaded use and overrun tolerance are hints Braid needs not.
  constexpr uint32_t kFlags =
      IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~kFlags)) {
    return fail_null<ibv_cq_ex>(EOPNOTSUPP);
  }
  if (attr->wc_flags & ~kWcFlags) return fail_null<ibv_cq_ex>(EOPNOTSUPP);  // timestamps...
  if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) return fail_null<ibv_cq_ex>(EINVAL);
  Cq* q = create_cq(ctx, static_cast<int>(attr->cqe), attr->cq_context, attr->channel,
                    static_cast<int>(attr->comp_vector));
  if (q == nullptr) return nullptr;
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
    q->parent_domain = attr->parent_domain;
    count_parent_user(q->parent_domain, +1);
  }
  return &q->cqx;
}

}  // namespace

void init_qp_ex(Qp* q) {
  ibv_qp_ex& x = q->qpx;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_local_inv = wr_local_inv;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_send_inv = wr_send_inv;
  x.wr_send_tso = wr_send_tso;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_atomic_write = wr_atomic_write;
}

void init_cq_ex(Cq* q) {
  ibv_cq_ex& x = q->cqx;
  x.start_poll = start_poll;
  x.next_poll = next_poll;
  x.end_poll = end_poll;
  x.read_opcode = read_opcode;
  x.read_vendor_err = read_vendor_err;
  x.read_byte_len = read_byte_len;
  x.read_imm_data = read_imm_data;
  x.read_qp_num = read_qp_num;
  x.read_src_qp = read_src_qp;
  x.read_wc_flags = read_wc_flags;
  x.read_slid = read_slid;
  x.read_sl = read_sl;
  x.read_dlid_path_bits = read_dlid_path_bits;
  // read_completion_ts, _wallclock_ns, cvlan, flow_tag, tm_info stay null:
  // creation refuses the flags that would let a program call them.
}

void install_extended_ops(Context* c) {
  c->vctx.create_qp_ex = create_qp_ex;
  c->vctx.create_cq_ex = create_cq_ex;
}

}  // namespace braid::ibv

// libibverbs: the extended view of a QP made by ibv_create_qp_ex with
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, else NULL.
BRAID_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  auto* q = reinterpret_cast<braid::ibv::Qp*>(qp);
  if (qp == nullptr || q->send_ops == 0) return nullptr;
  return &q->qpx;
}
