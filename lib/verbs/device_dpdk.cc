// Opening a verbs device on a DPDK port: EAL bootstrap (once per process)
// and the ethdev port named in the configuration.
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "dpdk/eal.h"
#include "dpdk/ethdev_port.h"
#include "verbs/device_io.h"
#include "verbs/verbs_internal.h"

namespace braid {

namespace {

bool looks_like_pci(const std::string& s) {
  // dddd:bb:dd.f or bb:dd.f
  return s.find(':') != std::string::npos && s.find('.') != std::string::npos &&
         s.find(',') == std::string::npos && s.rfind("net_", 0) != 0;
}

}  // namespace

std::vector<std::unique_ptr<PacketIo>> open_dpdk_port(const braid_device_config& config,
                                                      std::string* error,
                                                      std::unique_ptr<PacketIo>* port_out) {
  std::vector<std::unique_ptr<PacketIo>> ios;
  const std::string spec = config.port == nullptr ? "" : config.port;
  if (spec.empty()) {
    *error =
        "open_device: no port given (a vdev spec such as "
        "net_memif0,role=client,socket=/tmp/m.sock, "
        "or a PCI address)";
    return ios;
  }
  dpdk::EalConfig eal;
  std::string port_name = spec;
  const bool vdev = spec.rfind("net_", 0) == 0;
  if (vdev) {
    eal.vdevs.push_back(spec);
    port_name = spec.substr(0, spec.find(','));
  } else if (looks_like_pci(spec)) {
    eal.extra_args.push_back("-a");
    eal.extra_args.push_back(spec);
  }
  if (config.eal_args != nullptr) {
    std::istringstream in(config.eal_args);
    std::string arg;
    while (in >> arg) eal.extra_args.push_back(arg);
  }
  eal.lcore = config.lcore;
  if (!dpdk::Eal::initialized()) {
    const dpdk::Status s = dpdk::Eal::init(eal);
    if (!s.ok()) {
      *error = s.error;
      return ios;
    }
    // The EAL lives until the process ends (it cannot start twice); then its
    // runtime directory goes too.
    std::atexit([] {
      stop_all_progress_threads();
      dpdk::Eal::shutdown();
    });
  } else if (vdev) {
    // A further device in the same process: add its port to the running EAL.
    const dpdk::Status s = dpdk::Eal::probe_vdev(spec);
    if (!s.ok()) {
      *error = s.error;
      return ios;
    }
  }
  dpdk::EthdevPortConfig pc;
  pc.name = port_name;
  pc.mtu = config.mtu == 0 ? 1500 : config.mtu;
  pc.tx_external = config.tx_copy != 1;
  // The passive side of memif and vhost-user waits for its peer to appear.
  const bool passive =
      spec.find("role=server") != std::string::npos || spec.rfind("net_vhost", 0) == 0;
  pc.require_link_up = !passive;
  if (config.link_wait_ms != 0) pc.link_wait_ms = config.link_wait_ms;
  pc.queues = static_cast<uint16_t>(config.engines < 1 ? 1 : config.engines);
  std::unique_ptr<dpdk::EthdevPort> port = dpdk::EthdevPort::open(pc, error);
  if (port == nullptr) return ios;
  if (pc.queues == 1) {
    ios.push_back(std::move(port));
    return ios;
  }
  for (uint16_t q = 0; q < pc.queues; ++q) ios.push_back(port->queue(q));
  *port_out = std::move(port);
  return ios;
}

}  // namespace braid
