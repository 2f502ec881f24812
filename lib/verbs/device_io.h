// Opening a verbs device: parsing its configuration and binding an engine to
// a packet I/O backend (the registered port opener, engine/port_opener.h:
// DPDK's when braid_dpdk_backend is linked in; any PacketIo for tests).
#pragma once

#include <memory>
#include <vector>

#include "braid/verbs.h"
#include "engine/packet_io.h"
#include "wire/frame.h"
#include "wire/pds.h"
#include "wire/ses.h"

namespace braid {

inline constexpr uint32_t wire_l2() {
  return wire::kEthernetSize;
}
// RDMA payload per packet for an Ethernet (IP) MTU, less `trailer` bytes
// (the CRC-32C trailer, or the TSS header and ICV).
inline uint32_t max_payload(uint32_t link_mtu, uint32_t trailer = 0) {
  const uint32_t hdr =
      wire::kIpv4Size + wire::kUdpSize + wire::kRequestSize + wire::kSesStandardSize + trailer;
  return link_mtu > hdr + 64 ? link_mtu - hdr : 64;
}

inline constexpr int kMaxEngines = 16;

// io == nullptr: open the port named in the configuration (through the
// registered port opener).
braid_context* open_device(const braid_device_config* config, std::unique_ptr<PacketIo> io);
// One backend per engine (config->engines of them: the queues of one port,
// each taking back buffers any of the others received), or none: the port
// named in the configuration.
braid_context* open_device(const braid_device_config* config,
                           std::vector<std::unique_ptr<PacketIo>> ios);

}  // namespace braid
