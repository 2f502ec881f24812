// Bitmap penalty: every entropy in turn, but one with a penalty is passed
// over, and each pass takes one off it. An ECN-marked packet adds 1, a
// trimmed one (NACK) 4, as UET's bitmap does, and a loss inferred on it 4
// (Braid's sender infers what a UET receiver would NACK), up to 15: a path
// that marks everything it carries gets about half its share, one that
// trims or loses much less. Where UET adds 15 for a timeout, the path is
// set aside by PathSet's path states (as are dead and slow paths, with
// probes). Unlike REPS it remembers no good entropy: it spreads over every
// path not penalised, where REPS concentrates on the ones that came back
// clean.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/path_types.h"

namespace braid {

class BitmapPaths {
 public:
  static constexpr std::string_view kName = "bitmap";
  static constexpr bool kAdaptive = true;
  // Turns passed over for a mark, a trim, an inferred loss.
  static constexpr uint8_t kEcnPenalty = 1, kTrimPenalty = 4, kLossPenalty = 4;
  static constexpr uint8_t kMaxPenalty = 15;
  explicit BitmapPaths(const EntropyConfig& cfg)
      : penalty_(std::clamp<uint16_t>(cfg.count, 1, 256), 0) {}

  template <class Set>
  uint8_t choose(Set& s, TimeNs now) {
    return s.explore(now);
  }
  template <class Set>
  uint8_t choose_retransmit(Set& s, uint8_t previous, TimeNs now) {
    return s.explore(now, s.count() > 1 ? previous : -1, false);
  }
  template <class Set>
  void on_named(Set&, uint8_t i, bool marked) {
    if (marked) penalize(i, kEcnPenalty);
  }
  template <class Set>
  void on_lost(Set&, uint8_t i, LossKind why, TimeNs) {
    if (why != LossKind::kTimeout)
      penalize(i, why == LossKind::kTrimmed ? kTrimPenalty : kLossPenalty);
  }
  void on_set_aside(uint8_t) {}
  template <class Set>
  void on_delivered(Set&, uint8_t, bool) {}
  template <class Set>
  bool passes_over(Set&, uint8_t i) {
    uint8_t& p = penalty_[i];
    if (p == 0) return false;
    if (--p == 0) --penalized_count_;
    return true;
  }
  template <class Set>
  bool passing_any(const Set&) const {
    return penalized_count_ != 0;
  }

  uint8_t penalty(uint8_t i) const { return penalty_[i]; }
  // How many entropies have a penalty now.
  uint16_t penalized_count() const { return penalized_count_; }

 private:
  void penalize(uint8_t i, uint8_t by) {
    uint8_t& p = penalty_[i];
    if (p == 0) ++penalized_count_;
    p = static_cast<uint8_t>(std::min<uint32_t>(kMaxPenalty, uint32_t{p} + by));
  }

  std::vector<uint8_t> penalty_;
  uint16_t penalized_count_ = 0;
};

}  // namespace braid
