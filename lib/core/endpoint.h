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
#include <vector>

#include "core/connection.h"
#include "core/credit.h"
#include "core/memory_table.h"
#include "core/ready_queue.h"
#include "core/timing_wheel.h"
#include "wire/frame.h"

namespace braid {

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
  // Memory regions: this endpoint's own table (nullptr), or one shared with
  // other endpoints that must honour the same keys (the engines of one
  // verbs device). A shared table outlives the endpoint and is changed only
  // while none of its endpoints runs.
  MemoryRegionTable* shared_memory = nullptr;
};

struct EndpointStats {
  uint64_t rx_frames = 0;
  uint64_t tx_frames = 0;
  uint64_t immediate_acks = 0;  // ACKs received packets asked for at once
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
  void destroy_connection(uint16_t local_id);
  Connection* connection(uint16_t local_id) const {
    return local_id < conns_.size() ? conns_[local_id].get() : nullptr;
  }
  // Ids below this may name a connection (connection(id) tells).
  size_t connection_slots() const { return conns_.size(); }

  // One received frame; drops are counted by reason.
  void receive(const uint8_t* frame, uint32_t len, TimeNs now);
  // Writes up to one frame into buf. Returns its length, 0 if nothing to send.
  // With `ext`, a data frame may leave its payload where it is: ext->len
  // bytes at ext->data follow the (length - ext->len) bytes written into
  // buf (Connection::set_external_payload); ext->len is 0 otherwise.
  uint32_t transmit(uint8_t* buf, uint32_t cap, TimeNs now, TxPayloadRef* ext = nullptr);
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

 private:
  static uint32_t grant_thunk(void* owner, uint16_t id, uint32_t max_bytes, bool* more, TimeNs now);
  void drop(wire::DropReason r) { ++stats_.drops[static_cast<size_t>(r)]; }

  EndpointConfig cfg_;
  wire::DecodeOptions decode_;
  MemoryRegionTable mrs_;
  MemoryRegionTable* memory_;  // &mrs_ or the shared table
  TimingWheel wheel_;
  std::vector<std::unique_ptr<Connection>> conns_;
  ReadyQueue control_;        // connections with an ACK or NACK due
  ReadyQueue data_;           // connections that may have data to send
  uint16_t data_run_id_ = 0;  // the connection whose turn data_run_ counts
  uint32_t data_run_ = 0;     // frames it has sent in its turn
  CreditPacer pacer_;
  EndpointStats stats_;
  wire::ParsedPacket pkt_;  // scratch
};

}  // namespace braid
