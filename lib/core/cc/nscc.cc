#include "core/cc/nscc.h"

#include <algorithm>

namespace braid {

namespace {
constexpr double kDelayGain = 0.0125;   // EWMA of the queueing delay
constexpr double kMdGamma = 0.8;        // multiplicative decrease
constexpr double kMdFloor = 0.5;        // ... by at most half
constexpr double kFastDelayNs = 1'000;  // "no queue": fast increase below this
constexpr double kHeaderBytes = 64;
constexpr double kMinWindowPackets = 8;  // the window goes down to 1/8 packet
}  // namespace

NsccCc::NsccCc(const CcConfig& cfg, uint32_t packet_bytes)
    : cfg_(cfg), pkt_(packet_bytes), cwnd_(std::min<double>(cfg.window_bytes, kMaxWindowBytes)) {
  if (cfg_.base_rtt_ns > 0) {
    configure(cfg_.base_rtt_ns);
    cwnd_ = maxwnd_;  // start at the maximum, as UET does
  }
}

void NsccCc::configure(TimeNs net_rtt) {
  net_rtt_ = std::max<TimeNs>(net_rtt, 1);
  base_rtt_ = net_rtt_;
  const double rtt = static_cast<double>(net_rtt_);
  const double bdp = rtt * static_cast<double>(cfg_.link_bps) / 8e9;
  const double a = bdp / kRefBdpBytes;
  target_ = (cfg_.trimming ? 0.75 : 1.0) * rtt;
  const double b = target_ / kRefRttNs;
  const double mss = pkt_ - kHeaderBytes;
  alpha_ = 4 * mss * a * b / target_;
  fi_ = 5 * mss * a;
  eta_ = 0.15 * mss * a;
  fast_scale_ = 0.25 * a;
  min_cwnd_ = pkt_ / kMinWindowPackets;
  maxwnd_ = max_window_for(net_rtt_);
  clamp();
}

double NsccCc::max_window_for(TimeNs rtt) const {
  const double w = 1.5 * (static_cast<double>(rtt) * static_cast<double>(cfg_.link_bps) / 8e9);
  return std::clamp(w, pkt_, std::max(kMaxWindowBytes, pkt_));
}

void NsccCc::clamp() {
  cwnd_ = std::clamp(cwnd_, min_cwnd_, maxwnd_);
  // Below a packet: one packet every RTT x packet / window, the RTT being
  // the base RTT plus the average queueing delay.
  if (cwnd_ >= pkt_ || !configured()) {
    rate_ = 0;
  } else {
    const double rtt = static_cast<double>(base_rtt_) + avg_delay_;
    rate_ = static_cast<uint64_t>(cwnd_ * 8e9 / std::max(rtt, 1.0));
  }
}

bool NsccCc::quick_adapt(bool loss, bool ecn, double delay, TimeNs now, uint32_t inflight) {
  // After a QuickAdapt, the marks and trims of what was already in flight
  // say nothing new.
  if (ignored_ < to_ignore_ && (ecn || loss)) return true;
  if (now <= qa_end_) return false;
  // A long delay says "queue" only with a mark (as for the average delay):
  // unmarked, it is a slow path or a late host, and a software datapath's
  // hosts (whose reported link rate makes maxwnd / 8 more than they move in
  // a period) had their window cut to a few KB for it, over and over.
  const bool fire = qa_end_ != 0 && (qa_trigger_ || loss || (ecn && delay > 4 * target_)) &&
                    achieved_ < maxwnd_ / 8;
  const double achieved = achieved_;
  achieved_ = 0;
  qa_end_ = now + base_rtt_ + static_cast<TimeNs>(target_);
  if (!fire) return false;
  cwnd_ = std::max(achieved, min_cwnd_);
  to_ignore_ = inflight;
  ignored_ = 0;
  qa_trigger_ = false;
  ++quick_adapts_;
  return true;
}

void NsccCc::on_ack(const AckEvent& e) {
  // The base RTT is the smallest base sample (AckEvent::base_sample_ns;
  // the RTT itself where none is given).
  const uint64_t base_sample = e.base_sample_ns > 0 ? e.base_sample_ns : e.rtt_ns;
  if (!configured()) {
    if (e.rtt_ns == 0) return;  // nothing to scale by yet: the initial window holds
    configure(base_sample);
  }
  const double newly = e.acked_bytes;
  double delay = avg_delay_;
  if (e.rtt_ns > 0) {
    if (base_sample < base_rtt_) {
      base_rtt_ = base_sample;
      // Measured, not configured: the first sample may have waited behind
      // the initial window (the scale would then be that queue's). One
      // under half of it re-derives every parameter; otherwise the largest
      // window follows. A configured base RTT keeps its scale: it is
      // what the network is (or, on a software datapath, what the hosts'
      // batching adds to it), and the delay is still taken from the
      // smallest RTT seen.
      if (cfg_.base_rtt_ns == 0) {
        if (2 * base_rtt_ < net_rtt_) {
          configure(base_rtt_);
        } else {
          maxwnd_ = max_window_for(base_rtt_);
        }
      } else if (cfg_.max_window_from_measured_rtt) {
        maxwnd_ = max_window_for(base_rtt_);
      }
    }
    delay = e.rtt_ns > base_rtt_ ? static_cast<double>(e.rtt_ns - base_rtt_) : 0.0;
    // A long delay without a mark is not taken for a queue (a host that
    // was late, an ACK that waited): the average sees a quarter RTT.
    const double fed = !e.ecn && delay > target_ ? static_cast<double>(base_rtt_) / 4 : delay;
    avg_delay_ = kDelayGain * fed + (1 - kDelayGain) * avg_delay_;
  }
  // A packet sent after the last timeout came back first: that timeout
  // is over, and not to be undone any more.
  if (cwnd_before_timeout_ > 0 && e.rtt_ns > 0 && e.rtt_ns < e.now &&
      e.now - e.rtt_ns > timeout_at_) {
    cwnd_before_timeout_ = 0;
  }
  achieved_ += newly;
  received_ += newly;
  ignored_ += newly;
  if (quick_adapt(false, e.ecn, delay, e.now, e.inflight_bytes)) {
    inc_ = 0;
    received_ = 0;
    clamp();
    return;
  }
  if (!e.ecn) {
    if (delay >= target_) {
      inc_ += fi_ * newly;  // fair increase
    } else {
      bool fast_now = false;
      if (delay < kFastDelayNs) {
        // A window's worth of ACKs with no queue: grow fast.
        fast_count_ += newly;
        if (fast_count_ > cwnd_ || fast_) {
          cwnd_ += fast_scale_ * newly;
          if (!fast_) ++fast_increases_;
          fast_ = fast_now = true;
        }
      } else {
        fast_count_ = 0;
        fast_ = false;
      }
      if (!fast_now) inc_ += alpha_ * newly * (target_ - delay);  // proportional increase
    }
  } else if (delay >= target_) {
    fast_ = false;
    fast_count_ = 0;
    // At most once per base RTT, and only for a packet sent after the last
    // decrease: a window's marks are one signal. (Where the RTT is far above
    // the base RTT, a host's turnaround on a software datapath, marks of
    // the window already cut otherwise cut it again every base RTT, and a
    // small window, whose every ACK comes more than a base RTT apart, is
    // cut on each one.)
    const TimeNs sent_at = e.rtt_ns > 0 && e.rtt_ns < e.now ? e.now - e.rtt_ns : 0;
    if (avg_delay_ > target_ &&
        (!decreased_ || (e.now - last_decrease_ > base_rtt_ && sent_at > last_decrease_))) {
      cwnd_ *= std::max(1 - kMdGamma * (avg_delay_ - target_) / avg_delay_, kMdFloor);
      last_decrease_ = e.now;
      decreased_ = true;
      ++decreases_;
    }
  }
  clamp();
  // Increases are applied every 8 packets' bytes or once per RTT; eta at
  // most once per RTT.
  if (received_ > 8 * pkt_ || e.now - last_adjust_ > net_rtt_) {
    cwnd_ += inc_ / cwnd_;
    if (e.now - last_adjust_ >= net_rtt_) {
      cwnd_ += eta_;
      last_adjust_ = e.now;
    }
    inc_ = 0;
    received_ = 0;
  }
  clamp();
}

void NsccCc::on_spurious_timeout() {
  if (cwnd_before_timeout_ <= 0) return;
  cwnd_ = std::max(cwnd_, cwnd_before_timeout_);
  cwnd_before_timeout_ = 0;
  ++timeouts_undone_;
  clamp();
}

void NsccCc::on_loss(const LossEvent& e) {
  if (!configured()) return;
  const double size = e.lost_bytes;
  switch (e.kind) {
    case LossKind::kTrimmed:
      // A trim is a full queue: the average delay takes a sample of one
      // RTT, and QuickAdapt looks at the window; otherwise the window gives
      // up the trimmed packet.
      ignored_ += size;
      avg_delay_ = kDelayGain * static_cast<double>(net_rtt_) + (1 - kDelayGain) * avg_delay_;
      qa_trigger_ = true;
      if (!quick_adapt(true, true, 0, e.now, e.inflight_bytes)) cwnd_ -= size;
      break;
    case LossKind::kTimeout:
      // One expiry declares its packets lost at one time: the window
      // before the first of them is what an undo goes back to.
      // (Expiries in a row, backing off, keep the first one's.)
      if (e.now != timeout_at_) {
        if (cwnd_before_timeout_ == 0) cwnd_before_timeout_ = cwnd_;
        timeout_at_ = e.now;
      }
      // Not below a packet: a timeout says nothing of the share of a
      // queue (a window under a packet is for what marks and trims say;
      // a blackholed path's timeouts otherwise paced the survivor down).
      cwnd_ = std::max(cwnd_ - size, std::min(cwnd_, pkt_));
      break;
    case LossKind::kInferred:
      // A packet lost on its path (other packets overtook it there) is not
      // a congestion signal by itself: ECN and delay say whether there is
      // a queue. (Random loss would otherwise cost rate.)
      break;
  }
  clamp();
}

}  // namespace braid
