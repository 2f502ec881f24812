// A shared receive queue (InfiniBand's SRQ): receives posted once, taken by
// whichever of its queue pairs gets a message that consumes one.
//
// A queue pair takes receives from it in the order of its own receive
// sequence numbers (RSNs): when a message with RSN r arrives and the queue
// pair holds receives only up to r - k, it takes k + 1 at once, so that its
// receives stay one ring in RSN order whatever order packets come in
// (queue_pair_rx.cc receive_slot). A receive is thus bound to a queue pair
// up to a window of messages before that message's first packet arrives
// (the earlier messages are in flight); one bound and never used goes back
// here when the queue pair stops.
//
// Queue pairs of different engines (threads) take from it while the
// application posts: every call takes its lock, a spin lock held for the
// copy of an entry.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/sg_list.h"
#include "core/types.h"

namespace braid {

class SharedReceiveQueue {
 public:
  struct Entry {
    uint64_t wr_id = 0;
    SgList sgl;
    // LOC_PROT_ERR once its buffer's region was deregistered: the message
    // it is taken for fails.
    WcStatus status = WcStatus::kSuccess;
  };
  // The limit event (InfiniBand's SRQ_LIMIT_REACHED): called, outside the
  // lock, by the take that leaves fewer receives than the armed limit; the
  // limit is then disarmed.
  using LimitHook = void (*)(void* arg);

  explicit SharedReceiveQueue(uint32_t max_wr);
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

  // kQueueFull with max_wr receives waiting, kInvalid with too many SGEs.
  PostError post(uint64_t wr_id, const SgList& sgl);
  // The oldest receive (false: none waits).
  bool take(Entry* out);
  // A receive taken and never used comes back (it is taken next).
  void give_back(const Entry& e);
  uint32_t size() const;
  uint32_t max_wr() const;
  // A larger max_wr (false: smaller than the receives waiting now).
  bool resize(uint32_t max_wr);
  // 0 disarms. Arming with fewer receives than the limit already waiting
  // fires at the next take, as a NIC does.
  void arm_limit(uint32_t limit);
  uint32_t limit() const;
  void set_limit_hook(LimitHook hook, void* arg);
  // Receives whose buffers lie in the region of this key fail when used
  // (dereg_mr); true if any does.
  bool revoke_local_key(uint32_t lkey);
  // Receives taken by queue pairs so far.
  uint64_t taken() const;

 private:
  class Guard {
   public:
    explicit Guard(const SharedReceiveQueue* q) : q_(q) {
      while (q_->lock_.test_and_set(std::memory_order_acquire)) {
      }
    }
    ~Guard() { q_->lock_.clear(std::memory_order_release); }

   private:
    const SharedReceiveQueue* q_;
  };
  void reserve_one_more();

  mutable std::atomic_flag lock_ = ATOMIC_FLAG_INIT;
  std::vector<Entry> ring_;  // a power of two; grows only for receives given back
  uint32_t mask_ = 0;
  uint32_t head_ = 0, tail_ = 0;
  uint32_t max_wr_;
  uint32_t limit_ = 0;
  uint64_t taken_ = 0;
  LimitHook hook_ = nullptr;
  void* hook_arg_ = nullptr;
};

}  // namespace braid
