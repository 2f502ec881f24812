// A software switch for real datapaths, sans-IO: host ports on one side,
// and between every two of them a set of parallel core links (a leaf-spine
// fabric folded into one box), chosen per packet by an ECMP hash of the
// 5-tuple, so a packet's UDP source port (its entropy) picks its path. A
// core link is full duplex, as a fabric's links are: one queue carries the
// frames bound for a higher-numbered port than the one they came in on, the
// other the rest, so ACKs coming back do not share the data's queue (with
// servers on even ports and their clients on the next odd one, every
// client's data to its server crosses the same direction of a link). Each
// direction of a core link and each host port's egress has a queue with a
// rate, a buffer,
// WRED ECN marking, drop-tail or trimming, random loss, and a state (up;
// down: routing stops using it; blackhole: routing keeps using it and it
// drops everything). What is done to a frame (hash, marking, trimming) is
// the fabric simulator's (model/switch_rules.h, model/class_queue.h).
//
// Fed with frames and time, it says which frame leaves which port when: the
// DPDK app (apps/braid_switch) polls ports and copies frames in and out;
// tests drive it directly. Frames sit in a pool of fixed-size slots linked
// through the queues: no allocation per frame.
//
// Forwarding is Ethernet learning: a frame goes to the port its destination
// MAC was last seen on; broadcasts and unknown destinations go to every
// other port (straight to their egress queues). IPv4 frames between two
// known ports cross a core link; others go straight to the egress queue.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/types.h"
#include "model/class_queue.h"

namespace braid::sw {

struct QueueConfig {
  uint64_t rate_mbps = 0;            // 0: no limit (a frame leaves as it comes)
  uint32_t buffer_bytes = 1u << 20;  // per class (data; priority)
  // WRED on the data class, in bytes queued at arrival; kmin 0: no marking.
  uint32_t ecn_kmin_bytes = 0;
  uint32_t ecn_kmax_bytes = 0;
  double ecn_pmax = 1.0;
  bool trim = false;  // a full data queue trims a frame to its headers instead of dropping it
  double loss = 0;    // each data frame dropped with this probability
};

// A core link's two directions.
enum class Dir : uint8_t {
  kToHigher = 0,  // bound for a higher-numbered port than the frame came in on
  kToLower = 1,
};
const char* dir_name(Dir d);

enum class LinkState : uint8_t {
  kUp,
  kDown,       // routing hashes over the other links; what it held is dropped
  kBlackhole,  // routing still uses it; it drops everything (a silent failure)
};

struct SoftSwitchConfig {
  uint16_t ports = 2;         // host ports, 1..64
  uint16_t core_links = 2;    // parallel paths between every two ports, 1..64
  uint64_t seed = 1;          // of the ECMP hash and of WRED's and loss's draws
  uint32_t max_frame = 1518;  // bytes of the largest frame (jumbo: 9018)
  uint32_t slots = 16384;     // frames held at once, all queues together
  QueueConfig core;           // every core link's, at first
  QueueConfig egress;         // every host port's, at first
  // What a host sends towards the core first waits for the host's own link
  // (a real NIC serialises at its rate; a memif or vhost peer hands over
  // frames at memory speed): a queue per host port at this rate (0: none),
  // as large as a NIC's transmit side is deep, neither marking nor trimming.
  uint64_t uplink_rate_mbps = 0;
  uint32_t uplink_buffer_bytes = 4u << 20;
  // Host links: each a set of host ports behind one link of the egress
  // config's rate, buffer and marking (a host running one process per
  // port, or a receiver of an incast). A frame bound for one of them
  // crosses the core, then that link's queue, then its port (whose own
  // egress then has no rate limit). A port in none: its egress is its link.
  std::vector<std::vector<uint16_t>> host_links;
  uint32_t trimmed_bytes = 106;  // Ethernet, IP, UDP and 64 bytes of UET headers
  uint8_t trim_dscp = 0x0b;
};

struct QueueStats {
  uint64_t packets = 0;       // sent on
  uint64_t data_packets = 0;  // of those, not control frames nor trimmed headers
  uint64_t bytes = 0;
  uint64_t dropped = 0;  // full queue, loss, or its link down or blackholed
  uint64_t trimmed = 0;
  uint64_t ecn_marked = 0;
  uint64_t data_bytes = 0;  // of the data frames sent on
  // When the first and the last data frame left (0: none yet).
  TimeNs first_data_at = 0, last_data_at = 0;
  uint64_t queued_bytes = 0;  // now
  uint64_t peak_bytes = 0;
  // The data queue's depth that each data frame found as it arrived (in
  // KiB, the last bucket holding everything from 4 MiB up): how long the
  // queue stays, not only how long it once was.
  std::vector<uint64_t> depth_kib = std::vector<uint64_t>(4096, 0);
  // The depth (bytes, to the KiB above) that a share q (0..1] of the
  // arrivals found at most; 0 before any.
  uint64_t depth_percentile(double q) const;
};

struct SwitchStats {
  uint64_t received = 0;
  uint64_t flooded = 0;    // broadcast or unknown destination
  uint64_t refused = 0;    // runt, oversized, or back to its own port
  uint64_t no_buffer = 0;  // the slot pool was empty
};

class SoftSwitch {
 public:
  explicit SoftSwitch(const SoftSwitchConfig& config);

  uint16_t ports() const { return cfg_.ports; }
  uint16_t core_links() const { return cfg_.core_links; }

  // A frame arrives on host port `port` at `now`.
  void receive(uint16_t port, const uint8_t* frame, uint32_t len, TimeNs now);
  // Hands what the core links have finished sending by `now` to the egress
  // queues. Call before transmit.
  void advance(TimeNs now);
  // The next frame host port `port` sends by `now`, copied into buf; 0 when
  // none is due (or it does not fit cap: then it is dropped and counted).
  uint32_t transmit(uint16_t port, uint8_t* buf, uint32_t cap, TimeNs now);
  // The earliest time a queued frame is due somewhere (kNever: none queued).
  TimeNs next_due() const;

  void set_link_state(uint16_t link, LinkState state);
  LinkState link_state(uint16_t link) const { return core_[2 * link].state; }
  // One direction's queue of a core link (a command that changes a link
  // changes both).
  QueueConfig& core_config(uint16_t link, Dir d) { return core_[index(link, d)].cfg; }
  QueueConfig& egress_config(uint16_t port) { return egress_[port].cfg; }
  const QueueStats& core_stats(uint16_t link, Dir d) const { return core_[index(link, d)].stats; }
  // How many data flows (addresses, protocol, ports; not ACKs or other
  // control frames) the hash has sent over one direction of a core link
  // so far.
  size_t core_flows(uint16_t link, Dir d) const { return flows_[index(link, d)].size(); }
  const QueueStats& egress_stats(uint16_t port) const { return egress_[port].stats; }
  const QueueStats& uplink_stats(uint16_t port) const { return uplinks_[port].stats; }
  size_t host_links() const { return host_links_.size(); }
  QueueConfig& host_link_config(size_t h) { return host_links_[h].cfg; }
  const QueueStats& host_link_stats(size_t h) const { return host_links_[h].stats; }
  // Bytes of data frames (IPv4, not control nor trimmed) that came in on
  // host port `port` and have left the switch: what that host's flows got
  // through.
  uint64_t delivered_from(uint16_t port) const { return delivered_[port]; }
  const SwitchStats& stats() const { return stats_; }
  // The core link the ECMP hash gives an IPv4 frame now (tests, tools).
  uint16_t core_link_of(const uint8_t* frame) const;

  // The queues' counters start again (a run's steady state without its
  // start); what is queued now, and frames received, stay.
  void clear_queue_stats();
  // One line per queue: what it sent, dropped, trimmed and marked.
  std::string describe() const;

 private:
  static constexpr uint32_t kNil = 0xffffffffu;
  static size_t index(uint16_t link, Dir d) { return 2 * size_t{link} + static_cast<size_t>(d); }
  struct Queue {
    QueueConfig cfg;
    LinkState state = LinkState::kUp;
    model::ClassQueue fifo;  // priority (control, trimmed) and data
    TimeNs busy_until = 0;   // the link has sent everything before this
    QueueStats stats;
  };
  uint8_t* data(uint32_t s) { return pool_.data() + size_t{s} * slot_bytes_; }
  uint32_t alloc_slot();
  // A slot holding a copy of the frame from host port `in`, bound for host
  // port `out`; kNil (counted) when the pool is empty.
  uint32_t copy_in(const uint8_t* frame, uint32_t len, uint16_t in, uint16_t out);
  void free_slot(uint32_t s) {
    next_[s] = free_;
    free_ = s;
  }
  // Enqueues slot s (its frame bound for host port out_[s]) on q at now;
  // drops, trims or marks it by q's rules.
  void enqueue(Queue& q, uint32_t s, TimeNs now);
  // The frame at the head of q that leaves by now (the priority class
  // first), unlinked; kNil if none.
  uint32_t dequeue(Queue& q, TimeNs now);
  TimeNs departure(const Queue& q, uint32_t s) const;
  void drop_all(Queue& q);
  bool draw(double p);
  int port_of(const uint8_t* mac) const;

  SoftSwitchConfig cfg_;
  uint32_t slot_bytes_;
  std::vector<uint8_t> pool_;
  std::vector<uint32_t> next_;  // queue link or free list
  std::vector<uint32_t> len_;
  std::vector<TimeNs> at_;           // when it joined its queue
  std::vector<uint16_t> out_;        // the host port it is bound for
  std::vector<uint16_t> in_;         // the host port it came in on
  std::vector<uint64_t> delivered_;  // per host port, delivered_from()
  uint32_t free_ = kNil;
  std::vector<Queue> core_;  // per link, its two directions (index())
  std::vector<Queue> egress_;
  std::vector<Queue> host_links_;
  std::vector<Queue> uplinks_;                       // per host port, when uplink_rate_mbps is set
  std::vector<uint32_t> core_q_;                     // per slot: the core queue it is bound for
  std::vector<int> host_link_of_;                    // per host port: its host link, or -1
  std::vector<std::unordered_set<uint64_t>> flows_;  // per core queue: 5-tuple keys
  struct MacEntry {
    std::array<uint8_t, 6> mac;
    uint16_t port;
  };
  std::vector<MacEntry> macs_;
  std::mt19937_64 rng_;
  SwitchStats stats_;
};

}  // namespace braid::sw
