// The EAL and ring ports that dpdk_port_test.cc's environment sets up for
// every test of braid_dpdk_tests.
#pragma once

#include <memory>
#include <string>

#include "dpdk/ethdev_port.h"

namespace braid::dpdk {
// True once the EAL and the ring ports are up; otherwise *why says why not.
bool test_env_up(std::string* why);

// Opens memif vdevs probed already as a server port, not waiting for its
// peer, then as its client, waiting for the handshake; both with `c`'s
// other settings. A port that does not open is null, and *error says why.
struct PortPair {
  std::unique_ptr<EthdevPort> server, client;
};
PortPair open_memif_pair(const std::string& server, const std::string& client, EthdevPortConfig c,
                         std::string* error);
}  // namespace braid::dpdk
