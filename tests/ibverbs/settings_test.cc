// lib/ibverbs's settings: braid_device_config from BRAID_IBV_* variables (or
// the file they name), as unmodified verbs programs get it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ibverbs/config.h"

namespace {

// Path selection and congestion control come from the environment (or the
// file) by name; an unknown name is an error that names the key.
TEST(IbvSettings, PathsAndCongestionControlAreReadByName) {
  setenv("BRAID_IBV_PATHS", "round-robin", 1);
  setenv("BRAID_IBV_CC", "dcqcn", 1);
  setenv("BRAID_IBV_LINK_MBPS", "25000", 1);
  setenv("BRAID_IBV_BASE_RTT_US", "40", 1);
  std::string error;
  braid::ibv::DeviceSettings s = braid::ibv::load_settings(&error);
  EXPECT_TRUE(error.empty()) << error;
  const braid_device_config c = s.to_config();
  EXPECT_EQ(c.paths, BRAID_PATHS_ROUND_ROBIN);
  EXPECT_EQ(c.cc, BRAID_CC_DCQCN);
  EXPECT_EQ(c.link_mbps, 25000u);
  EXPECT_EQ(c.base_rtt_us, 40u);
  setenv("BRAID_IBV_CC", "cubic", 1);
  error.clear();
  braid::ibv::load_settings(&error);
  EXPECT_NE(error.find("for cc"), std::string::npos) << error;
  setenv("BRAID_IBV_CC", "nscc", 1);
  setenv("BRAID_IBV_PATHS", "bitmap", 1);
  error.clear();
  EXPECT_EQ(braid::ibv::load_settings(&error).to_config().paths, BRAID_PATHS_BITMAP) << error;
  setenv("BRAID_IBV_PATHS", "ecmp", 1);
  error.clear();
  braid::ibv::load_settings(&error);
  EXPECT_NE(error.find("for paths"), std::string::npos) << error;
  for (const char* k :
       {"BRAID_IBV_PATHS", "BRAID_IBV_CC", "BRAID_IBV_LINK_MBPS", "BRAID_IBV_BASE_RTT_US"}) {
    unsetenv(k);
  }
}

// The idle yield, for more busy programs than cores: a count of fruitless
// calls, 0 (never) when unset; anything not a count is refused by name.
TEST(IbvSettings, IdleYieldIsACount) {
  std::string error;
  EXPECT_EQ(braid::ibv::load_settings(&error).to_config().idle_yield, 0u);
  setenv("BRAID_IBV_IDLE_YIELD", "16", 1);
  error.clear();
  EXPECT_EQ(braid::ibv::load_settings(&error).to_config().idle_yield, 16u);
  EXPECT_TRUE(error.empty()) << error;
  setenv("BRAID_IBV_IDLE_YIELD", "often", 1);
  error.clear();
  braid::ibv::load_settings(&error);
  EXPECT_NE(error.find("for idle_yield"), std::string::npos) << error;
  unsetenv("BRAID_IBV_IDLE_YIELD");
}

// Receiver-driven credit: off when unset, 1 turns it on, anything else is
// refused by name.
TEST(IbvSettings, CreditIsOnOrOff) {
  std::string error;
  EXPECT_EQ(braid::ibv::load_settings(&error).to_config().credit, 0);
  setenv("BRAID_IBV_CREDIT", "1", 1);
  error.clear();
  EXPECT_EQ(braid::ibv::load_settings(&error).to_config().credit, 1);
  EXPECT_TRUE(error.empty()) << error;
  setenv("BRAID_IBV_CREDIT", "2", 1);
  error.clear();
  braid::ibv::load_settings(&error);
  EXPECT_NE(error.find("for credit"), std::string::npos) << error;
  unsetenv("BRAID_IBV_CREDIT");
}

// Payloads in place unless BRAID_IBV_TX_COPY=1; other values are refused.
TEST(IbvSettings, TxCopyIsOnOrOff) {
  std::string error;
  EXPECT_EQ(braid::ibv::load_settings(&error).to_config().tx_copy, 0);
  setenv("BRAID_IBV_TX_COPY", "1", 1);
  error.clear();
  EXPECT_EQ(braid::ibv::load_settings(&error).to_config().tx_copy, 1);
  EXPECT_TRUE(error.empty()) << error;
  setenv("BRAID_IBV_TX_COPY", "yes", 1);
  error.clear();
  braid::ibv::load_settings(&error);
  EXPECT_NE(error.find("for tx_copy"), std::string::npos) << error;
  unsetenv("BRAID_IBV_TX_COPY");
}

// The rate ibv_query_port reports is the largest IB lane count times lane
// rate that the port's link_mbps carries; programs size protocols by it.
TEST(IbvSettings, APortsRateIsTheLargestIbRateItsLinkCarries) {
  struct Case {
    uint32_t link_mbps;
    uint8_t width, speed;
    uint32_t mbps;
  };
  for (const Case& c :
       {Case{10'000, 1, 4, 10'000}, Case{25'000, 1, 32, 25'000}, Case{40'000, 2, 4, 40'000},
        Case{100'000, 1, 128, 100'000}, Case{200'000, 16, 128, 200'000},
        Case{400'000, 2, 128, 400'000}, Case{99'999, 4, 4, 80'000}, Case{3'000, 1, 1, 2'500},
        Case{1, 1, 1, 2'500}, Case{5'000'000, 8, 128, 1'200'000}}) {
    const braid::ibv::IbRate r = braid::ibv::ib_rate_for(c.link_mbps);
    EXPECT_EQ(r.width, c.width) << c.link_mbps;
    EXPECT_EQ(r.speed, c.speed) << c.link_mbps;
    EXPECT_EQ(r.mbps, c.mbps) << c.link_mbps;
  }
}

}  // namespace
