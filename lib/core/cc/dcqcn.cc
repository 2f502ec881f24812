#include "core/cc/dcqcn.h"

#include <algorithm>

namespace braid {

DcqcnCc::DcqcnCc(const CcConfig& cfg)
    : cfg_(cfg),
      link_(static_cast<double>(cfg.link_bps)),
      rc_(link_),
      rt_(link_),
      min_rate_(std::max(link_ / 10'000, 1e6)) {}

void DcqcnCc::advance(TimeNs now) {
  if (!started_) {
    started_ = true;
    last_ = now;
    alpha_due_ = now + cfg_.dcqcn.alpha_timer_ns;
    rate_due_ = now + cfg_.dcqcn.rate_timer_ns;
    return;
  }
  // A gap between events far longer than the pacing explains (four rate
  // periods, or four frames at the current rate) is a host that did not
  // run: a NIC would have kept its timer and kept sending, and got CNPs
  // meanwhile. Its rate increases stop at the gap's start (taken, they
  // brought a descheduled software host back at line rate: 1 MB queues on
  // the wire). Alpha decays on.
  const double frame_gap_ns = rc_ > 0 ? last_frame_bits_ * 1e9 / rc_ : 0;
  const TimeNs catch_up = std::max<TimeNs>(kCatchUp * cfg_.dcqcn.rate_timer_ns,
                                           static_cast<TimeNs>(kCatchUp * frame_gap_ns));
  const TimeNs rate_until = now - last_ > catch_up ? last_ + catch_up : now;
  // The timers that expired since the last event, in order.
  while (alpha_due_ <= now || rate_due_ <= rate_until) {
    if (alpha_due_ <= now && (alpha_due_ <= rate_due_ || rate_due_ > rate_until)) {
      alpha_ *= 1.0 - cfg_.dcqcn.g;
      alpha_due_ += cfg_.dcqcn.alpha_timer_ns;
    } else {
      ++t_count_;
      increase();
      rate_due_ += cfg_.dcqcn.rate_timer_ns;
    }
    // An idle sender catches up at most a second of timers.
    if (now > alpha_due_ + 1'000'000'000 && now > rate_due_ + 1'000'000'000) {
      alpha_due_ = now + cfg_.dcqcn.alpha_timer_ns;
      rate_due_ = now + cfg_.dcqcn.rate_timer_ns;
      rc_ = rt_ = link_;
      break;
    }
  }
  if (rate_due_ <= now) {
    rate_due_ = now + cfg_.dcqcn.rate_timer_ns;
    ++gaps_skipped_;
  }
  last_ = now;
}

void DcqcnCc::increase() {
  const uint32_t f = cfg_.dcqcn.fast_recovery_stages;
  const double rai = link_ * cfg_.dcqcn.rai_fraction;
  if (t_count_ > f && b_count_ > f) {
    const uint32_t i = std::min(t_count_, b_count_) - f;
    rt_ += i * rai * cfg_.dcqcn.hai_factor;  // hyper increase
  } else if (t_count_ > f || b_count_ > f) {
    rt_ += rai;  // additive increase
  }
  rt_ = std::min(rt_, link_);
  rc_ = std::min((rt_ + rc_) / 2, link_);
}

void DcqcnCc::on_ack(const AckEvent& e) {
  advance(e.now);
}

void DcqcnCc::on_sent(uint32_t bytes, TimeNs now) {
  // The paper's byte counter counts bytes sent (a stage per byte_counter).
  advance(now);
  last_frame_bits_ = 8.0 * bytes;
  bytes_ += bytes;
  while (bytes_ >= cfg_.dcqcn.byte_counter) {
    bytes_ -= cfg_.dcqcn.byte_counter;
    ++b_count_;
    increase();
  }
}

void DcqcnCc::on_cnp(TimeNs now) {
  advance(now);
  ++cnps_;
  rt_ = rc_;
  rc_ = std::max(rc_ * (1 - alpha_ / 2), min_rate_);
  alpha_ = (1 - cfg_.dcqcn.g) * alpha_ + cfg_.dcqcn.g;
  t_count_ = b_count_ = 0;
  bytes_ = 0;
  alpha_due_ = now + cfg_.dcqcn.alpha_timer_ns;
  rate_due_ = now + cfg_.dcqcn.rate_timer_ns;
}

}  // namespace braid
