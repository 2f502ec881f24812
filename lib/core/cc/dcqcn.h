// DCQCN (Zhu et al., SIGCOMM 2015), RoCEv2's congestion control, as the
// baseline: a rate, not a window. The receiver (notification point) answers
// ECN-CE with a CNP, at most one per 50 us per connection; the sender
// (reaction point) keeps a current rate RC, a target rate RT and alpha, the
// estimate of how often it is marked:
//   a CNP:  RT = RC; RC = RC x (1 - alpha / 2); alpha = (1 - g) alpha + g;
//           the increase stages start again;
//   every alpha_timer_ns without a CNP: alpha = (1 - g) alpha;
//   every rate_timer_ns, and every byte_counter bytes sent (counted as
//   frames leave, not as they are acknowledged), an increase
//   event: in fast recovery (both counts below F) RC = (RT + RC) / 2; then
//   additive increase (RT += R_AI), or hyper increase (RT += i x R_HAI)
//   once both counts passed F, each followed by RC = (RT + RC) / 2.
// The connection paces at RC. Timers are applied lazily at each event from
// the time that has passed, so no timer of its own is needed: a sender with
// nothing to send has no rate to change. Rate increases are not taken over
// a gap far longer than the pacing explains (a software host that did not
// run: its NIC would have sent, and heard CNPs, meanwhile). Paper parameters by default
// (facts.md): g = 1/256, 50 us timer, 10 MB byte counter, F = 5; R_AI is
// 40 Mb/s at 40 Gb/s in the paper, scaled here to the link (a thousandth of
// it), R_HAI ten times that.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cc_types.h"

namespace braid {

class DcqcnCc {
 public:
  static constexpr std::string_view kName = "dcqcn";
  explicit DcqcnCc(const CcConfig& cfg);
  DcqcnCc(const CcConfig& cfg, uint32_t /*packet_bytes*/) : DcqcnCc(cfg) {}

  void on_ack(const AckEvent& e);
  void on_loss(const LossEvent&) {}  // the rate answers CNPs only, as RoCE's
  void on_cnp(TimeNs now);
  // A frame of `bytes` left at the paced rate (the byte counter's input).
  void on_sent(uint32_t bytes, TimeNs now);
  // In flight, the window bounds it (RoCE's NICs bound it by their queues).
  uint32_t cwnd_bytes() const { return cfg_.window_bytes; }
  uint64_t rate_bps() const { return static_cast<uint64_t>(rc_); }

  // State, for tests and statistics.
  double target_rate_bps() const { return rt_; }
  double alpha() const { return alpha_; }
  uint64_t cnps() const { return cnps_; }
  uint32_t timer_stage() const { return t_count_; }
  uint32_t byte_stage() const { return b_count_; }
  // Gaps between events too long for the pacing (the host did not run):
  // the rate timer's increases over them were not taken.
  uint64_t gaps_skipped() const { return gaps_skipped_; }

 private:
  void advance(TimeNs now);
  void increase();

  CcConfig cfg_;
  double link_;     // b/s
  double rc_, rt_;  // current and target rates, b/s
  double alpha_ = 1.0;
  double min_rate_;
  uint32_t t_count_ = 0, b_count_ = 0;  // increase events since the last CNP
  uint64_t bytes_ = 0;                  // towards the byte counter
  TimeNs last_ = 0;                     // when the timers were last applied
  TimeNs alpha_due_ = 0, rate_due_ = 0;
  bool started_ = false;
  uint64_t cnps_ = 0;
  double last_frame_bits_ = 0;  // the last frame sent
  uint64_t gaps_skipped_ = 0;
  static constexpr uint32_t kCatchUp = 4;  // rate periods or frames
};

}  // namespace braid
