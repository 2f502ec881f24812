// The paths of one connection: every entropy (UDP source port) it sprays
// over and all that is known per entropy. It chooses the entropy of each
// packet (new or retransmitted) and of each ACK/NACK, and learns from what
// comes back on an entropy: ACKs, RTT samples, ECN echoes and losses (by
// inference, trim NACK or timeout). It also keeps the per-entropy send
// sequences that loss inference reads: one entropy is one path through an
// ECMP fabric, and a path keeps order.
//
// The policy is a switch, not a virtual call:
// - round robin (oblivious): every entropy in turn;
// - REPS (recycled entropy packet spraying, arXiv 2407.21625): an entropy
//   whose packet was acknowledged without an ECN mark is used again (a ring
//   of them); when none is waiting, the next entropy in turn is explored.
//   Congested, degraded or dead paths are simply not recycled. After a
//   timeout exploring stops for a while (the failure may be anywhere):
//   the last entropy known good is used when the ring is empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/types.h"

namespace braid {

enum class PathPolicy : uint8_t {
  kRoundRobin,  // oblivious: every entropy in turn
  kReps,        // recycle entropies that came back unmarked
};

struct EntropyConfig {
  PathPolicy policy = PathPolicy::kRoundRobin;
  uint16_t count = 16;         // 1..256; 1 = single path (RoCEv2-like)
  uint16_t base_port = 49152;  // entropy i is base_port + i * stride (mod 2^14) | 0xc000
  uint16_t stride = 1;
  TimeNs freeze_ns = 100'000;  // REPS: no exploring for this long after a timeout
};

// Why a packet was declared lost.
enum class LossKind : uint8_t { kInferred, kTrimmed, kTimeout };

// Per-entropy counters; 32 bytes each.
struct EntropyStats {
  uint32_t sent = 0;
  uint32_t acked = 0;
  uint32_t ecn_marked = 0;
  uint32_t lost = 0;  // declared lost (gap on this entropy, NACK or timeout)
  // (REPS: how often it was recycled is sent - explored.)
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
  uint8_t choose(TimeNs now) {
    if (cfg_.policy == PathPolicy::kReps) {
      if (ring_count_ > 0) return take_recycled();
      if (now < frozen_until_ && has_good_) return last_good_;
    }
    return next_in_turn();
  }
  uint8_t choose_retransmit(uint8_t previous, TimeNs now) {
    if (cfg_.policy == PathPolicy::kReps) {
      // Not the path that lost it, if another is known good.
      for (uint8_t n = ring_count_; n > 0; --n) {
        const uint8_t e = take_recycled();
        if (e != previous || cfg_.count == 1) return e;
        recycle(e);
      }
      if (now < frozen_until_ && has_good_ && last_good_ != previous) return last_good_;
      const uint8_t e = next_in_turn();
      return e == previous && cfg_.count > 1 ? next_in_turn() : e;
    }
    return next_in_turn();
  }
  uint16_t explored() const { return explored_; }
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
  // A packet sent on i with path sequence `seq` is acknowledged, `marked`
  // if it arrived with ECN-CE. Only a packet sent once says which path
  // delivered it (`sent_once`): the ACK of a retransmitted one may be for
  // its first copy, still on the old path.
  void on_acked(uint8_t i, uint32_t seq, bool sent_once, bool marked) {
    Path& p = paths_[i];
    ++p.stats.acked;
    if (!sent_once) return;
    if (static_cast<int32_t>(seq + 1 - p.acked_seq) > 0) p.acked_seq = seq + 1;
    if (cfg_.policy == PathPolicy::kReps && !marked) {
      recycle(i);
      last_good_ = i;
      has_good_ = true;
    }
  }
  // How far the packet with path sequence `seq` on i has been overtaken:
  // the packets sent on i after it, up to the latest one acknowledged
  // (0 or less: none of them yet).
  int32_t overtaken_by(uint8_t i, uint32_t seq) const {
    return static_cast<int32_t>(paths_[i].acked_seq - 1 - seq);
  }
  void on_ecn(uint8_t i) { ++paths_[i].stats.ecn_marked; }
  void on_lost(uint8_t i, LossKind why, TimeNs now) {
    ++paths_[i].stats.lost;
    if (why == LossKind::kTimeout) {
      frozen_until_ = now + cfg_.freeze_ns;
      if (has_good_ && last_good_ == i) has_good_ = false;
    }
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
  uint8_t next_in_turn() {
    const uint8_t i = static_cast<uint8_t>(cursor_);
    cursor_ = cursor_ + 1 == cfg_.count ? 0 : cursor_ + 1;
    if (cfg_.policy != PathPolicy::kRoundRobin) ++explored_;
    return i;
  }
  // REPS's ring of entropies to use again; the oldest is dropped when full.
  static constexpr uint8_t kRing = 16;
  void recycle(uint8_t i) {
    if (ring_count_ == kRing) {
      ring_head_ = (ring_head_ + 1) % kRing;
      --ring_count_;
    }
    ring_[(ring_head_ + ring_count_) % kRing] = i;
    ++ring_count_;
  }
  uint8_t take_recycled() {
    const uint8_t i = ring_[ring_head_];
    ring_head_ = (ring_head_ + 1) % kRing;
    --ring_count_;
    return i;
  }

  EntropyConfig cfg_;
  uint16_t cursor_ = 0;
  uint16_t ack_cursor_ = 0;
  std::vector<Path> paths_;
  uint8_t ring_[kRing] = {};
  uint8_t ring_head_ = 0, ring_count_ = 0;
  uint8_t last_good_ = 0;
  bool has_good_ = false;
  uint16_t explored_ = 0;
  TimeNs frozen_until_ = 0;
};

static_assert(sizeof(EntropyStats) == 32);

}  // namespace braid
