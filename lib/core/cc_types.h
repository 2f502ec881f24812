// What congestion control is configured with and fed: the algorithm's
// settings and the events of ACKs and losses (congestion_control.h).
#pragma once

#include <cstdint>

#include "core/path_set.h"
#include "core/types.h"

namespace braid {

enum class CcAlgorithm : uint8_t {
  kFixedWindow,  // window_bytes in flight, never changed
  kNscc,         // UET's network-signal CC: ECN and delay
};

struct CcConfig {
  CcAlgorithm algorithm = CcAlgorithm::kFixedWindow;
  uint32_t window_bytes = 1024 * 1024;  // fixed window; NSCC's initial window is its maximum
  uint64_t pacing_rate_bps = 0;         // fixed window: 0 = not paced
  // What NSCC scales itself by: the network's base RTT (0: the smallest RTT
  // measured so far) and the rate of the host's link.
  TimeNs base_rtt_ns = 0;
  uint64_t link_bps = 100'000'000'000;
  // The network trims instead of dropping: a lower delay target.
  bool trimming = true;
};

// What one ACK says.
struct AckEvent {
  TimeNs now = 0;
  uint32_t acked_bytes =
      0;  // newly acknowledged, as the window counts them (payload + header charge)
  uint32_t acked_packets = 0;
  uint64_t rtt_ns = 0;          // of the packet that triggered it, when sent once (0: no sample)
  bool ecn = false;             // that packet arrived with ECN-CE
  uint32_t inflight_bytes = 0;  // after this ACK
  uint8_t entropy = 0;          // of that packet
};

struct LossEvent {
  TimeNs now = 0;
  uint32_t lost_bytes = 0;  // as the window counts them: payload and header charge
  LossKind kind = LossKind::kInferred;
  uint8_t entropy = 0;
  uint32_t inflight_bytes = 0;  // after taking the packet out
};

}  // namespace braid
