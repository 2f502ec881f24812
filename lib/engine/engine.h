// The engine: the poll loop that ties one Endpoint (the sans-IO protocol
// core) to one packet I/O backend. Each poll() moves a burst of received
// frames into the core (ARP to the neighbour table), runs due timers, and
// moves a burst of frames the core wants to send out. It owns the clock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/endpoint.h"
#include "engine/engine_group.h"
#include "engine/packet_io.h"
#include "engine/stats_shm.h"
#include "net/arp.h"

namespace braid {

struct EngineConfig {
  uint32_t ip = 0;  // host order
  uint16_t udp_port = wire::kUetUdpPort;
  uint32_t prefix_len = 24;
  uint32_t gateway = 0;  // 0: none
  bool crc_trailer = false;
  // Authenticated mode (EndpointConfig::auth) and its secret.
  AuthMode auth = AuthMode::kOff;
  wire::TssSecret auth_secret{};
  uint16_t burst = 32;
  // Receiver-driven credit: the rate this port's credit pacer grants at
  // (0: the link rate of the first connection that asks).
  uint64_t credit_rate_bps = 0;
  bool cc_per_peer = true;  // EndpointConfig::cc_per_peer
  // The engines of one port: their pacers' shared next-grant time
  // (CreditPacerConfig::shared_next_at), so that together they grant the
  // port's rate. nullptr: this engine's pacer alone.
  std::atomic<TimeNs>* credit_shared_next_at = nullptr;
  // Live statistics (stats_shm.h): published every stats_interval_ns of
  // the engine's clock once enable_stats() has been called.
  TimeNs stats_interval_ns = 100'000'000;
  // A poll this long after the previous one (the core was taken away, or
  // nobody polled) first takes in everything that arrived meanwhile, up to
  // stall_drain_bursts bursts, before any timer runs: the ACKs waiting in
  // the ring must not come second to the retransmission timers they would
  // have stopped.
  TimeNs stall_ns = 500'000;
  uint16_t stall_drain_bursts = 64;
  // The engines of one device share their memory regions (EndpointConfig).
  MemoryRegionTable* shared_memory = nullptr;
};

struct EngineStats {
  uint64_t polls = 0;
  uint64_t rx_frames = 0;
  uint64_t tx_frames = 0;
  uint64_t arp_frames = 0;
  uint64_t tx_no_buffer = 0;  // the backend had no free transmit buffer
  uint64_t tx_ring_full = 0;  // frames the TX ring handed back, sent later
  // Frames to our own address (a QP connected to a QP of this device),
  // delivered in software without touching the port.
  uint64_t local_frames = 0;
  // In an EngineGroup: frames this engine received for another engine's
  // connections and handed over (and copies of ARP replies), frames handed
  // to it, and frames dropped because the owner's inbox was full (a
  // stalled engine).
  uint64_t steered_out = 0;
  uint64_t steered_in = 0;
  uint64_t steer_dropped = 0;
  // Frames sent with their payload read in place from registered memory
  // (PacketIo::tx_external), not copied into the buffer first.
  uint64_t tx_external = 0;
  // Polls that came stall_ns or more after the previous one, and the
  // longest such gap.
  uint64_t poll_gaps = 0;
  TimeNs longest_poll_gap_ns = 0;
};

class Engine {
 public:
  Engine(std::unique_ptr<PacketIo> io, const EngineConfig& cfg);
  ~Engine();

  // One iteration; returns frames moved (received + sent). Received packets
  // that ask for an ACK at once hold the transmit step back for
  // `ack_hold_ns` (0: one poll), or until transmit() (an application's
  // post): the ACK then leaves with the application's answer.
  // kAckNow: no hold, the ACKs leave in this poll (before whoever waits
  // for the completions this poll made is woken).
  static constexpr TimeNs kAckNow = ~TimeNs{0};
  uint32_t poll(TimeNs ack_hold_ns = 0) { return poll_at(now(), ack_hold_ns); }
  // The same at a time the caller read (tests: a clock of their own).
  uint32_t poll_at(TimeNs t, TimeNs ack_hold_ns = 0);
  // Sends what the core has ready, nothing else (after a post: the
  // doorbell). Returns frames sent.
  uint32_t transmit();
  TimeNs now() const {
    return static_cast<TimeNs>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
  }

  // Publishes live statistics for other processes (braid_stat) into
  // /dev/shm/stats_name(), for up to max_conns connections of up to
  // max_paths entropies each. False (and *error) if the object cannot be
  // created.
  bool enable_stats(uint32_t max_conns, uint32_t max_paths, std::string* error);
  // Publishes now (the poll loop does it every stats_interval_ns).
  void publish_stats();
  // The shared-memory object's name ("" when not publishing).
  std::string stats_name() const { return publisher_ ? publisher_->name() : std::string(); }

  // Neighbours: static entries, and resolution of a peer's MAC.
  void add_neighbor(uint32_t ip, const wire::MacAddr& mac);
  // True (and *mac) when known; otherwise starts resolving it.
  bool lookup_neighbor(uint32_t ip, wire::MacAddr* mac);
  // Polls until the peer's MAC is known or timeout_ns passes.
  bool resolve_neighbor(uint32_t ip, wire::MacAddr* mac, TimeNs timeout_ns);
  // The next hop's MAC towards ip, as another engine of the group learnt
  // it (ARP replies arrive on whichever queue the NIC chooses).
  void learn_neighbor(uint32_t ip, const wire::MacAddr& mac);
  // The connection `local_id` sends to `peer_ip` once its MAC is resolved;
  // if resolution fails the connection fails (RETRY_EXC_ERR).
  void route_when_resolved(uint16_t local_id, uint32_t peer_ip);
  // Destroys the connection and everything in the engine that refers to it
  // (a resolution under way): a new connection that reuses the id is not
  // touched by the old one's ARP outcome.
  void destroy_connection(uint16_t local_id);
  // As an RC QP goes: see Endpoint::close_connection.
  void close_connection(uint16_t local_id);
  // Whether the next hop towards ip is known, being resolved, or failed.
  net::NeighborState neighbor_state(uint32_t ip) const;

  // Makes this engine number `index` of `group`, before it has connections
  // and before any engine of the group polls. From then on it creates
  // only connections it owns (owns()), hands frames for others' to them,
  // and takes theirs for its own at each poll. Every engine of a group
  // drives its own queue of one port, and their backends take each
  // other's buffers back (rx_release of a frame another queue received or
  // allocated: DPDK mbufs go back to their own pool whoever frees them).
  // Stop every engine of the group before destroying any.
  void join(EngineGroup* group, uint16_t index);
  bool owns(uint16_t conn_id) const {
    return group_ == nullptr || group_->owner(conn_id) == group_index_;
  }
  EngineGroup* group() const { return group_; }
  uint16_t group_index() const { return group_index_; }

  Endpoint& endpoint() { return endpoint_; }
  PacketIo& io() { return *io_; }
  const EngineConfig& config() const { return cfg_; }
  const EngineStats& stats() const { return stats_; }
  // How long the TX ring has taken no frame while frames wait (0: it
  // drains). A link that stays up while its ring stops draining has
  // stalled: a peer that stopped polling, or virtio-user sharing memory
  // the vhost side cannot map.
  TimeNs tx_blocked_ns() const;
  // Longer than this, the port counts as stalled (reported DOWN).
  TimeNs tx_stall_ns = 1'000'000'000;
  bool tx_stalled() const { return tx_blocked_ns() > tx_stall_ns; }
  // The port as this engine last looked at it, once per port_watch_ns of
  // polls: its link up and its TX ring not stalled (any thread may read
  // it). port_changes() counts the changes (the engine's thread): the
  // verbs layer raises PORT_ERR and PORT_ACTIVE from them.
  bool port_ok() const { return port_ok_.load(std::memory_order_relaxed); }
  uint32_t port_changes() const { return port_changes_; }
  TimeNs port_watch_ns = 10'000'000;
  // Looks at the port now (the poll does every port_watch_ns; a query of
  // the port's state does, so that it and the events agree).
  void look_at_port(TimeNs now);

 private:
  void on_arp(const uint8_t* frame, uint32_t len, TimeNs now);
  void send_arp_requests(TimeNs now);
  void send_raw(const uint8_t* frame, uint32_t len);
  void update_routes(TimeNs now);
  void forget_routes(uint16_t local_id);  // a connection going: its pending route too
  uint32_t transmit_at(TimeNs now);
  // In a group: the engine that owns the frame's connection, when it is
  // another one.
  bool steered_elsewhere(const uint8_t* data, uint32_t len, uint16_t* to) const;
  // An ARP reply arrives on whichever queue the NIC chooses (RSS sends
  // non-IP frames to one): each other engine of the group gets a copy, so
  // the engine that asked learns the answer too.
  void share_arp_reply(const RxFrame& f);
  // Hands frames[0..n) received for `to` over; releases those its full
  // inbox refused.
  void hand_over(uint16_t to, RxFrame* frames, uint16_t n);
  uint32_t receive_handed_over(TimeNs now);
  // One rx_burst into the core; returns the frames it took.
  uint16_t receive_burst(TimeNs t);
  uint32_t flush_tx(uint16_t filled, TimeNs now);
  struct PendingRoute {
    uint16_t local_id;
    uint32_t ip;
  };
  std::vector<PendingRoute> pending_routes_;

  std::unique_ptr<PacketIo> io_;
  EngineConfig cfg_;
  Endpoint endpoint_;
  struct Arp;
  std::unique_ptr<Arp> arp_;
  std::vector<RxFrame> rx_;
  EngineGroup* group_ = nullptr;
  uint16_t group_index_ = 0;
  std::vector<std::vector<RxFrame>> steer_out_;  // per engine of the group: frames for it
  std::vector<TxFrame> tx_;
  bool tx_external_ = false;          // io_->tx_external(), at creation
  uint16_t tx_held_ = 0;              // built frames the ring did not take: tx_[0..tx_held_)
  TimeNs tx_blocked_since_ = kNever;  // since when the ring has taken nothing
  bool tx_held_back_ = false;         // transmit waits (see poll)
  TimeNs tx_hold_until_ = 0;
  EngineStats stats_;
  std::unique_ptr<stats::Publisher> publisher_;
  TimeNs stats_next_ = kNever;
  TimeNs last_poll_ = kNever;
  std::atomic<bool> port_ok_{false};  // set from the link at creation
  uint32_t port_changes_ = 0;
  TimeNs port_looked_ = 0;  // the last look at the port
};

}  // namespace braid
