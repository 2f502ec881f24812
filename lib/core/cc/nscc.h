// NSCC, UET's network-signal congestion control, as UEC's simulator runs it:
// a window moved by ECN echoes and queueing delay (RTT minus the base RTT)
// in four quadrants.
//   no ECN, delay below target: proportional increase (more the lower the
//     delay), or fast increase after a window's worth of near-zero delay;
//   no ECN, delay at or above target: fair increase (the same for all);
//   ECN, delay at or above target: multiplicative decrease by how far the
//     averaged delay is above target, at most once per base RTT;
//   ECN, delay below target: no change (the path, not the rate, is at
//     fault: path selection moves away).
// Increases accumulate and are applied every 8 packets' bytes or once per
// RTT. QuickAdapt: when a trim, or a delay above 4 x target, comes after a
// window in which less than an eighth of the maximum window got through,
// the window drops at once to what got through. Scaled by a = BDP / 150 KB
// (100 Gb/s x 12 us) and b = target / 12 us. Times in ns, sizes in bytes
// with 64 B of header per packet, as the window counts them.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cc_types.h"

namespace braid {

class NsccCc {
 public:
  static constexpr std::string_view kName = "nscc";
  // `packet_bytes`: a full packet as the window counts it (MTU payload plus
  // header charge).
  NsccCc(const CcConfig& cfg, uint32_t packet_bytes);

  void on_ack(const AckEvent& e);
  void on_loss(const LossEvent& e);
  // A timeout shown spurious (the first copy of a packet it declared lost
  // was acknowledged): the window goes back to what it was before that
  // timeout took its packets out of it.
  void on_spurious_timeout();
  uint32_t cwnd_bytes() const { return static_cast<uint32_t>(cwnd_); }  // <= kMaxWindowBytes
  // Window-based, not paced, down to one packet; below that (a share of
  // a large incast) one packet per window's share of the RTT.
  uint64_t rate_bps() const { return rate_; }

  // State, for tests and statistics.
  bool configured() const { return net_rtt_ > 0; }
  TimeNs base_rtt_ns() const { return base_rtt_; }
  double target_delay_ns() const { return target_; }
  double avg_delay_ns() const { return avg_delay_; }
  double max_window() const { return maxwnd_; }
  uint64_t decreases() const { return decreases_; }
  uint64_t quick_adapts() const { return quick_adapts_; }
  uint64_t fast_increases() const { return fast_increases_; }
  uint64_t timeouts_undone() const { return timeouts_undone_; }

  // The largest window NSCC keeps: above any connection's reach (16384
  // packets of at most 16 KiB), far below 2^32. A link rate and base RTT
  // whose 1.5 x BDP exceeds it are refused where they are configured.
  static constexpr double kMaxWindowBytes = 1u << 30;
  // Reference point of the scaling.
  static constexpr double kRefRttNs = 12'000;
  static constexpr double kRefBdpBytes = 150'000;  // 100 Gb/s x 12 us

 private:
  // Derives the parameters from the network's RTT (once: from the
  // configuration, or from the first RTT sample).
  void configure(TimeNs net_rtt);
  // 1.5 x the link's BDP at `rtt`, at least one packet.
  double max_window_for(TimeNs rtt) const;
  void clamp();
  // QuickAdapt; true when this event is to leave the window alone.
  bool quick_adapt(bool loss, bool ecn, double delay, TimeNs now, uint32_t inflight);

  CcConfig cfg_;
  double pkt_;  // a full packet
  double cwnd_;
  // Parameters.
  TimeNs net_rtt_ = 0;  // 0: not configured yet
  double target_ = 0, alpha_ = 0, fi_ = 0, eta_ = 0, fast_scale_ = 0;
  double maxwnd_ = 0, min_cwnd_ = 0;
  uint64_t rate_ = 0;  // pacing below one packet (0: none)
  TimeNs base_rtt_ = 0;
  // State.
  double avg_delay_ = 0;
  double inc_ = 0;            // accumulated increase, bytes^2
  double received_ = 0;       // bytes acknowledged since the last adjustment
  double fast_count_ = 0;     // bytes acknowledged at near-zero delay in a row
  bool fast_ = false;         // in fast increase
  TimeNs last_adjust_ = 0;    // eta added, increases applied
  TimeNs last_decrease_ = 0;  // multiplicative decrease
  bool decreased_ = false;
  // QuickAdapt.
  double achieved_ = 0;  // bytes acknowledged since the window began
  TimeNs qa_end_ = 0;    // when the current window ends (0: none yet)
  double to_ignore_ = 0, ignored_ = 0;
  bool qa_trigger_ = false;  // a trim since the last window check
  // The last timeout: the window before it (0: none to undo) and when.
  double cwnd_before_timeout_ = 0;
  TimeNs timeout_at_ = 0;
  // Counters.
  uint64_t decreases_ = 0, quick_adapts_ = 0, fast_increases_ = 0, timeouts_undone_ = 0;
};

}  // namespace braid
