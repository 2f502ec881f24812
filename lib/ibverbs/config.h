// Where the libibverbs-compatible library finds its device: the DPDK port,
// our IPv4 address and the options of include/braid/verbs.h's
// braid_device_config, from the environment or a file, so unmodified
// programs need no change.
//
//   BRAID_IBV_CONFIG   a file of "key = value" lines (default
//                      /etc/braid/ibverbs.conf when it exists); keys below
//                      without the prefix, lower case: port, ip, ...
//   BRAID_IBV_PORT     DPDK port: a vdev spec or a PCI address (required)
//   BRAID_IBV_IP       our IPv4 address (required)
//   BRAID_IBV_PREFIX_LEN, BRAID_IBV_GATEWAY, BRAID_IBV_NEIGHBORS,
//   BRAID_IBV_EAL_ARGS, BRAID_IBV_MTU, BRAID_IBV_ENTROPIES,
//   BRAID_IBV_UDP_PORT, BRAID_IBV_LCORE, BRAID_IBV_PROGRESS_THREAD
//   BRAID_IBV_LINK_WAIT_MS  how long ibv_open_device waits for the link to
//                      come up (default 30000: a memif or vhost-user port
//                      is down until its peer attaches)
//   BRAID_IBV_NAME     the device's name (default braid0)
// The environment wins over the file.
#pragma once

#include <string>

#include "braid/verbs.h"

namespace braid::ibv {

struct DeviceSettings {
  std::string name = "braid0";
  std::string port, ip, gateway, neighbors, eal_args;
  int prefix_len = 0;
  uint32_t mtu = 0;
  uint16_t entropies = 0;
  uint16_t udp_port = 0;
  int lcore = -1;
  bool progress_thread = true;  // a passive side (a WRITE target) makes no verbs calls
  // ibv_open_device waits this long for the link (a memif or vhost-user
  // peer attaching) before it reports the port DOWN.
  uint32_t link_wait_ms = 30000;
  int paths = 0;             // braid_device_config.paths
  int cc = 0;                // braid_device_config.cc
  uint32_t link_mbps = 0;    // braid_device_config.link_mbps
  uint32_t base_rtt_us = 0;  // braid_device_config.base_rtt_us
  uint32_t idle_yield = 0;   // braid_device_config.idle_yield
  int credit = 0;            // braid_device_config.credit
  int cc_per_qp = 0;         // braid_device_config.cc_per_qp (cc_scope = peer or qp)
  int pdc_per_peer = 0;      // braid_device_config.pdc_per_peer (pdc_scope = qp or peer)
  int crc = 0;               // braid_device_config.crc: 0 auto, 1 on, -1 off
  int auth = 0;              // enum braid_auth
  std::string auth_key;      // 64 hex digits or @file (braid_device_config.auth_key)
  int tx_copy = 0;           // braid_device_config.tx_copy: 1 always copy payloads
  int engines = 0;           // braid_device_config.engines
  std::string source;        // where the settings came from, for messages

  bool usable() const { return !port.empty() && !ip.empty(); }
  // A braid_device_config whose strings point into *this.
  braid_device_config to_config() const;
};

// Reads the file and the environment. *error names a bad value (the device
// is then not listed).
DeviceSettings load_settings(std::string* error);

// A port's rate as ibv_port_attr spells it: a lane count (active_width:
// 1 1X, 2 4X, 4 8X, 8 12X, 16 2X) times a lane rate (active_speed: 1 SDR
// 2.5 Gb/s, 2 DDR 5, 4 QDR 10, 16 FDR 14, 32 EDR 25, 64 HDR 50, 128 NDR 100).
// Programs size their protocols by it (UCX picks its rendezvous threshold
// from it), so it says what the port carries: the largest combination not
// above link_mbps (1X SDR below 2.5 Gb/s); mbps is that combination's rate.
struct IbRate {
  uint8_t width = 1;
  uint8_t speed = 1;
  uint32_t mbps = 2500;
};
IbRate ib_rate_for(uint32_t link_mbps);

}  // namespace braid::ibv
