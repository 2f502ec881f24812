#include "core/shared_receive_queue.h"

#include <algorithm>
#include <bit>

#include "core/ring.h"

namespace braid {

SharedReceiveQueue::SharedReceiveQueue(uint32_t max_wr) : max_wr_(std::max<uint32_t>(max_wr, 1)) {
  ring_.resize(std::bit_ceil(max_wr_));
  mask_ = static_cast<uint32_t>(ring_.size()) - 1;
}

PostError SharedReceiveQueue::post(uint64_t wr_id, const SgList& sgl) {
  if (sgl.num > kMaxSge) return PostError::kInvalid;
  Guard g(this);
  if (tail_ - head_ >= max_wr_) return PostError::kQueueFull;
  Entry& e = ring_[tail_++ & mask_];
  e.wr_id = wr_id;
  e.sgl = sgl;
  e.status = WcStatus::kSuccess;
  return PostError::kOk;
}

bool SharedReceiveQueue::take(Entry* out) {
  LimitHook fire = nullptr;
  void* arg = nullptr;
  {
    Guard g(this);
    if (head_ == tail_) return false;
    *out = ring_[head_++ & mask_];
    ++taken_;
    if (limit_ > 0 && tail_ - head_ < limit_) {
      limit_ = 0;
      fire = hook_;
      arg = hook_arg_;
    }
  }
  if (fire != nullptr) fire(arg);
  return true;
}

void SharedReceiveQueue::reserve_one_more() {
  if (tail_ - head_ < ring_.size()) return;
  grow_ring(ring_, &mask_, head_, tail_, 2 * ring_.size());
}

void SharedReceiveQueue::give_back(const Entry& e) {
  Guard g(this);
  // Receives given back while the application posted more may exceed
  // max_wr for a while: the ring makes room (this path is an error's).
  reserve_one_more();
  ring_[--head_ & mask_] = e;
  --taken_;
}

uint32_t SharedReceiveQueue::size() const {
  Guard g(this);
  return tail_ - head_;
}

uint32_t SharedReceiveQueue::max_wr() const {
  Guard g(this);
  return max_wr_;
}

bool SharedReceiveQueue::resize(uint32_t max_wr) {
  Guard g(this);
  if (max_wr < tail_ - head_) return false;
  max_wr_ = std::max<uint32_t>(max_wr, 1);
  if (ring_.size() < max_wr_) grow_ring(ring_, &mask_, head_, tail_, std::bit_ceil(max_wr_));
  return true;
}

void SharedReceiveQueue::arm_limit(uint32_t limit) {
  Guard g(this);
  limit_ = limit;
}

uint32_t SharedReceiveQueue::limit() const {
  Guard g(this);
  return limit_;
}

void SharedReceiveQueue::set_limit_hook(LimitHook hook, void* arg) {
  Guard g(this);
  hook_ = hook;
  hook_arg_ = arg;
}

bool SharedReceiveQueue::revoke_local_key(uint32_t lkey) {
  Guard g(this);
  bool used = false;
  for (uint32_t i = head_; i != tail_; ++i) {
    Entry& e = ring_[i & mask_];
    if (!sgl_uses(e.sgl, lkey)) continue;
    e.status = WcStatus::kLocProtErr;
    used = true;
  }
  return used;
}

uint64_t SharedReceiveQueue::taken() const {
  Guard g(this);
  return taken_;
}

}  // namespace braid
