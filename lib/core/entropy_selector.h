// Chooses the entropy (UDP source port) of every packet and keeps what each
// entropy has experienced. Round-robin spraying ships now; adaptive selectors
// (REPS, bitmap penalties, MRC-style path states) plug in behind the same
// calls and use the statistics gathered here.
#pragma once

#include <cstdint>
#include <vector>

#include "core/types.h"

namespace braid {

enum class PathPolicy : uint8_t {
  kRoundRobin,
};

struct EntropyConfig {
  PathPolicy policy = PathPolicy::kRoundRobin;
  uint16_t count = 16;         // 1..256; 1 = single path (RoCEv2-like)
  uint16_t base_port = 49152;  // entropy i is base_port + i * stride (mod 2^14) | 0xc000
  uint16_t stride = 1;
};

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

class EntropySelector {
 public:
  explicit EntropySelector(const EntropyConfig& cfg);

  // Index of the entropy for the next packet.
  uint8_t next() {
    switch (cfg_.policy) {
      case PathPolicy::kRoundRobin:
      default: {
        const uint8_t i = static_cast<uint8_t>(cursor_);
        cursor_ = cursor_ + 1 == cfg_.count ? 0 : cursor_ + 1;
        return i;
      }
    }
  }
  uint16_t entropy(uint8_t index) const { return ports_[index]; }
  uint16_t count() const { return cfg_.count; }

  void on_sent(uint8_t i) { ++stats_[i].sent; }
  void on_acked(uint8_t i) { ++stats_[i].acked; }
  void on_ecn(uint8_t i) { ++stats_[i].ecn_marked; }
  void on_lost(uint8_t i) { ++stats_[i].lost; }
  void on_rtt(uint8_t i, uint64_t rtt_ns);

  const EntropyStats& stats(uint8_t i) const { return stats_[i]; }

 private:
  EntropyConfig cfg_;
  uint16_t cursor_ = 0;
  std::vector<uint16_t> ports_;
  std::vector<EntropyStats> stats_;
};

}  // namespace braid
