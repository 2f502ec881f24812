// libibverbs.so.1 for unmodified programs: the device list, contexts,
// queries and the verbs objects of rdma-core 44's ABI (the system's
// <infiniband/verbs.h>), mapped onto Braid's verbs API (include/braid/
// verbs.h). One device, configured by ibverbs/config.h. Verbs Braid does not
// have (UD, SRQ, memory windows, atomics, flows...) fail cleanly: NULL or an
// errno value, with errno set.
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>

#include "braid/verbs.h"
#include "ibverbs/config.h"
#include "ibverbs/ibverbs_internal.h"

// The header turns these into inline wrappers; the library defines the
// functions behind them.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

namespace braid::ibv {
namespace {

struct Registry {
  std::mutex lock;
  bool loaded = false;
  DeviceSettings settings;
  std::string error;
  Device device;
};

Registry& registry() {
  static Registry r;
  return r;
}

// The listed device, or null (no configuration: no device, as on a host
// without RDMA hardware).
Device* the_device() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.lock);
  if (!r.loaded) {
    r.loaded = true;
    r.settings = load_settings(&r.error);
    if (!r.error.empty()) {
      std::fprintf(stderr, "braid libibverbs: %s; no device listed\n", r.error.c_str());
    }
    if (r.settings.usable()) {
      Device& d = r.device;
      std::memset(&d.dev, 0, sizeof d.dev);
      d.dev.node_type = IBV_NODE_CA;
      d.dev.transport_type = IBV_TRANSPORT_IB;
      std::snprintf(d.dev.name, sizeof d.dev.name, "%s", r.settings.name.c_str());
      std::snprintf(d.dev.dev_name, sizeof d.dev.dev_name, "uverbs-%s", r.settings.name.c_str());
      std::snprintf(d.dev.dev_path, sizeof d.dev.dev_path, "/dev/null");
      std::snprintf(d.dev.ibdev_path, sizeof d.dev.ibdev_path, "/dev/null");
      d.settings = &r.settings;
    }
  }
  return r.settings.usable() ? &r.device : nullptr;
}

}  // namespace

void trace(const char* fmt, ...) {
  static const bool on = [] {
    const char* v = std::getenv("BRAID_IBV_TRACE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  if (!on) return;
  va_list ap;
  va_start(ap, fmt);
  std::fputs("braid libibverbs: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

Device* device_of(ibv_device* d) {
  Device* ours = the_device();
  return ours != nullptr && d == &ours->dev ? ours : nullptr;
}

uint64_t node_guid(const Device& d) {
  // EUI-64 in the style of a RoCE NIC: from the IPv4 address, so both
  // sides of a test see stable, distinct GUIDs.
  uint32_t a = 0, b = 0, c = 0, e = 0;
  std::sscanf(d.settings->ip.c_str(), "%u.%u.%u.%u", &a, &b, &c, &e);
  const uint64_t guid = (uint64_t{0x02} << 56) | (uint64_t{0xb7} << 48) | (uint64_t{0xa1} << 40) |
                        (uint64_t{0xd0} << 32) | (a << 24) | (b << 16) | (c << 8) | e;
  return htobe64(guid);
}

}  // namespace braid::ibv

using braid::ibv::Context;
using braid::ibv::Device;

// ---- Devices ------------------------------------------------------------

BRAID_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  Device* d = braid::ibv::the_device();
  auto** list = static_cast<ibv_device**>(calloc(2, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (d != nullptr) list[0] = &d->dev;
  if (num_devices) *num_devices = d != nullptr ? 1 : 0;
  return list;
}

BRAID_EXPORT void ibv_free_device_list(ibv_device** list) {
  free(list);
}

BRAID_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device ? device->name : nullptr;
}

BRAID_EXPORT int ibv_get_device_index(ibv_device* device) {
  return braid::ibv::device_of(device) ? 0 : -1;
}

BRAID_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  Device* d = braid::ibv::device_of(device);
  return d ? braid::ibv::node_guid(*d) : 0;
}

namespace braid::ibv {
namespace {

// Opens the device's Braid device for its first context; waits for the link.
braid_context* open_shared(Device* d) {
  const braid_device_config cfg = d->settings->to_config();
  braid_context* bctx = braid_open_device(&cfg);
  if (bctx == nullptr) {
    std::fprintf(stderr, "braid libibverbs: cannot open %s on %s (settings from %s): %s\n",
                 d->dev.name, d->settings->port.c_str(), d->settings->source.c_str(),
                 braid_last_error());
    return nullptr;
  }
  braid_set_async_handler(bctx, route_async_event, d);
  // A memif or vhost-user port is DOWN until its peer attaches, and
  // programs written for RDMA NICs give up on a port that is not ACTIVE
  // (perftest: "Port number 1 state is Down"): wait for the peer here.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(d->settings->link_wait_ms);
  for (;;) {
    braid_port_attr pa{};
    if (braid_query_port(bctx, 1, &pa) == 0 && pa.state == BRAID_PORT_ACTIVE) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr,
                   "braid libibverbs: %s's link on %s is still down after %u ms (its peer has "
                   "not attached); the port reports DOWN\n",
                   d->dev.name, d->settings->port.c_str(), d->settings->link_wait_ms);
      break;
    }
    braid_progress(bctx);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return bctx;
}

}  // namespace
}  // namespace braid::ibv

BRAID_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  Device* d = braid::ibv::device_of(device);
  if (d == nullptr) {
    errno = ENODEV;
    return nullptr;
  }
  auto* c = new (std::nothrow) Context();
  if (c == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  int open = 0;
  {
    std::lock_guard<std::mutex> g(d->open_lock);
    if (d->shared == nullptr) d->shared = braid::ibv::open_shared(d);
    if (d->shared == nullptr) {
      delete c;
      errno = ENODEV;
      return nullptr;
    }
    open = ++d->contexts;
    c->braid = d->shared;
    // Several contexts may be used by several threads (libibverbs allows
    // it): without a progress thread the device took no lock until now.
    if (open == 2) braid_lock_calls(d->shared);
  }
  c->device = d;
  braid::ibv::init_context(c);
  {
    std::lock_guard<std::mutex> g(d->listeners_lock);
    d->listeners.push_back(c);
  }
  braid::ibv::trace("open_device %s -> %p (%d open)", d->dev.name,
                    static_cast<void*>(&c->vctx.context), open);
  return &c->vctx.context;
}

BRAID_EXPORT int ibv_close_device(ibv_context* context) {
  Context* c = braid::ibv::context_of(context);
  if (c == nullptr) return EINVAL;
  braid::ibv::release_objects(c);
  {
    std::lock_guard<std::mutex> g(c->objects_lock);
    const size_t left = c->qps.size() + c->mrs.size() + c->cqs.size() + c->channels.size() +
                        c->pds.size() + c->srqs.size() + c->ahs.size();
    if (left != 0) {  // some would not go (a destroy failed): the context stays
      std::fprintf(stderr, "braid libibverbs: cannot close a context of %s: %zu objects remain\n",
                   c->device->dev.name, left);
      errno = EBUSY;
      return EBUSY;
    }
  }
  Device* d = c->device;
  {
    std::lock_guard<std::mutex> g(d->open_lock);
    if (d->contexts == 1) {
      // The last context: the port stops.
      const int rc = braid_close_device(d->shared);
      if (rc != 0) {  // objects still open: the context stays
        std::fprintf(stderr, "braid libibverbs: cannot close %s: %s\n", d->dev.name,
                     braid_last_error());
        errno = rc;
        return rc;
      }
      d->shared = nullptr;
    }
    --d->contexts;
  }
  {
    std::lock_guard<std::mutex> g(d->listeners_lock);
    std::erase(d->listeners, c);
  }
  braid::ibv::trace("close_device %p", static_cast<void*>(context));
  if (c->vctx.context.async_fd >= 0) close(c->vctx.context.async_fd);
  if (c->vctx.context.cmd_fd >= 0) close(c->vctx.context.cmd_fd);
  pthread_mutex_destroy(&c->vctx.context.mutex);
  delete c;
  return 0;
}

// ---- Strings and rates ----------------------------------------------------

BRAID_EXPORT const char* ibv_node_type_str(ibv_node_type t) {
  switch (t) {
    case IBV_NODE_CA:
      return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH:
      return "InfiniBand switch";
    case IBV_NODE_ROUTER:
      return "InfiniBand router";
    case IBV_NODE_RNIC:
      return "iWARP NIC";
    case IBV_NODE_USNIC:
      return "usNIC";
    case IBV_NODE_USNIC_UDP:
      return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED:
      return "unspecified";
    default:
      return "unknown";
  }
}

BRAID_EXPORT const char* ibv_port_state_str(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP:
      return "PORT_NOP";
    case IBV_PORT_DOWN:
      return "PORT_DOWN";
    case IBV_PORT_INIT:
      return "PORT_INIT";
    case IBV_PORT_ARMED:
      return "PORT_ARMED";
    case IBV_PORT_ACTIVE:
      return "PORT_ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "PORT_ACTIVE_DEFER";
    default:
      return "invalid state";
  }
}

BRAID_EXPORT const char* ibv_event_type_str(ibv_event_type e) {
  static const char* const kNames[] = {"CQ error",
                                       "local work queue catastrophic error",
                                       "invalid request local work queue error",
                                       "local access violation work queue error",
                                       "communication established",
                                       "send queue drained",
                                       "path migrated",
                                       "path migration request error",
                                       "local catastrophic error",
                                       "port active",
                                       "port error",
                                       "LID change",
                                       "P_Key change",
                                       "SM change",
                                       "SRQ catastrophic error",
                                       "SRQ limit reached",
                                       "last WQE reached",
                                       "client reregistration",
                                       "GID table change",
                                       "WQ fatal"};
  const auto i = static_cast<size_t>(e);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "unknown";
}

BRAID_EXPORT const char* ibv_wc_status_str(ibv_wc_status s) {
  static const char* const kNames[] = {"success",
                                       "local length error",
                                       "local QP operation error",
                                       "local EE context operation error",
                                       "local protection error",
                                       "Work Request Flushed Error",
                                       "memory management operation error",
                                       "bad response error",
                                       "local access error",
                                       "remote invalid request error",
                                       "remote access error",
                                       "remote operation error",
                                       "transport retry counter exceeded",
                                       "RNR retry counter exceeded",
                                       "local RDD violation error",
                                       "remote invalid RD request",
                                       "aborted error",
                                       "invalid EE context number",
                                       "invalid EE context state",
                                       "fatal error",
                                       "response timeout error",
                                       "general error",
                                       "TM error",
                                       "TM rendezvous error"};
  const auto i = static_cast<size_t>(s);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "unknown";
}

namespace {

// IB static rates: enum value, multiple of 2.5 Gb/s, Mb/s.
struct Rate {
  ibv_rate rate;
  int mult;
  int mbps;
};
constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, 5, 14062},
    {IBV_RATE_56_GBPS, 22, 56250},      {IBV_RATE_112_GBPS, 45, 112500},
    {IBV_RATE_168_GBPS, 67, 168750},    {IBV_RATE_25_GBPS, 10, 25781},
    {IBV_RATE_100_GBPS, 40, 103125},    {IBV_RATE_200_GBPS, 80, 206250},
    {IBV_RATE_300_GBPS, 120, 309375},   {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

}  // namespace

BRAID_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate) return r.mult;
  }
  return -1;
}

BRAID_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  for (const Rate& r : kRates) {
    if (r.mult == mult) return r.rate;
  }
  return IBV_RATE_MAX;
}

BRAID_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

BRAID_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const Rate& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

// ---- Fork support: Braid's memory is plain process memory ----------------

BRAID_EXPORT int ibv_fork_init(void) {
  return 0;
}

BRAID_EXPORT ibv_fork_status ibv_is_fork_initialized(void) {
  return IBV_FORK_UNNEEDED;
}

BRAID_EXPORT int ibv_dontfork_range(void*, size_t) {
  return 0;
}

BRAID_EXPORT int ibv_dofork_range(void*, size_t) {
  return 0;
}
