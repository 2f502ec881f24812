// The DPDK backend's port opener (engine/port_opener.h): EAL bootstrap
// (once per process) and the ethdev port a request names. Registered when
// this file is linked in (the braid_dpdk_backend target links it whole).
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "dpdk/eal.h"
#include "dpdk/ethdev_port.h"
#include "engine/port_opener.h"

namespace braid::dpdk {

namespace {

void (*g_before_shutdown)() = nullptr;

bool looks_like_pci(const std::string& s) {
  // dddd:bb:dd.f or bb:dd.f
  return s.find(':') != std::string::npos && s.find('.') != std::string::npos &&
         s.find(',') == std::string::npos && s.rfind("net_", 0) != 0;
}

OpenedPort open_port(const PortRequest& request) {
  OpenedPort out;
  const std::string& spec = request.spec;
  if (spec.empty()) {
    out.error =
        "open_device: no port given (a vdev spec such as "
        "net_memif0,role=client,socket=/tmp/m.sock, "
        "or a PCI address)";
    return out;
  }
  EalConfig eal;
  std::string port_name = spec;
  const bool vdev = spec.rfind("net_", 0) == 0;
  if (vdev) {
    eal.vdevs.push_back(spec);
    port_name = spec.substr(0, spec.find(','));
  } else if (looks_like_pci(spec)) {
    eal.extra_args.push_back("-a");
    eal.extra_args.push_back(spec);
  }
  std::istringstream in(request.eal_args);
  std::string arg;
  while (in >> arg) eal.extra_args.push_back(arg);
  eal.lcore = request.lcore;
  if (!Eal::initialized()) {
    const Status s = Eal::init(eal);
    if (!s.ok()) {
      out.error = s.error;
      return out;
    }
    // The EAL lives until the process ends (it cannot start twice); then its
    // runtime directory goes too, after the caller's own shutdown.
    g_before_shutdown = request.before_shutdown;
    std::atexit([] {
      if (g_before_shutdown != nullptr) g_before_shutdown();
      Eal::shutdown();
    });
  } else if (vdev) {
    // A further device in the same process: add its port to the running EAL.
    const Status s = Eal::probe_vdev(spec);
    if (!s.ok()) {
      out.error = s.error;
      return out;
    }
  }
  EthdevPortConfig pc;
  pc.name = port_name;
  pc.mtu = request.mtu == 0 ? 1500 : request.mtu;
  pc.tx_external = !request.tx_copy;
  // The passive side of memif and vhost-user waits for its peer to appear.
  const bool passive =
      spec.find("role=server") != std::string::npos || spec.rfind("net_vhost", 0) == 0;
  pc.require_link_up = !passive;
  if (request.link_wait_ms != 0) pc.link_wait_ms = request.link_wait_ms;
  pc.queues = request.queues < 1 ? 1 : request.queues;
  std::unique_ptr<EthdevPort> port = EthdevPort::open(pc, &out.error);
  if (port == nullptr) return out;
  if (pc.queues == 1) {
    out.ios.push_back(std::move(port));
    return out;
  }
  for (uint16_t q = 0; q < pc.queues; ++q) out.ios.push_back(port->queue(q));
  out.port = std::move(port);
  return out;
}

// Registered at load: a program or library that links braid_dpdk_backend
// opens its verbs devices on DPDK ports.
[[maybe_unused]] const bool g_registered = (register_port_opener(&open_port), true);
}  // namespace

}  // namespace braid::dpdk
