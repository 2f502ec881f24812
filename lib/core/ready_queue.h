// A FIFO of connection ids with a membership bit each, so that an id is
// queued at most once: the endpoint's lists of connections with something
// to send. O(1) push and pop; it allocates only when it grows with the
// connection table.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid {

class ReadyQueue {
 public:
  // Room for ids 0..ids-1 at least (never shrinks); keeps what is queued, in
  // order. Grows by doubling (up to the 16-bit id space): a device creating
  // QPs one by one, on ids that go round the space, copies O(n) in all.
  void reserve_ids(size_t ids) {
    if (ids <= queued_.size()) return;
    ids = std::max(ids, std::min<size_t>(2 * queued_.size(), size_t{1} << 16));
    std::vector<uint16_t> ring(ids);
    for (size_t i = 0; i < count_; ++i) ring[i] = ring_[(head_ + i) % ring_.size()];
    ring_.swap(ring);
    head_ = 0;
    queued_.resize(ids, 0);
  }
  size_t ids() const { return queued_.size(); }  // room for ids 0..ids()-1
  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  // id: below reserve_ids().
  bool contains(uint16_t id) const { return queued_[id] != 0; }
  // Appends id unless it is queued already.
  void push(uint16_t id) {
    if (queued_[id] != 0) return;
    queued_[id] = 1;
    size_t tail = head_ + count_;
    if (tail >= ring_.size()) tail -= ring_.size();
    ring_[tail] = id;
    ++count_;
  }
  uint16_t front() const { return ring_[head_]; }
  void pop() {
    queued_[ring_[head_]] = 0;
    if (++head_ == ring_.size()) head_ = 0;
    --count_;
  }
  // Takes id out wherever it is (a connection going away): O(size).
  void remove(uint16_t id) {
    if (id >= queued_.size() || !contains(id)) return;
    size_t kept = 0;
    for (size_t i = 0; i < count_; ++i) {
      const uint16_t x = ring_[(head_ + i) % ring_.size()];
      if (x != id) ring_[(head_ + kept++) % ring_.size()] = x;
    }
    count_ = kept;
    queued_[id] = 0;
  }

 private:
  std::vector<uint16_t> ring_;
  std::vector<uint8_t> queued_;
  size_t head_ = 0, count_ = 0;
};

}  // namespace braid
