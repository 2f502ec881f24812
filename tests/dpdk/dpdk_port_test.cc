// Tests for the DPDK ethdev backend (drivers/dpdk). The EAL runs on plain
// memory (--no-huge -m 512, --no-pci), so no hugepages, NIC or network
// interface is needed. Two ports made in this process from a pair of rings
// (rte_eth_from_rings) are joined crosswise, A's TX ring being B's RX ring
// and back: a real PMD with real mbufs, passing pointers. A net_ring0 vdev
// is a port looped back to itself. Frames are compared byte for byte; every
// buffer handed out must come back to its pool.
//
// The EAL arguments are also built for imagined machines (with and without
// hugepages), which needs no DPDK at all.

#include <gtest/gtest.h>
#include <rte_dev.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <csignal>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dpdk/eal.h"
#include "dpdk/ethdev_port.h"
#include "test_env.h"

namespace braid::dpdk {
namespace {

// rte_eth_from_rings("braid_a") names its port "net_ring_braid_a".
constexpr char kPortA[] = "net_ring_braid_a";
constexpr char kPortB[] = "net_ring_braid_b";
constexpr char kLoopVdev[] = "net_ring0";
// Each ring PMD queue is one rte_ring; it holds one slot less than its size.
constexpr unsigned kRingSize = 1024;

bool g_eal_up = false;
std::string g_eal_error;

// Runtime directories planted before the EAL starts: one of a Braid
// process that died (its pid is free), one of a live process (ours' parent),
// one not named by a pid. Init removes only the first.
struct PlantedRuntimeDirs {
  std::filesystem::path dead, alive, other;
  pid_t child = -1;
};
PlantedRuntimeDirs g_planted;

std::filesystem::path dpdk_runtime_base() {
  if (::getuid() == 0) return "/var/run/dpdk";
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  return std::filesystem::path(xdg ? xdg : "/tmp") / "dpdk";
}

// Each test process plants its own: ctest runs several at once, and one's
// clean-up must not take another's dirs.
void plant_runtime_dirs() {
  std::ifstream max_file("/proc/sys/kernel/pid_max");
  long pid_max = 32768;
  max_file >> pid_max;
  long dead = pid_max - 1 - ::getpid() % 4096;
  while (dead > 1 && std::filesystem::exists("/proc/" + std::to_string(dead))) --dead;
  // A process that lives as long as the test: a child that waits.
  const pid_t parent = ::getpid();
  g_planted.child = ::fork();
  if (g_planted.child == 0) {
    // Dies with the test even if the test crashes: a child left behind
    // holds ctest's output pipe open, and ctest waits out its timeout.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(0);
    ::pause();
    ::_exit(0);
  }
  const std::filesystem::path base = dpdk_runtime_base();
  g_planted.dead = base / ("braid-" + std::to_string(dead));
  g_planted.alive = base / ("braid-" + std::to_string(g_planted.child));
  g_planted.other = base / ("braid-notapid" + std::to_string(::getpid()));
  for (const auto& d : {g_planted.dead, g_planted.alive, g_planted.other}) {
    std::filesystem::create_directories(d);
    std::ofstream(d / "config") << "x";
  }
}

class DpdkEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    plant_runtime_dirs();
    EalConfig config;
    config.memory = EalMemoryMode::kNoHuge;
    config.memory_mb = 512;
    config.no_pci = true;
    config.vdevs = {kLoopVdev};
    if (Status st = Eal::init(config); !st.ok()) {
      g_eal_error = st.error;
      return;
    }
    rte_ring* ab =
        rte_ring_create("braid_ab", kRingSize, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    rte_ring* ba =
        rte_ring_create("braid_ba", kRingSize, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!ab || !ba || rte_eth_from_rings("braid_a", &ba, 1, &ab, 1, SOCKET_ID_ANY) < 0 ||
        rte_eth_from_rings("braid_b", &ab, 1, &ba, 1, SOCKET_ID_ANY) < 0) {
      g_eal_error = "cannot make the ring ports";
      return;
    }
    // Two ports of two queue pairs each, joined crosswise queue by queue
    // (engine_group_test.cc): A's TX queue q is B's RX queue q.
    rte_ring* mq_ab[2];
    rte_ring* mq_ba[2];
    for (int q = 0; q < 2; ++q) {
      const std::string n = std::to_string(q);
      mq_ab[q] = rte_ring_create(("braid_mq_ab" + n).c_str(), kRingSize, SOCKET_ID_ANY,
                                 RING_F_SP_ENQ | RING_F_SC_DEQ);
      mq_ba[q] = rte_ring_create(("braid_mq_ba" + n).c_str(), kRingSize, SOCKET_ID_ANY,
                                 RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (!mq_ab[q] || !mq_ba[q]) {
        g_eal_error = "cannot make the rings of the two-queue ports";
        return;
      }
    }
    if (rte_eth_from_rings("braid_mqa", mq_ba, 2, mq_ab, 2, SOCKET_ID_ANY) < 0 ||
        rte_eth_from_rings("braid_mqb", mq_ab, 2, mq_ba, 2, SOCKET_ID_ANY) < 0) {
      g_eal_error = "cannot make the two-queue ring ports";
      return;
    }
    g_eal_up = true;
  }
  void TearDown() override {
    Eal::shutdown();
    std::error_code ec;
    for (const auto& d : {g_planted.dead, g_planted.alive, g_planted.other}) {
      if (!d.empty()) std::filesystem::remove_all(d, ec);
    }
    if (g_planted.child > 0) {
      ::kill(g_planted.child, SIGKILL);
      ::waitpid(g_planted.child, nullptr, 0);
    }
  }
};

class EthdevPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_eal_up) GTEST_FAIL() << "EAL not up: " << g_eal_error;
  }

  static std::unique_ptr<EthdevPort> open(const std::string& name, uint32_t mtu = 1500,
                                          uint32_t mbufs = 0) {
    EthdevPortConfig c;
    c.name = name;
    c.mtu = mtu;
    c.mbufs = mbufs;
    std::string error;
    auto port = EthdevPort::open(c, &error);
    EXPECT_TRUE(port) << error;
    return port;
  }

  // Receives until `want` frames arrived or a bounded number of empty polls:
  // the ring PMD delivers at once, so empty polls mean nothing is coming.
  static std::vector<std::vector<uint8_t>> receive(EthdevPort& port, size_t want) {
    std::vector<std::vector<uint8_t>> got;
    RxFrame rx[64];
    for (int empty = 0; got.size() < want && empty < 100;) {
      const uint16_t n = port.rx_burst(rx, 64);
      if (n == 0) {
        ++empty;
        continue;
      }
      for (uint16_t i = 0; i < n; ++i) got.emplace_back(rx[i].data, rx[i].data + rx[i].len);
      port.rx_release(rx, n);
    }
    return got;
  }

  // A frame of `len` bytes that differs from every other one in the test.
  static std::vector<uint8_t> pattern(uint32_t len, uint32_t seed) {
    std::vector<uint8_t> f(len);
    for (uint32_t i = 0; i < len; ++i) f[i] = static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8));
    return f;
  }

  // Sends the frames in one burst; returns how many were queued.
  static uint16_t send(EthdevPort& port, const std::vector<std::vector<uint8_t>>& frames) {
    std::vector<TxFrame> tx(frames.size());
    const auto n = static_cast<uint16_t>(frames.size());
    EXPECT_EQ(port.tx_alloc(tx.data(), n), n);
    for (uint16_t i = 0; i < n; ++i) {
      EXPECT_GE(tx[i].cap, frames[i].size());
      std::memcpy(tx[i].data, frames[i].data(), frames[i].size());
      tx[i].len = static_cast<uint32_t>(frames[i].size());
    }
    const uint16_t queued = port.tx_burst(tx.data(), n);
    // What the ring did not take is still ours.
    if (queued < n) port.tx_free(tx.data() + queued, static_cast<uint16_t>(n - queued));
    return queued;
  }
};

TEST_F(EthdevPortTest, BurstCrossesTheRingPairByteExact) {
  auto a = open(kPortA);
  auto b = open(kPortB);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->link_up());
  EXPECT_EQ(a->max_frame(), 1514u);
  const uint32_t a_start = a->pool_available();

  std::vector<std::vector<uint8_t>> frames;
  for (uint32_t i = 0; i < 32; ++i) frames.push_back(pattern(60 + i * 45, i));
  frames.push_back(pattern(a->max_frame(), 99));
  ASSERT_EQ(send(*a, frames), frames.size());

  const auto got = receive(*b, frames.size());
  ASSERT_EQ(got.size(), frames.size());
  for (size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(got[i], frames[i]) << "frame " << i;
  EXPECT_TRUE(receive(*a, 1).empty());  // nothing came back the other way

  EXPECT_EQ(a->stats().tx_frames, frames.size());
  EXPECT_EQ(a->stats().tx_dropped, 0u);
  EXPECT_EQ(b->stats().rx_frames, frames.size());
  EXPECT_EQ(b->stats().rx_missed, 0u);
  // B released A's mbufs: they went home to A's pool.
  EXPECT_EQ(a->pool_available(), a_start);

  // And the other way.
  ASSERT_EQ(send(*b, {pattern(100, 7)}), 1u);
  const auto back = receive(*a, 1);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0], pattern(100, 7));
}

// A thread that drives a port besides the one that opened it (a progress
// thread) becomes an lcore while attached, so that DPDK gives it mempool
// caches; the frames it moves are the same.
TEST_F(EthdevPortTest, AttachedThreadIsAnLcoreAndMovesFrames) {
  auto a = open(kPortA);
  auto b = open(kPortB);
  ASSERT_TRUE(a && b);
  const uint32_t a_start = a->pool_available();
  unsigned during = LCORE_ID_ANY, before = 0, after = 0;
  std::vector<std::vector<uint8_t>> got;
  std::thread t([&] {
    before = rte_lcore_id();
    a->attach_thread();
    during = rte_lcore_id();
    EXPECT_EQ(send(*a, {pattern(500, 1), pattern(1514, 2)}), 2u);
    got = receive(*b, 2);
    a->detach_thread();
    after = rte_lcore_id();
  });
  t.join();
  EXPECT_EQ(before, unsigned{LCORE_ID_ANY});
  EXPECT_NE(during, unsigned{LCORE_ID_ANY});
  EXPECT_NE(during, rte_lcore_id());  // not the main lcore's id
  EXPECT_EQ(after, unsigned{LCORE_ID_ANY});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], pattern(500, 1));
  EXPECT_EQ(got[1], pattern(1514, 2));
  EXPECT_EQ(a->pool_available(), a_start);  // caches counted: every buffer home
  // Attaching the opening (EAL) thread changes nothing.
  const unsigned main_id = rte_lcore_id();
  a->attach_thread();
  a->detach_thread();
  EXPECT_EQ(rte_lcore_id(), main_id);
}

TEST_F(EthdevPortTest, TxAllocAndFreeReturnEveryBuffer) {
  auto a = open(kPortA, 1500, 1023);
  ASSERT_TRUE(a);
  const uint32_t start = a->pool_available();
  EXPECT_EQ(start, 1023u);

  std::vector<TxFrame> held(start + 10);
  ASSERT_EQ(a->tx_alloc(held.data(), 64), 64);
  EXPECT_EQ(a->pool_available(), start - 64);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(held[i].len, 0u);
    EXPECT_GE(held[i].cap, a->max_frame());
  }
  a->tx_free(held.data(), 64);
  EXPECT_EQ(a->pool_available(), start);

  // Exhaust the pool: the last call gets the remainder, then nothing.
  uint32_t total = 0;
  for (uint16_t n; (n = a->tx_alloc(held.data() + total, EthdevPort::kMaxBurst)) > 0;) total += n;
  EXPECT_EQ(total, start);
  EXPECT_EQ(a->pool_available(), 0u);
  for (uint32_t i = 0; i < total; i += EthdevPort::kMaxBurst) {
    a->tx_free(held.data() + i,
               static_cast<uint16_t>(std::min<uint32_t>(EthdevPort::kMaxBurst, total - i)));
  }
  EXPECT_EQ(a->pool_available(), start);
}

TEST_F(EthdevPortTest, FullRingHandsFramesBackIntact) {
  auto a = open(kPortA);
  auto b = open(kPortB);
  ASSERT_TRUE(a && b);
  const uint32_t start = a->pool_available();

  uint32_t queued = 0, offered = 0;
  for (int burst = 0; burst < 4; ++burst) {
    std::vector<std::vector<uint8_t>> frames(EthdevPort::kMaxBurst, pattern(64, burst));
    queued += send(*a, frames);
    offered += EthdevPort::kMaxBurst;
  }
  EXPECT_EQ(queued, kRingSize - 1);

  // One more burst into the full ring: nothing is queued, every frame comes
  // back as it was, and it goes out once the peer has drained the ring.
  std::vector<TxFrame> tx(8);
  ASSERT_EQ(a->tx_alloc(tx.data(), 8), 8);
  for (uint16_t i = 0; i < 8; ++i) {
    const std::vector<uint8_t> f = pattern(100 + i, 9);
    std::memcpy(tx[i].data, f.data(), f.size());
    tx[i].len = static_cast<uint32_t>(f.size());
  }
  EXPECT_EQ(a->tx_burst(tx.data(), 8), 0);
  offered += 8;
  EXPECT_EQ(a->stats().tx_ring_full, offered - queued);
  EXPECT_EQ(a->stats().tx_dropped, 0u);
  EXPECT_EQ(a->stats().tx_frames, queued);
  EXPECT_EQ(receive(*b, queued).size(), queued);
  EXPECT_EQ(a->tx_burst(tx.data(), 8), 8);
  const std::vector<std::vector<uint8_t>> late = receive(*b, 8);
  ASSERT_EQ(late.size(), 8u);
  for (uint16_t i = 0; i < 8; ++i) EXPECT_EQ(late[i], pattern(100 + i, 9)) << i;
  EXPECT_EQ(a->pool_available(), start);
}

TEST_F(EthdevPortTest, JumboMtuGetsBuffersThatHoldTheFrame) {
  auto a = open(kPortA, 9000, 1023);
  auto b = open(kPortB, 9000, 1023);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->max_frame(), 9014u);
  EXPECT_GE(a->mbuf_data_room(), 9000u + 18u);
  const auto jumbo = pattern(a->max_frame(), 3);
  ASSERT_EQ(send(*a, {jumbo}), 1u);
  const auto got = receive(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], jumbo);
}

TEST_F(EthdevPortTest, MtuLargerThanTheMbufIsRefused) {
  EthdevPortConfig c;
  c.name = kPortA;
  c.mtu = 9000;
  c.mbuf_data_room = 2048;
  std::string error;
  EXPECT_FALSE(EthdevPort::open(c, &error));
  EXPECT_NE(error.find("RX buffer smaller than the MTU"), std::string::npos) << error;
  EXPECT_NE(error.find("mbuf_data_room >= 9018"), std::string::npos) << error;
}

TEST_F(EthdevPortTest, MtuBeyondThePmdIsRefused) {
  EthdevPortConfig c;
  c.name = kPortA;
  c.mtu = 70000;
  std::string error;
  EXPECT_FALSE(EthdevPort::open(c, &error));
  EXPECT_NE(error.find("outside what port"), std::string::npos) << error;
}

TEST_F(EthdevPortTest, UnknownPortListsTheAvailableOnes) {
  EthdevPortConfig c;
  c.name = "no_such_port";
  std::string error;
  EXPECT_FALSE(EthdevPort::open(c, &error));
  EXPECT_NE(error.find("no DPDK port named 'no_such_port'"), std::string::npos) << error;
  EXPECT_NE(error.find(kPortA), std::string::npos) << error;
  EXPECT_NE(error.find(kPortB), std::string::npos) << error;
  EXPECT_NE(error.find(kLoopVdev), std::string::npos) << error;

  c.name.clear();
  c.port_id = RTE_MAX_ETHPORTS - 1;
  EXPECT_FALSE(EthdevPort::open(c, &error));
  EXPECT_NE(error.find("no DPDK port with id"), std::string::npos) << error;
}

TEST_F(EthdevPortTest, OpensByPortIdAndDescribesItself) {
  uint16_t id = 0;
  ASSERT_EQ(rte_eth_dev_get_port_by_name(kPortB, &id), 0);
  EthdevPortConfig c;
  c.port_id = id;
  std::string error;
  auto b = EthdevPort::open(c, &error);
  ASSERT_TRUE(b) << error;
  EXPECT_EQ(b->port_id(), id);
  rte_ether_addr mac{};
  ASSERT_EQ(rte_eth_macaddr_get(id, &mac), 0);
  EXPECT_EQ(std::memcmp(b->mac().data(), mac.addr_bytes, 6), 0);
  const std::string d = b->describe();
  EXPECT_NE(d.find(kPortB), std::string::npos) << d;
  EXPECT_NE(d.find("net_ring"), std::string::npos) << d;
  EXPECT_NE(d.find("MTU 1500"), std::string::npos) << d;
  EXPECT_NE(d.find("link up"), std::string::npos) << d;
  // A ring port says 10 Gb/s, a constant of the PMD: a host-local port's
  // rate counts as unknown (the device takes its default).
  rte_eth_link link{};
  ASSERT_EQ(rte_eth_link_get_nowait(id, &link), 0);
  EXPECT_EQ(link.link_speed, RTE_ETH_SPEED_NUM_10G);
  EXPECT_TRUE(b->host_local());
  EXPECT_EQ(b->link_mbps(), 0u);
  EXPECT_NE(d.find("host-local (no link rate)"), std::string::npos) << d;
  EXPECT_EQ(d.find("10000 Mb/s"), std::string::npos) << d;  // the PMD's constant, not shown
}

TEST_F(EthdevPortTest, VdevFromTheEalLoopsBackToItself) {
  auto loop = open(kLoopVdev);
  ASSERT_TRUE(loop);
  const std::vector<std::vector<uint8_t>> frames = {pattern(60, 1), pattern(1514, 2)};
  ASSERT_EQ(send(*loop, frames), 2u);
  EXPECT_EQ(receive(*loop, 2), frames);
}

// A directory of this test process's own under /tmp, removed however the
// test ends.
struct ScratchDir {
  std::filesystem::path path = "/tmp/braid-test-" + std::to_string(::getpid());
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// A hot-plugged memif vdev under a directory of this test's own: no server
// is listening there, so starting the client fails once its link wait
// (retrying the connection) is over.
TEST_F(EthdevPortTest, MemifClientWithoutServerSaysStartTheServer) {
  ScratchDir dir;
  const std::string socket = (dir.path / "memif.sock").string();
  ASSERT_EQ(rte_dev_probe(("net_memif0,role=client,id=0,socket=" + socket).c_str()), 0);

  EthdevPortConfig c;
  c.name = "net_memif0";
  c.link_wait_ms = 100;
  std::string error;
  EXPECT_FALSE(EthdevPort::open(c, &error));
  EXPECT_EQ(
      error.find("memif: no server at " + socket + " (abstract): start the server side first"), 0u)
      << error;

  EXPECT_TRUE(Eal::remove_vdev("net_memif0").ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path));  // nothing left behind
}

// Both memif roles in this process. A server that must have its link gives
// up after the bounded wait; opened without that, it returns at once, the
// client's open waits for the handshake, and frames copied through memif's
// shared rings arrive byte-exact both ways.
TEST_F(EthdevPortTest, MemifServerAndClientInOneProcess) {
  // memif binds the name in the abstract namespace (no file) and keeps it
  // bound after the vdev is removed, so every run takes a fresh one.
  static int run = 0;
  ScratchDir dir;
  const std::string socket = (dir.path / ("pair" + std::to_string(run++) + ".sock")).string();
  ASSERT_EQ(rte_dev_probe(("net_memif1,role=server,id=1,socket=" + socket).c_str()), 0);
  ASSERT_EQ(rte_dev_probe(("net_memif2,role=client,id=1,socket=" + socket).c_str()), 0);
  {
    EthdevPortConfig c;
    c.name = "net_memif1";
    std::string error;
    // memif reports 1518-byte frames at most, whatever its bsize=; jumbo
    // frames need buffers that hold them (bsize 2048 by default).
    c.mtu = 9000;
    EXPECT_FALSE(EthdevPort::open(c, &error));
    EXPECT_NE(error.find("frames of 9018 B need memif buffers that hold them, but bsize is "
                         "2048: add bsize=10240"),
              std::string::npos)
        << error;
    c.mtu = 1500;
    c.link_wait_ms = 50;
    // Waiting for a peer that is not there ends, with the reason.
    EXPECT_FALSE(EthdevPort::open(c, &error));
    EXPECT_NE(error.find("still down 50 ms after start: the memif peer at " + socket +
                         " (abstract) has not connected"),
              std::string::npos)
        << error;
    c.require_link_up = false;  // its peer is not there yet
    c.mbufs = 2047;
    auto server = EthdevPort::open(c, &error);
    ASSERT_TRUE(server) << error;
    c.name = "net_memif2";
    c.require_link_up = true;  // waits for the handshake
    c.link_wait_ms = 2000;
    auto client = EthdevPort::open(c, &error);
    ASSERT_TRUE(client) << error;
    EXPECT_TRUE(client->link_up());
    EXPECT_TRUE(server->link_up());

    std::vector<std::vector<uint8_t>> frames;
    for (uint32_t i = 0; i < 16; ++i) frames.push_back(pattern(60 + i * 90, i));
    ASSERT_EQ(send(*client, frames), frames.size());
    EXPECT_EQ(receive(*server, frames.size()), frames);
    // The client hands memif its receive slots when it polls; until then the
    // server has nowhere to copy to.
    EXPECT_TRUE(receive(*client, 1).empty());
    ASSERT_EQ(send(*server, {pattern(1514, 5)}), 1u);
    const auto back = receive(*client, 1);
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[0], pattern(1514, 5));
  }
  EXPECT_TRUE(Eal::remove_vdev("net_memif2").ok());
  EXPECT_TRUE(Eal::remove_vdev("net_memif1").ok());
}

// The EAL's interrupt thread parked: nested holds, a scope that lets it
// run (a port's handshake, a job on the thread) and parks it again after.
TEST_F(EthdevPortTest, InterruptThreadParksNestsAndRunsForAJob) {
  // Generous waits for the thread to park: the cores may be busy.
  const std::chrono::seconds wait(30);
  ASSERT_FALSE(Eal::interrupts_paused());
  ASSERT_TRUE(Eal::pause_interrupts(wait));
  EXPECT_TRUE(Eal::interrupts_paused());
  ASSERT_TRUE(Eal::pause_interrupts(wait));  // a second holder
  {
    Eal::InterruptsRun run;
    EXPECT_FALSE(Eal::interrupts_paused());
    // A holder that comes meanwhile is parked for once the job is done,
    // not underneath it.
    ASSERT_TRUE(Eal::pause_interrupts(wait));
    EXPECT_FALSE(Eal::interrupts_paused());
  }
  EXPECT_TRUE(Eal::interrupts_paused());
  Eal::resume_interrupts();
  // A job on the thread runs (it is let go for it), and the thread parks again.
  bool ran = false;
  Eal::run_on_interrupt_thread([](void* p) { *static_cast<bool*>(p) = true; }, &ran);
  EXPECT_TRUE(ran);
  EXPECT_TRUE(Eal::interrupts_paused());
  Eal::resume_interrupts();
  EXPECT_TRUE(Eal::interrupts_paused());  // one holder left
  Eal::resume_interrupts();
  EXPECT_FALSE(Eal::interrupts_paused());
  Eal::resume_interrupts();  // one too many: nothing to release
  EXPECT_FALSE(Eal::interrupts_paused());
}

// A memif port held until close (a device with connected QPs): the
// interrupt thread, which would unmap the rings under a burst when the peer
// disconnects, stays parked while frames flow, and runs again once the port
// closes. A ring port has no such events: it holds nothing.
TEST_F(EthdevPortTest, MemifPortHoldsTheInterruptThreadUntilItCloses) {
  ScratchDir dir;
  const std::string socket = (dir.path / "hold.sock").string();
  ASSERT_EQ(rte_dev_probe(("net_memif8,role=server,id=8,socket=" + socket).c_str()), 0);
  ASSERT_EQ(rte_dev_probe(("net_memif9,role=client,id=8,socket=" + socket).c_str()), 0);
  {
    std::string error;
    auto [server, client] = open_memif_pair("net_memif8", "net_memif9", {}, &error);
    ASSERT_TRUE(server && client) << error;
    client->hold_events_until_close();
    EXPECT_TRUE(Eal::interrupts_paused());
    client->hold_events_until_close();  // once per port
    const std::vector<std::vector<uint8_t>> frames = {pattern(60, 1), pattern(1514, 2)};
    ASSERT_EQ(send(*client, frames), frames.size());
    EXPECT_EQ(receive(*server, frames.size()), frames);
    client.reset();
    EXPECT_FALSE(Eal::interrupts_paused());
    auto ring = open(kPortA);
    ASSERT_TRUE(ring);
    ring->hold_events_until_close();
    EXPECT_FALSE(Eal::interrupts_paused());
  }
  EXPECT_TRUE(Eal::remove_vdev("net_memif9").ok());
  EXPECT_TRUE(Eal::remove_vdev("net_memif8").ok());
}

// memif copies every frame out within tx_burst, so a frame may end with a
// payload outside the port's buffers (registered memory): it arrives whole,
// and a frame the full ring hands back comes back whole, its payload copied
// in, so that nothing refers to that memory after the call.
TEST_F(EthdevPortTest, MemifSendsPayloadsInPlaceAndHandsBackWholeFrames) {
  static int run = 0;
  ScratchDir dir;
  const std::string socket = (dir.path / ("ext" + std::to_string(run++) + ".sock")).string();
  ASSERT_EQ(rte_dev_probe(("net_memif7,role=server,id=7,socket=" + socket).c_str()), 0);
  ASSERT_EQ(rte_dev_probe(("net_memif8,role=client,id=7,socket=" + socket).c_str()), 0);
  {
    EthdevPortConfig c;
    c.mbufs = 4095;
    std::string error;
    auto [server, client] = open_memif_pair("net_memif7", "net_memif8", c, &error);
    ASSERT_TRUE(server && client) << error;
    ASSERT_TRUE(client->tx_external());
    EXPECT_NE(client->describe().find("payloads sent from registered memory"), std::string::npos);
    const uint32_t idle = client->pool_available();

    constexpr uint32_t kHeader = 60, kPayload = 1300, kFrames = 1500;
    const std::vector<uint8_t> payloads = pattern(kPayload * kFrames, 9);
    auto expected = [&](uint32_t i) {
      std::vector<uint8_t> f = pattern(kHeader, i);
      f.insert(f.end(), payloads.begin() + i * kPayload, payloads.begin() + (i + 1) * kPayload);
      return f;
    };
    // Bursts of 32 until the ring (1024 slots) refuses: the peer does not
    // read yet.
    uint32_t sent = 0;
    std::vector<TxFrame> back;
    for (uint32_t first = 0; first < kFrames && back.empty(); first += 32) {
      TxFrame tx[32];
      ASSERT_EQ(client->tx_alloc(tx, 32), 32);
      for (uint32_t j = 0; j < 32; ++j) {
        const std::vector<uint8_t> h = pattern(kHeader, first + j);
        std::memcpy(tx[j].data, h.data(), kHeader);
        tx[j].len = kHeader;
        tx[j].ext = payloads.data() + size_t{first + j} * kPayload;
        tx[j].ext_len = kPayload;
      }
      const uint16_t queued = client->tx_burst(tx, 32);
      sent += queued;
      back.assign(tx + queued, tx + 32);
    }
    ASSERT_FALSE(back.empty()) << "the ring never filled";
    EXPECT_EQ(client->stats().tx_external, sent);
    for (uint32_t j = 0; j < back.size(); ++j) {
      const TxFrame& f = back[j];
      EXPECT_EQ(f.ext, nullptr);
      EXPECT_EQ(f.ext_len, 0u);
      ASSERT_EQ(f.len, kHeader + kPayload);
      ASSERT_EQ(std::vector<uint8_t>(f.data, f.data + f.len), expected(sent + j)) << j;
    }
    client->tx_free(back.data(), static_cast<uint16_t>(back.size()));
    const auto got = receive(*server, sent);
    ASSERT_EQ(got.size(), sent);
    for (uint32_t i = 0; i < sent; ++i) ASSERT_EQ(got[i], expected(i)) << i;
    // Every buffer of the client is back: memif freed what it copied.
    EXPECT_EQ(client->pool_available(), idle);
  }
  EXPECT_TRUE(Eal::remove_vdev("net_memif8").ok());
  EXPECT_TRUE(Eal::remove_vdev("net_memif7").ok());
}

// What a port's open and close could leave behind: DPDK pools and heap, and
// file descriptors (memif's sockets and event fds).
struct Usage {
  int pools = 0;
  size_t heap = 0;
  int fds = 0;
  static Usage now() {
    Usage u;
    rte_mempool_walk([](rte_mempool*, void* arg) { ++*static_cast<int*>(arg); }, &u.pools);
    for (int socket = 0; socket < RTE_MAX_NUMA_NODES; ++socket) {
      rte_malloc_socket_stats st{};
      if (rte_malloc_get_socket_stats(socket, &st) == 0) u.heap += st.heap_allocsz_bytes;
    }
    if (DIR* d = opendir("/proc/self/fd")) {
      while (readdir(d) != nullptr) ++u.fds;
      closedir(d);
    }
    return u;
  }
};

void expect_no_growth(const Usage& before, const Usage& after) {
  EXPECT_EQ(after.pools, before.pools);
  EXPECT_EQ(after.fds, before.fds);
  // A port's pool is megabytes: a leak per cycle would be far more.
  EXPECT_LE(after.heap, before.heap + (1u << 20)) << "DPDK heap grew from " << before.heap;
}

// A port closed while frames it sent still wait in its peer's ring (a ring
// pair in one process) cannot free its pool: its next open runs on that
// pool again, and the frames drain into it. 1000 cycles make no new pool.
// A second open of a port that is open is refused.
TEST_F(EthdevPortTest, ClosingWithFramesInFlightAThousandTimesGrowsNothing) {
  {
    auto a = open(kPortA);
    ASSERT_TRUE(a);
    EthdevPortConfig c;
    c.name = kPortA;
    std::string error;
    EXPECT_FALSE(EthdevPort::open(c, &error));
    EXPECT_NE(error.find("is open already"), std::string::npos) << error;
  }
  auto cycle = [&](uint32_t i) {
    auto a = open(kPortA);
    ASSERT_TRUE(a);
    // Into b's RX ring, which nobody reads while b is closed.
    const std::vector<std::vector<uint8_t>> frames = {pattern(60, i), pattern(1514, i + 1)};
    ASSERT_EQ(send(*a, frames), 2u);
    auto b = open(kPortB);
    ASSERT_TRUE(b);
    // What the previous cycle left in b's ring comes first, intact, then
    // this cycle's frames.
    auto got = receive(*b, 3);
    if (i > 0) {
      ASSERT_EQ(got.size(), 3u);
      EXPECT_EQ(got.front(), pattern(200, i + 1));
      got.erase(got.begin());
    }
    EXPECT_EQ(got, frames);
    // a closes while its last frame waits in b's ring; the ring keeps it
    // (and its buffer from a's pool, which must still be there) for b's
    // next open.
    ASSERT_EQ(send(*a, {pattern(200, i + 2)}), 1u);
    a.reset();
  };
  for (uint32_t i = 0; i < 10; ++i) cycle(i);
  const Usage before = Usage::now();
  for (uint32_t i = 10; i < 1000 && !HasFatalFailure(); ++i) cycle(i);
  expect_no_growth(before, Usage::now());
}

// A memif server and client, connected each time (the handshake, memif's
// regions and sockets), with frames left in the client's rings at close,
// 1000 times. (Setting memif's queues up again on each open leaked 27 KB of
// DPDK heap a time: a port keeps its queues across close and open.)
TEST_F(EthdevPortTest, MemifPairOpenedAndClosedRepeatedlyGrowsNothing) {
  ScratchDir dir;
  const std::string socket = (dir.path / "cycles.sock").string();
  ASSERT_EQ(rte_dev_probe(("net_memif5,role=server,id=5,socket=" + socket).c_str()), 0);
  ASSERT_EQ(rte_dev_probe(("net_memif6,role=client,id=5,socket=" + socket).c_str()), 0);
  auto cycle = [&](uint32_t i) {
    std::string error;
    auto [server, client] = open_memif_pair("net_memif5", "net_memif6", {}, &error);
    ASSERT_TRUE(server && client) << error;
    const std::vector<std::vector<uint8_t>> frames = {pattern(60, i), pattern(1514, i)};
    ASSERT_EQ(send(*client, frames), frames.size());
    EXPECT_EQ(receive(*server, frames.size()), frames);
    ASSERT_EQ(send(*client, frames), frames.size());  // left unread
  };
  for (uint32_t i = 0; i < 5; ++i) cycle(i);
  const Usage before = Usage::now();
  for (uint32_t i = 5; i < 1000 && !HasFatalFailure(); ++i) cycle(i);
  expect_no_growth(before, Usage::now());
  EXPECT_TRUE(Eal::remove_vdev("net_memif6").ok());
  EXPECT_TRUE(Eal::remove_vdev("net_memif5").ok());
}

// A vhost-user server port (the virtio path's passive side), opened and
// closed 1000 times without its virtio-user peer.
TEST_F(EthdevPortTest, VhostServerOpenedAndClosedRepeatedlyGrowsNothing) {
  ScratchDir dir;
  const std::string socket = (dir.path / "vhost.sock").string();
  ASSERT_EQ(rte_dev_probe(("net_vhost7,iface=" + socket + ",queues=1").c_str()), 0);
  auto cycle = [&] {
    EthdevPortConfig c;
    c.name = "net_vhost7";
    c.require_link_up = false;
    std::string error;
    auto port = EthdevPort::open(c, &error);
    ASSERT_TRUE(port) << error;
    EXPECT_FALSE(port->link_up());
  };
  for (int i = 0; i < 5; ++i) cycle();
  const Usage before = Usage::now();
  for (int i = 5; i < 1000 && !HasFatalFailure(); ++i) cycle();
  expect_no_growth(before, Usage::now());
  EXPECT_TRUE(Eal::remove_vdev("net_vhost7").ok());
}

// memif carries jumbo frames although it reports 1518 B: with bsize=10240
// on both ends, MTU 9000 frames cross whole, byte-exact, one mbuf each.
TEST_F(EthdevPortTest, MemifJumboFramesWithLargeBuffers) {
  static int run = 0;
  ScratchDir dir;
  const std::string socket = (dir.path / ("jumbo" + std::to_string(run++) + ".sock")).string();
  ASSERT_EQ(rte_dev_probe(("net_memif3,role=server,id=3,bsize=10240,socket=" + socket).c_str()), 0);
  ASSERT_EQ(rte_dev_probe(("net_memif4,role=client,id=3,bsize=10240,socket=" + socket).c_str()), 0);
  {
    EthdevPortConfig c;
    c.name = "net_memif3";
    c.mtu = 9000;
    c.require_link_up = false;
    c.mbufs = 2047;
    std::string error;
    auto server = EthdevPort::open(c, &error);
    ASSERT_TRUE(server) << error;
    c.name = "net_memif4";
    c.require_link_up = true;
    auto client = EthdevPort::open(c, &error);
    ASSERT_TRUE(client) << error;
    EXPECT_EQ(client->max_frame(), 9014u);
    EXPECT_GE(client->mbuf_data_room(), 9018u);

    std::vector<std::vector<uint8_t>> frames;
    for (uint32_t i = 0; i < 8; ++i) frames.push_back(pattern(9014 - i * 1000, 40 + i));
    ASSERT_EQ(send(*client, frames), frames.size());
    EXPECT_EQ(receive(*server, frames.size()), frames);
    EXPECT_EQ(server->rx_chained_dropped(), 0u);
    EXPECT_TRUE(receive(*client, 1).empty());  // hands memif its receive slots
    ASSERT_EQ(send(*server, {pattern(9014, 7)}), 1u);
    const auto back = receive(*client, 1);
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[0], pattern(9014, 7));
  }
  EXPECT_TRUE(Eal::remove_vdev("net_memif4").ok());
  EXPECT_TRUE(Eal::remove_vdev("net_memif3").ok());
}

TEST_F(EthdevPortTest, InitRemovesRuntimeDirsOfDeadBraidProcessesOnly) {
  EXPECT_FALSE(std::filesystem::exists(g_planted.dead)) << g_planted.dead;
  EXPECT_TRUE(std::filesystem::exists(g_planted.alive / "config")) << g_planted.alive;
  EXPECT_TRUE(std::filesystem::exists(g_planted.other / "config")) << g_planted.other;
}

// ---- EAL arguments, built for imagined machines ----

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

HugepageInfo no_hugepages() {
  return {};
}
HugepageInfo mounted_hugepages() {
  return {"/dev/hugepages", 512, 512};
}

TEST(EalArgs, AutoUsesPlainMemoryWithoutHugepages) {
  EalConfig c;
  c.file_prefix = "t";
  std::vector<std::string> args;
  EalMemoryMode mode = EalMemoryMode::kAuto;
  ASSERT_TRUE(Eal::build_args(c, no_hugepages(), &args, &mode).ok());
  EXPECT_EQ(mode, EalMemoryMode::kNoHuge);
  const std::vector<std::string> want = {
      "braid",     "-l", "0",   "--file-prefix=t", "--no-telemetry", "--log-level=warning",
      "--no-huge", "-m", "512", "--no-pci"};
  EXPECT_EQ(args, want);
}

// DPDK's notices stay quiet unless asked for: BRAID_DPDK_LOG, or a
// --log-level of the caller's own (which then is the only one).
TEST(EalArgs, DpdkLogLevelIsWarningUnlessAskedOtherwise) {
  EalConfig c;
  std::vector<std::string> args;
  EalMemoryMode mode = EalMemoryMode::kAuto;
  setenv("BRAID_DPDK_LOG", "debug", 1);
  ASSERT_TRUE(Eal::build_args(c, no_hugepages(), &args, &mode).ok());
  unsetenv("BRAID_DPDK_LOG");
  EXPECT_TRUE(has(args, "--log-level=debug"));
  EXPECT_FALSE(has(args, "--log-level=warning"));
  args.clear();
  c.extra_args = {"--log-level=pmd.net.memif:debug", "--telemetry"};
  ASSERT_TRUE(Eal::build_args(c, no_hugepages(), &args, &mode).ok());
  EXPECT_EQ(std::count_if(args.begin(), args.end(),
                          [](const std::string& a) { return a.rfind("--log-level", 0) == 0; }),
            1);
  EXPECT_FALSE(has(args, "--no-telemetry"));
}

TEST(EalArgs, AutoUsesMountedHugepagesWithFreePages) {
  EalConfig c;
  std::vector<std::string> args;
  EalMemoryMode mode = EalMemoryMode::kAuto;
  ASSERT_TRUE(Eal::build_args(c, mounted_hugepages(), &args, &mode).ok());
  EXPECT_EQ(mode, EalMemoryMode::kHugepages);
  EXPECT_FALSE(has(args, "--no-huge"));
  EXPECT_TRUE(has(args, "--file-prefix=braid-" + std::to_string(::getpid())));

  HugepageInfo none_free = mounted_hugepages();
  none_free.mount_free = 0;
  ASSERT_TRUE(Eal::build_args(c, none_free, &args, &mode).ok());
  EXPECT_EQ(mode, EalMemoryMode::kNoHuge);
}

TEST(EalArgs, ExplicitModesTheMachineCannotDoAreRefusedWithTheFix) {
  EalConfig c;
  std::vector<std::string> args;
  c.memory = EalMemoryMode::kHugepages;
  Status st = Eal::build_args(c, no_hugepages(), &args);
  EXPECT_EQ(st.error.find("no hugepages mounted and memory mode 'hugepages' requested: mount "
                          "hugetlbfs"),
            0u)
      << st.error;
  EXPECT_NE(st.error.find("--memory=no-huge"), std::string::npos);

  c.memory = EalMemoryMode::kInMemory;
  st = Eal::build_args(c, no_hugepages(), &args);
  EXPECT_NE(st.error.find("'in-memory' needs free hugepages"), std::string::npos) << st.error;
  ASSERT_TRUE(Eal::build_args(c, mounted_hugepages(), &args).ok());
  EXPECT_TRUE(has(args, "--in-memory"));

  c.memory = EalMemoryMode::kAuto;
  c.extra_args = {"--no-huge"};
  EXPECT_FALSE(Eal::build_args(c, no_hugepages(), &args).ok());
}

TEST(EalArgs, VhostUserStyleVdevsGetSingleFileSegments) {
  std::vector<std::string> args;
  for (const char* vdev : {"net_virtio_user0,path=/tmp/v.sock", "net_vhost0,iface=/tmp/v.sock",
                           "net_memif0,role=client,zero-copy=yes"}) {
    EalConfig c;
    c.vdevs = {vdev};
    ASSERT_TRUE(Eal::build_args(c, mounted_hugepages(), &args).ok());
    EXPECT_TRUE(has(args, std::string("--vdev=") + vdev));
    EXPECT_EQ(std::count(args.begin(), args.end(), "--single-file-segments"), 1) << vdev;
  }
  EalConfig c;
  c.vdevs = {"net_memif0,role=client"};
  ASSERT_TRUE(Eal::build_args(c, mounted_hugepages(), &args).ok());
  EXPECT_FALSE(has(args, "--single-file-segments"));

  // Given through extra_args: recognised, and not added twice.
  c.vdevs.clear();
  c.extra_args = {"--vdev", "net_virtio_user1,path=/x", "--single-file-segments"};
  ASSERT_TRUE(Eal::build_args(c, mounted_hugepages(), &args).ok());
  EXPECT_EQ(std::count(args.begin(), args.end(), "--single-file-segments"), 1);
}

TEST(EalArgs, AnAllowedPciDeviceTurnsOffNoPci) {
  EalConfig c;
  c.extra_args = {"-a", "0000:00:04.0"};
  std::vector<std::string> args;
  ASSERT_TRUE(Eal::build_args(c, no_hugepages(), &args).ok());
  EXPECT_FALSE(has(args, "--no-pci"));
  EXPECT_TRUE(has(args, "0000:00:04.0"));
  c.no_pci = true;
  EXPECT_FALSE(Eal::build_args(c, no_hugepages(), &args).ok());
}

TEST(EalArgs, MemoryModeNamesRoundTrip) {
  for (EalMemoryMode m : {EalMemoryMode::kAuto, EalMemoryMode::kInMemory, EalMemoryMode::kNoHuge,
                          EalMemoryMode::kHugepages}) {
    EalMemoryMode back = EalMemoryMode::kAuto;
    ASSERT_TRUE(parse_memory_mode(memory_mode_name(m), &back));
    EXPECT_EQ(back, m);
  }
  EalMemoryMode back;
  EXPECT_FALSE(parse_memory_mode("huge", &back));
}

}  // namespace

bool test_env_up(std::string* why) {
  *why = g_eal_error;
  return g_eal_up;
}

PortPair open_memif_pair(const std::string& server, const std::string& client, EthdevPortConfig c,
                         std::string* error) {
  PortPair p;
  c.name = server;
  c.require_link_up = false;  // its peer is not there yet
  p.server = EthdevPort::open(c, error);
  if (!p.server) return p;
  c.name = client;
  c.require_link_up = true;  // waits for the handshake
  p.client = EthdevPort::open(c, error);
  return p;
}

}  // namespace braid::dpdk

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new braid::dpdk::DpdkEnvironment);
  return RUN_ALL_TESTS();
}
