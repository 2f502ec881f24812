// REPS (recycled entropy packet spraying, arXiv 2407.21625): an entropy
// whose packet was acknowledged without an ECN mark is used again (a ring
// of them); when none is waiting, the next entropy in turn is explored.
// Congested, degraded or dead paths are simply not recycled. After a
// timeout exploring stops for a while (the failure may be anywhere): the
// last entropy known good is used when the ring is empty. An entropy that
// marks persistently (PathSet's mark rate) is not recycled, and exploring
// passes over it while its rate decays. The path states (good, skipped,
// assumed bad, probes) are PathSet's, shared with every adaptive policy.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/path_types.h"

namespace braid {

class RepsPaths {
 public:
  static constexpr std::string_view kName = "reps";
  static constexpr bool kAdaptive = true;
  explicit RepsPaths(const EntropyConfig& cfg) : freeze_ns_(cfg.freeze_ns) {}

  template <class Set>
  uint8_t choose(Set& s, TimeNs now) {
    while (ring_count_ > 0) {
      const uint8_t e = take_recycled();
      if (s.health(e).state == PathState::kGood) return e;  // not gone bad since
    }
    if (now < frozen_until_ && has_good_) return last_good_;
    return s.explore(now);
  }
  template <class Set>
  uint8_t choose_retransmit(Set& s, uint8_t previous, TimeNs now) {
    // Not the path that lost it, if another is known good.
    for (uint16_t n = ring_count_; n > 0; --n) {
      const uint8_t e = take_recycled();
      if (s.health(e).state != PathState::kGood) continue;
      if (e != previous || s.count() == 1) return e;
      recycle(e);
    }
    if (now < frozen_until_ && has_good_ && last_good_ != previous) return last_good_;
    // A retransmission never carries a probe: the ACK of a packet sent
    // twice does not say which copy arrived.
    return s.explore(now, s.count() > 1 ? previous : -1, false);
  }
  // An ACK named a packet sent once on i: its mark rate follows.
  template <class Set>
  void on_named(Set& s, uint8_t i, bool marked) {
    const uint16_t r = s.health(i).mark_rate;
    s.set_mark_rate(i, static_cast<uint16_t>(r - (r >> 3) + (marked ? (Set::kMarkOne >> 3) : 0)));
  }
  template <class Set>
  void on_lost(Set&, uint8_t i, LossKind why, TimeNs now) {
    if (why != LossKind::kTimeout) return;
    frozen_until_ = now + freeze_ns_;
    on_set_aside(i);
  }
  void on_set_aside(uint8_t i) {
    if (has_good_ && last_good_ == i) has_good_ = false;
  }
  // A packet sent once on a good path i was acknowledged.
  template <class Set>
  void on_delivered(Set& s, uint8_t i, bool marked) {
    if (marked || s.health(i).mark_rate >= Set::kMarkedPersistently) return;
    recycle(i);
    last_good_ = i;
    has_good_ = true;
  }
  // Exploring passes over an entropy that marks persistently; its mark
  // rate decays by an eighth each time, so it is tried again after a few
  // turns (and passed over again if what it carries comes back marked).
  template <class Set>
  bool passes_over(Set& s, uint8_t i) {
    const uint16_t r = s.health(i).mark_rate;
    if (r < Set::kMarkedPersistently) return false;
    s.set_mark_rate(i, static_cast<uint16_t>(r - (r >> 3)));
    return true;
  }
  template <class Set>
  bool passing_any(const Set& s) const {
    return s.marked_count() != 0;
  }

 private:
  // The ring of entropies to use again; the oldest is dropped when full.
  static constexpr uint16_t kRing = 16;
  void recycle(uint8_t i) {
    if (ring_count_ == kRing) {
      ring_head_ = (ring_head_ + 1) % kRing;
      --ring_count_;
    }
    ring_[(ring_head_ + ring_count_) % kRing] = i;
    ++ring_count_;
  }
  uint8_t take_recycled() {
    const uint8_t i = ring_[ring_head_];
    ring_head_ = (ring_head_ + 1) % kRing;
    --ring_count_;
    return i;
  }

  TimeNs freeze_ns_;
  uint8_t ring_[kRing] = {};
  uint16_t ring_head_ = 0, ring_count_ = 0;
  uint8_t last_good_ = 0;
  bool has_good_ = false;
  TimeNs frozen_until_ = 0;
};

}  // namespace braid
