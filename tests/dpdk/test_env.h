// The EAL and ring ports that dpdk_port_test.cc's environment sets up for
// every test of braid_dpdk_tests.
#pragma once

#include <string>

namespace braid::dpdk {
// True once the EAL and the ring ports are up; otherwise *why says why not.
bool test_env_up(std::string* why);
}  // namespace braid::dpdk
