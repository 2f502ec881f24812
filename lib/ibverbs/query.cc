// Device, port and GID queries, and the context's operation tables.
#include <sys/eventfd.h>

#include <cerrno>
#include <cstring>

#include "ibverbs/ibverbs_internal.h"

#undef ibv_query_port

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

using braid::ibv::Context;

namespace braid::ibv {
namespace {

ibv_mtu to_ibv_mtu(braid_mtu m) {
  return static_cast<ibv_mtu>(m);  // same numbering (256 = 1 ... 4096 = 5)
}

int fill_device_attr(Context* c, ibv_device_attr* a) {
  braid_device_attr b{};
  if (const int rc = braid_query_device(c->braid, &b)) return rc;
  std::memset(a, 0, sizeof(*a));
  std::memcpy(a->fw_ver, b.fw_ver, sizeof a->fw_ver);
  a->node_guid = node_guid(*c->device);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = b.max_mr_size;
  a->page_size_cap = 0xfffff000;  // any multiple of 4 KiB
  a->vendor_id = b.vendor_id;
  a->vendor_part_id = b.vendor_part_id;
  a->max_qp = b.max_qp;
  a->max_qp_wr = b.max_qp_wr;
  a->device_cap_flags =
      IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SRQ_RESIZE;
  a->max_sge = b.max_sge;
  a->max_sge_rd = b.max_sge;
  a->max_cq = b.max_cq;
  a->max_cqe = b.max_cqe;
  a->max_mr = b.max_mr;
  a->max_pd = b.max_pd;
  a->max_qp_rd_atom = b.max_qp_rd_atom;
  a->max_res_rd_atom = b.max_qp_rd_atom * b.max_qp;
  a->max_qp_init_rd_atom = b.max_qp_init_rd_atom;
  a->atomic_cap = static_cast<ibv_atomic_cap>(b.atomic_cap);
  a->max_srq = b.max_srq;
  a->max_srq_wr = b.max_srq_wr;
  a->max_srq_sge = b.max_srq_sge;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = b.phys_port_cnt;
  return 0;
}

int fill_port_attr(Context* c, uint8_t port, ibv_port_attr* a, size_t size) {
  braid_port_attr b{};
  if (const int rc = braid_query_port(c->braid, port, &b)) return rc;
  ibv_port_attr out{};
  out.state = b.state == BRAID_PORT_ACTIVE ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  out.max_mtu = to_ibv_mtu(b.max_mtu);
  out.active_mtu = to_ibv_mtu(b.active_mtu);
  out.gid_tbl_len = b.gid_tbl_len;
  out.port_cap_flags = 0;
  out.max_msg_sz = b.max_msg_sz;
  out.pkey_tbl_len = 1;
  out.lid = 0;  // Ethernet: no LIDs
  out.max_vl_num = 1;
  const IbRate rate = ib_rate_for(b.link_mbps);
  out.active_width = rate.width;
  out.active_speed = rate.speed;
  out.phys_state = b.state == BRAID_PORT_ACTIVE ? 5 /* LinkUp */ : 3 /* Disabled */;
  out.link_layer = IBV_LINK_LAYER_ETHERNET;
  std::memcpy(a, &out, std::min(size, sizeof out));
  return 0;
}

int query_port_ex(ibv_context* ctx, uint8_t port, ibv_port_attr* a, size_t size) {
  Context* c = context_of(ctx);
  if (c == nullptr || a == nullptr) return EINVAL;
  return fill_port_attr(c, port, a, size);
}

int query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t size) {
  Context* c = context_of(ctx);
  if (c == nullptr || attr == nullptr || size < sizeof(ibv_device_attr)) return EINVAL;
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  ibv_device_attr_ex out{};
  if (const int rc = fill_device_attr(c, &out.orig_attr)) return rc;
  out.device_cap_flags_ex = out.orig_attr.device_cap_flags;
  out.phys_port_cnt_ex = out.orig_attr.phys_port_cnt;
  out.max_dm_size = 0;
  std::memcpy(attr, &out, std::min(size, sizeof out));
  return 0;
}

}  // namespace

void init_context(Context* c) {
  std::memset(&c->vctx, 0, sizeof c->vctx);
  ibv_context& ctx = c->vctx.context;
  ctx.device = &c->device->dev;
  ctx.cmd_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // Readable while asynchronous events wait (srq.cc). Blocking, as the
  // kernel's: ibv_get_async_event waits unless the program sets O_NONBLOCK.
  ctx.async_fd = eventfd(0, EFD_CLOEXEC);
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c->vctx.sz = sizeof(verbs_context);
  c->vctx.query_port = query_port_ex;
  c->vctx.query_device_ex = query_device_ex;
  install_object_ops(c);
}

}  // namespace braid::ibv

BRAID_EXPORT int ibv_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  Context* c = braid::ibv::context_of(ctx);
  if (c == nullptr || attr == nullptr) return EINVAL;
  return braid::ibv::fill_device_attr(c, attr);
}

// The classic entry point (old binaries, and the header's fallback): the
// caller's struct is the full current one.
BRAID_EXPORT int ibv_query_port(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr) {
  Context* c = braid::ibv::context_of(ctx);
  if (c == nullptr || attr == nullptr) return EINVAL;
  return braid::ibv::fill_port_attr(c, port, reinterpret_cast<ibv_port_attr*>(attr),
                                    sizeof(ibv_port_attr));
}

BRAID_EXPORT int ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  Context* c = braid::ibv::context_of(ctx);
  if (c == nullptr || gid == nullptr) return EINVAL;
  braid_gid g{};
  if (const int rc = braid_query_gid(c->braid, port, index, &g)) {
    errno = rc;
    return -1;
  }
  std::memcpy(gid->raw, g.raw, sizeof gid->raw);
  return 0;
}

BRAID_EXPORT int _ibv_query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index,
                                   ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  Context* c = braid::ibv::context_of(ctx);
  if (c == nullptr || entry == nullptr || flags != 0 || port > 255 || index > 255) return EINVAL;
  braid_gid g{};
  if (const int rc =
          braid_query_gid(c->braid, static_cast<uint8_t>(port), static_cast<int>(index), &g)) {
    return rc == EINVAL ? ENODATA : rc;
  }
  ibv_gid_entry out{};
  std::memcpy(out.gid.raw, g.raw, sizeof out.gid.raw);
  out.gid_index = index;
  out.port_num = port;
  out.gid_type = IBV_GID_TYPE_ROCE_V2;
  out.ndev_ifindex = 0;
  std::memcpy(entry, &out, std::min(entry_size, sizeof out));
  return 0;
}

BRAID_EXPORT ssize_t _ibv_query_gid_table(ibv_context* ctx, ibv_gid_entry* entries,
                                          size_t max_entries, uint32_t flags, size_t entry_size) {
  if (entries == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  if (max_entries < 1) return -EINVAL;  // too small for the table, as rdma-core
  const int rc = _ibv_query_gid_ex(ctx, 1, 0, entries, 0, entry_size);
  return rc == 0 ? 1 : -rc;
}

BRAID_EXPORT int ibv_query_pkey(ibv_context* ctx, uint8_t port, int index, __be16* pkey) {
  if (braid::ibv::context_of(ctx) == nullptr || pkey == nullptr || port != 1 || index != 0) {
    return EINVAL;
  }
  *pkey = htobe16(0xffff);  // the default partition
  return 0;
}

BRAID_EXPORT int ibv_get_pkey_index(ibv_context* ctx, uint8_t port, __be16 pkey) {
  if (braid::ibv::context_of(ctx) == nullptr || port != 1) return -EINVAL;
  return (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -ENOENT;
}

// rdma-core's private query (driver.h) that ibv_devinfo uses to label GIDs:
// 0 for "IB/RoCE v1", 1 for RoCE v2 (enum ibv_gid_type_sysfs).
BRAID_EXPORT int ibv_query_gid_type(ibv_context* ctx, uint8_t port, unsigned int index, int* type) {
  ibv_gid_entry e{};
  if (type == nullptr) return EINVAL;
  if (const int rc = _ibv_query_gid_ex(ctx, port, index, &e, 0, sizeof e)) {
    errno = rc;
    return -1;
  }
  *type = 1;  // RoCE v2: UDP/IP encapsulation
  return 0;
}
