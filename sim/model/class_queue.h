// The queue discipline of every switch port modelled here (the fabric
// simulator's ports, the software switch's queues): two FIFOs of frames, the
// priority class (ACKs, NACKs and other control frames, trimmed headers),
// which always leaves first, and the data class, each with a buffer of its
// own. A full data class trims a frame to its headers into the priority
// class (when trimming is on) or drops it; a lossless (PFC) data class
// never drops. Frames are slots of their owner's pool, linked through the
// owner's `next` array: the queue allocates nothing.
#pragma once

#include <cstdint>

namespace braid::model {

class ClassQueue {
 public:
  static constexpr uint32_t kNil = 0xffffffffu;

  enum class Verdict : uint8_t { kDrop, kData, kPriority, kTrim };
  // What becomes of a frame of `len` bytes arriving now, in the priority
  // class or the data class, with `buffer` bytes for each class. kTrim: it
  // goes in the priority class cut to `trimmed` bytes (`trim` allows it).
  Verdict admit(bool priority, uint32_t len, uint64_t buffer, bool trim, uint32_t trimmed,
                bool lossless = false) const {
    const bool over = priority ? hi_bytes_ + len > buffer : data_bytes() + len > buffer;
    if (!over || (lossless && !priority)) return priority ? Verdict::kPriority : Verdict::kData;
    if (!trim || priority || len <= trimmed || hi_bytes_ + trimmed > buffer) return Verdict::kDrop;
    return Verdict::kTrim;
  }
  // Slot s, `len` bytes, joins the tail of its class.
  void append(uint32_t s, uint32_t len, bool priority, uint32_t* next) {
    uint32_t& head = priority ? hi_head_ : lo_head_;
    uint32_t& tail = priority ? hi_tail_ : lo_tail_;
    next[s] = kNil;
    if (tail == kNil) {
      head = s;
    } else {
      next[tail] = s;
    }
    tail = s;
    queued_ += len;
    if (priority) hi_bytes_ += len;
  }
  // The frame that leaves next (the priority class first), kNil if none;
  // *priority says its class.
  uint32_t head(bool* priority) const {
    *priority = hi_head_ != kNil;
    return *priority ? hi_head_ : lo_head_;
  }
  // The head of the data class, or kNil.
  uint32_t data_head() const { return lo_head_; }
  // Unlinks the head of a class (`len` bytes).
  void pop(bool priority, uint32_t len, const uint32_t* next) {
    uint32_t& head = priority ? hi_head_ : lo_head_;
    uint32_t& tail = priority ? hi_tail_ : lo_tail_;
    head = next[head];
    if (head == kNil) tail = kNil;
    queued_ -= len;
    if (priority) hi_bytes_ -= len;
  }
  // Empties both classes; `drop(s)` for each frame, in order, priority first.
  template <typename Drop>
  void clear(const uint32_t* next, Drop drop) {
    for (uint32_t* head : {&hi_head_, &lo_head_}) {
      while (*head != kNil) {
        const uint32_t s = *head;
        *head = next[s];
        drop(s);
      }
    }
    hi_tail_ = lo_tail_ = kNil;
    queued_ = hi_bytes_ = 0;
  }

  uint64_t queued_bytes() const { return queued_; }  // both classes
  uint64_t priority_bytes() const { return hi_bytes_; }
  uint64_t data_bytes() const { return queued_ - hi_bytes_; }
  bool empty() const { return hi_head_ == kNil && lo_head_ == kNil; }
  bool priority_waiting() const { return hi_head_ != kNil; }
  // The data class holds one frame or none.
  bool data_at_most_one() const { return lo_head_ == lo_tail_; }

 private:
  uint32_t hi_head_ = kNil, hi_tail_ = kNil, lo_head_ = kNil, lo_tail_ = kNil;
  uint64_t queued_ = 0;
  uint64_t hi_bytes_ = 0;
};

}  // namespace braid::model
