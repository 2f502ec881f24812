// An endpoint: one IPv4 address on one port, its connections, its memory
// regions and its timers. It validates and demultiplexes received frames and
// schedules transmission among its connections: a connection queues itself
// when it may have something to send (a post, a packet, a timer), control
// frames (ACK, NACK) go before data, and connections take turns a frame at
// a time; nothing scans the connections that have nothing to send. Still
// sans-IO: the engine (DPDK) or the simulator moves the frames and supplies
// the time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/connection.h"
#include "core/credit.h"
#include "core/datagram_qp.h"
#include "core/memory_table.h"
#include "core/peer_congestion.h"
#include "core/ready_queue.h"
#include "core/timing_wheel.h"
#include "wire/frame.h"

namespace braid {

// The authenticated mode (TSS) of an endpoint's connections.
enum class AuthMode : uint8_t {
  kOff = 0,  // packets in clear; sealed ones are dropped (counted)
  kOn,       // every connection seals and takes only what authenticates
  // As kOn, and no unauthenticated frame is answered: not even the
  // stateless answer to a CLOSE for an unknown connection.
  kRequired,
};

struct EndpointConfig {
  wire::MacAddr mac{};
  uint32_t ip = 0;  // host order
  uint16_t udp_port = wire::kUetUdpPort;
  bool crc_trailer = false;
  uint8_t trim_dscp = 0xff;
  TimeNs timer_tick_ns = 1000;
  // Receiver-driven credit: the pacer that grants this endpoint's senders
  // their turns on its link (used only by peers that ask for credit).
  CreditPacerConfig credit;
  // Data frames a connection sends in a row before the next one's turn
  // (1: a frame each in turn). A run of packets of one connection lets its
  // receiver coalesce ACKs (ack_every) even when many connections send at
  // once, and keeps each end on one connection's state for a burst: round
  // robin by single frames gave every packet its own ACK at 1024 busy QPs;
  // turns of 8 gave 56% of one QP's goodput there, turns of 32 (an engine's
  // burst) 81% (docs/benchmarks.md). A turn of 32 full frames is 48 KiB at
  // MTU 1500: what a small message waits behind, per busy connection.
  uint32_t data_quantum = 32;
  // Connections to the same peer (its IPv4 address) with the same congestion
  // settings and MTU share one congestion window, pacing clock and CNP
  // timer (PeerCongestion): four QPs to a peer take one host's share of a
  // bottleneck, as one QP does. false: a state per connection, as RoCE's
  // DCQCN per QP (docs/congestion.md compares the two).
  bool cc_per_peer = true;
  // Memory regions: this endpoint's own table (nullptr), or one shared with
  // other endpoints that must honour the same keys (the engines of one
  // verbs device). A shared table outlives the endpoint and is changed only
  // while none of its endpoints runs.
  MemoryRegionTable* shared_memory = nullptr;
  // Closing a connection whose peer may still wait for our ACK: the CLOSE
  // is sent again after close_retry_ns, doubling, close_sends times in
  // all; unanswered, the record goes one interval after the last.
  TimeNs close_retry_ns = 1'000'000;
  uint8_t close_sends = 6;
  // Authenticated mode, and the secret each connection's keys derive from.
  AuthMode auth = AuthMode::kOff;
  wire::TssSecret auth_secret{};
  uint32_t auth_sdi = 1;
};

struct EndpointStats {
  uint64_t rx_frames = 0;
  uint64_t tx_frames = 0;
  uint64_t closes_sent = 0;              // CTRL CLOSEs of closed connections (and repeats)
  uint64_t closes_answered = 0;          // ... the peer answered (or closed as well)
  uint64_t closes_unanswered = 0;        // ... given up on
  uint64_t closes_answered_unknown = 0;  // peers' CLOSEs for connections we do not have
  // (or naming PSNs the live connection never sent: answered the same way)
  uint64_t stateless_limited = 0;  // such answers not sent: over the rate limit
  uint64_t sealed_strangers = 0;   // sealed frames for no connection of ours: dropped
  std::array<uint64_t, static_cast<size_t>(wire::DropReason::kCount)> drops{};
  uint64_t dropped() const {
    uint64_t n = 0;
    for (uint64_t d : drops) n += d;
    return n;
  }
  uint64_t drops_for(wire::DropReason r) const { return drops[static_cast<size_t>(r)]; }
};

class Endpoint {
 public:
  explicit Endpoint(const EndpointConfig& cfg);
  ~Endpoint();

  // Fills in the endpoint's own addressing, port and integrity options.
  // Returns nullptr when cfg.local_id is taken.
  Connection* create_connection(ConnectionConfig cfg, CompletionQueue* send_cq,
                                CompletionQueue* recv_cq);
  // A shared PDC's queue pairs (ConnectionConfig::shared): another queue
  // pair on connection `local_id` (Connection::add_queue_pair), whose QP
  // number names the connection on the wire from then on, taken only from
  // that queue pair's peer (its remote_qpn). kNoSlot: the number names
  // another connection already, or the connection is not shared.
  uint16_t attach_queue_pair(uint16_t local_id, QpConfig q, CompletionQueue* send_cq,
                             CompletionQueue* recv_cq);
  // ... and off it again (Connection::remove_queue_pair): kRefused (no such
  // queue pair, or the connection's last: close the connection), or done,
  // its QP number free again, or still the connection's while the peer may
  // name it (the number it is kept under, the one the peer names).
  enum class Detach : uint8_t { kRefused, kNumberFree, kNumberHeld };
  Detach detach_queue_pair(uint16_t local_id, uint16_t slot);
  // Removes the connection at once: nothing more is sent for it.
  void destroy_connection(uint16_t local_id);
  // Removes the connection as an RC QP goes. When the peer may still wait
  // for the ACK of what it sent last (that ACK may be lost, or still in a
  // ring the peer has not read when our port closes), a CTRL CLOSE
  // carrying our cumulative PSN goes to it, again on a timer and whenever
  // the peer sends again, until the peer answers it (an ACK with the P
  // flag) or closes as well (its CLOSE), or close_sends are spent. The
  // closed connection is gone meanwhile: no completion, no placement.
  void close_connection(uint16_t local_id);
  // Every connection acknowledges what it holds unacknowledged with the next
  // transmit (Connection::ack_now): the process exits.
  void ack_now() {
    for (auto& c : conns_) {
      if (c != nullptr) c->ack_now();
    }
  }
  // Closed connections still waiting for their peer's answer.
  size_t closing() const { return closing_count_; }
  Connection* connection(uint16_t local_id) const {
    return local_id < conns_.size() ? conns_[local_id].get() : nullptr;
  }
  // Ids below this may name a connection (connection(id) tells).
  size_t connection_slots() const { return conns_.size(); }
  // Peers whose connections share a congestion state (cc_per_peer).
  size_t shared_peers() const { return peers_.size(); }

  // One received frame; drops are counted by reason.
  // Unreliable datagram (UD) queue pairs, kept under their QP numbers.
  // nullptr when the number is taken.
  DatagramQueuePair* create_datagram_qp(DatagramConfig cfg, CompletionQueue* send_cq,
                                        CompletionQueue* recv_cq);
  void destroy_datagram_qp(uint32_t qp_num);
  DatagramQueuePair* datagram_qp(uint32_t qp_num) const {
    auto it = datagrams_.find(qp_num);
    return it == datagrams_.end() ? nullptr : it->second.get();
  }
  // A send was posted on it: it goes out with the next transmit.
  void datagram_posted(uint32_t qp_num);

  void receive(const uint8_t* frame, uint32_t len, TimeNs now);
  // Builds up to one frame into out.buf and says where it goes (TxOut).
  // Returns the bytes written there, 0 if nothing is to be sent; with
  // out.in_place_ok a data frame's payload may stay where it lies
  // (out.payload_len bytes at out.payload follow them).
  uint32_t transmit(TxOut& out, TimeNs now);
  // The same into buf, the whole frame copied there: its length.
  uint32_t transmit(uint8_t* buf, uint32_t cap, TimeNs now) {
    TxOut out{buf, cap};
    return transmit(out, now);
  }
  // Whether a connection has something to send (it may still turn out that
  // it cannot: transmit() then returns 0).
  bool wants_to_send();
  // Runs expired timers.
  void advance(TimeNs now) { wheel_.advance(now); }
  TimeNs next_timer() const { return wheel_.next_deadline(); }

  MemoryRegionTable& memory() { return *memory_; }
  TimingWheel& wheel() { return wheel_; }
  const EndpointConfig& config() const { return cfg_; }
  const EndpointStats& stats() const { return stats_; }
  const CreditPacer& credit_pacer() const { return pacer_; }
  // ACKs received packets asked for at once (a statistic), and whether one
  // was asked since the flag was last taken (the engine's signal to hold
  // its transmit step for the application's answer).
  uint64_t immediate_acks() const { return ack_asked_.count; }
  bool take_ack_asked() { return ack_asked_.take(); }

 private:
  static uint32_t grant_thunk(void* owner, uint16_t id, uint32_t max_bytes, bool* more, TimeNs now);
  void drop(wire::DropReason r) { ++stats_.drops[static_cast<size_t>(r)]; }

  // A closed connection waiting for its peer (close_connection).
  static constexpr uint8_t kMaxCloseSends = 16;
  struct Closing {
    Timer timer;
    Endpoint* endpoint = nullptr;
    uint16_t local_id = 0;
    uint16_t remote_id = 0;  // the id the peer names as its own
    uint16_t dst_pdc = 0;    // ... the one we name as the peer's
    uint32_t remote_ip = 0;
    uint8_t sends_left = 0;  // timed sends
    bool queued = false;     // on closing_due_
    bool timer_due = false;  // the send due is a timed one (else the peer's data asked for it)
    bool answer = false;     // the peer closed too: answer it once, then go
    TimeNs interval = 0;
    uint32_t close_len = 0;
    uint32_t answer_len = 0;
    // Built unsealed (with room for the seal) in the authenticated mode:
    // sealed at each send with the connection's key, so that every copy
    // has its own counter (a copy again would be a replay).
    std::array<uint8_t, wire::kL2L4Size + wire::kCtrlSize + 4 + wire::kTssOverhead> close{};
    std::array<uint8_t, wire::kL2L4Size + wire::kAckCcSize + wire::kTssOverhead> answer_frame{};
    std::unique_ptr<wire::TssKey> tx_key, rx_key;  // auth on: the connection's
    wire::TssReplayWindow replay;
    std::array<uint16_t, 8> ports{};  // the connection's entropies, a send on each in turn
    uint8_t nports = 0;
    uint8_t next_port = 0;
  };
  static void closing_timer(Timer* t, TimeNs now);
  void queue_closing(Closing& r);
  bool on_closing_packet(uint16_t dst, uint16_t src);
  void answer_unknown_close(TimeNs now);
  uint32_t transmit_closing(TxOut& out, TimeNs now);
  // A closing record's frame into `buf`, sealed if the record has a key.
  uint32_t put_closing_frame(const Closing& r, const uint8_t* frame, uint32_t len, uint8_t* buf);
  void erase_closing(uint16_t id);
  // Answers to CLOSEs for connections this end does not have: a token
  // bucket of kMaxStateless, one more every kStatelessIntervalNs (10,000 a
  // second), so that forged CLOSEs cannot make this end a reflector.
  static constexpr size_t kMaxStateless = 64;
  static constexpr TimeNs kStatelessIntervalNs = 100'000;
  uint32_t stateless_tokens_ = kMaxStateless;
  TimeNs stateless_refill_at_ = 0;
  struct Stateless {
    std::array<uint8_t, wire::kL2L4Size + wire::kAckCcSize> frame{};
    uint32_t len = 0;
    uint32_t dst_ip = 0;
    uint16_t dst_pdc = 0;
  };

  EndpointConfig cfg_;
  wire::DecodeOptions decode_;
  MemoryRegionTable mrs_;
  MemoryRegionTable* memory_;  // &mrs_ or the shared table
  TimingWheel wheel_;
  // Congestion state per peer (cc_per_peer), shared by its connections:
  // declared before them, so that it outlives them.
  struct Peer {
    uint32_t ip = 0;
    std::unique_ptr<PeerCongestion> cc;
  };
  std::vector<Peer> peers_;
  PeerCongestion* peer_for(const ConnectionConfig& cfg);
  // The peers' ids among the credit pacer's turns (cc_per_peer): the peer
  // each id names, nullptr when free.
  std::vector<PeerCongestion*> turn_owner_;
  std::vector<std::unique_ptr<Connection>> conns_;
  std::unordered_map<uint32_t, std::unique_ptr<DatagramQueuePair>> datagrams_;
  std::vector<uint32_t> datagram_ready_;  // UD QPs with sends to build, in turn
  [[gnu::noinline]] void on_datagram(const uint8_t* frame);
  uint32_t transmit_datagram(TxOut& out);
  // Shared PDCs: every QP number on one (theirs included) names it, with
  // the peer id that must come with it.
  struct Alias {
    uint16_t conn = 0;
    uint16_t remote = 0;
  };
  std::unordered_map<uint16_t, Alias> aliases_;
  // A received frame that names no connection of its own (dst, src): a
  // shared PDC's, or a closed connection's, or a stranger's. The
  // connection to take it, or nullptr (dropped or answered here).
  [[gnu::noinline]] Connection* route_other(Connection* c, uint16_t dst, uint16_t src, bool close,
                                            bool data, TimeNs now);
  // The shared connection (dst, src) names, from its peer's address.
  Connection* by_alias(uint16_t dst, uint16_t src) const;
  ReadyQueue control_;        // connections with an ACK or NACK due
  ReadyQueue data_;           // connections that may have data to send
  uint16_t data_run_id_ = 0;  // the connection whose turn data_run_ counts
  uint32_t data_run_ = 0;     // frames it has sent in its turn
  CreditPacer pacer_;
  EndpointStats stats_;
  AckAsked ack_asked_;
  wire::ParsedPacket pkt_;                         // scratch
  std::vector<uint8_t> open_buf_;                  // sealed packets decrypted (auth on)
  std::vector<std::unique_ptr<Closing>> closing_;  // by local id
  std::vector<uint16_t> closing_due_;              // ids with a frame due (or stale)
  std::vector<Stateless> stateless_;
  size_t closing_count_ = 0;
};

}  // namespace braid
