// A datacenter fabric in virtual time: hosts running Braid's real protocol
// core (Endpoint/Connection, the same code as the DPDK datapath) joined by
// switches with per-egress-port FIFOs, ECN marking (WRED), drop-tail or
// UET-style trimming, and ECMP on a 5-tuple hash with a per-switch seed, so
// a packet's UDP source port (its entropy) picks its path at every hop.
//
// Discrete events on one heap; frames live in a pool of fixed-size slots
// linked through the queues (no allocation per packet once the pool has
// grown to the fabric's occupancy). Topology builders are in topology.h,
// workloads in workload.h.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/endpoint.h"
#include "model/class_queue.h"

namespace braid::fabric {

inline constexpr int kNone = -1;

struct SwitchConfig {
  uint32_t buffer_bytes = 175'000;  // per egress port
  // ECN by WRED on the queue in bytes: no mark below kmin, probability
  // rising linearly to pmax at kmax, every ECT packet marked above. 0: off.
  uint32_t ecn_kmin_bytes = 0;
  uint32_t ecn_kmax_bytes = 0;
  double ecn_pmax = 1.0;
  bool ecn_at_dequeue = false;  // mark on the queue a packet leaves, not finds
  // A full queue trims a data packet to its headers (trimmed_bytes of frame)
  // and forwards it in the priority class, instead of dropping it.
  bool trim = false;
  uint32_t trimmed_bytes = 106;  // Ethernet, IP, UDP and 64 bytes of UET headers
  uint8_t trim_dscp = 0x0b;
  TimeNs latency_ns = 0;  // forwarding latency, added to each packet
  // Per-packet adaptive routing (for comparison with ECMP): each packet
  // takes the member of its equal-cost group with the shortest queue (ties
  // broken by the ECMP hash), whatever its entropy.
  bool adaptive_routing = false;
  // Lossless (PFC): data queues never drop; when the data a switch holds
  // from one ingress link passes xoff bytes it pauses that link's sender
  // (after the link's delay), and resumes it below xon. ACKs and other
  // control frames travel in a class that is never paused.
  bool pfc = false;
  uint32_t pfc_xoff_bytes = 0;
  uint32_t pfc_xon_bytes = 0;
};

// WRED: the probability that an ECT packet meeting `queued` bytes is marked.
double wred_probability(uint64_t queued, const SwitchConfig& cfg);

struct LinkSpec {
  double gbps = 100.0;
  TimeNs delay_ns = 1000;
};

// One direction of a link: the egress port of `node` towards `peer`.
struct PortStats {
  uint64_t packets = 0;  // started on the wire
  uint64_t bytes = 0;
  uint64_t dropped = 0;  // full queue (or priority class full)
  uint64_t dropped_down = 0;
  uint64_t dropped_loss = 0;  // random loss, silent failure
  uint64_t trimmed = 0;
  uint64_t ecn_marked = 0;
  uint64_t peak_queue_bytes = 0;
  uint64_t pauses = 0;   // PFC pauses this port received
  TimeNs paused_ns = 0;  // time spent paused (PFC)
};

struct FabricStats {
  uint64_t events = 0;
  uint64_t packets_delivered = 0;  // to hosts
  uint64_t dropped = 0;
  uint64_t trimmed = 0;
  uint64_t ecn_marked = 0;
  uint64_t bytes_lost = 0;  // frame bytes dropped by the fabric
  uint64_t pauses = 0;      // PFC pause frames sent
  TimeNs paused_ns = 0;     // summed over ports
};

class Fabric {
 public:
  // max_frame: the largest frame a host sends (payload MTU plus headers).
  explicit Fabric(uint64_t seed, uint32_t max_frame = 4352);

  // Hosts must outlive the fabric. Each host's IPv4 address must be unique.
  int add_host(Endpoint* ep);
  int add_switch(const SwitchConfig& cfg);
  // A full-duplex link; returns the egress port of a towards b (b's towards
  // a is that + 1).
  int connect(int a, int b, const LinkSpec& spec);
  // After the topology is complete: ECMP groups of equal-cost next hops from
  // every switch towards every host.
  void build_routes();

  // Runs events until done() is true (checked after each event) or the
  // virtual time passes `until`. Returns whether done() became true.
  bool run(const std::function<bool()>& done, TimeNs until);
  TimeNs now() const { return now_; }
  // A host that has something new to send (a post) or whose timers moved.
  void kick(int host);
  // Calls fn at virtual time `at` (a flow's start, a link event).
  void at(TimeNs when, std::function<void()> fn);
  // Called after the fabric delivered frames to or took frames from a host
  // (its completion queues may have moved).
  std::function<void(int host)> on_host_activity;

  // Link events, on one direction of a link (its egress port):
  // - down: the port drops what it would send, and its switch stops
  //   choosing it (local failover: other switches do not know);
  // - rate: a degraded link serialises slower;
  // - loss: each frame is lost with this probability and nobody is told;
  //   1.0 is a silent (gray) failure: up, chosen by ECMP, dropping all.
  void set_port_up(int port, bool up);
  void set_port_rate(int port, double gbps);
  void set_port_loss(int port, double probability);
  bool port_up(int port) const { return ports_[port].up; }
  int port_count() const { return static_cast<int>(ports_.size()); }
  int host_count() const { return static_cast<int>(hosts_.size()); }
  int node_of_host(int host) const { return hosts_[host].node; }
  // The egress port of a host's NIC, and of a node towards a neighbour.
  int host_port(int host) const { return nodes_[hosts_[host].node].ports.at(0); }
  int port_between(int node, int peer) const;
  int port_peer(int port) const { return ports_[port].peer; }
  // A node's egress ports (a host's: one per plane).
  const std::vector<int>& ports_of(int node) const { return nodes_[node].ports; }
  const PortStats& port_stats(int port) const { return ports_[port].stats; }
  uint64_t queue_bytes(int port) const { return ports_[port].queue.queued_bytes(); }
  const FabricStats& stats() const { return stats_; }
  // The ECMP choice a switch makes for a frame (tests).
  int route(int node, const uint8_t* frame) const;
  // The egress ports a UDP frame between two hosts would take now, from
  // the source's NIC to the port into the destination (shorter if a switch
  // has no route).
  std::vector<int> trace(int src_host, int dst_host, uint16_t src_port, uint16_t dst_port) const;
  // The marking decision a switch makes at queue `queued` (draws from the
  // fabric's generator, as the ports do).
  bool wred_mark(uint64_t queued, const SwitchConfig& cfg);
  size_t packets_allocated() const { return slot_len_.size(); }

 private:
  struct Port {
    int node = kNone, peer = kNone;
    double bytes_per_ns = 12.5;
    TimeNs delay_ns = 1000;
    bool up = true;
    bool busy = false;
    double carry_ns = 0;  // serialisation time owed below a nanosecond
    double loss = 0;
    // PFC: this port's sender is paused (its data class); the switch at its
    // far end holds `ingress_bytes` of data that came through it.
    bool paused = false;
    TimeNs paused_since = 0;
    uint64_t ingress_bytes = 0;
    bool pause_sent = false;
    // Priority (trimmed headers, ACKs) and data, linked through the slots.
    model::ClassQueue queue;
    PortStats stats;
  };
  struct Node {
    bool is_switch = false;
    int host = kNone;  // index into hosts_
    int sw = kNone;    // index into switches_
    std::vector<int> ports;
  };
  struct Host {
    Endpoint* ep = nullptr;
    int node = kNone;
    TimeNs wake_at = kNever;  // the timer event scheduled for it
  };
  struct Switch {
    SwitchConfig cfg;
    uint64_t seed = 0;
    std::vector<uint32_t> route;  // per destination host: ECMP group index
  };
  enum class Ev : uint8_t { kDeliver, kTxDone, kHostTimer, kCall, kPause, kResume };
  struct Event {
    TimeNs at;
    uint64_t seq;
    uint32_t a, b;
    Ev kind;
  };
  static constexpr uint32_t kNil = 0xffffffffu;

  int nic_port(const std::vector<int>& nic, const uint8_t* frame) const;
  void push(TimeNs at, Ev kind, uint32_t a, uint32_t b = 0);
  uint32_t alloc_slot();
  void free_slot(uint32_t s) {
    slot_next_[s] = free_;
    free_ = s;
  }
  uint8_t* data(uint32_t s) { return &slots_[size_t{s} * slot_bytes_]; }
  const uint8_t* data(uint32_t s) const { return &slots_[size_t{s} * slot_bytes_]; }
  void deliver(int port, uint32_t slot);
  void enqueue(int port, uint32_t slot);
  void start_tx(int port);
  void maybe_mark_ce(int port, uint32_t slot, const SwitchConfig& cfg);
  void pfc_account(int in_port, int64_t delta);
  void set_paused(int port, bool paused);
  void host_send(int host);
  void schedule_host_timer(int host);
  int host_of_ip(uint32_t ip) const;

  std::mt19937_64 rng_;
  TimeNs now_ = 0;
  uint64_t seq_ = 0;
  std::vector<Event> heap_;
  std::vector<std::function<void()>> calls_;
  std::vector<uint32_t> free_calls_;
  std::vector<Node> nodes_;
  std::vector<Host> hosts_;
  std::vector<Switch> switches_;
  std::vector<Port> ports_;
  std::vector<std::vector<int>> groups_;  // ECMP groups of egress ports
  uint32_t ip_base_ = 0;
  std::vector<int> host_by_ip_offset_;  // host index by ip - ip_base_
  // Packet slots.
  uint32_t slot_bytes_;
  std::vector<uint8_t> slots_;
  std::vector<uint32_t> slot_len_, slot_next_;
  std::vector<int32_t> slot_in_;  // the port a switch received the frame from
  uint32_t free_ = kNil;
  FabricStats stats_;
};

}  // namespace braid::fabric
