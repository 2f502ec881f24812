// A single-level hashed timing wheel with intrusive timers. Insert and cancel
// are O(1) and allocation-free; a timer beyond the wheel's span waits in its
// slot for later rotations. The owner drives it with advance(now): the core
// never reads a clock.
#pragma once

#include <cstdint>
#include <vector>

#include "core/types.h"

namespace braid {

class TimingWheel;

struct Timer {
  using Callback = void (*)(Timer*, TimeNs now);
  Callback fn = nullptr;
  void* owner = nullptr;  // for the callback
  TimeNs deadline = kNever;
  Timer* prev = nullptr;
  Timer* next = nullptr;
  bool armed() const { return deadline != kNever; }
};

class TimingWheel {
 public:
  // tick_ns: resolution (timers fire at or after their deadline, at most one
  // tick late when advance() is called often enough). slots: power of two,
  // at least 64.
  explicit TimingWheel(TimeNs tick_ns = 1000, uint32_t slots = 4096);
  ~TimingWheel();
  TimingWheel(const TimingWheel&) = delete;
  TimingWheel& operator=(const TimingWheel&) = delete;

  void schedule(Timer* t, TimeNs deadline);  // re-arms if already armed
  void cancel(Timer* t);
  // Fires every timer whose deadline is <= now. Callbacks may re-arm timers.
  uint32_t advance(TimeNs now);
  // Earliest deadline of an armed timer (a lower bound is never later than the
  // truth), kNever when none is armed.
  TimeNs next_deadline() const;
  uint32_t armed_count() const { return armed_; }

 private:
  uint64_t tick_of(TimeNs t) const { return t / tick_ns_; }
  void unlink(Timer* t);

  void mark(uint64_t slot) { occupied_[slot >> 6] |= uint64_t{1} << (slot & 63); }
  void unmark(uint64_t slot) { occupied_[slot >> 6] &= ~(uint64_t{1} << (slot & 63)); }
  // Next occupied slot at or after `from` (in rotation order), or -1 when
  // none is within `span` slots after it (a slot found beyond the span, in
  // a word already read, may still be returned).
  int64_t next_occupied(uint64_t from, uint64_t span) const;

  TimeNs tick_ns_;
  uint32_t mask_;
  std::vector<Timer*> slots_;
  std::vector<uint64_t> occupied_;       // one bit per slot: next_deadline skips empty ones
  mutable TimeNs cached_next_ = kNever;  // valid while !cache_dirty_
  mutable bool cache_dirty_ = false;
  uint64_t current_tick_ = 0;  // every slot before it has been processed
  uint32_t armed_ = 0;
};

}  // namespace braid
