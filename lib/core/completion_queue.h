// A fixed-capacity ring of work completions. The verbs CQ wraps one; several
// connections may share it (single-threaded, like everything in the core).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/types.h"

namespace braid {

class CompletionQueue {
 public:
  explicit CompletionQueue(uint32_t capacity) : ring_(capacity) {}

  // False when full: the entry is dropped and counted as an overrun, which
  // libibverbs reports as a fatal CQ error; callers move the QP to error.
  bool push(const WorkCompletion& wc) {
    if (count_ == ring_.size()) {
      ++overruns_;
      return false;
    }
    // (No division: head_ + count_ < 2 * size.)
    const size_t at = head_ + count_;
    ring_[at < ring_.size() ? at : at - ring_.size()] = wc;
    ++count_;
    ++pushed_;
    return true;
  }

  // Copies up to n completions out, oldest first.
  uint32_t poll(WorkCompletion* out, uint32_t n) {
    return poll_each(n, [&out](const WorkCompletion& wc) { *out++ = wc; });
  }
  // Hands up to n completions to f(const WorkCompletion&), oldest first, and
  // removes them: a caller with a format of its own converts in place.
  template <typename F>
  uint32_t poll_each(uint32_t n, F&& f) {
    uint32_t k = 0;
    for (; k < n && count_ > 0; ++k) {
      f(ring_[head_]);
      if (++head_ == ring_.size()) head_ = 0;
      --count_;
    }
    return k;
  }

  // The completions of one queue pair leave, the others keep their order
  // (a QP moved to RESET: a NIC's provider cleans its CQEs out of its CQs).
  // Returns how many left.
  uint32_t erase_qp(uint32_t qp_num) {
    uint32_t kept = 0, erased = 0;
    const size_t n = ring_.size();
    for (uint32_t i = 0; i < count_; ++i) {
      const WorkCompletion& wc = ring_[(head_ + i) % n];
      if (wc.qp_num == qp_num) {
        ++erased;
      } else {
        ring_[(head_ + kept++) % n] = wc;
      }
    }
    count_ = kept;
    return erased;
  }

  uint32_t size() const { return count_; }
  uint32_t capacity() const { return static_cast<uint32_t>(ring_.size()); }
  uint64_t overruns() const { return overruns_; }
  // Completions added so far (an event fires for those added after arming).
  uint64_t pushed() const { return pushed_; }

 private:
  std::vector<WorkCompletion> ring_;
  uint32_t head_ = 0;
  uint32_t count_ = 0;
  uint64_t overruns_ = 0;
  uint64_t pushed_ = 0;
};

}  // namespace braid
