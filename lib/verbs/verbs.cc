// Braid's verbs C API over the engine and the protocol core: errors,
// names, GIDs, the device, protection domains and memory regions. The
// other calls: progress.cc, cq.cc, qp.cc, post.cc, stats.cc.
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
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/registry.h"
#include "verbs/calls.h"
#include "verbs/device_io.h"
#include "verbs/verbs_internal.h"
using namespace braid::calls;

namespace braid {
void set_last_error(const std::string& why) {
  g_last_error = why;
}
}  // namespace braid

namespace {
// A registry's numbers in the C API (enum braid_cc, braid_path_policy):
// its place plus one; 0 for none.
template <class Registry>
int c_number(const char* name) {
  if (name == nullptr) return 0;
  const auto i = braid::registry_index<Registry>(name);
  return i ? static_cast<int>(*i) + 1 : 0;
}
template <class Registry>
const char* c_name(int number) {
  if (number < 1) return nullptr;
  const std::string_view n = braid::registry_name<Registry>(static_cast<size_t>(number - 1));
  return n.empty() ? nullptr : n.data();  // kName is a literal: it ends in a NUL
}
}  // namespace

extern "C" {

int braid_paths_from_name(const char* name) {
  return c_number<braid::PathPolicies>(name);
}

const char* braid_paths_name(int paths) {
  return c_name<braid::PathPolicies>(paths);
}

int braid_cc_from_name(const char* name) {
  return c_number<braid::CcAlgorithms>(name);
}

const char* braid_cc_name(int cc) {
  return c_name<braid::CcAlgorithms>(cc);
}

const char* braid_last_error(void) {
  return g_last_error.c_str();
}

void braid_gid_from_ipv4(uint32_t ip, union braid_gid* gid) {
  std::memset(gid->raw, 0, sizeof(gid->raw));
  gid->raw[10] = 0xff;
  gid->raw[11] = 0xff;
  gid->raw[12] = static_cast<uint8_t>(ip >> 24);
  gid->raw[13] = static_cast<uint8_t>(ip >> 16);
  gid->raw[14] = static_cast<uint8_t>(ip >> 8);
  gid->raw[15] = static_cast<uint8_t>(ip);
}

int braid_gid_to_ipv4(const union braid_gid* gid, uint32_t* ip) {
  for (int i = 0; i < 10; ++i) {
    if (gid->raw[i] != 0) return EINVAL;
  }
  if (gid->raw[10] != 0xff || gid->raw[11] != 0xff) return EINVAL;
  *ip = (uint32_t{gid->raw[12]} << 24) | (uint32_t{gid->raw[13]} << 16) |
        (uint32_t{gid->raw[14]} << 8) | gid->raw[15];
  return 0;
}

// Before the port closes, the device's closed QPs wait for their peers'
// answers (Endpoint::close_connection): a memif or vhost peer loses what it
// has not read from the rings when the port goes. The records end on their
// own once their retries are spent (about 63 ms unanswered); the wait ends
// sooner when the link goes down (the peer's port closed) or the TX ring
// stops draining (a peer that no longer reads), and in any case after the
// records' whole span and a margin.
static void linger(braid_context* c) {
  auto closing = [c] {
    size_t n = 0;
    for (auto& s : c->slots) n += s->engine->endpoint().closing();
    return n;
  };
  if (closing() == 0) return;
  const braid::EndpointConfig& ec = c->slots[0]->engine->endpoint().config();
  const braid::TimeNs span =
      ec.close_retry_ns * ((braid::TimeNs{1} << std::min<uint8_t>(ec.close_sends, 16)) - 1);
  // The backends' own events wait meanwhile (a memif peer that exits has
  // DPDK's interrupt thread unmap the rings a burst is reading: SIGSEGV at
  // close, 1 run in 15 under load). Events that cannot be held (the thread
  // did not park): the wait polls all the same, as before.
  size_t held = 0;
  for (; held < c->slots.size(); ++held) {
    if (!c->slots[held]->engine->io().hold_events()) break;
  }
  const uint64_t deadline = steady_ns() + span + 20'000'000;
  for (uint32_t pass = 0; closing() > 0; ++pass) {
    if ((pass & 63) == 0) {
      if (steady_ns() > deadline) break;
      bool go = false;
      for (auto& s : c->slots) go |= !s->engine->io().link_up() || s->engine->tx_stalled();
      if (go) break;
    }
    // Under the device's locks: at exit (settle_at_exit) other threads of
    // the program may still call in.
    Guard g(c);
    for (auto& s : c->slots) s->engine->poll();
  }
  while (held > 0) c->slots[--held]->engine->io().release_events();
}

// Devices open now (braid_open_device to braid_close_device).
static std::mutex g_open_lock;
static std::vector<braid_context*> g_open;

struct braid_context* braid_open_device(const struct braid_device_config* config) {
  braid_context* c = braid::open_device(config, nullptr);
  if (c != nullptr) {
    std::lock_guard<std::mutex> l(g_open_lock);
    g_open.push_back(c);
  }
  return c;
}

int braid_lock_calls(struct braid_context* c) {
  if (c == nullptr) return EINVAL;
  c->locking = true;
  return 0;
}

int braid_close_device(struct braid_context* c) {
  if (c == nullptr) return EINVAL;
  if (c->open_objects != 0) {
    return fail(EBUSY, std::to_string(c->open_objects) + " objects still exist on this device");
  }
  {
    std::lock_guard<std::mutex> l(g_open_lock);
    g_open.erase(std::remove(g_open.begin(), g_open.end(), c), g_open.end());
  }
  braid::stop_progress_thread(c);
  linger(c);
  delete c;
  return 0;
}

const char* braid_stats_name(struct braid_context* c) {
  return c == nullptr ? "" : c->stats_name.c_str();
}

int braid_query_device(struct braid_context* c, struct braid_device_attr* a) {
  if (c == nullptr || a == nullptr) return EINVAL;
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "braid-0.1");
  a->max_mr_size = ~uint64_t{0};
  // Not an IEEE-assigned OUI (Braid has none): the locally administered
  // prefix of Braid's node GUIDs (02:b7:a1), non-zero as programs expect.
  a->vendor_id = BRAID_VENDOR_ID;
  a->vendor_part_id = 1;
  a->max_qp = 65535;
  a->max_qp_wr = 32768;
  a->max_sge = braid::kMaxSge;
  a->max_cq = 65535;
  a->max_cqe = 1 << 20;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 20;
  a->max_qp_rd_atom = braid::kMaxRdAtomic;
  a->max_qp_init_rd_atom = braid::kMaxRdAtomic;
  a->atomic_cap = 1;  // IBV_ATOMIC_HCA
  a->phys_port_cnt = 1;
  a->max_srq = 65535;
  a->max_srq_wr = 1 << 20;
  a->max_srq_sge = braid::kMaxSge;
  return 0;
}

int braid_query_port(struct braid_context* c, uint8_t port, struct braid_port_attr* a) {
  if (c == nullptr || a == nullptr || port != 1) return EINVAL;
  Guard g(c);
  std::memset(a, 0, sizeof(*a));
  const uint32_t link_mtu = c->engine->io().max_frame() - braid::wire_l2();
  // Each engine looks at its queue of the port now: the state said here
  // and the last PORT_ACTIVE / PORT_ERR raised agree.
  for (uint16_t k = 0; k < c->engines(); ++k) {
    braid::Engine& e = *c->slots[k]->engine;
    e.look_at_port(e.now());
    if (e.port_changes() != c->slots[k]->port_changes_seen) raise_port_event(c, k);
  }
  a->state = c->port_ok() ? BRAID_PORT_ACTIVE : BRAID_PORT_DOWN;
  a->link_mtu = link_mtu;
  a->tx_in_place = c->engine->io().tx_external() ? 1 : 0;
  a->link_mbps = c->config.link_mbps;
  a->max_mtu = a->active_mtu = ib_mtu_for(braid::max_payload(link_mtu, c->trailer_bytes()));
  a->gid_tbl_len = 1;
  a->max_msg_sz = 0x7fffffff;
  a->link_layer = 2;
  return 0;
}

int braid_query_gid(struct braid_context* c, uint8_t port, int index, union braid_gid* gid) {
  if (c == nullptr || gid == nullptr || port != 1 || index != 0) return EINVAL;
  braid_gid_from_ipv4(c->ip, gid);
  return 0;
}

struct braid_pd* braid_alloc_pd(struct braid_context* c) {
  if (c == nullptr) return fail_null<braid_pd>(EINVAL, "no device");
  Guard g(c);
  ++c->open_objects;
  return new braid_pd{c, c->next_pd++};
}

int braid_dealloc_pd(struct braid_pd* pd) {
  if (pd == nullptr) return EINVAL;
  braid_context* c = pd->context;
  Guard g(c);
  if (pd->users > 0) {
    return fail(EBUSY, "dealloc_pd: " + std::to_string(pd->users) + " MRs and QPs still use it");
  }
  --c->open_objects;
  delete pd;
  return 0;
}

struct braid_mr* braid_reg_mr(struct braid_pd* pd, void* addr, size_t length, int access) {
  if (pd == nullptr || (addr == nullptr && length > 0)) {
    return fail_null<braid_mr>(EINVAL, "reg_mr: no PD or no address");
  }
  constexpr int kKnown = BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE |
                         BRAID_ACCESS_REMOTE_READ | BRAID_ACCESS_REMOTE_ATOMIC |
                         BRAID_ACCESS_RELAXED_ORDERING;
  if ((access & ~kKnown) != 0) return fail_null<braid_mr>(EINVAL, "reg_mr: unknown access flags");
  // As libibverbs: remote write and remote atomics need local write.
  if ((access & (BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_ATOMIC)) &&
      !(access & BRAID_ACCESS_LOCAL_WRITE)) {
    return fail_null<braid_mr>(EINVAL, "reg_mr: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE");
  }
  braid_context* c = pd->context;
  Guard g(c);
  const uint32_t core_access =
      static_cast<uint32_t>(access) & (braid::kAccessLocalWrite | braid::kAccessRemoteWrite |
                                       braid::kAccessRemoteRead | braid::kAccessRemoteAtomic);
  const uint32_t key = c->memory->register_region(addr, length, core_access, pd->id);
  if (key == 0) return fail_null<braid_mr>(ENOMEM, "reg_mr: memory-region table full");
  ++c->open_objects;
  ++pd->users;
  return new braid_mr{c, pd, addr, length, key, key, access};
}

int braid_rereg_mr(struct braid_mr* mr, int flags, struct braid_pd* pd, void* addr, size_t length,
                   int access) {
  constexpr int kFlags =
      BRAID_REREG_MR_CHANGE_TRANSLATION | BRAID_REREG_MR_CHANGE_PD | BRAID_REREG_MR_CHANGE_ACCESS;
  if (mr == nullptr || flags == 0 || (flags & ~kFlags) != 0) {
    return fail(EINVAL, "rereg_mr: no region, or unknown flags");
  }
  braid_context* c = mr->context;
  braid_pd* new_pd = (flags & BRAID_REREG_MR_CHANGE_PD) ? pd : mr->pd;
  if (new_pd == nullptr || new_pd->context != c) return fail(EINVAL, "rereg_mr: no such PD");
  void* new_addr = (flags & BRAID_REREG_MR_CHANGE_TRANSLATION) ? addr : mr->addr;
  const size_t new_length = (flags & BRAID_REREG_MR_CHANGE_TRANSLATION) ? length : mr->length;
  if (new_addr == nullptr || new_length == 0) return fail(EINVAL, "rereg_mr: no memory");
  int new_access = mr->access;
  if (flags & BRAID_REREG_MR_CHANGE_ACCESS) {
    constexpr int kKnown = BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE |
                           BRAID_ACCESS_REMOTE_READ | BRAID_ACCESS_REMOTE_ATOMIC |
                           BRAID_ACCESS_RELAXED_ORDERING;
    if ((access & ~kKnown) != 0) return fail(EINVAL, "rereg_mr: unknown access flags");
    if ((access & (BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_ATOMIC)) &&
        !(access & BRAID_ACCESS_LOCAL_WRITE)) {
      return fail(EINVAL, "rereg_mr: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE");
    }
    new_access = access;
  }
  Guard g(c);
  const uint32_t core_access =
      static_cast<uint32_t>(new_access) & (braid::kAccessLocalWrite | braid::kAccessRemoteWrite |
                                           braid::kAccessRemoteRead | braid::kAccessRemoteAtomic);
  if (!c->memory->reregister(mr->lkey, new_addr, new_length, core_access, new_pd->id)) {
    return fail(EINVAL, "rereg_mr: the region is gone");
  }
  --mr->pd->users;
  ++new_pd->users;
  mr->pd = new_pd;
  mr->addr = new_addr;
  mr->length = new_length;
  mr->access = new_access;
  return 0;
}

int braid_dereg_mr(struct braid_mr* mr) {
  if (mr == nullptr) return EINVAL;
  braid_context* c = mr->context;
  Guard g(c);
  if (!c->memory->deregister(mr->lkey)) return EINVAL;
  // Work still outstanding on the region fails (LOC_PROT_ERR, its QP to
  // error) rather than touching memory the application may free now.
  // A shared receive queue's receive on it fails the message that takes it.
  for (braid_srq* srq : c->srqs) srq->queue.revoke_local_key(mr->lkey);
  for (braid_qp* qp : c->qps) {
    if (qp->ud != nullptr) qp->ud->revoke_local_key(mr->lkey);
    if (qp->conn != nullptr && qp->conn->revoke_local_key(mr->lkey)) {
      c->slots[qp->engine]->engine->transmit();
    }
    auto& early = qp->early_recvs;
    for (auto it = early.begin(); it != early.end();) {
      bool uses = false;
      for (uint8_t i = 0; i < it->second.num; ++i) uses |= it->second.sge[i].lkey == mr->lkey;
      if (!uses) {
        ++it;
        continue;
      }
      braid::WorkCompletion wc;
      wc.wr_id = it->first;
      wc.status = braid::WcStatus::kLocProtErr;
      wc.opcode = braid::WcOpcode::kRecv;
      wc.qp_num = qp->qp_num;
      qp->recv_cq->ring(qp->engine).push(wc);
      it = early.erase(it);
    }
  }
  --c->open_objects;
  --mr->pd->users;
  delete mr;
  return 0;
}

}  // extern "C"

namespace braid {
void settle_at_exit() {
  stop_all_progress_threads();
  std::vector<braid_context*> open;
  {
    std::lock_guard<std::mutex> l(g_open_lock);
    open = g_open;
  }
  // A NIC acknowledges a message before its receiver sees it complete; here
  // the ACK may still be coalesced or held when a program that saw its last
  // receive exits without closing its device. Its peer would retry into
  // RETRY_EXC_ERR. Other threads of the program may still run: the engines
  // are taken under their locks.
  for (braid_context* c : open) {
    {
      Guard g(c);
      for (auto& s : c->slots) {
        s->engine->endpoint().ack_now();
        s->engine->poll();
      }
    }
    linger(c);
  }
}
}  // namespace braid
