// A deterministic, seeded, virtual-time network for tests, benchmarks and the
// simulated main job. Hosts are Braid Endpoints; each pair of hosts is joined
// by a link of several parallel paths, and ECMP picks a path from the UDP
// source port (the entropy). Paths are FIFO with their own delay, rate and
// queue; the link adds impairments: random and bursty loss, duplication,
// corruption, trimming (payload cut, DSCP re-marked), ECN marking, and paths
// or whole links cut.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <random>
#include <vector>

#include "core/endpoint.h"

namespace braid::sim {

struct PathConfig {
  TimeNs delay_ns = 5'000;
  double gbps = 100.0;
  uint32_t queue_bytes = 4u << 20;  // beyond: trim (if enabled) or drop
  uint32_t ecn_kmin_bytes = 0;      // 0: no ECN marking
  uint32_t ecn_kmax_bytes = 0;
};

struct Impairments {
  double loss = 0.0;  // independent loss probability per frame
  // Bursty loss (Gilbert-Elliott in time): each frame starts a burst with
  // probability burst_enter; a burst lasts an exponential time of mean
  // burst_mean_ns, during which frames are lost with probability burst_loss.
  double burst_enter = 0.0;
  TimeNs burst_mean_ns = 20'000;
  double burst_loss = 1.0;
  double duplicate = 0.0;
  double corrupt = 0.0;           // flip one random byte of the frame
  double trim = 0.0;              // random trimming probability
  bool trim_on_overflow = false;  // a full queue trims instead of dropping
  uint8_t trim_dscp = 0x0b;       // DSCP put on trimmed frames
  uint32_t trimmed_size = 106;    // frame bytes kept (L2-L4 + 64)
};

struct LinkConfig {
  std::vector<PathConfig> paths = std::vector<PathConfig>(1);
  Impairments impair;
  double host_gbps = 100.0;  // NIC rate of each end
};

struct LinkStats {
  uint64_t frames = 0;
  uint64_t dropped_loss = 0;
  uint64_t dropped_queue = 0;
  uint64_t dropped_down = 0;
  uint64_t duplicated = 0;
  uint64_t corrupted = 0;
  uint64_t trimmed = 0;
  uint64_t ecn_marked = 0;
  std::vector<uint64_t> per_path;
  uint64_t lost() const { return dropped_loss + dropped_queue + dropped_down; }
};

class SimNetwork {
 public:
  explicit SimNetwork(uint64_t seed) : rng_(seed) {}

  // Hosts must outlive the network. Returns the host index.
  int add_host(Endpoint* ep);
  // Joins two hosts with the same configuration in both directions.
  void connect(int a, int b, const LinkConfig& cfg);
  void set_path_up(int from, int to, size_t path, bool up);
  void set_link_up(int a, int b, bool up);  // both directions, every path
  // Drops `count` consecutive frames from `from` to `to`, starting with the
  // frame after the next `skip` (a burst loss of an exact length).
  void drop_burst(int from, int to, uint64_t skip, uint64_t count);

  // Runs until done() is true, or the virtual time reaches `until`. Returns
  // true when done() became true. Time only moves forward.
  bool run(const std::function<bool()>& done, TimeNs until);
  TimeNs now() const { return now_; }
  const LinkStats& link_stats(int from, int to) const;
  // Path an entropy maps to on a link (the ECMP hash).
  static size_t path_of(uint16_t entropy, size_t paths);

 private:
  struct Path {
    PathConfig cfg;
    TimeNs busy_until = 0;
    bool up = true;
  };
  struct Link {
    int to = -1;
    std::vector<Path> paths;
    Impairments impair;
    TimeNs burst_until = 0;
    uint64_t drop_from = 0, drop_until = 0;  // frame numbers (stats.frames) to drop
    LinkStats stats;
  };
  struct Host {
    Endpoint* ep = nullptr;
    double gbps = 100.0;
    TimeNs nic_busy_until = 0;
    std::vector<int> links;  // index into links_ per destination host, -1 none
  };
  struct Delivery {
    TimeNs at;
    uint64_t seq;
    int host;
    std::vector<uint8_t> frame;
    bool operator>(const Delivery& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  void send_from(int h, const uint8_t* frame, uint32_t len);
  void enqueue(Link& l, int to, std::vector<uint8_t> frame);
  bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  Link* link_between(int from, int to);

  std::mt19937_64 rng_;
  TimeNs now_ = 0;
  uint64_t seq_ = 0;
  std::vector<Host> hosts_;
  std::vector<Link> links_;
  std::priority_queue<Delivery, std::vector<Delivery>, std::greater<Delivery>> in_flight_;
  std::vector<uint8_t> txbuf_ = std::vector<uint8_t>(16384);
};

}  // namespace braid::sim
