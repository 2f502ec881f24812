#include "core/timing_wheel.h"

#include <bit>

namespace braid {

TimingWheel::TimingWheel(TimeNs tick_ns, uint32_t slots)
    : tick_ns_(tick_ns == 0 ? 1 : tick_ns),
      mask_((slots < 64 ? 64 : slots) - 1),
      slots_(mask_ + 1, nullptr),
      occupied_((mask_ + 1) / 64, 0) {}

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
    const uint64_t slot = tick_of(t->deadline) & mask_;
    slots_[slot] = t->next;
    if (t->next == nullptr) unmark(slot);
  }
  if (t->deadline == cached_next_) cache_dirty_ = true;
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
  const uint64_t slot = tick_of(deadline) & mask_;
  Timer*& head = slots_[slot];
  t->prev = nullptr;
  t->next = head;
  if (head != nullptr) head->prev = t;
  head = t;
  mark(slot);
  ++armed_;
  if (!cache_dirty_ && deadline < cached_next_) cached_next_ = deadline;
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
  // Empty slots are skipped by their bits: the cost follows the timers
  // due, not the time since the last call.
  const uint64_t last = target - current_tick_ > mask_ ? current_tick_ + mask_ : target;
  for (uint64_t tick = current_tick_; tick <= last; ++tick) {
    const int64_t slot = next_occupied(tick, last - tick);
    if (slot < 0) break;
    tick += (static_cast<uint64_t>(slot) - (tick & mask_)) & mask_;
    if (tick > last) break;
    // A callback that schedules a deadline already due lands in this slot,
    // not one walked before, and fires before advance() returns.
    current_tick_ = tick;
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

int64_t TimingWheel::next_occupied(uint64_t from, uint64_t span) const {
  const uint64_t words = occupied_.size();
  uint64_t w = (from & mask_) >> 6;
  uint64_t bits = occupied_[w] & (~uint64_t{0} << (from & 63));
  uint64_t beyond = 63 - (from & 63);  // slots after `from` that word w covers
  for (uint64_t n = 0; n <= words; ++n) {
    if (bits != 0) return static_cast<int64_t>((w << 6) + std::countr_zero(bits));
    if (beyond >= span) return -1;  // the words looked at cover the span
    w = (w + 1) % words;
    bits = occupied_[w];
    beyond += 64;
  }
  return -1;
}

TimeNs TimingWheel::next_deadline() const {
  if (armed_ == 0) return kNever;
  if (!cache_dirty_ && cached_next_ != kNever) return cached_next_;
  // Visit occupied slots in rotation order from the current tick. A timer in
  // the slot of tick T of this rotation is due within T; no later slot can
  // hold an earlier deadline of this rotation.
  TimeNs best = kNever;
  uint64_t scanned = 0;
  uint64_t slot = current_tick_ & mask_;
  while (scanned <= mask_) {
    const int64_t next = next_occupied(slot, mask_);
    if (next < 0) break;
    const uint64_t dist = (static_cast<uint64_t>(next) - (current_tick_ & mask_)) & mask_;
    if (dist < scanned) break;  // wrapped past the start: every slot seen
    scanned = dist + 1;
    for (const Timer* t = slots_[next]; t != nullptr; t = t->next) {
      if (t->deadline < best) best = t->deadline;
    }
    if (best != kNever && tick_of(best) <= current_tick_ + dist) break;
    slot = (static_cast<uint64_t>(next) + 1) & mask_;
    if (slot == (current_tick_ & mask_)) break;
  }
  cached_next_ = best;
  cache_dirty_ = false;
  return best;
}

}  // namespace braid
