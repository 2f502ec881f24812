// The paths of one connection: every entropy (UDP source port) it sprays
// over and all that is known per entropy. It chooses the entropy of each
// packet (new or retransmitted) and of each ACK/NACK, and learns from what
// comes back on an entropy: ACKs, RTT samples, ECN echoes and losses (by
// inference, trim NACK or timeout). It also keeps the per-entropy send
// sequences that loss inference reads: one entropy is one path through an
// ECMP fabric, and a path keeps order.
//
// The policy is a switch, not a virtual call. Oblivious round robin ships
// now; adaptive policies (penalties, REPS, MRC-style states) use the same
// calls and the state kept here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/types.h"

namespace braid {

enum class PathPolicy : uint8_t {
  kRoundRobin,  // oblivious: every entropy in turn
};

struct EntropyConfig {
  PathPolicy policy = PathPolicy::kRoundRobin;
  uint16_t count = 16;         // 1..256; 1 = single path (RoCEv2-like)
  uint16_t base_port = 49152;  // entropy i is base_port + i * stride (mod 2^14) | 0xc000
  uint16_t stride = 1;
};

// Why a packet was declared lost.
enum class LossKind : uint8_t { kInferred, kTrimmed, kTimeout };

// Per-entropy counters; 32 bytes each.
struct EntropyStats {
  uint32_t sent = 0;
  uint32_t acked = 0;
  uint32_t ecn_marked = 0;
  uint32_t lost = 0;  // declared lost (gap on this entropy, NACK or timeout)
  uint32_t rtt_samples = 0;
  uint32_t srtt_ns = 0;     // EWMA 1/8
  uint32_t min_rtt_ns = 0;  // 0 until the first sample
  uint32_t last_rtt_ns = 0;
};

class PathSet {
 public:
  explicit PathSet(const EntropyConfig& cfg);

  uint16_t count() const { return cfg_.count; }
  PathPolicy policy() const { return cfg_.policy; }
  // The UDP source port of entropy i.
  uint16_t entropy(uint8_t i) const { return paths_[i].port; }
  const EntropyStats& stats(uint8_t i) const { return paths_[i].stats; }

  // The entropy of a new packet, and of a retransmission of a packet last
  // sent on `previous`.
  uint8_t choose() {
    switch (cfg_.policy) {
      case PathPolicy::kRoundRobin:
        break;
    }
    const uint8_t i = static_cast<uint8_t>(cursor_);
    cursor_ = cursor_ + 1 == cfg_.count ? 0 : cursor_ + 1;
    return i;
  }
  uint8_t choose_retransmit(uint8_t previous) {
    (void)previous;  // round robin does not avoid it
    return choose();
  }
  // The UDP source port of the next ACK or NACK: spread over the entropies
  // in turn, so that no single path carries every acknowledgement.
  uint16_t control_port() {
    const uint16_t p = paths_[ack_cursor_].port;
    ack_cursor_ = ack_cursor_ + 1 == cfg_.count ? 0 : ack_cursor_ + 1;
    return p;
  }

  // A packet leaves on entropy i; returns its sequence number on that path.
  uint32_t on_sent(uint8_t i) {
    ++paths_[i].stats.sent;
    return paths_[i].next_seq++;
  }
  // A packet sent on i with path sequence `seq` is acknowledged. Only a
  // packet sent once says which path delivered it (`sent_once`): the ACK of
  // a retransmitted one may be for its first copy, still on the old path.
  void on_acked(uint8_t i, uint32_t seq, bool sent_once) {
    Path& p = paths_[i];
    ++p.stats.acked;
    if (sent_once && static_cast<int32_t>(seq + 1 - p.acked_seq) > 0) p.acked_seq = seq + 1;
  }
  // How far the packet with path sequence `seq` on i has been overtaken:
  // the packets sent on i after it, up to the latest one acknowledged
  // (0 or less: none of them yet).
  int32_t overtaken_by(uint8_t i, uint32_t seq) const {
    return static_cast<int32_t>(paths_[i].acked_seq - 1 - seq);
  }
  void on_ecn(uint8_t i) { ++paths_[i].stats.ecn_marked; }
  void on_lost(uint8_t i, LossKind why) {
    (void)why;
    ++paths_[i].stats.lost;
  }
  void on_rtt(uint8_t i, uint64_t rtt_ns);

  // Bytes of per-entropy state (for the connection's memory footprint).
  size_t memory_footprint() const { return paths_.capacity() * sizeof(Path); }

 private:
  struct Path {
    EntropyStats stats;
    uint32_t next_seq = 0;   // path sequence of the next packet sent on it
    uint32_t acked_seq = 0;  // highest acknowledged path sequence + 1
    uint16_t port = 0;
  };
  EntropyConfig cfg_;
  uint16_t cursor_ = 0;
  uint16_t ack_cursor_ = 0;
  std::vector<Path> paths_;
};

static_assert(sizeof(EntropyStats) == 32);

}  // namespace braid
