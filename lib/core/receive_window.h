// The receiver's view of one PSN space: the cumulative point (every PSN up to
// and including cack() has arrived) and a bitmap of what arrived above it.
// Duplicates and PSNs outside the window are recognised here, so nothing is
// ever placed twice. Memory: window/8 bytes.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "core/types.h"

namespace braid {

class ReceiveWindow {
 public:
  enum class Verdict : uint8_t { kNew, kDuplicate, kOutOfWindow };

  // window_packets: power of two, >= 128.
  ReceiveWindow(uint32_t window_packets, uint32_t initial_psn)
      : mask_(window_packets - 1), words_(window_packets / 64, 0), cack_(initial_psn - 1) {}

  // Moves the start of a window nothing has been marked in to psn.
  void restart(uint32_t psn) {
    cack_ = psn - 1;
    for (uint64_t& w : words_) w = 0;
  }

  Verdict check(uint32_t psn) const {
    const int32_t d = psn_diff(psn, cack_);
    if (d <= 0) return Verdict::kDuplicate;
    if (static_cast<uint32_t>(d) > mask_ + 1) return Verdict::kOutOfWindow;
    return test(psn) ? Verdict::kDuplicate : Verdict::kNew;
  }

  // Marks a PSN that check() called kNew. Returns how far cack() advanced.
  // `in_order`: the caller knows psn is cack() + 1.
  uint32_t mark(uint32_t psn, bool in_order = false) {
    if (held_ == 0 && (in_order || psn == cack_ + 1)) {
      // In order with nothing held above: no bit to set and clear again.
      cack_ = psn;
      return 1;
    }
    const uint32_t i = psn & mask_;
    words_[i >> 6] |= uint64_t{1} << (i & 63);
    ++held_;
    if (psn != cack_ + 1) return 0;
    uint32_t advanced = 0;
    for (;;) {
      const uint32_t p = (cack_ + 1) & mask_;
      const uint32_t w = p >> 6;
      const uint32_t b = p & 63;
      const uint64_t bits = words_[w] >> b;
      const uint32_t ones = static_cast<uint32_t>(std::countr_one(bits));
      const uint32_t run = ones > 64 - b ? 64 - b : ones;
      if (run == 0) break;
      const uint64_t clear = run == 64 ? ~uint64_t{0} : ((uint64_t{1} << run) - 1) << b;
      words_[w] &= ~clear;
      cack_ += run;
      advanced += run;
      held_ -= run;
      if (run < 64 - b) break;
    }
    return advanced;
  }

  uint32_t cack() const { return cack_; }
  uint32_t held_out_of_order() const { return held_; }
  uint32_t window() const { return mask_ + 1; }

  // Bit i set: PSN base + i has arrived (PSNs at or below cack() count as
  // arrived). base must be above cack().
  uint64_t sack_bits(uint32_t base) const {
    const uint32_t p = base & mask_;
    const uint32_t w = p >> 6;
    const uint32_t b = p & 63;
    uint64_t v = words_[w] >> b;
    if (b != 0) v |= words_[(w + 1) % words_.size()] << (64 - b);
    // Bits that wrapped past the window's end map to PSNs <= cack(): their
    // words are clear, except the part of the window the base itself skipped.
    const uint32_t span = mask_ + 1 - static_cast<uint32_t>(psn_diff(base, cack_) - 1);
    if (span < 64) v &= (uint64_t{1} << span) - 1;
    return v;
  }

 private:
  bool test(uint32_t psn) const {
    const uint32_t i = psn & mask_;
    return (words_[i >> 6] >> (i & 63)) & 1;
  }

  uint32_t mask_;
  std::vector<uint64_t> words_;
  uint32_t cack_;
  uint32_t held_ = 0;
};

}  // namespace braid
