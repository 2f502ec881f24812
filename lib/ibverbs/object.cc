// PDs, MRs, completion channels, CQs and RC QPs: rdma-core's structs in
// front of Braid's objects, and the data-path operations programs reach
// through ibv_context::ops (post_send, post_recv, poll_cq, req_notify_cq).
#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "ibverbs/ibverbs_internal.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

namespace braid::ibv {
namespace {

// The CQ's two views share their common fields.
static_assert(offsetof(ibv_cq, context) == offsetof(ibv_cq_ex, context) &&
              offsetof(ibv_cq, channel) == offsetof(ibv_cq_ex, channel) &&
              offsetof(ibv_cq, cq_context) == offsetof(ibv_cq_ex, cq_context) &&
              offsetof(ibv_cq, cqe) == offsetof(ibv_cq_ex, cqe) &&
              offsetof(ibv_cq, mutex) == offsetof(ibv_cq_ex, mutex) &&
              offsetof(ibv_cq, cond) == offsetof(ibv_cq_ex, cond) &&
              offsetof(ibv_cq, comp_events_completed) ==
                  offsetof(ibv_cq_ex, comp_events_completed) &&
              offsetof(ibv_cq, async_events_completed) ==
                  offsetof(ibv_cq_ex, async_events_completed));
static_assert(offsetof(Cq, cqx) == 0 && offsetof(Qp, qpx) == 0 &&
              offsetof(ibv_qp_ex, qp_base) == 0);

// The same memory layout on both sides: lists pass through untouched.
static_assert(sizeof(ibv_sge) == sizeof(braid_sge) &&
              offsetof(ibv_sge, addr) == offsetof(braid_sge, addr) &&
              offsetof(ibv_sge, length) == offsetof(braid_sge, length) &&
              offsetof(ibv_sge, lkey) == offsetof(braid_sge, lkey));
static_assert(sizeof(ibv_recv_wr) == sizeof(braid_recv_wr) &&
              offsetof(ibv_recv_wr, next) == offsetof(braid_recv_wr, next) &&
              offsetof(ibv_recv_wr, sg_list) == offsetof(braid_recv_wr, sg_list) &&
              offsetof(ibv_recv_wr, num_sge) == offsetof(braid_recv_wr, num_sge));
// Status and opcode numbers are libibverbs' own in Braid's API.
static_assert(int(BRAID_WC_REM_ACCESS_ERR) == int(IBV_WC_REM_ACCESS_ERR) &&
              int(BRAID_WC_RETRY_EXC_ERR) == int(IBV_WC_RETRY_EXC_ERR) &&
              int(BRAID_WC_RNR_RETRY_EXC_ERR) == int(IBV_WC_RNR_RETRY_EXC_ERR) &&
              int(BRAID_WC_WR_FLUSH_ERR) == int(IBV_WC_WR_FLUSH_ERR) &&
              int(BRAID_WC_RECV_RDMA_WITH_IMM) == int(IBV_WC_RECV_RDMA_WITH_IMM) &&
              int(BRAID_WC_RDMA_READ) == int(IBV_WC_RDMA_READ) &&
              int(BRAID_WC_WITH_IMM) == int(IBV_WC_WITH_IMM));
static_assert(int(BRAID_WR_ATOMIC_CMP_AND_SWP) == int(IBV_WR_ATOMIC_CMP_AND_SWP) &&
              int(BRAID_WR_ATOMIC_FETCH_AND_ADD) == int(IBV_WR_ATOMIC_FETCH_AND_ADD) &&
              int(BRAID_WC_COMP_SWAP) == int(IBV_WC_COMP_SWAP) &&
              int(BRAID_WC_FETCH_ADD) == int(IBV_WC_FETCH_ADD));
static_assert(int(BRAID_QP_QKEY) == int(IBV_QP_QKEY) && int(BRAID_WC_GRH) == int(IBV_WC_GRH));
static_assert(int(BRAID_WR_RDMA_READ) == int(IBV_WR_RDMA_READ) &&
              int(BRAID_WR_SEND_WITH_IMM) == int(IBV_WR_SEND_WITH_IMM) &&
              int(BRAID_SEND_INLINE) == int(IBV_SEND_INLINE) &&
              int(BRAID_SEND_SIGNALED) == int(IBV_SEND_SIGNALED));
static_assert(int(BRAID_QP_DEST_QPN) == int(IBV_QP_DEST_QPN) &&
              int(BRAID_QP_SQ_PSN) == int(IBV_QP_SQ_PSN) && int(BRAID_QP_AV) == int(IBV_QP_AV));

// Attribute bits Braid's modify_qp understands; others (Q_Key, alternate
// path, migration, rate limit) do not apply to RC over Ethernet and are
// ignored, as a RoCE device ignores what its transport has no use for.
static_assert(int(BRAID_QP_EN_SQD_ASYNC_NOTIFY) == int(IBV_QP_EN_SQD_ASYNC_NOTIFY));
constexpr int kKnownQpMask =
    IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ACCESS_FLAGS |
    IBV_QP_QKEY | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
    IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_CAP | IBV_QP_DEST_QPN;
constexpr unsigned kAccessBits = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

Pd* pd_of(ibv_pd* p) {
  return reinterpret_cast<Pd*>(p);
}
Cq* cq_of(ibv_cq* c) {
  return reinterpret_cast<Cq*>(c);
}
Qp* qp_of(ibv_qp* q) {
  return reinterpret_cast<Qp*>(q);
}

int fail(int err) {
  errno = err;
  return err;
}
template <typename T>
T* fail_null(int err) {
  errno = err;
  return nullptr;
}

// ---- Data path (ibv_context::ops) ----

int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  constexpr int kBatch = 32;
  braid_wc b[kBatch];
  int total = 0;
  while (total < n) {
    const int want = std::min(kBatch, n - total);
    const int got = braid_poll_cq(cq_of(cq)->b, want, b);
    if (got < 0) return total > 0 ? total : got;
    for (int i = 0; i < got; ++i) {
      ibv_wc& w = wc[total + i];
      w = ibv_wc{};
      w.wr_id = b[i].wr_id;
      w.status = static_cast<ibv_wc_status>(b[i].status);
      w.opcode = static_cast<ibv_wc_opcode>(b[i].opcode);
      w.vendor_err = b[i].vendor_err;
      w.byte_len = b[i].byte_len;
      w.imm_data = b[i].imm_data;
      w.qp_num = b[i].qp_num;
      w.src_qp = b[i].src_qp;
      w.wc_flags = b[i].wc_flags;
    }
    total += got;
    if (got < want) break;
  }
  return total;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  return braid_req_notify_cq(cq_of(cq)->b, solicited_only);
}

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  for (; wr != nullptr; wr = wr->next) {
    if (wr->opcode > IBV_WR_ATOMIC_FETCH_AND_ADD) {  // bind, TSO, invalidate...
      if (bad) *bad = wr;
      return EINVAL;
    }
    braid_send_wr b{};
    b.wr_id = wr->wr_id;
    b.sg_list = reinterpret_cast<braid_sge*>(wr->sg_list);
    b.num_sge = wr->num_sge;
    b.opcode = static_cast<braid_wr_opcode>(wr->opcode);
    b.send_flags = wr->send_flags &
                   (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
    b.imm_data = wr->imm_data;
    if (qp->qp_type == IBV_QPT_UD) {
      b.ud.ah = wr->wr.ud.ah != nullptr ? reinterpret_cast<Ah*>(wr->wr.ud.ah)->b : nullptr;
      b.ud.remote_qpn = wr->wr.ud.remote_qpn;
      b.ud.remote_qkey = wr->wr.ud.remote_qkey;
    } else if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
               wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      b.atomic = {wr->wr.atomic.remote_addr, wr->wr.atomic.compare_add, wr->wr.atomic.swap,
                  wr->wr.atomic.rkey};
    } else {
      b.rdma.remote_addr = wr->wr.rdma.remote_addr;
      b.rdma.rkey = wr->wr.rdma.rkey;
    }
    if (const int rc = braid_post_send(qp_of(qp)->b, &b, nullptr)) {
      if (bad) *bad = wr;
      return rc;
    }
  }
  return 0;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  braid_recv_wr* b_bad = nullptr;
  const int rc = braid_post_recv(qp_of(qp)->b, reinterpret_cast<braid_recv_wr*>(wr), &b_bad);
  if (rc != 0 && bad) *bad = reinterpret_cast<ibv_recv_wr*>(b_bad);
  return rc;
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  braid_recv_wr* b_bad = nullptr;
  const int rc = braid_post_srq_recv(reinterpret_cast<Srq*>(srq)->b,
                                     reinterpret_cast<braid_recv_wr*>(wr), &b_bad);
  if (rc != 0 && bad) *bad = reinterpret_cast<ibv_recv_wr*>(b_bad);
  return rc;
}

ibv_mw* alloc_mw(ibv_pd*, ibv_mw_type) {
  return fail_null<ibv_mw>(EOPNOTSUPP);
}
int bind_mw(ibv_qp*, ibv_mw*, ibv_mw_bind*) {
  return EOPNOTSUPP;
}
int dealloc_mw(ibv_mw*) {
  return EOPNOTSUPP;
}

}  // namespace

void install_object_ops(Context* c) {
  install_extended_ops(c);
  ibv_context_ops& ops = c->vctx.context.ops;
  ops.poll_cq = poll_cq;
  ops.req_notify_cq = req_notify_cq;
  ops.post_send = post_send;
  ops.post_recv = post_recv;
  ops.post_srq_recv = post_srq_recv;
  ops.alloc_mw = alloc_mw;
  ops.bind_mw = bind_mw;
  ops.dealloc_mw = dealloc_mw;
  c->vctx.alloc_parent_domain = alloc_parent_domain;
}

}  // namespace braid::ibv

using namespace braid::ibv;  // NOLINT: the file's own types

void braid::ibv::release_objects(Context* c) {
  // Copies, taken under the lock: each destroy erases from the set it came
  // from (and takes the lock itself).
  c->closing = true;  // nothing waits for an event to be acknowledged now
  const auto copy = [c](auto& set) {
    std::lock_guard<std::mutex> g(c->objects_lock);
    return std::vector(set.begin(), set.end());
  };
  for (ibv_qp* qp : copy(c->qps)) ibv_destroy_qp(qp);
  for (ibv_srq* srq : copy(c->srqs)) ibv_destroy_srq(srq);
  for (ibv_ah* ah : copy(c->ahs)) ibv_destroy_ah(ah);
  for (ibv_mr* mr : copy(c->mrs)) ibv_dereg_mr(mr);
  for (ibv_cq* cq : copy(c->cqs)) ibv_destroy_cq(cq);
  for (ibv_comp_channel* ch : copy(c->channels)) ibv_destroy_comp_channel(ch);
  // Parent domains before the protection domains they stand for.
  for (ibv_pd* pd : copy(c->pds)) {
    if (is_parent_domain(pd)) ibv_dealloc_pd(pd);
  }
  for (ibv_pd* pd : copy(c->pds)) ibv_dealloc_pd(pd);
}

bool braid::ibv::is_parent_domain(ibv_pd* pd) {
  return pd != nullptr && pd_of(pd)->protection != nullptr;
}

void braid::ibv::count_parent_user(ibv_pd* pd, int delta) {
  if (!is_parent_domain(pd)) return;
  Context* c = context_of(pd->context);
  std::lock_guard<std::mutex> g(c->objects_lock);
  pd_of(pd)->users += delta;
}

// Parent domains: a protection domain with allocators for the provider's
// queue buffers. Braid's queues are not memory a device reads, so the
// allocators are accepted and never called; objects made on a parent domain
// belong to its protection domain (memory keys, QPs), as on hardware.
ibv_pd* braid::ibv::alloc_parent_domain(ibv_context* ctx, ibv_parent_domain_init_attr* attr) {
  Context* c = context_of(ctx);
  if (c == nullptr || attr == nullptr || attr->pd == nullptr) return fail_null<ibv_pd>(EINVAL);
  constexpr uint32_t kKnown =
      IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (attr->comp_mask & ~kKnown) return fail_null<ibv_pd>(EINVAL);
  // A thread domain would come from ibv_alloc_td, which Braid has not.
  if (attr->td != nullptr) return fail_null<ibv_pd>(EOPNOTSUPP);
  // Not a parent of a parent, and not a PD of another context.
  if (attr->pd->context != ctx || is_parent_domain(attr->pd)) return fail_null<ibv_pd>(EINVAL);
  auto* p = new (std::nothrow) Pd{};
  if (p == nullptr) return fail_null<ibv_pd>(ENOMEM);
  p->pd.context = ctx;
  p->pd.handle = attr->pd->handle;
  p->b = pd_of(attr->pd)->b;
  p->protection = attr->pd;
  {
    std::lock_guard<std::mutex> g(c->objects_lock);
    ++pd_of(attr->pd)->parents;
    c->pds.insert(&p->pd);
  }
  trace("alloc_parent_domain of %p -> %p", static_cast<void*>(attr->pd),
        static_cast<void*>(&p->pd));
  return &p->pd;
}

// ---- Protection domains ----

BRAID_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  Context* c = context_of(ctx);
  if (c == nullptr) return fail_null<ibv_pd>(EINVAL);
  braid_pd* b = braid_alloc_pd(c->braid);
  if (b == nullptr) return fail_null<ibv_pd>(ENOMEM);
  auto* p = new (std::nothrow) Pd{};
  if (p == nullptr) {
    braid_dealloc_pd(b);
    return fail_null<ibv_pd>(ENOMEM);
  }
  p->pd.context = ctx;
  p->pd.handle = 0;
  p->b = b;
  track(c, c->pds, &p->pd);
  trace("alloc_pd -> %p", static_cast<void*>(&p->pd));
  return &p->pd;
}

BRAID_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  trace("dealloc_pd %p", static_cast<void*>(pd));
  if (pd == nullptr) return fail(EINVAL);
  Context* c = context_of(pd->context);
  Pd* p = pd_of(pd);
  {
    std::lock_guard<std::mutex> g(c->objects_lock);
    if (p->protection != nullptr) {          // a parent domain: its protection domain stays
      if (p->users > 0) return fail(EBUSY);  // QPs, MRs or CQs made on it
      --pd_of(p->protection)->parents;
      c->pds.erase(pd);
      delete p;
      return 0;
    }
    if (p->parents > 0) return fail(EBUSY);  // parent domains still stand for it
  }
  if (const int rc = braid_dealloc_pd(p->b)) return fail(rc);  // still in use
  untrack(c, c->pds, pd);
  delete p;
  return 0;
}

// ---- Memory regions ----

BRAID_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                      unsigned int access) {
  if (pd == nullptr) return fail_null<ibv_mr>(EINVAL);
  // Braid's keys address memory by virtual address: an iova other than the
  // address itself would need a translation it does not have.
  if (iova != reinterpret_cast<uintptr_t>(addr)) return fail_null<ibv_mr>(EOPNOTSUPP);
  // Optional bits (relaxed ordering and the rest of IBV_ACCESS_OPTIONAL_RANGE)
  // may be ignored; other unknown bits may not.
  // MW_BIND lets memory windows be bound to the region: Braid has none
  // (ibv_alloc_mw fails), so the permission is granted and never used, as
  // a kernel device without windows grants it. HUGETLB is a hint.
  constexpr unsigned kAccepted =
      kAccessBits | IBV_ACCESS_OPTIONAL_RANGE | IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB;
  constexpr unsigned kMissing = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND;
  if (access & ~(kAccepted | kMissing)) return fail_null<ibv_mr>(EINVAL);
  if (access & kMissing) return fail_null<ibv_mr>(EOPNOTSUPP);  // zero-based, ODP
  braid_mr* b = braid_reg_mr(pd_of(pd)->b, addr, length, static_cast<int>(access & kAccessBits));
  if (b == nullptr) return fail_null<ibv_mr>(EINVAL);
  auto* m = new (std::nothrow) Mr{};
  if (m == nullptr) {
    braid_dereg_mr(b);
    return fail_null<ibv_mr>(ENOMEM);
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.lkey = b->lkey;
  m->mr.rkey = b->rkey;
  m->b = b;
  {
    Context* c = context_of(pd->context);
    track(c, c->mrs, &m->mr);
  }
  count_parent_user(pd, +1);
  trace("reg_mr %p+%zu access 0x%x -> %p", addr, length, access, static_cast<void*>(&m->mr));
  return &m->mr;
}

BRAID_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uintptr_t>(addr),
                          static_cast<unsigned>(access));
}

BRAID_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                     int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned>(access));
}

BRAID_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  trace("dereg_mr %p", static_cast<void*>(mr));
  if (mr == nullptr) return fail(EINVAL);
  Mr* m = reinterpret_cast<Mr*>(mr);
  if (const int rc = braid_dereg_mr(m->b)) return fail(rc);
  {
    Context* c = context_of(mr->context);
    untrack(c, c->mrs, mr);
  }
  count_parent_user(mr->pd, -1);
  delete m;
  return 0;
}

// The keys stay. rdma-core's return codes: 0, or an IBV_REREG_MR_ERR_*
// (negative), errno set.
BRAID_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length,
                              int access) {
  static_assert(int(BRAID_REREG_MR_CHANGE_TRANSLATION) == int(IBV_REREG_MR_CHANGE_TRANSLATION) &&
                int(BRAID_REREG_MR_CHANGE_PD) == int(IBV_REREG_MR_CHANGE_PD) &&
                int(BRAID_REREG_MR_CHANGE_ACCESS) == int(IBV_REREG_MR_CHANGE_ACCESS));
  if (mr == nullptr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) != 0) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) && (pd == nullptr || pd->context != mr->context)) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) &&
      (access &
       ~(kAccessBits | IBV_ACCESS_OPTIONAL_RANGE | IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB))) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  Mr* m = reinterpret_cast<Mr*>(mr);
  braid_pd* bpd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd_of(pd)->b : nullptr;
  if (const int rc =
          braid_rereg_mr(m->b, flags, bpd, addr, length,
                         static_cast<int>(static_cast<unsigned>(access) & kAccessBits))) {
    errno = rc;
    return IBV_REREG_MR_ERR_INPUT;
  }
  trace("rereg_mr %p flags %d", static_cast<void*>(mr), flags);
  if (flags & IBV_REREG_MR_CHANGE_PD) {
    count_parent_user(mr->pd, -1);
    count_parent_user(pd, +1);
    mr->pd = pd;
  }
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    mr->addr = addr;
    mr->length = length;
  }
  return 0;
}

// ---- Completion channels and CQs ----

BRAID_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
  Context* c = context_of(ctx);
  if (c == nullptr) return fail_null<ibv_comp_channel>(EINVAL);
  braid_comp_channel* b = braid_create_comp_channel(c->braid);
  if (b == nullptr) return fail_null<ibv_comp_channel>(ENOMEM);
  auto* ch = new (std::nothrow) Channel{};
  if (ch == nullptr) {
    braid_destroy_comp_channel(b);
    return fail_null<ibv_comp_channel>(ENOMEM);
  }
  ch->ch.context = ctx;
  ch->ch.fd = braid_comp_channel_fd(b);
  ch->ch.refcnt = 0;
  ch->b = b;
  track(c, c->channels, &ch->ch);
  trace("create_comp_channel -> %p", static_cast<void*>(&ch->ch));
  return &ch->ch;
}

BRAID_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (channel == nullptr) return fail(EINVAL);
  Channel* ch = reinterpret_cast<Channel*>(channel);
  if (const int rc = braid_destroy_comp_channel(ch->b)) return fail(rc);
  {
    Context* c = context_of(channel->context);
    untrack(c, c->channels, channel);
  }
  delete ch;
  return 0;
}

Cq* braid::ibv::create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                          int comp_vector) {
  Context* c = context_of(ctx);
  if (c == nullptr || cqe < 1) return fail_null<Cq>(EINVAL);
  // One completion vector (num_comp_vectors); a channel of another context
  // is not this one's to use.
  if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) return fail_null<Cq>(EINVAL);
  if (channel != nullptr && channel->context != ctx) return fail_null<Cq>(EINVAL);
  auto* q = new (std::nothrow) Cq{};
  if (q == nullptr) return fail_null<Cq>(ENOMEM);
  braid_comp_channel* bch = channel ? reinterpret_cast<Channel*>(channel)->b : nullptr;
  // Braid's cq_context is our wrapper: get_cq_event maps back through it.
  q->b = braid_create_cq(c->braid, cqe, q, bch, comp_vector);
  if (q->b == nullptr) {
    delete q;
    return fail_null<Cq>(EINVAL);
  }
  init_cq_ex(q);
  ibv_cq* cq = q->cq();
  cq->context = ctx;
  cq->channel = channel;
  cq->cq_context = cq_context;
  cq->cqe = cqe;
  pthread_mutex_init(&cq->mutex, nullptr);
  pthread_cond_init(&cq->cond, nullptr);
  if (channel) ++channel->refcnt;
  track(c, c->cqs, cq);
  trace("create_cq %d -> %p", cqe, static_cast<void*>(cq));
  return q;
}

BRAID_EXPORT ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context,
                                   ibv_comp_channel* channel, int comp_vector) {
  Cq* q = create_cq(ctx, cqe, cq_context, channel, comp_vector);
  return q ? q->cq() : nullptr;
}

BRAID_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  trace("destroy_cq %p", static_cast<void*>(cq));
  if (cq == nullptr) return fail(EINVAL);
  Cq* q = cq_of(cq);
  if (const int rc = braid_destroy_cq(q->b)) return fail(rc);
  if (cq->channel) --cq->channel->refcnt;
  {
    Context* c = context_of(cq->context);
    untrack(c, c->cqs, cq);
    settle_events(c, cq, &q->events_reported, &cq->mutex, &cq->cond, &cq->async_events_completed);
  }
  count_parent_user(q->parent_domain, -1);
  pthread_cond_destroy(&cq->cond);
  pthread_mutex_destroy(&cq->mutex);
  delete q;
  return 0;
}

BRAID_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (channel == nullptr || cq == nullptr || cq_context == nullptr) return fail(EINVAL);
  braid_cq* b = nullptr;
  void* ours = nullptr;
  if (const int rc = braid_get_cq_event(reinterpret_cast<Channel*>(channel)->b, &b, &ours)) {
    errno = rc;
    return -1;
  }
  Cq* q = static_cast<Cq*>(ours);
  *cq = q->cq();
  *cq_context = q->cq()->cq_context;
  return 0;
}

BRAID_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (cq == nullptr) return;
  braid_ack_cq_events(cq_of(cq)->b, nevents);
  cq->comp_events_completed += nevents;
}

BRAID_EXPORT int ibv_resize_cq(ibv_cq*, int) {
  return fail(EOPNOTSUPP);
}

// ---- Queue pairs (RC) ----

Qp* braid::ibv::create_qp(ibv_pd* pd, ibv_qp_init_attr* attr, bool cm) {
  if (pd == nullptr || attr == nullptr) return fail_null<Qp>(EINVAL);
  if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UD) {
    return fail_null<Qp>(EOPNOTSUPP);  // UC, raw and XRC: not in Braid
  }
  if (attr->send_cq == nullptr || attr->recv_cq == nullptr) return fail_null<Qp>(EINVAL);
  // Objects of one context are not visible to another (a kernel device
  // finds no such handle in the context's file).
  if (attr->send_cq->context != pd->context || attr->recv_cq->context != pd->context ||
      (attr->srq != nullptr && attr->srq->context != pd->context)) {
    return fail_null<Qp>(EINVAL);
  }
  braid_qp_init_attr b{};
  b.send_cq = cq_of(attr->send_cq)->b;
  b.recv_cq = cq_of(attr->recv_cq)->b;
  b.cap = {attr->cap.max_send_wr, attr->cap.max_recv_wr, attr->cap.max_send_sge,
           attr->cap.max_recv_sge, attr->cap.max_inline_data};
  b.qp_type = attr->qp_type == IBV_QPT_UD ? BRAID_QPT_UD : BRAID_QPT_RC;
  if (cm) {
    if (attr->qp_type != IBV_QPT_UD) return fail_null<Qp>(EINVAL);
    b.qp_type = BRAID_QPT_CM;
  }
  b.sq_sig_all = attr->sq_sig_all;
  if (attr->srq != nullptr) b.srq = reinterpret_cast<Srq*>(attr->srq)->b;
  auto* q = new (std::nothrow) Qp{};
  if (q == nullptr) return fail_null<Qp>(ENOMEM);
  b.qp_context = q;  // events name the wrapper (route_async_event)
  q->b = braid_create_qp(pd_of(pd)->b, &b);
  if (q->b == nullptr) {
    delete q;
    return fail_null<Qp>(cm && errno == EBUSY ? EBUSY : EINVAL);
  }
  init_qp_ex(q);
  // What the QP really has, as providers report it.
  braid_qp_attr qa{};
  braid_qp_init_attr qi{};
  if (braid_query_qp(q->b, &qa, BRAID_QP_CAP, &qi) == 0) {
    attr->cap.max_send_wr = qi.cap.max_send_wr;
    attr->cap.max_recv_wr = qi.cap.max_recv_wr;
    attr->cap.max_send_sge = qi.cap.max_send_sge;
    attr->cap.max_recv_sge = qi.cap.max_recv_sge;
    attr->cap.max_inline_data = qi.cap.max_inline_data;
  }
  ibv_qp* qp = q->qp();
  qp->context = pd->context;
  qp->qp_context = attr->qp_context;
  qp->pd = pd;
  qp->send_cq = attr->send_cq;
  qp->recv_cq = attr->recv_cq;
  qp->srq = attr->srq;
  qp->qp_num = braid_qp_num(q->b);
  qp->state = IBV_QPS_RESET;
  qp->qp_type = attr->qp_type;
  pthread_mutex_init(&qp->mutex, nullptr);
  pthread_cond_init(&qp->cond, nullptr);
  {
    Context* c = context_of(pd->context);
    track(c, c->qps, qp);
  }
  count_parent_user(pd, +1);
  trace("create_qp -> %p qpn %u", static_cast<void*>(qp), qp->qp_num);
  return q;
}

BRAID_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  Qp* q = create_qp(pd, attr);
  return q ? q->qp() : nullptr;
}

// Braid's librdmacm's QP 1 (BRAID_QPT_CM): a UD QP numbered 1, one per
// device, where CM messages arrive. Not part of rdma-core's API (version
// BRAID_PRIVATE_1.0).
BRAID_EXPORT ibv_qp* braid_ibv_create_cm_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  Qp* q = create_qp(pd, attr, true);
  return q ? q->qp() : nullptr;
}

BRAID_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  if (qp == nullptr || attr == nullptr) return fail(EINVAL);
  if ((mask & IBV_QP_AV) && !attr->ah_attr.is_global) {
    return fail(EINVAL);  // Ethernet: the peer is named by its GID (RoCE's GRH)
  }
  braid_qp_attr b{};
  b.qp_state = static_cast<braid_qp_state>(attr->qp_state);
  if (!(mask & IBV_QP_STATE)) {
    // Attributes alone (libfabric and qperf set MIN_RNR_TIMER on an RTS
    // QP so): a change within the QP's present state.
    braid_qp_attr now{};
    braid_qp_init_attr init{};
    if (braid_query_qp(qp_of(qp)->b, &now, BRAID_QP_STATE, &init) != 0) return fail(EINVAL);
    b.qp_state = now.qp_state;
    mask |= IBV_QP_STATE;
  }
  b.cur_qp_state = static_cast<braid_qp_state>(attr->cur_qp_state);
  b.path_mtu = static_cast<braid_mtu>(attr->path_mtu);
  b.qkey = attr->qkey;
  // InfiniBand's PSNs are 24 bits (Braid's own API takes 32).
  b.rq_psn = attr->rq_psn & 0xffffff;
  b.sq_psn = attr->sq_psn & 0xffffff;
  b.dest_qp_num = attr->dest_qp_num;
  b.qp_access_flags = attr->qp_access_flags & kAccessBits;
  b.cap = {attr->cap.max_send_wr, attr->cap.max_recv_wr, attr->cap.max_send_sge,
           attr->cap.max_recv_sge, attr->cap.max_inline_data};
  std::memcpy(b.ah_attr.dgid.raw, attr->ah_attr.grh.dgid.raw, sizeof b.ah_attr.dgid.raw);
  b.ah_attr.port_num = attr->ah_attr.port_num;
  b.pkey_index = attr->pkey_index;
  b.max_rd_atomic = attr->max_rd_atomic;
  b.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  b.min_rnr_timer = attr->min_rnr_timer;
  b.port_num = attr->port_num;
  b.timeout = attr->timeout;
  b.retry_cnt = attr->retry_cnt;
  b.rnr_retry = attr->rnr_retry;
  b.en_sqd_async_notify = attr->en_sqd_async_notify;
  if (const int rc = braid_modify_qp(qp_of(qp)->b, &b, mask & kKnownQpMask)) {
    trace("modify_qp %p state %d mask 0x%x: %s", static_cast<void*>(qp), attr->qp_state, mask,
          braid_last_error());
    return fail(rc);
  }
  trace("modify_qp %p state %d mask 0x%x", static_cast<void*>(qp), attr->qp_state, mask);
  if (mask & IBV_QP_STATE) qp->state = attr->qp_state;
  return 0;
}

BRAID_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask,
                              ibv_qp_init_attr* init_attr) {
  if (qp == nullptr || attr == nullptr) return fail(EINVAL);
  braid_qp_attr b{};
  braid_qp_init_attr bi{};
  if (const int rc = braid_query_qp(qp_of(qp)->b, &b, mask, &bi)) return fail(rc);
  *attr = ibv_qp_attr{};
  attr->qp_state = static_cast<ibv_qp_state>(b.qp_state);
  attr->cur_qp_state = static_cast<ibv_qp_state>(b.cur_qp_state);
  attr->path_mtu = static_cast<ibv_mtu>(b.path_mtu);
  attr->qkey = b.qkey;
  attr->rq_psn = b.rq_psn;
  attr->sq_psn = b.sq_psn;
  attr->dest_qp_num = b.dest_qp_num;
  attr->qp_access_flags = b.qp_access_flags;
  attr->cap = {b.cap.max_send_wr, b.cap.max_recv_wr, b.cap.max_send_sge, b.cap.max_recv_sge,
               b.cap.max_inline_data};
  std::memcpy(attr->ah_attr.grh.dgid.raw, b.ah_attr.dgid.raw, sizeof b.ah_attr.dgid.raw);
  attr->ah_attr.is_global = 1;
  attr->ah_attr.port_num = b.ah_attr.port_num;
  attr->pkey_index = b.pkey_index;
  attr->max_rd_atomic = b.max_rd_atomic;
  attr->max_dest_rd_atomic = b.max_dest_rd_atomic;
  attr->min_rnr_timer = b.min_rnr_timer;
  attr->port_num = b.port_num;
  attr->timeout = b.timeout;
  attr->retry_cnt = b.retry_cnt;
  attr->rnr_retry = b.rnr_retry;
  attr->en_sqd_async_notify = b.en_sqd_async_notify;
  attr->sq_draining = b.sq_draining;
  if (init_attr != nullptr) {
    *init_attr = ibv_qp_init_attr{};
    init_attr->qp_context = qp->qp_context;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
    init_attr->cap = attr->cap;
    init_attr->qp_type = qp->qp_type;
    init_attr->sq_sig_all = bi.sq_sig_all;
  }
  qp->state = attr->qp_state;
  return 0;
}

BRAID_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  if (qp == nullptr) return fail(EINVAL);
  Qp* q = qp_of(qp);
  braid_qp_stats st{};
  braid_query_qp_stats(q->b, &st);
  trace(
      "destroy_qp %p: sent %lu (retransmits %lu), received %lu (duplicates %lu), acks %lu/%lu, "
      "timeouts %lu, lost inferred %lu",
      static_cast<void*>(qp), static_cast<unsigned long>(st.data_packets_sent),
      static_cast<unsigned long>(st.retransmits),
      static_cast<unsigned long>(st.data_packets_received),
      static_cast<unsigned long>(st.duplicates), static_cast<unsigned long>(st.acks_sent),
      static_cast<unsigned long>(st.acks_received), static_cast<unsigned long>(st.timeouts),
      static_cast<unsigned long>(st.lost_inferred));
  if (const int rc = braid_destroy_qp(q->b)) return fail(rc);
  {
    Context* c = context_of(qp->context);
    untrack(c, c->qps, qp);
    settle_events(c, qp, &q->events_reported, &qp->mutex, &qp->cond, &qp->events_completed);
  }
  count_parent_user(qp->pd, -1);
  pthread_cond_destroy(&qp->cond);
  pthread_mutex_destroy(&qp->mutex);
  delete q;
  return 0;
}

// Braid places every packet when it arrives, in any order: data is never
// guaranteed to land in order.
BRAID_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) {
  return 0;
}

// ---- Address handles (UD) ----

BRAID_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr || !attr->is_global) {
    return fail_null<ibv_ah>(EINVAL);  // Ethernet: the peer is named by its GID
  }
  braid_ah_attr b{};
  std::memcpy(b.dgid.raw, attr->grh.dgid.raw, sizeof b.dgid.raw);
  b.port_num = attr->port_num;
  auto* a = new (std::nothrow) Ah{};
  if (a == nullptr) return fail_null<ibv_ah>(ENOMEM);
  a->b = braid_create_ah(pd_of(pd)->b, &b);
  if (a->b == nullptr) {
    const int err = errno;
    delete a;
    return fail_null<ibv_ah>(err != 0 ? err : EINVAL);
  }
  a->ah.context = pd->context;
  a->ah.pd = pd;
  {
    Context* c = context_of(pd->context);
    track(c, c->ahs, &a->ah);
  }
  trace("create_ah -> %p", static_cast<void*>(&a->ah));
  return &a->ah;
}

BRAID_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  if (ah == nullptr) return fail(EINVAL);
  Ah* a = reinterpret_cast<Ah*>(ah);
  if (const int rc = braid_destroy_ah(a->b)) return fail(rc);
  {
    Context* c = context_of(ah->context);
    untrack(c, c->ahs, ah);
  }
  delete a;
  return 0;
}

// The address handle that answers a received datagram: its sender, the
// GRH's source GID (Braid's GRHs carry IPv4-mapped GIDs).
BRAID_EXPORT int ibv_init_ah_from_wc(ibv_context*, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                     ibv_ah_attr* attr) {
  if (wc == nullptr || grh == nullptr || attr == nullptr || !(wc->wc_flags & IBV_WC_GRH)) {
    return fail(EINVAL);
  }
  const auto* raw = reinterpret_cast<const uint8_t*>(grh);
  *attr = ibv_ah_attr{};
  attr->is_global = 1;
  attr->port_num = port_num;
  attr->grh.hop_limit = 64;
  std::memcpy(attr->grh.dgid.raw, raw + 8, 16);  // the source GID
  return 0;
}

BRAID_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr{};
  if (pd == nullptr || ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) {
    return fail_null<ibv_ah>(EINVAL);
  }
  return ibv_create_ah(pd, &attr);
}
