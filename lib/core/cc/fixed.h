// The fixed window: what Braid did before congestion control, kept as a
// profile for comparison: window_bytes in flight, never changed, optionally
// paced at a fixed rate (CcConfig::pacing_rate_bps).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cc_types.h"

namespace braid {

class FixedWindowCc {
 public:
  static constexpr std::string_view kName = "fixed";
  explicit FixedWindowCc(const CcConfig& cfg, uint32_t /*packet_bytes*/ = 0)
      : cwnd_(cfg.window_bytes), rate_(cfg.pacing_rate_bps) {}
  void on_ack(const AckEvent&) {}
  void on_loss(const LossEvent&) {}
  uint32_t cwnd_bytes() const { return cwnd_; }
  uint64_t rate_bps() const { return rate_; }

 private:
  uint32_t cwnd_;
  uint64_t rate_;
};

}  // namespace braid
