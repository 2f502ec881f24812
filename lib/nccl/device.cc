// The NCCL plugin's device: one Braid port opened by init (configured as
// Braid's libibverbs.so.1 is), its properties, memory registration, and
// the plugin's log.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ibverbs/config.h"
#include "nccl/plugin_internal.h"

namespace braid::nccl {

ncclDebugLogger_t g_logger = nullptr;

__attribute__((format(printf, 4, 5))) void log_line(ncclDebugLogLevel level, const char* file,
                                                    int line, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g_logger != nullptr) {
    g_logger(level, NCCL_NET, file, line, "NET/Braid : %s", msg);
  } else if (level == NCCL_LOG_WARN) {
    std::fprintf(stderr, "NET/Braid : %s\n", msg);
  }
}

std::mutex g_init_mu;
bool g_init_done = false;
ncclResult_t g_init_result = ncclSuccess;
Device g_dev;

// The address listen advertises: BRAID_NCCL_OOB_ADDR, else the first IPv4
// address of an up, non-loopback kernel interface, else 127.0.0.1.
uint32_t pick_oob_ip() {
  in_addr a{};
  if (const char* env = std::getenv("BRAID_NCCL_OOB_ADDR"); env != nullptr && *env != '\0') {
    if (inet_pton(AF_INET, env, &a) == 1) return a.s_addr;
    WARN("BRAID_NCCL_OOB_ADDR=%s is not an IPv4 address; using 127.0.0.1", env);
    return htonl(INADDR_LOOPBACK);
  }
  ifaddrs* list = nullptr;
  uint32_t ip = htonl(INADDR_LOOPBACK);
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
      ip = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      break;
    }
    freeifaddrs(list);
  }
  return ip;
}

ncclResult_t open_device() {
  std::string error;
  const braid::ibv::DeviceSettings s = braid::ibv::load_settings(&error);
  if (!error.empty()) {
    WARN("%s", error.c_str());
    return ncclInvalidArgument;
  }
  if (!s.usable()) {
    WARN("no Braid port configured: set BRAID_IBV_PORT and BRAID_IBV_IP (or %s)",
         "/etc/braid/ibverbs.conf");
    return ncclInvalidArgument;
  }
  braid_device_config cfg = s.to_config();
  cfg.progress_thread = 1;   // NCCL's threads call in; the engine runs between calls
  cfg.rtr_arp_wait_us = -1;  // connect and accept never wait for ARP
  g_dev.ctx = braid_open_device(&cfg);
  if (g_dev.ctx == nullptr) {
    WARN("cannot open Braid port %s: %s", s.port.c_str(), braid_last_error());
    return ncclSystemError;
  }
  g_dev.pd = braid_alloc_pd(g_dev.ctx);
  braid_port_attr port{};
  braid_device_attr dev{};
  if (g_dev.pd == nullptr || braid_query_port(g_dev.ctx, 1, &port) != 0 ||
      braid_query_device(g_dev.ctx, &dev) != 0 ||
      braid_query_gid(g_dev.ctx, 1, 0, &g_dev.gid) != 0) {
    WARN("cannot set up Braid port %s: %s", s.port.c_str(), braid_last_error());
    if (g_dev.pd != nullptr) braid_dealloc_pd(g_dev.pd);
    braid_close_device(g_dev.ctx);
    g_dev.ctx = nullptr;
    return ncclSystemError;
  }
  g_dev.name = s.name;
  g_dev.mtu = port.active_mtu;
  // The port's rate as the device resolved it: the configured one, else
  // what the PMD reports, else (none, or a host-local PMD) 100 Gb/s.
  // NCCL's tuning takes it for the link's.
  g_dev.speed_mbps = static_cast<int>(port.link_mbps);
  g_dev.max_qp = dev.max_qp;
  g_dev.oob_ip = pick_oob_ip();
  char oob[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &g_dev.oob_ip, oob, sizeof oob);
  INFO("device %s on port %s (%s), %s; connections set up over TCP on %s", s.name.c_str(),
       s.port.c_str(), s.ip.c_str(), port.state == BRAID_PORT_ACTIVE ? "link up" : "link DOWN",
       oob);
  return ncclSuccess;
}

ncclResult_t init_common(ncclDebugLogger_t logger) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (logger != nullptr) g_logger = logger;
  if (!g_init_done) {
    g_init_result = open_device();
    g_init_done = true;
  }
  return g_init_result;
}

ncclResult_t check_dev(int dev) {
  if (!g_init_done || g_init_result != ncclSuccess) {
    WARN("called before a successful init");
    return ncclInvalidArgument;
  }
  if (dev != 0) {
    WARN("no device %d (one Braid port: device 0)", dev);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t braid_devices(int* ndev) {
  *ndev = g_init_done && g_init_result == ncclSuccess ? 1 : 0;
  return ncclSuccess;
}

template <typename Props>
void fill_common(Props* p) {
  p->name = const_cast<char*>(g_dev.name.c_str());
  p->pciPath = nullptr;  // a DPDK port: no PCI function NCCL could place
  p->guid = (uint64_t{BRAID_VENDOR_ID} << 32) | ntohl(g_dev.oob_ip);
  p->ptrSupport = NCCL_PTR_HOST;
  if constexpr (requires { p->regIsGlobal; }) p->regIsGlobal = 1;  // on the device's PD
  p->speed = g_dev.speed_mbps;
  p->port = 1;
  p->latency = 0;
  p->maxComms = g_dev.max_qp;
  p->maxRecvs = kMaxRecvs;
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
}

ncclResult_t braid_get_properties_v8(int dev, ncclNetProperties_v8_t* props) {
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  *props = ncclNetProperties_v8_t{};
  fill_common(props);
  return ncclSuccess;
}

ncclResult_t braid_get_properties_v7(int dev, ncclNetProperties_v7_t* props) {
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  *props = ncclNetProperties_v7_t{};
  fill_common(props);
  return ncclSuccess;
}

ncclResult_t braid_get_properties_v10(int dev, ncclNetProperties_v10_t* props) {
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  *props = ncclNetProperties_v10_t{};
  fill_common(props);
  props->forceFlush = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = 0x7fffffff;  // one message: Braid's max_msg_sz
  props->maxCollBytes = 0x7fffffff;
  return ncclSuccess;
}

ncclResult_t braid_reg_mr(void* /*comm*/, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  if (type != NCCL_PTR_HOST) {
    WARN("regMr: only host memory (NCCL_PTR_HOST) is supported, not type %d", type);
    return ncclInvalidArgument;
  }
  braid_mr* mr =
      braid_reg_mr(g_dev.pd, data, size,
                   BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ);
  if (mr == nullptr) {
    WARN("regMr %p + %zu: %s", data, size, braid_last_error());
    return ncclSystemError;
  }
  *mhandle = mr;
  return ncclSuccess;
}

ncclResult_t braid_reg_mr_v7(void* comm, void* data, int size, int type, void** mhandle) {
  if (size < 0) {
    *mhandle = nullptr;
    WARN("regMr: negative size %d", size);
    return ncclInvalidArgument;
  }
  return braid_reg_mr(comm, data, static_cast<size_t>(size), type, mhandle);
}

ncclResult_t braid_reg_mr_dmabuf(void* /*comm*/, void* /*data*/, size_t /*size*/, int /*type*/,
                                 uint64_t /*offset*/, int /*fd*/, void** mhandle) {
  *mhandle = nullptr;
  WARN("regMrDmaBuf: DMA-BUF registration is not supported (host memory only)");
  return ncclInternalError;
}

ncclResult_t braid_dereg_mr(void* /*comm*/, void* mhandle) {
  if (mhandle != nullptr) braid_dereg_mr(static_cast<braid_mr*>(mhandle));
  return ncclSuccess;
}

ncclResult_t braid_init_v8(ncclDebugLogger_t logger) {
  return init_common(logger);
}
ncclResult_t braid_init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t /*profiler*/) {
  return init_common(logger);
}

ncclResult_t braid_make_vdevice(int* d, ncclNetVDeviceProps_v10_t* props) {
  // A virtual NIC of one device is that device; Braid has one per process.
  if (props == nullptr || props->ndevs != 1 || check_dev(props->devs[0]) != ncclSuccess) {
    WARN("makeVDevice: only a virtual device of the one device 0");
    return ncclInvalidArgument;
  }
  *d = props->devs[0];
  return ncclSuccess;
}

}  // namespace braid::nccl
