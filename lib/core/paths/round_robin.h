// Round robin (oblivious): every entropy in turn, keeping no path states.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/path_types.h"

namespace braid {

class RoundRobinPaths {
 public:
  static constexpr std::string_view kName = "round-robin";
  static constexpr bool kAdaptive = false;  // PathSet never asks it (next_in_turn)
  explicit RoundRobinPaths(const EntropyConfig&) {}
  template <class Set>
  uint8_t choose(Set& s, TimeNs) {
    return s.next_in_turn();
  }
  template <class Set>
  uint8_t choose_retransmit(Set& s, uint8_t, TimeNs) {
    return s.next_in_turn();
  }
  template <class Set>
  void on_named(Set&, uint8_t, bool) {}
  template <class Set>
  void on_lost(Set&, uint8_t, LossKind, TimeNs) {}
  void on_set_aside(uint8_t) {}
  template <class Set>
  void on_delivered(Set&, uint8_t, bool) {}
  template <class Set>
  bool passes_over(Set&, uint8_t) {
    return false;
  }
  template <class Set>
  bool passing_any(const Set&) const {
    return false;
  }
};

}  // namespace braid
