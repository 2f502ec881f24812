// The congestion-control interface of a connection: a window of bytes in
// flight and a pacing rate, fed with ACK, ECN, NACK and loss events. The
// algorithm is picked per connection and dispatched with a switch, not a
// virtual call. Fixed window ships now; NSCC and DCQCN join this file's
// switch in a later change.
#pragma once

#include <cstdint>

#include "core/path_set.h"
#include "core/types.h"

namespace braid {

enum class CcAlgorithm : uint8_t {
  kFixedWindow,
};

struct CcConfig {
  CcAlgorithm algorithm = CcAlgorithm::kFixedWindow;
  uint32_t window_bytes = 1024 * 1024;
  uint64_t pacing_rate_bps = 0;  // 0: not paced
};

struct AckEvent {
  TimeNs now = 0;
  uint32_t acked_bytes = 0;  // newly acknowledged (cumulatively or selectively)
  uint64_t rtt_ns = 0;       // 0: no sample in this ACK
  bool ecn = false;          // the acknowledged packet carried ECN-CE
  uint32_t inflight_bytes = 0;
};

struct LossEvent {
  TimeNs now = 0;
  uint32_t lost_bytes = 0;
  LossKind kind = LossKind::kInferred;
};

class CongestionControl {
 public:
  explicit CongestionControl(const CcConfig& cfg) : cfg_(cfg), cwnd_(cfg.window_bytes) {}

  void on_ack(const AckEvent& e) {
    switch (cfg_.algorithm) {
      case CcAlgorithm::kFixedWindow:
        (void)e;
        break;
    }
  }
  void on_loss(const LossEvent& e) {
    switch (cfg_.algorithm) {
      case CcAlgorithm::kFixedWindow:
        (void)e;
        break;
    }
  }

  uint32_t cwnd_bytes() const { return cwnd_; }
  uint64_t pacing_rate_bps() const { return cfg_.pacing_rate_bps; }
  CcAlgorithm algorithm() const { return cfg_.algorithm; }

 private:
  CcConfig cfg_;
  uint32_t cwnd_;
};

}  // namespace braid
