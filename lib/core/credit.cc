#include "core/credit.h"

namespace braid {

CreditPacer::CreditPacer(const CreditPacerConfig& cfg, TimingWheel* wheel, GrantFn fn, void* owner)
    : cfg_(cfg),
      wheel_(wheel),
      grant_(fn),
      owner_(owner),
      rate_(cfg.rate_bps),
      shared_(cfg.shared_next_at) {
  if (cfg_.quantum_bytes == 0) cfg_.quantum_bytes = 8192;
  timer_.fn = &CreditPacer::thunk;
  timer_.owner = this;
}

CreditPacer::~CreditPacer() {
  if (timer_.armed()) wheel_->cancel(&timer_);
}

void CreditPacer::thunk(Timer* t, TimeNs now) {
  static_cast<CreditPacer*>(t->owner)->run(now);
}

void CreditPacer::want(uint16_t id, uint64_t link_bps, TimeNs now) {
  if (rate_ == 0) rate_ = link_bps;
  active_.push(id);
  if (shared_ != nullptr) {
    if (booked_ == kNever) book(now);
    return;
  }
  // An idle pacer banks no turns: it starts from now (or from when the
  // unscheduled data it has seen has left the link).
  if (!timer_.armed()) {
    next_at_ = std::max(next_at_, now);
    if (next_at_ <= now) {
      run(now);
    } else {
      wheel_->schedule(&timer_, next_at_);
    }
  }
}

void CreditPacer::on_unscheduled(uint16_t id, uint32_t frame_bytes, TimeNs now, bool others) {
  stats_.unscheduled_bytes += frame_bytes;
  if (!others && active_.size() <= (active_.contains(id) ? 1u : 0u)) return;
  push_next(now, time_of(frame_bytes));
  // (Shared: the turns booked later move; this pacer's booked one stays.)
  if (shared_ == nullptr && timer_.armed() && timer_.deadline < next_at_) {
    wheel_->schedule(&timer_, next_at_);
  }
}

void CreditPacer::on_congestion(uint32_t frame_bytes, bool trimmed, TimeNs now) {
  ++(trimmed ? stats_.trimmed : stats_.marked);
  push_next(now, time_of(trimmed ? frame_bytes : frame_bytes / 16));
  if (shared_ == nullptr && timer_.armed() && timer_.deadline < next_at_) {
    wheel_->schedule(&timer_, next_at_);
  }
}

uint32_t CreditPacer::turn_bytes() const {
  // Few senders take larger turns (up to 8 quanta for a lone one): fewer
  // CREDITs for the same rate. Many take a quantum each, for fairness.
  const auto quanta = static_cast<uint32_t>(
      std::clamp<size_t>(cfg_.max_turn_quanta / std::max<size_t>(active_.size(), 1), 1,
                         std::max<uint32_t>(cfg_.max_turn_quanta, 1)));
  return cfg_.quantum_bytes * quanta;
}

void CreditPacer::book(TimeNs now) {
  // The link's next free time, shared with the port's other pacers: this
  // pacer takes the turn after it (an idle link banks nothing), so pacers
  // with demand take turns in the order they booked.
  booked_turn_ = turn_bytes();
  TimeNs cur = shared_->load(std::memory_order_relaxed);
  TimeNs start = 0;
  do {
    start = std::max(cur, now);
  } while (!shared_->compare_exchange_weak(cur, start + time_of(booked_turn_),
                                           std::memory_order_relaxed));
  booked_ = start;
  if (start <= now) {
    run(now);
  } else {
    wheel_->schedule(&timer_, start);
  }
}

void CreditPacer::run_shared(TimeNs now) {
  if (booked_ == kNever) {
    if (!active_.empty()) book(now);
    return;
  }
  if (booked_ > now) {
    wheel_->schedule(&timer_, booked_);
    return;
  }
  // The booked turn: granted to the first connection that takes any.
  const TimeNs start = booked_;
  booked_ = kNever;
  uint32_t g = 0;
  while (g == 0 && !active_.empty()) {
    const uint16_t id = active_.front();
    active_.pop();
    bool more = false;
    g = grant_(owner_, id, booked_turn_, &more, now);
    if (more) active_.push(id);
  }
  if (g > 0) {
    ++stats_.grants;
    stats_.granted_bytes += g;
  }
  // A turn not used in full gives its rest back if nobody booked after it.
  if (g < booked_turn_) {
    TimeNs end = start + time_of(booked_turn_);
    shared_->compare_exchange_strong(end, start + time_of(g), std::memory_order_relaxed);
  }
  if (!active_.empty()) book(now);
}

void CreditPacer::run(TimeNs now) {
  if (shared_ != nullptr) {
    run_shared(now);
    return;
  }
  // A timer fires up to a tick late: the turns due meanwhile are granted
  // now, but an idle spell is not made up for (at most two quanta).
  const TimeNs slack = 2 * time_of(cfg_.quantum_bytes);
  if (next_at_ + slack < now) next_at_ = now - slack;
  while (next_at_ <= now && !active_.empty()) {
    const uint32_t turn = turn_bytes();
    const uint16_t id = active_.front();
    active_.pop();
    bool more = false;
    const uint32_t g = grant_(owner_, id, turn, &more, now);
    if (more) active_.push(id);
    if (g == 0) continue;
    ++stats_.grants;
    stats_.granted_bytes += g;
    next_at_ += time_of(g);
  }
  if (!active_.empty()) wheel_->schedule(&timer_, next_at_);
}

CreditGrantor::Request CreditGrantor::on_request(uint32_t demand, TimeNs rto, TimeNs rto_max,
                                                 TimeNs now) {
  Request out;
  asked_ = true;
  if (credit_after(demand, target_)) target_ = demand;
  if (capped_) {
    // The peer has not used what it holds (or some was lost, or given back
    // at idle). One whose credited data still arrives is forgiven at once.
    const bool alive = arrival_at_ != 0 && now - arrival_at_ < rto;
    const TimeNs wait = std::min<TimeNs>(rto << std::min<uint8_t>(forgiven_, 16), rto_max);
    if (!alive && now - capped_at_ < wait) {
      due_ = true;  // our cumulative grant again: nothing new
      return out;
    }
    if (!alive && forgiven_ < 255) ++forgiven_;
    out.forgiven = true;
    capped_ = false;
    unused_ = 0;
    arrived_since_forgiven_ = 0;
  }
  if (credit_after(target_, granted_)) {
    if (pacer_ != nullptr) {
      want(now);
    } else {
      out.granted = target_ - granted_;
      granted_ = target_;  // nothing paces: grant it all
      due_ = true;
    }
  } else {
    due_ = true;  // all granted already: our CREDIT may have been lost
  }
  return out;
}

uint32_t CreditGrantor::grant(uint32_t max_bytes, uint32_t frame, uint32_t cap, bool* more,
                              bool* capped, TimeNs now) {
  *more = false;
  *capped = false;
  const int32_t want = static_cast<int32_t>(target_ - granted_);
  if (want <= 0) return 0;
  if (cap != 0 && unused_ >= cap) {
    // Out of the turns until its data arrives or it asks again.
    if (!capped_) {
      capped_ = true;
      capped_at_ = now;
      *capped = true;
    }
    return 0;
  }
  // Whole packets: a turn's time on the link is what its packets take (a
  // quantum that is not a multiple of them leaves a gap in one turn and a
  // queue in another, the same turns for every sender).
  const uint32_t packets = std::max<uint32_t>(1, (max_bytes + frame / 2) / frame);
  const uint32_t g = std::min<uint32_t>(packets * frame, static_cast<uint32_t>(want));
  granted_ += g;
  unused_ += g;
  *more = static_cast<uint32_t>(want) > g;
  due_ = true;
  // The grant that completes the peer's demand has no later one to repair
  // it if lost: it goes out twice, the copy on the next entropy.
  copies_ = *more ? 0 : 1;
  return g;
}

void CreditGrantor::on_arrival(uint32_t frame, uint32_t cap, TimeNs now) {
  arrival_at_ = now;
  unused_ -= std::min(frame, unused_);
  arrived_since_forgiven_ =
      static_cast<uint32_t>(std::min<uint64_t>(uint64_t{arrived_since_forgiven_} + frame, cap));
  if (arrived_since_forgiven_ >= cap / 2) forgiven_ = 0;
  if (capped_ && unused_ < cap) {
    capped_ = false;
    if (credit_after(target_, granted_) && pacer_ != nullptr) want(now);
  }
}

}  // namespace braid
