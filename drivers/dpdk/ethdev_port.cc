#include "dpdk/ethdev_port.h"

#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>

#include "dpdk/eal.h"

namespace braid::dpdk {
namespace {

// What ethdev itself assumes a frame adds to the MTU when the PMD does not
// say (Ethernet header and CRC).
constexpr uint32_t kDefaultFrameOverhead = RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
// The usual mbuf size: PMDs are tuned for it, so smaller MTUs still get it.
constexpr uint32_t kMinDataRoom = RTE_MBUF_DEFAULT_DATAROOM;
constexpr uint32_t kMempoolCache = 256;

std::string port_label(uint16_t port, const std::string& name, const std::string& driver) {
  return "port " + std::to_string(port) + " '" + name + "' (" + driver + ")";
}

std::string available_ports() {
  std::string out;
  uint16_t p = 0;
  RTE_ETH_FOREACH_DEV(p) {
    char name[RTE_ETH_NAME_MAX_LEN] = {};
    rte_eth_dev_get_name_by_port(p, name);
    rte_eth_dev_info info{};
    const char* driver = rte_eth_dev_info_get(p, &info) == 0 ? info.driver_name : "?";
    if (!out.empty()) out += ", ";
    out += std::to_string(p) + " '" + name + "' (" + driver + ")";
  }
  if (out.empty()) {
    return "none: give the EAL a --vdev (EalConfig::vdevs) or allow a PCI device (-a <address>)";
  }
  return out;
}

// The value of key in a vdev's "k1=v1,k2=v2" arguments.
std::string devarg(const rte_eth_dev_info& info, std::string_view key,
                   std::string_view fallback = {}) {
  const rte_devargs* da = info.device ? rte_dev_devargs(info.device) : nullptr;
  if (!da || !da->args) return std::string(fallback);
  std::string_view args(da->args);
  while (!args.empty()) {
    const size_t comma = args.find(',');
    const std::string_view kv = args.substr(0, comma);
    if (kv.size() > key.size() && kv.substr(0, key.size()) == key && kv[key.size()] == '=') {
      return std::string(kv.substr(key.size() + 1));
    }
    if (comma == std::string_view::npos) break;
    args.remove_prefix(comma + 1);
  }
  return std::string(fallback);
}

bool is_driver(const std::string& driver, std::string_view prefix) {
  return driver.compare(0, prefix.size(), prefix) == 0;
}

// memif's socket, as the message should name it. DPDK 22.11 binds it in the
// abstract namespace unless socket-abstract=no: no file appears, and peers
// in different network namespaces cannot see each other.
std::string memif_socket(const rte_eth_dev_info& info) {
  std::string path = devarg(info, "socket", "/run/memif.sock");  // the PMD's default
  if (devarg(info, "socket-abstract", "yes") != "no") path += " (abstract)";
  return path;
}

std::string driver_of(const rte_eth_dev_info& info) {
  return info.driver_name ? info.driver_name : "";
}

bool memif_client(const rte_eth_dev_info& info) {
  const std::string role = devarg(info, "role", "server");
  return role == "client" || role == "slave";
}

std::string start_failure(int ret, const rte_eth_dev_info& info, const std::string& label) {
  const std::string driver = info.driver_name ? info.driver_name : "";
  if (is_driver(driver, "net_memif")) {
    if (memif_client(info)) {
      return "memif: no server at " + memif_socket(info) + ": start the server side first (" +
             label + " is a client; it retried for the link wait)";
    }
    return "memif server " + label + " failed to start at " + memif_socket(info) + ": " +
           rte_strerror(-ret) + ": see the PMD's log above";
  }
  return "rte_eth_dev_start(" + label + ") failed: " + rte_strerror(-ret) +
         ": see the PMD's log above";
}

std::string link_down_hint(const rte_eth_dev_info& info) {
  const std::string driver = info.driver_name ? info.driver_name : "";
  if (is_driver(driver, "net_memif")) {
    return "the memif peer at " + memif_socket(info) +
           " has not connected: start it, or open with require_link_up=false and poll link_up()";
  }
  if (is_driver(driver, "net_vhost") || is_driver(driver, "net_virtio_user")) {
    return "the vhost-user peer has not connected (or went away): start it, or open with "
           "require_link_up=false and poll link_up()";
  }
  return "check the cable or the peer, or open with require_link_up=false and poll link_up()";
}

// vhost-user (and memif zero-copy) pass memory to the peer one region per
// file; a file per hugepage exhausts the region table and virtio-user then
// stalls after 256 packets with its link up. With --no-huge the EAL has one
// segment, which is fine.
std::string missing_single_file_segments(const rte_eth_dev_info& info) {
  if (!Eal::initialized() || !rte_eal_has_hugepages() || Eal::has_arg("--single-file-segments")) {
    return {};
  }
  const std::string driver = info.driver_name ? info.driver_name : "";
  const bool needs = is_driver(driver, "net_virtio_user") || is_driver(driver, "net_vhost") ||
                     (is_driver(driver, "net_memif") && devarg(info, "zero-copy") == "yes");
  if (!needs) return {};
  return driver +
         " without --single-file-segments: with hugepages, vhost-user style memory sharing runs "
         "out of memory regions and the link stalls after 256 packets: add "
         "--single-file-segments to the EAL arguments (Eal::init adds it for vdevs listed in "
         "EalConfig::vdevs)";
}

struct JumboCheck {
  bool applies = false;  // the PMD carries frames beyond what it reports
  std::string error;     // ...but not as configured: cause and fix
};

// memif and AF_PACKET in DPDK 22.11 report 1518 B as their largest frame
// (ethdev then refuses any larger MTU) although they carry larger frames
// when their buffers hold them: memif's bsize (split buffers otherwise,
// which corrupt and lose frames) and AF_PACKET's framesz, on a kernel
// interface whose own MTU allows them. For those, ethdev keeps its MTU at
// the PMD's limit and Braid sizes frames itself. frame 0: only whether the
// exception applies.
JumboCheck jumbo_beyond_reported_limit(const rte_eth_dev_info& info, uint32_t frame,
                                       const std::string& label) {
  JumboCheck out;
  const std::string driver = info.driver_name ? info.driver_name : "";
  if (is_driver(driver, "net_memif")) {
    out.applies = true;
    if (frame == 0) return out;
    const unsigned long bsize = std::strtoul(devarg(info, "bsize", "2048").c_str(), nullptr, 10);
    if (bsize < frame) {
      out.error = label + ": frames of " + std::to_string(frame) + " B need memif buffers that " +
                  "hold them, but bsize is " + std::to_string(bsize) +
                  ": add bsize=10240 to the memif arguments of both peers";
    }
    return out;
  }
  if (is_driver(driver, "net_af_packet")) {
    out.applies = true;
    if (frame == 0) return out;
    // A PACKET_MMAP frame starts with its tpacket2 header and address.
    constexpr uint32_t kTpacketOverhead = 64;
    const unsigned long framesz =
        std::strtoul(devarg(info, "framesz", "2048").c_str(), nullptr, 10);
    if (framesz < frame + kTpacketOverhead) {
      out.error = label + ": frames of " + std::to_string(frame) + " B need AF_PACKET framesz >= " +
                  std::to_string((frame + kTpacketOverhead + 15) / 16 * 16) + " (now " +
                  std::to_string(framesz) +
                  "): set framesz (a multiple of 16) and blocksz (a multiple of framesz and of "
                  "4096), e.g. framesz=10240,blocksz=20480";
      return out;
    }
    const std::string iface = devarg(info, "iface");
    std::ifstream sysfs("/sys/class/net/" + iface + "/mtu");
    uint32_t kernel_mtu = 0;
    if (!iface.empty() && (sysfs >> kernel_mtu) && kernel_mtu + kDefaultFrameOverhead < frame) {
      out.error = label + ": the kernel interface " + iface + " has MTU " +
                  std::to_string(kernel_mtu) + ", too small for frames of " +
                  std::to_string(frame) + " B: ip link set dev " + iface + " mtu " +
                  std::to_string(frame - kDefaultFrameOverhead);
    }
    return out;
  }
  return out;
}

// AF_XDP (DPDK 22.11, zero-copy mbufs): the mbuf data room that lets a
// chunk take `frame`, and the check of the largest frame it then receives.
// Empty when fine; the error otherwise.
std::string af_xdp_sizes(const EthdevPortConfig& config, uint32_t frame, uint32_t min_room,
                         const std::string& label, uint32_t* room) {
  constexpr uint32_t kXdpHeadroom = 256;  // XDP_PACKET_HEADROOM, in every chunk
  constexpr uint32_t kMinChunk = 2048;    // XDP_UMEM_MIN_CHUNK_SIZE
  const auto chunk_of = [](uint32_t r, rte_mempool_objsz* sz) {
    return rte_mempool_calc_obj_size(
        static_cast<uint32_t>(sizeof(rte_mbuf)) + RTE_PKTMBUF_HEADROOM + r, 0, sz);
  };
  rte_mempool_objsz sz{};
  // Exactly what the frame needs (a cache line's multiple), not the next
  // KiB: a chunk may not exceed a page. Nor be under the kernel's least.
  if (config.mbuf_data_room == 0) {
    *room = std::max(min_room, (frame + kXdpHeadroom + 63) / 64 * 64);
    while (chunk_of(*room, &sz) < kMinChunk) *room += 64;
  }
  const uint32_t chunk = chunk_of(*room, &sz);
  const uint32_t before = sz.header_size + static_cast<uint32_t>(sizeof(rte_mbuf)) +
                          RTE_PKTMBUF_HEADROOM + kXdpHeadroom;
  const auto page = static_cast<uint32_t>(sysconf(_SC_PAGESIZE));
  if (chunk > page) {
    // The largest room whose chunk fits a page, and the frame it takes.
    uint32_t r = *room;
    while (r > 64 && chunk_of(r, &sz) > page) r -= 64;
    const uint32_t most = chunk_of(r, &sz) - before;
    return label + ": MTU " + std::to_string(config.mtu) + " needs frames of " +
           std::to_string(frame) + " B, but AF_XDP puts each in a UMEM chunk of one page (" +
           std::to_string(page) + " B, with the mbuf and 256 B of XDP headroom), which takes " +
           std::to_string(most) + " B: use an MTU up to " +
           std::to_string(most - kDefaultFrameOverhead);
  }
  const uint32_t rx_max = chunk > before ? chunk - before : 0;
  if (rx_max < frame) {
    return label + ": MTU " + std::to_string(config.mtu) + " needs frames of " +
           std::to_string(frame) + " B, but with mbufs of " + std::to_string(*room) +
           " B an AF_XDP chunk (" + std::to_string(chunk) + " B, 256 of them XDP headroom) takes " +
           std::to_string(rx_max) + " B: set mbuf_data_room to 0 (sized from the MTU) or >= " +
           std::to_string(frame + kXdpHeadroom);
  }
  return "";
}

// After ethdev's MTU is set: a PMD in front of a kernel interface (AF_XDP
// sets the interface's MTU itself) must have left it able to carry `mtu`.
std::string kernel_mtu_check(const rte_eth_dev_info& info, uint32_t mtu, const std::string& label) {
  const std::string iface = devarg(info, "iface");
  if (iface.empty()) return "";
  std::ifstream sysfs("/sys/class/net/" + iface + "/mtu");
  uint32_t kernel_mtu = 0;
  if (!(sysfs >> kernel_mtu) || kernel_mtu >= mtu) return "";
  return label + ": the kernel interface " + iface + " has MTU " + std::to_string(kernel_mtu) +
         ", below Braid's " + std::to_string(mtu) + ": ip link set dev " + iface + " mtu " +
         std::to_string(mtu) + " (a veth with XDP takes at most 3506)";
}

std::string offload_names(uint64_t offloads, bool rx) {
  std::string out;
  for (uint64_t bit = 1; bit != 0 && bit <= offloads; bit <<= 1) {
    if (!(offloads & bit)) continue;
    if (!out.empty()) out += ',';
    out += rx ? rte_eth_dev_rx_offload_name(bit) : rte_eth_dev_tx_offload_name(bit);
  }
  return out.empty() ? "none" : out;
}

// A port's queues and pool outlive its EthdevPort. Closing stops the port;
// the next open with the same parameters starts it again on the same queues
// and pool instead of setting them up anew: a PMD may leak on every queue
// setup (memif: about 27 KB of DPDK heap each time), and buffers still out
// at close (in a PMD's RX descriptors after stop, or in a ring a
// same-process peer has not read) belong to a pool that stays in use, so
// 1000 opens and closes make no new pool and grow nothing. The pool is DPDK
// heap the EAL holds until the process ends anyway.
struct PortSetup {
  uint16_t port = 0;
  std::string name;
  std::vector<rte_mempool*> pools;  // one per queue pair
  uint32_t mbufs = 0, elt_room = 0, ethdev_mtu = 0;
  uint16_t rxd = 0, txd = 0, queues = 1;
  uint64_t rx_offloads = 0, tx_offloads = 0;
  bool in_use = false;  // an EthdevPort runs on it
  bool same_queues(const PortSetup& o) const {
    return port == o.port && name == o.name && mbufs == o.mbufs && elt_room == o.elt_room &&
           ethdev_mtu == o.ethdev_mtu && rxd == o.rxd && txd == o.txd && queues == o.queues &&
           rx_offloads == o.rx_offloads && tx_offloads == o.tx_offloads;
  }
};
std::mutex g_setup_lock;
std::vector<PortSetup> g_setups;
// Pools replaced (another MTU) or given up (a failed open) while some of
// their buffers were still out: freed once whole again.
std::vector<rte_mempool*> g_orphans;

void orphan_pool(rte_mempool* pool) {
  if (pool == nullptr) return;
  std::lock_guard<std::mutex> g(g_setup_lock);
  g_orphans.push_back(pool);
}

// With g_setup_lock held.
void orphan_pools_locked(std::vector<rte_mempool*>* pools) {
  for (rte_mempool* pool : *pools) g_orphans.push_back(pool);
  pools->clear();
}

void free_whole_orphans() {
  std::lock_guard<std::mutex> g(g_setup_lock);
  std::erase_if(g_orphans, [](rte_mempool* pool) {
    if (!rte_mempool_full(pool)) return false;
    rte_mempool_free(pool);
    return true;
  });
}

// Reserves the port for an opening EthdevPort and returns the setup its
// queues have, if any (a port closed and probed again under the same id has
// none). *busy: another EthdevPort holds it. The record stays, marked in
// use, so two opens at once cannot both set the port up.
std::optional<PortSetup> reserve_port(uint16_t port, const std::string& name,
                                      const rte_eth_dev_info& info, bool* busy) {
  std::lock_guard<std::mutex> g(g_setup_lock);
  *busy = false;
  for (PortSetup& s : g_setups) {
    if (s.port != port) continue;
    if (s.in_use) {
      *busy = true;
      return std::nullopt;
    }
    s.in_use = true;
    if (!s.pools.empty() && info.nb_rx_queues == s.queues && info.nb_tx_queues == s.queues &&
        s.name == name) {
      return s;
    }
    orphan_pools_locked(&s.pools);  // stale: its queues are gone
    return std::nullopt;
  }
  PortSetup placeholder;
  placeholder.port = port;
  placeholder.in_use = true;
  g_setups.push_back(placeholder);
  return std::nullopt;
}

// The reserved port now runs on `s` (its queues were set up anew).
void commit_setup(const PortSetup& s) {
  std::lock_guard<std::mutex> g(g_setup_lock);
  for (PortSetup& r : g_setups) {
    if (r.port != s.port) continue;
    for (rte_mempool* pool : r.pools) {
      if (std::find(s.pools.begin(), s.pools.end(), pool) == s.pools.end()) {
        g_orphans.push_back(pool);
      }
    }
    r = s;
    r.in_use = true;
  }
}

// The EthdevPort that reserved the port closes. With `forget` its queues
// are in no known state (a setup that failed half-way): the next open sets
// them up again, and their pool goes once whole.
void unreserve_port(uint16_t port, bool forget) {
  std::lock_guard<std::mutex> g(g_setup_lock);
  for (auto it = g_setups.begin(); it != g_setups.end(); ++it) {
    if (it->port != port) continue;
    it->in_use = false;
    if (forget) {
      orphan_pools_locked(&it->pools);
      g_setups.erase(it);
    }
    return;
  }
}

// Makes the pools (one per queue pair) and sets the port's queues up for
// `want` (configure, MTU, its RX and TX queues). *pools gets each pool once
// made, even when a later step fails. Returns why it failed, or "".
std::string set_up_queues(const PortSetup& want, uint32_t cache, int socket,
                          const std::string& pool_name, const std::string& label,
                          uint32_t config_mtu, const rte_eth_dev_info& info,
                          std::vector<rte_mempool*>* pools) {
  const uint16_t port = want.port;
  const uint32_t room = want.elt_room - RTE_PKTMBUF_HEADROOM;
  for (uint16_t q = 0; q < want.queues; ++q) {
    const std::string name = q == 0 ? pool_name : pool_name + "q" + std::to_string(q);
    rte_mempool* pool = rte_pktmbuf_pool_create(name.c_str(), want.mbufs, cache, 0,
                                                static_cast<uint16_t>(want.elt_room), socket);
    if (pool == nullptr) {
      const uint64_t mb = (uint64_t{want.mbufs} * want.queues * (want.elt_room + 128)) >> 20;
      return "cannot allocate " + std::to_string(want.queues) + " x " + std::to_string(want.mbufs) +
             " mbufs of " + std::to_string(room) + " B (about " + std::to_string(mb) + " MB) for " +
             label + ": " + rte_strerror(rte_errno) +
             ": give the EAL more memory (EalConfig::memory_mb, -m) or lower mbufs, queues or "
             "the MTU";
    }
    pools->push_back(pool);
  }
  // Offloads the engine can use when offered; it computes checksums itself,
  // so their absence costs nothing but CPU.
  rte_eth_conf conf{};
  // Several queues: RSS spreads what arrives where the device can (the
  // engines steer each frame to its connection's engine anyway; see
  // engine/engine_group.h). Shared-memory PMDs deliver on the queue their
  // peer sent on.
  const uint64_t rss = info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP);
  conf.rxmode.mq_mode = want.queues > 1 && rss != 0 ? RTE_ETH_MQ_RX_RSS : RTE_ETH_MQ_RX_NONE;
  conf.rx_adv_conf.rss_conf.rss_hf = conf.rxmode.mq_mode == RTE_ETH_MQ_RX_RSS ? rss : 0;
  conf.rxmode.mtu = want.ethdev_mtu;
  conf.txmode.mq_mode = RTE_ETH_MQ_TX_NONE;
  conf.rxmode.offloads = want.rx_offloads;
  conf.txmode.offloads = want.tx_offloads;
  if (int ret = rte_eth_dev_configure(port, want.queues, want.queues, &conf); ret != 0) {
    return "rte_eth_dev_configure(" + label + ", " + std::to_string(want.queues) +
           " RX and TX queue(s), MTU " + std::to_string(config_mtu) +
           ") failed: " + rte_strerror(-ret) +
           (ret == -EBUSY ? ": the port is started already; is another EthdevPort open on it?"
                          : ": see the PMD's log above");
  }
  // configure recorded the MTU; set_mtu makes PMDs that apply it only there
  // program it. PMDs without the operation keep the recorded value. Not
  // beyond the PMD's reported limit: AF_PACKET would set its kernel
  // interface back to that limit.
  const bool beyond_limit = want.ethdev_mtu != config_mtu;
  if (int ret =
          beyond_limit ? 0 : rte_eth_dev_set_mtu(port, static_cast<uint16_t>(want.ethdev_mtu));
      ret != 0) {
    uint16_t now = 0;
    if (ret != -ENOTSUP || rte_eth_dev_get_mtu(port, &now) != 0 || now != want.ethdev_mtu) {
      return label + " refused MTU " + std::to_string(want.ethdev_mtu) + " (" + rte_strerror(-ret) +
             "); the PMD reports a maximum of " + std::to_string(info.max_mtu) +
             ": use an MTU up to that";
    }
  }
  if (is_driver(info.driver_name ? info.driver_name : "", "net_af_xdp")) {
    if (std::string why = kernel_mtu_check(info, config_mtu, label); !why.empty()) return why;
  }
  rte_eth_rxconf rxconf = info.default_rxconf;
  rxconf.offloads = want.rx_offloads;
  rte_eth_txconf txconf = info.default_txconf;
  txconf.offloads = want.tx_offloads;
  for (uint16_t q = 0; q < want.queues; ++q) {
    if (int ret = rte_eth_rx_queue_setup(port, q, want.rxd, socket, &rxconf, (*pools)[q]);
        ret != 0) {
      return "rte_eth_rx_queue_setup(" + label + ", queue " + std::to_string(q) + ", " +
             std::to_string(want.rxd) + " descriptors, mbufs of " + std::to_string(room) +
             " B) failed: " + rte_strerror(-ret) +
             (ret == -EINVAL ? ": the PMD may need larger buffers for this MTU (raise "
                               "mbuf_data_room) or other descriptor counts"
                             : ": see the PMD's log above");
    }
    if (int ret = rte_eth_tx_queue_setup(port, q, want.txd, socket, &txconf); ret != 0) {
      return "rte_eth_tx_queue_setup(" + label + ", queue " + std::to_string(q) + ", " +
             std::to_string(want.txd) + " descriptors) failed: " + rte_strerror(-ret) +
             ": see the PMD's log above";
    }
  }
  return "";
}

// Mempools are most compact at 2^q - 1 elements.
uint32_t round_pool_size(uint32_t n) {
  uint32_t size = 1023;
  while (size < n) size = size * 2 + 1;
  return size;
}

}  // namespace

std::unique_ptr<EthdevPort> EthdevPort::open(const EthdevPortConfig& config, std::string* error) {
  auto fail = [error](std::string why) -> std::unique_ptr<EthdevPort> {
    if (error) *error = std::move(why);
    return nullptr;
  };
  if (!Eal::initialized() && rte_lcore_count() == 0) {
    return fail("the DPDK EAL is not initialised: call braid::dpdk::Eal::init first");
  }
  // A link handshake (memif's, vhost-user's) runs on the interrupt thread:
  // another port's hold lets it run meanwhile.
  Eal::InterruptsRun handshakes;

  uint16_t port = 0;
  if (std::string why = find_port(config, &port); !why.empty()) return fail(why);
  std::unique_ptr<EthdevPort> p(new EthdevPort());
  p->port_id_ = port;
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  rte_eth_dev_get_name_by_port(port, name);
  p->name_ = name;

  rte_eth_dev_info info{};
  if (int ret = rte_eth_dev_info_get(port, &info); ret != 0) {
    return fail("rte_eth_dev_info_get(port " + std::to_string(port) +
                ") failed: " + rte_strerror(-ret));
  }
  p->driver_ = info.driver_name ? info.driver_name : "?";
  const std::string label = port_label(port, p->name_, p->driver_);
  if (std::string why = missing_single_file_segments(info); !why.empty()) return fail(why);

  // The steps: frame and buffer sizes, queues and pools, start and link.
  uint32_t ethdev_mtu = 0;
  std::string why = p->size_frames(config, info, label, &ethdev_mtu);
  if (why.empty()) why = p->open_queues(config, info, label, ethdev_mtu);
  if (why.empty()) why = p->start(config, info, label);
  if (!why.empty()) return fail(why);
  return p;
}

std::string EthdevPort::find_port(const EthdevPortConfig& config, uint16_t* port_out) {
  uint16_t port = 0;
  if (!config.name.empty()) {
    if (rte_eth_dev_get_port_by_name(config.name.c_str(), &port) != 0) {
      return std::string("no DPDK port named '" + config.name +
                         "'; available ports: " + available_ports());
    }
  } else if (config.port_id) {
    port = *config.port_id;
    if (!rte_eth_dev_is_valid_port(port)) {
      return std::string("no DPDK port with id " + std::to_string(port) +
                         "; available ports: " + available_ports());
    }
  } else {
    return std::string("no port given: set EthdevPortConfig::name or port_id; available ports: " +
                       available_ports());
  }

  *port_out = port;
  return {};
}

std::string EthdevPort::size_frames(const EthdevPortConfig& config, const rte_eth_dev_info& info,
                                    const std::string& label, uint32_t* ethdev_mtu_out) {
  // Frame size the MTU implies, with the PMD's own overhead when it states
  // one (VLAN tags, for instance), as ethdev computes it.
  uint32_t overhead = kDefaultFrameOverhead;
  if (info.max_mtu != UINT16_MAX && info.max_rx_pktlen > info.max_mtu) {
    overhead = info.max_rx_pktlen - info.max_mtu;
  }
  if (config.mtu < info.min_mtu ||
      (config.mtu > info.max_mtu && !jumbo_beyond_reported_limit(info, 0, label).applies)) {
    return std::string("MTU " + std::to_string(config.mtu) + " is outside what " + label +
                       " allows (" + std::to_string(info.min_mtu) + ".." +
                       std::to_string(info.max_mtu) + "): use an MTU in that range");
  }
  const uint32_t frame = config.mtu + overhead;
  // The MTU ethdev is told; Braid sizes its frames to config.mtu.
  uint32_t ethdev_mtu = config.mtu;
  if (frame > info.max_rx_pktlen) {
    const JumboCheck jumbo = jumbo_beyond_reported_limit(info, frame, label);
    if (!jumbo.applies) {
      return std::string("MTU " + std::to_string(config.mtu) + " needs frames of " +
                         std::to_string(frame) + " B but " + label + " accepts at most " +
                         std::to_string(info.max_rx_pktlen) + " B: use an MTU up to " +
                         std::to_string(info.max_rx_pktlen - overhead));
    }
    if (!jumbo.error.empty()) return std::string(jumbo.error);
    ethdev_mtu = std::min<uint32_t>(info.max_mtu, info.max_rx_pktlen - overhead);
  }
  if (config.mbuf_data_room != 0 && config.mbuf_data_room < frame) {
    return std::string("RX buffer smaller than the MTU on " + label + ": an mbuf holds " +
                       std::to_string(config.mbuf_data_room) + " B but MTU " +
                       std::to_string(config.mtu) + " needs frames of " + std::to_string(frame) +
                       " B: set mbuf_data_room >= " + std::to_string(frame) +
                       " (or 0 to size it from the MTU), or lower the MTU");
  }
  uint32_t room = config.mbuf_data_room;
  if (room == 0) room = std::max(kMinDataRoom, (frame + 1023) / 1024 * 1024);
  room = std::max(room, info.min_rx_bufsize);
  if (is_driver(driver_, "net_af_packet") && config.mbuf_data_room == 0) {
    // AF_PACKET copies a whole ring frame (framesz less its 32-byte header)
    // into one mbuf and refuses smaller ones.
    const uint32_t framesz =
        static_cast<uint32_t>(std::strtoul(devarg(info, "framesz", "2048").c_str(), nullptr, 10));
    room = std::max(room, (framesz + 1023) / 1024 * 1024);
  }
  if (is_driver(driver_, "net_af_xdp")) {
    // DPDK 22.11's AF_XDP receives into the mbufs themselves: each is one
    // UMEM chunk, and the kernel puts its own 256 B of XDP headroom in the
    // chunk after the mempool header, the mbuf and its headroom, and drops
    // a longer frame (as imissed). Its reported maximum does not say so:
    // an MTU of 2000 or 3000 lost every full-size frame with mbufs sized
    // for the frame alone.
    const std::string why = af_xdp_sizes(config, frame, info.min_rx_bufsize, label, &room);
    if (!why.empty()) return std::string(why);
  }
  if (room + RTE_PKTMBUF_HEADROOM > UINT16_MAX) {
    return std::string("MTU " + std::to_string(config.mtu) + " needs mbufs of " +
                       std::to_string(room) + " B, more than an mbuf can hold (" +
                       std::to_string(UINT16_MAX - RTE_PKTMBUF_HEADROOM) + " B): lower the MTU");
  }
  mtu_ = config.mtu;
  data_room_ = room;

  *ethdev_mtu_out = ethdev_mtu;
  return {};
}

std::string EthdevPort::open_queues(const EthdevPortConfig& config, const rte_eth_dev_info& info,
                                    const std::string& label, uint32_t ethdev_mtu) {
  const uint16_t port = port_id_;
  const uint16_t most_queues = std::min(info.max_rx_queues, info.max_tx_queues);
  if (config.queues == 0 || config.queues > most_queues) {
    return std::string(std::to_string(config.queues) + " queue pair(s) asked of " + label +
                       ", which has " + std::to_string(most_queues) + ": ask for 1 to " +
                       std::to_string(most_queues) +
                       (is_driver(driver_, "net_memif") || is_driver(driver_, "net_vhost") ||
                                is_driver(driver_, "net_virtio_user")
                            ? " (or give the vdev more queues)"
                            : ""));
  }
  queues_.resize(config.queues);

  uint16_t rxd = config.rx_descriptors;
  uint16_t txd = config.tx_descriptors;
  if (int ret = rte_eth_dev_adjust_nb_rx_tx_desc(port, &rxd, &txd); ret != 0) {
    return std::string("rte_eth_dev_adjust_nb_rx_tx_desc(" + label +
                       ") failed: " + rte_strerror(-ret));
  }
  rx_descriptors_ = rxd;
  tx_descriptors_ = txd;

  // Both rings full, a burst in each direction in the engine's hands, and
  // as much again for frames a same-process peer (ring PMD) still holds.
  const uint32_t mbufs =
      config.mbufs ? config.mbufs : round_pool_size(2u * (rxd + txd) + 4u * kMaxBurst);
  const uint32_t cache = std::min<uint32_t>(kMempoolCache, mbufs / 2);
  static std::atomic<uint32_t> pool_serial{0};
  const std::string pool_name =
      "braid_p" + std::to_string(port) + "_" + std::to_string(pool_serial++);
  int socket = rte_eth_dev_socket_id(port);
  if (socket < 0) socket = SOCKET_ID_ANY;
  rx_offloads_ = info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
  tx_offloads_ =
      info.tx_offload_capa & (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_MULTI_SEGS);
  PortSetup want;
  want.port = port;
  want.name = name_;
  want.mbufs = mbufs;
  want.elt_room = data_room_ + RTE_PKTMBUF_HEADROOM;
  want.ethdev_mtu = ethdev_mtu;
  want.rxd = rxd;
  want.txd = txd;
  want.queues = config.queues;
  want.rx_offloads = rx_offloads_;
  want.tx_offloads = tx_offloads_;
  bool busy = false;
  std::optional<PortSetup> had = reserve_port(port, name_, info, &busy);
  if (busy) {
    return std::string(label +
                       " is open already (another EthdevPort runs on it in this process): close "
                       "that one first, or share it");
  }
  reserved_ = true;
  if (had && had->same_queues(want)) {
    // Set up by an earlier open: start it again as it is.
    for (uint16_t q = 0; q < config.queues; ++q) queues_[q].pool = had->pools[q];
    setup_kept_ = true;
  } else {
    std::vector<rte_mempool*> pools;
    std::string why =
        set_up_queues(want, cache, socket, pool_name, label, config.mtu, info, &pools);
    for (size_t q = 0; q < pools.size(); ++q) queues_[q].pool = pools[q];
    if (!why.empty()) return std::string(why);
    // The old queues' pools, if any, go once their buffers are back.
    want.pools = pools;
    commit_setup(want);
    setup_kept_ = true;
    free_whole_orphans();
  }

  // External payloads where the PMD copies frames out within tx_burst and
  // takes chains: memif in copy mode (its zero-copy mode hands our mbufs'
  // memory to the peer, which cannot reach the application's).
  if (config.tx_external && is_driver(driver_, "net_memif") && devarg(info, "zero-copy") != "yes" &&
      (tx_offloads_ & RTE_ETH_TX_OFFLOAD_MULTI_SEGS)) {
    for (uint16_t q = 0; q < config.queues; ++q) {
      const std::string name = "braid_x" + std::to_string(port) + "_" +
                               std::to_string(pool_serial++) + "q" + std::to_string(q);
      // Each carries the shared info of the buffer it is attached to.
      const auto priv = static_cast<uint16_t>(
          RTE_ALIGN_CEIL(sizeof(rte_mbuf_ext_shared_info), RTE_MBUF_PRIV_ALIGN));
      queues_[q].ext_pool =
          rte_pktmbuf_pool_create(name.c_str(), round_pool_size(2u * txd + 2u * kMaxBurst),
                                  std::min<uint32_t>(kMempoolCache, txd), priv, 0, socket);
      if (queues_[q].ext_pool == nullptr) {
        return std::string("cannot allocate the mbufs that carry payloads in place for " + label +
                           ": " + rte_strerror(rte_errno) +
                           ": give the EAL more memory, or set tx_external false");
      }
    }
    tx_external_ = true;
  }

  return {};
}

std::string EthdevPort::start(const EthdevPortConfig& config, const rte_eth_dev_info& info,
                              const std::string& label) {
  const uint16_t port = port_id_;
  // A memif client connects at start and does not retry by itself: a server
  // that is not listening yet (its socket file made a moment before its
  // listen) is retried within the link wait.
  const bool retries =
      config.require_link_up && is_driver(driver_of(info), "net_memif") && memif_client(info);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(config.link_wait_ms);
  for (;;) {
    const int ret = rte_eth_dev_start(port);
    if (ret == 0) break;
    if (!retries || std::chrono::steady_clock::now() >= deadline) {
      return std::string(start_failure(ret, info, label));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  started_ = true;

  // Frames for other MACs are not ours; promiscuous only when asked (a
  // capture, or a peer that does not know our MAC). Not every PMD has the
  // switch, which is fine for the default.
  const int promisc =
      config.promiscuous ? rte_eth_promiscuous_enable(port) : rte_eth_promiscuous_disable(port);
  if (promisc != 0 && (config.promiscuous || promisc != -ENOTSUP)) {
    return std::string("cannot turn promiscuous mode " +
                       std::string(config.promiscuous ? "on" : "off") + " on " + label + ": " +
                       rte_strerror(-promisc));
  }

  rte_ether_addr addr{};
  if (int ret = rte_eth_macaddr_get(port, &addr); ret != 0) {
    return std::string("rte_eth_macaddr_get(" + label + ") failed: " + rte_strerror(-ret));
  }
  std::memcpy(mac_.data(), addr.addr_bytes, mac_.size());

  // Links come up asynchronously (memif and vhost after a handshake); wait a
  // bounded time rather than return a port that silently drops.
  if (config.require_link_up) {
    // A memif handshake that went nowhere (seen 2 in 10 loopback starts on
    // a loaded host) is started again: stop and start reconnect the client.
    constexpr auto kHandshakeGiveUp = std::chrono::milliseconds(500);
    auto attempt = std::chrono::steady_clock::now();
    while (!link_up() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const auto now = std::chrono::steady_clock::now();
      if (retries && !link_up() && now - attempt >= kHandshakeGiveUp && now < deadline) {
        ++reconnects_;
        Eal::run_on_interrupt_thread([](void* q) { rte_eth_dev_stop(*static_cast<uint16_t*>(q)); },
                                     &port_id_);
        Eal::drain_interrupts();
        while (rte_eth_dev_start(port) != 0 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        attempt = std::chrono::steady_clock::now();
      }
    }
    if (!link_up()) {
      return std::string("link of " + label + " still down " + std::to_string(config.link_wait_ms) +
                         " ms after start: " + link_down_hint(info));
    }
  }
  return {};
}

EthdevPort::~EthdevPort() {
  SigpipeGuard no_sigpipe;
  // No burst runs any more: the peer's disconnect may be handled now.
  if (events_held_) Eal::resume_interrupts();
  if (started_) {
    // Frames still in the RX queue stay there: the queue and its pool
    // outlive this port (PortSetup), and the next open reads them. (Reading
    // them here raced a memif peer's disconnect, which the interrupt thread
    // handles by unmapping the rings: a SEGV in rx_burst under load.)
    Eal::run_on_interrupt_thread([](void* p) { rte_eth_dev_stop(*static_cast<uint16_t*>(p)); },
                                 &port_id_);
    // Stopping a memif or vhost port raises events (its peer's disconnect)
    // that the interrupt thread handles with the port's state: let it, so
    // the next close or removal does not pull that state from under it.
    Eal::drain_interrupts();
  }
  release_pool();
}

void EthdevPort::release_pool() {
  // A pool the port's queues run on stays with them (see PortSetup); one a
  // failed open made goes, once its buffers are back.
  if (reserved_) unreserve_port(port_id_, /*forget=*/!setup_kept_);
  for (Queue& q : queues_) {
    // tx_burst frees every external mbuf before it returns.
    if (q.ext_pool != nullptr) {
      if (rte_mempool_full(q.ext_pool)) {
        rte_mempool_free(q.ext_pool);
      } else {
        orphan_pool(q.ext_pool);
      }
      q.ext_pool = nullptr;
    }
    if (q.pool != nullptr && !setup_kept_) {
      if (rte_mempool_full(q.pool)) {
        rte_mempool_free(q.pool);
      } else {
        orphan_pool(q.pool);
      }
    }
    q.pool = nullptr;
  }
  free_whole_orphans();
}

namespace {

// An mbuf goes from thread to thread through DPDK's rings and mempools,
// which ThreadSanitizer does not see (Debian's DPDK is not instrumented):
// each hand-off is told to it, the sender's side released, the taker's
// acquired, so engines on several threads are checked without false
// reports. Nothing at all in other builds.
#if defined(__SANITIZE_THREAD__)
#define BRAID_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BRAID_TSAN 1
#endif
#endif
#ifdef BRAID_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
inline void handed_over(rte_mbuf* m) {
  __tsan_release(m);
}
inline void taken_over(rte_mbuf* m) {
  __tsan_acquire(m);
}
#else
inline void handed_over(rte_mbuf*) {}
inline void taken_over(rte_mbuf*) {}
#endif

}  // namespace

uint16_t EthdevPort::rx_burst_on(uint16_t queue, RxFrame* frames, uint16_t n) {
  Queue& q = queues_[queue];
  rte_mbuf* mbufs[kMaxBurst];
  const uint16_t got = rte_eth_rx_burst(port_id_, queue, mbufs, std::min(n, kMaxBurst));
  uint16_t out = 0;
  for (uint16_t i = 0; i < got; ++i) {
    rte_mbuf* m = mbufs[i];
    taken_over(m);
    // The engine reads a frame as one contiguous view; a chain means a PMD
    // split it (memif with buffers smaller than the frame).
    if (unlikely(m->nb_segs != 1)) {
      handed_over(m);
      rte_pktmbuf_free(m);
      ++q.rx_chained_dropped;
      continue;
    }
    frames[out].data = rte_pktmbuf_mtod(m, const uint8_t*);
    frames[out].len = m->data_len;
    frames[out].handle = m;
    ++out;
  }
  q.rx_frames += out;
  return out;
}

namespace {

// Returns the mbufs behind received or unsent frames to their pool in bulk.
template <typename Frame>
void free_frames(Frame* frames, uint16_t n) {
  rte_mbuf* mbufs[EthdevPort::kMaxBurst];
  while (n > 0) {
    const uint16_t k = std::min(n, EthdevPort::kMaxBurst);
    for (uint16_t i = 0; i < k; ++i) {
      mbufs[i] = static_cast<rte_mbuf*>(frames[i].handle);
      handed_over(mbufs[i]);
    }
    rte_pktmbuf_free_bulk(mbufs, k);
    frames += k;
    n -= k;
  }
}

}  // namespace

void EthdevPort::rx_release(RxFrame* frames, uint16_t n) {
  free_frames(frames, n);
}

uint16_t EthdevPort::tx_alloc_on(uint16_t queue, TxFrame* frames, uint16_t n) {
  rte_mempool* pool = queues_[queue].pool;
  rte_mbuf* mbufs[kMaxBurst];
  n = std::min(n, kMaxBurst);
  // rte_pktmbuf_alloc_bulk in two steps (take, reset), so that ThreadSanitizer
  // learns of the hand-over before the reset writes the mbuf.
  void** objs = reinterpret_cast<void**>(mbufs);
  if (rte_mempool_get_bulk(pool, objs, n) != 0) {
    // Bulk allocation is all or nothing; hand out what is left.
    n = static_cast<uint16_t>(std::min<uint32_t>(n, rte_mempool_avail_count(pool)));
    if (n == 0 || rte_mempool_get_bulk(pool, objs, n) != 0) return 0;
  }
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = mbufs[i];
    taken_over(m);
    rte_pktmbuf_reset(m);
    frames[i].data = rte_pktmbuf_mtod(m, uint8_t*);
    frames[i].cap = rte_pktmbuf_tailroom(m);
    frames[i].len = 0;
    frames[i].handle = m;
    frames[i].ext = nullptr;
    frames[i].ext_len = 0;
  }
  return n;
}

namespace {

void no_free(void*, void*) {}

// Copies a frame's external payload in after its headers: it is whole.
void make_whole(TxFrame& f) {
  assert(f.len + f.ext_len <= f.cap);
  std::memcpy(f.data + f.len, f.ext, f.ext_len);
  f.len += f.ext_len;
  f.ext = nullptr;
  f.ext_len = 0;
}

}  // namespace

uint16_t EthdevPort::tx_burst_on(uint16_t queue, TxFrame* frames, uint16_t n) {
  Queue& q = queues_[queue];
  rte_mbuf* mbufs[kMaxBurst];
  uint16_t queued = 0;
  while (n > 0) {
    const uint16_t k = std::min(n, kMaxBurst);
    uint16_t external = 0;
    for (uint16_t i = 0; i < k; ++i) {
      TxFrame& f = frames[i];
      rte_mbuf* m = static_cast<rte_mbuf*>(f.handle);
      rte_mbuf* x = nullptr;
      if (f.ext_len > 0) {
        // The payload stays where it is: a second segment attached to it.
        x = q.ext_pool != nullptr ? rte_pktmbuf_alloc(q.ext_pool) : nullptr;
        if (x == nullptr) {
          make_whole(f);
        } else {
          auto* shinfo = static_cast<rte_mbuf_ext_shared_info*>(rte_mbuf_to_priv(x));
          shinfo->free_cb = no_free;
          shinfo->fcb_opaque = nullptr;
          rte_mbuf_ext_refcnt_set(shinfo, 1);
          rte_pktmbuf_attach_extbuf(x, const_cast<uint8_t*>(f.ext), RTE_BAD_IOVA,
                                    static_cast<uint16_t>(f.ext_len), shinfo);
          x->data_len = static_cast<uint16_t>(f.ext_len);
          x->pkt_len = f.ext_len;
          ++external;
        }
      }
      assert(f.len <= f.cap);
      m->data_len = static_cast<uint16_t>(f.len);
      m->pkt_len = f.len + (x != nullptr ? f.ext_len : 0);
      m->next = x;
      m->nb_segs = x != nullptr ? 2 : 1;
      handed_over(m);
      mbufs[i] = m;
    }
    const uint16_t sent = rte_eth_tx_burst(port_id_, queue, mbufs, k);
    queued += sent;
    for (uint16_t i = 0; i < sent; ++i) q.tx_external += frames[i].ext_len > 0;
    if (unlikely(sent < k)) {
      q.tx_ring_full += k - sent;
      // What the ring did not take goes back whole: nothing refers to the
      // application's memory once this returns.
      for (uint16_t i = sent; i < n; ++i) {
        TxFrame& f = frames[i];
        if (f.ext_len == 0) continue;
        if (i < k) {
          rte_mbuf* m = static_cast<rte_mbuf*>(f.handle);
          taken_over(m);
          rte_pktmbuf_free_seg(m->next);
          m->next = nullptr;
          m->nb_segs = 1;
        }
        make_whole(f);
      }
      (void)external;
      break;  // the rest stay the caller's
    }
    frames += k;
    n -= k;
  }
  q.tx_frames += queued;
  return queued;
}

void EthdevPort::tx_free(TxFrame* frames, uint16_t n) {
  free_frames(frames, n);
}

bool EthdevPort::hold_events() {
  return Eal::pause_interrupts();
}

void EthdevPort::release_events() {
  Eal::resume_interrupts();
}

void EthdevPort::hold_events_until_close() {
  // Only memif's handlers unmap what a burst reads (the others' events are
  // link states and their peers' messages: leave them be).
  if (events_held_ || !is_driver(driver_, "net_memif")) return;
  // Not parked in time (a stuck thread): bursts go on unprotected.
  events_held_ = Eal::pause_interrupts();
}

bool EthdevPort::link_up() const {
  rte_eth_link link{};
  return rte_eth_link_get_nowait(port_id_, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

uint32_t EthdevPort::link_mbps() const {
  // A host-local PMD's speed is a constant of its own (vhost, ring and null
  // say 10 Gb/s; memif and virtio-user nothing): the frames move at memory
  // speed. Taken for the link's, vhost's 10 Gb/s capped NSCC's window at a
  // tenth of the others' and what a vhost port sent (READ responses) at
  // 6.5 GB/s. Unknown, the device takes its default.
  if (host_local()) return 0;
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_id_, &link) != 0 || link.link_speed == RTE_ETH_SPEED_NUM_NONE ||
      link.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN) {
    return 0;
  }
  return link.link_speed;
}

namespace {
thread_local bool t_registered = false;  // this thread was given an lcore by attach_thread
}  // namespace

void EthdevPort::attach_thread() {
  if (rte_lcore_id() != LCORE_ID_ANY) return;  // an EAL thread already
  // An lcore id gives the thread its own mempool caches. Without a free id
  // it works on, through the shared pool.
  if (rte_thread_register() == 0) t_registered = true;
}

void EthdevPort::detach_thread() {
  if (!t_registered) return;
  rte_thread_unregister();
  t_registered = false;
}

PacketIoStats EthdevPort::stats() const {
  PacketIoStats s;
  for (const Queue& q : queues_) {
    s.rx_frames += q.rx_frames;
    s.tx_frames += q.tx_frames;
    s.tx_ring_full += q.tx_ring_full;
    s.rx_missed += q.rx_chained_dropped;
    s.tx_external += q.tx_external;
  }
  rte_eth_stats st{};
  if (rte_eth_stats_get(port_id_, &st) == 0) {
    s.rx_missed += st.imissed + st.rx_nombuf;
    s.tx_dropped = st.oerrors;
  }
  return s;
}

uint32_t EthdevPort::pool_available() const {
  uint32_t n = 0;
  for (const Queue& q : queues_) n += q.pool ? rte_mempool_avail_count(q.pool) : 0;
  return n;
}

uint64_t EthdevPort::rx_chained_dropped() const {
  uint64_t n = 0;
  for (const Queue& q : queues_) n += q.rx_chained_dropped;
  return n;
}

uint64_t EthdevPort::tx_ring_full() const {
  uint64_t n = 0;
  for (const Queue& q : queues_) n += q.tx_ring_full;
  return n;
}

// One queue pair of a port as a PacketIo of its own.
class EthdevQueue final : public PacketIo {
 public:
  EthdevQueue(EthdevPort* port, uint16_t queue) : port_(port), queue_(queue) {}
  uint16_t rx_burst(RxFrame* frames, uint16_t n) override {
    return port_->rx_burst_on(queue_, frames, n);
  }
  void rx_release(RxFrame* frames, uint16_t n) override { port_->rx_release(frames, n); }
  uint16_t tx_alloc(TxFrame* frames, uint16_t n) override {
    return port_->tx_alloc_on(queue_, frames, n);
  }
  uint16_t tx_burst(TxFrame* frames, uint16_t n) override {
    return port_->tx_burst_on(queue_, frames, n);
  }
  void tx_free(TxFrame* frames, uint16_t n) override { port_->tx_free(frames, n); }
  wire::MacAddr mac() const override { return port_->mac(); }
  uint32_t max_frame() const override { return port_->max_frame(); }
  bool link_up() const override { return port_->link_up(); }
  uint32_t link_mbps() const override { return port_->link_mbps(); }
  // This queue's frames; frames the device missed are the port's (stats()).
  PacketIoStats stats() const override { return port_->queue_stats(queue_); }
  std::string describe() const override {
    return port_->describe() + ", queue " + std::to_string(queue_) + " of " +
           std::to_string(port_->queues());
  }
  bool host_local() const override { return port_->host_local(); }
  bool tx_external() const override { return port_->tx_external(); }
  void attach_thread() override { port_->attach_thread(); }
  void detach_thread() override { port_->detach_thread(); }
  bool hold_events() override { return port_->hold_events(); }
  void release_events() override { port_->release_events(); }
  void hold_events_until_close() override { port_->hold_events_until_close(); }

 private:
  EthdevPort* port_;
  uint16_t queue_;
};

std::unique_ptr<PacketIo> EthdevPort::queue(uint16_t q) {
  if (q >= queues_.size()) return nullptr;
  return std::make_unique<EthdevQueue>(this, q);
}

PacketIoStats EthdevPort::queue_stats(uint16_t queue) const {
  const Queue& q = queues_[queue];
  PacketIoStats s;
  s.rx_frames = q.rx_frames;
  s.tx_frames = q.tx_frames;
  s.tx_ring_full = q.tx_ring_full;
  s.rx_missed = q.rx_chained_dropped;
  s.tx_external = q.tx_external;
  return s;
}

bool EthdevPort::host_local() const {
  for (const char* d : {"net_memif", "net_vhost", "net_virtio_user", "net_ring", "net_null"}) {
    if (is_driver(driver_, d)) return true;
  }
  return false;
}

std::string EthdevPort::describe() const {
  std::ostringstream out;
  out << "dpdk " << port_label(port_id_, name_, driver_) << ": MTU " << mtu_ << ", ";
  // rte_eth_link_to_str is still experimental in DPDK 22.11.
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_id_, &link) != 0) {
    out << "link unknown";
  } else if (link.link_status != RTE_ETH_LINK_UP) {
    out << "link down";
  } else {
    out << "link up";
    if (host_local()) {
      // Its PMD's figure is not a link's (link_mbps): say so, not the figure.
      out << ", host-local (no link rate)";
    } else if (link.link_speed != RTE_ETH_SPEED_NUM_NONE &&
               link.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN) {
      out << " " << link.link_speed << " Mb/s";
    }
    out << (link.link_duplex == RTE_ETH_LINK_FULL_DUPLEX ? " full-duplex" : " half-duplex");
  }
  if (queues_.size() > 1) out << ", " << queues_.size() << " queue pairs";
  const rte_mempool* pool = queues_.empty() ? nullptr : queues_[0].pool;
  out << ", mbufs " << (pool ? pool->size : 0) << " x " << data_room_ << " B"
      << (queues_.size() > 1 ? " each" : "") << ", rxd " << rx_descriptors_ << " txd "
      << tx_descriptors_ << ", offloads rx " << offload_names(rx_offloads_, true) << " tx "
      << offload_names(tx_offloads_, false)
      << (tx_external_ ? ", payloads sent from registered memory" : ", payloads copied into mbufs");
  return out.str();
}

}  // namespace braid::dpdk
