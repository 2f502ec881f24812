// The round-trip time of a connection and its retransmission timeout:
// RFC 6298's smoothed RTT and variation (gains 1/8 and 1/4), the least
// sample, and an RTO between a floor and a ceiling that backs off by
// doubling. A timeout shown spurious (its packet's first copy was
// acknowledged later) raises the floor to the RTO it had backed off to; the
// floor then fades by 1/64 with each RTO computed from new samples.
#pragma once

#include <algorithm>

#include "core/types.h"

namespace braid {

class RttEstimator {
 public:
  RttEstimator(TimeNs rto_initial, TimeNs rto_min, TimeNs rto_max)
      : rto_(rto_initial), rto_min_(rto_min), rto_max_(rto_max) {}

  // A sample (Karn: only from packets sent once).
  void sample(TimeNs rtt) {
    if (min_rtt_ == 0 || rtt < min_rtt_) min_rtt_ = rtt;
    if (srtt_ == 0) {
      srtt_ = rtt;
      rttvar_ = rtt / 2;
      return;
    }
    const TimeNs diff = srtt_ > rtt ? srtt_ - rtt : rtt - srtt_;
    rttvar_ = rttvar_ - rttvar_ / 4 + diff / 4;
    srtt_ = srtt_ - srtt_ / 8 + rtt / 8;
  }
  // The oldest packet was acknowledged: the RTO comes from the samples
  // again (no change before the first).
  void on_progress() {
    if (srtt_ == 0) return;
    rto_ = std::clamp<TimeNs>(srtt_ + 4 * rttvar_, std::max(rto_min_, floor_), rto_max_);
    floor_ -= floor_ / 64;
  }
  // A timeout expired: the next waits twice as long, up to the ceiling.
  void back_off() { rto_ = std::min(rto_ * 2, rto_max_); }
  void on_spurious_timeout() { floor_ = std::max(floor_, std::min(rto_, rto_max_)); }
  // A new ceiling (an RC QP's timeout changed at RTS); never below the least.
  void set_max(TimeNs rto_max) {
    rto_max_ = std::max(rto_max, rto_min_);
    rto_ = std::min(rto_, rto_max_);
  }

  TimeNs srtt() const { return srtt_; }
  TimeNs rttvar() const { return rttvar_; }
  TimeNs min_rtt() const { return min_rtt_; }
  TimeNs rto() const { return rto_; }
  TimeNs rto_max() const { return rto_max_; }

 private:
  TimeNs srtt_ = 0;
  TimeNs rttvar_ = 0;
  TimeNs min_rtt_ = 0;
  TimeNs rto_;
  TimeNs floor_ = 0;
  TimeNs rto_min_;
  TimeNs rto_max_;
};

}  // namespace braid
