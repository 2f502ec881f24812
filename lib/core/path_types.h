// What path selection is configured with and keeps per entropy: shared by
// PathSet (path_set.h) and the policies (paths/).
#pragma once

#include <cstdint>

#include "core/types.h"

namespace braid {

// A policy's place in the registry (paths/registry.h): any number below
// kPathPolicyCount (path_set.h) is one. Those code picks by name are named
// here; path_policy_named() finds any by its name.
enum class PathPolicy : uint8_t {
  kRoundRobin,  // oblivious: every entropy in turn (paths/round_robin.h)
  kReps,        // recycle entropies that came back unmarked (paths/reps.h)
  kBitmap,      // in turn, passing over entropies penalised by ECN, NACK, loss (paths/bitmap.h)
};

struct EntropyConfig {
  PathPolicy policy = PathPolicy::kRoundRobin;
  uint16_t count = 16;         // 1..256; 1 = single path (RoCEv2-like)
  uint16_t base_port = 49152;  // entropy i is base_port + i * stride (mod 2^14) | 0xc000
  uint16_t stride = 1;
  TimeNs freeze_ns = 100'000;  // REPS: no exploring for this long after a timeout
  // REPS: an entropy assumed bad is first probed again after this, or after
  // four of the connection's RTTs if that is longer.
  TimeNs probe_after_ns = 100'000;
};

// kSkip: delivers, but far slower than the connection's other paths (a
// rate-limited or congested link with no ECN to say so).
enum class PathState : uint8_t { kGood, kSkip, kAssumedBad };

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
  // Smoothed (EWMA 1/8, with the RTT samples) lateness: when an ACK names
  // a packet sent on it, how much later than that packet the newest packet
  // already acknowledged was sent (0: none was). A path slower than the
  // others shows here however much the hosts' own queues add to every RTT.
  uint32_t late_ns = 0;
};

// What the adaptive policies know of an entropy's health; 24 bytes.
struct PathHealth {
  PathState state = PathState::kGood;
  uint8_t losses_in_row = 0;  // since the last packet it delivered
  uint8_t backoff = 0;        // the probe interval is doubled this many times
  bool probing = false;       // a probe is out on it
  uint32_t revive_seq = 0;    // a packet it delivers from this path sequence on revives it
  TimeNs probe_at = 0;        // when it may carry its next probe
  // EWMA (1/8) of ECN-CE among its packets that ACKs named, in 1/32768ths
  // (REPS keeps it: RepsPaths::on_named).
  uint16_t mark_rate = 0;
};

}  // namespace braid
