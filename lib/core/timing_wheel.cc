#include "core/timing_wheel.h"

namespace braid {

TimingWheel::TimingWheel(TimeNs tick_ns, uint32_t slots)
    : tick_ns_(tick_ns == 0 ? 1 : tick_ns), mask_(slots - 1), slots_(slots, nullptr) {}

TimingWheel::~TimingWheel() {
  for (Timer* head : slots_) {
    for (Timer* t = head; t != nullptr;) {
      Timer* n = t->next;
      t->prev = t->next = nullptr;
      t->deadline = kNever;
      t = n;
    }
  }
}

void TimingWheel::unlink(Timer* t) {
  if (t->prev != nullptr) {
    t->prev->next = t->next;
  } else {
    slots_[tick_of(t->deadline) & mask_] = t->next;
  }
  if (t->next != nullptr) t->next->prev = t->prev;
  t->prev = t->next = nullptr;
}

void TimingWheel::schedule(Timer* t, TimeNs deadline) {
  if (t->armed()) cancel(t);
  if (deadline == kNever) return;
  // A deadline in the past goes into the current slot and fires on the next
  // advance(); keep tick_of(deadline) consistent for unlink().
  const TimeNs floor = current_tick_ * tick_ns_;
  if (deadline < floor) deadline = floor;
  t->deadline = deadline;
  Timer*& head = slots_[tick_of(deadline) & mask_];
  t->prev = nullptr;
  t->next = head;
  if (head != nullptr) head->prev = t;
  head = t;
  ++armed_;
}

void TimingWheel::cancel(Timer* t) {
  if (!t->armed()) return;
  unlink(t);
  t->deadline = kNever;
  --armed_;
}

uint32_t TimingWheel::advance(TimeNs now) {
  const uint64_t target = tick_of(now);
  if (target < current_tick_) return 0;
  uint32_t fired = 0;
  // Walk at most one rotation: beyond that every slot has been visited.
  const uint64_t last = target - current_tick_ > mask_ ? current_tick_ + mask_ : target;
  for (uint64_t tick = current_tick_; tick <= last; ++tick) {
    Timer* t = slots_[tick & mask_];
    while (t != nullptr) {
      Timer* next = t->next;
      if (t->deadline <= now) {
        unlink(t);
        t->deadline = kNever;
        --armed_;
        ++fired;
        t->fn(t, now);
        // The callback may have re-armed or cancelled any timer, including
        // `next`: restart the slot from its head.
        next = slots_[tick & mask_];
      }
      t = next;
      // Skip timers of later rotations without restarting forever.
      while (t != nullptr && t->deadline > now) t = t->next;
    }
  }
  current_tick_ = target;
  return fired;
}

TimeNs TimingWheel::next_deadline() const {
  if (armed_ == 0) return kNever;
  TimeNs best = kNever;
  for (uint64_t i = 0; i <= mask_; ++i) {
    const uint64_t tick = current_tick_ + i;
    for (const Timer* t = slots_[tick & mask_]; t != nullptr; t = t->next) {
      if (t->deadline < best) best = t->deadline;
    }
    // Anything found in this rotation's slot is due by the end of this tick;
    // no later slot can hold an earlier deadline of this rotation.
    if (best != kNever && tick_of(best) <= tick) return best;
  }
  return best;
}

}  // namespace braid
