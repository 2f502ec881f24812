// Opening a port by name, for layers above the engine that must not know
// the backend: a driver registers its opener (the DPDK driver's is
// drivers/dpdk/port_opener.cc, linked in through the braid_dpdk_backend
// target), and the verbs layer opens a device's port through whichever is
// registered.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/packet_io.h"

namespace braid {

struct PortRequest {
  std::string spec;      // a vdev ("net_memif0,role=client,...") or a PCI address
  std::string eal_args;  // the backend's own arguments, space-separated
  int lcore = 0;         // the core the backend's runtime is bound to
  uint32_t mtu = 1500;
  bool tx_copy = false;       // copy payloads into the NIC's buffers (no in-place send)
  uint32_t link_wait_ms = 0;  // 0: the backend's default
  uint16_t queues = 1;        // queue pairs, one PacketIo each
  // Run at process exit before the backend is torn down (the verbs layer
  // stops its progress threads there).
  void (*before_shutdown)() = nullptr;
};

struct OpenedPort {
  // One PacketIo per queue: with one queue, the port itself; with several,
  // a handle on each queue, and the port in `port` (which must outlive
  // them). Empty on failure, with `error` saying why.
  std::vector<std::unique_ptr<PacketIo>> ios;
  std::unique_ptr<PacketIo> port;
  std::string error;
};

using PortOpener = OpenedPort (*)(const PortRequest&);

// The last registration wins; nullptr clears it.
void register_port_opener(PortOpener opener);
// nullptr: no backend linked in.
PortOpener registered_port_opener();

}  // namespace braid
