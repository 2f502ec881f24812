// How a loop that polls packet I/O gives its core away when there is
// nothing to do. With more busy-polling processes than cores (a switch,
// peers and tools on one host) the one this loop waits for runs at once,
// not at the end of this loop's time slice; on a core of its own, yielding
// only adds latency, so it is a choice (0: never).
#pragma once

#include <sched.h>

#include <cstdint>

namespace braid {

class IdleYield {
 public:
  explicit IdleYield(uint32_t after = 0) : after_(after) {}
  // One pass of the loop, which did work or found none; after `after`
  // fruitless passes in a row, yields the core. True when it yielded.
  bool pass(bool worked) { return pass(worked, after_); }
  // The same with the threshold given at each pass (a counter per thread
  // shared by devices of different settings).
  bool pass(bool worked, uint32_t after) {
    if (worked || after == 0) {
      idle_ = 0;
      return false;
    }
    if (++idle_ < after) return false;
    idle_ = 0;
    sched_yield();
    return true;
  }

 private:
  uint32_t after_;
  uint32_t idle_ = 0;
};

}  // namespace braid
