// A bounded single-producer single-consumer ring of trivially copyable
// items: one thread pushes, one other thread pops, neither locks nor
// allocates after construction. Bursts move with one release store each;
// the producer and the consumer keep their own index on their own cache
// line and a cached copy of the other's, so a burst touches the shared
// line only when the cached copy says the ring looks full (or empty).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace braid {

template <typename T>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  // Holds up to `capacity` items, rounded up to a power of two (at least 2).
  explicit SpscRing(uint32_t capacity) {
    uint32_t size = 2;
    while (size < capacity) size *= 2;
    mask_ = size - 1;
    items_ = std::make_unique<T[]>(size);
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  uint32_t capacity() const { return mask_ + 1; }

  // Producer: queues a prefix of items[0..n) and returns its length (less
  // than n when the ring fills).
  uint32_t push(const T* items, uint32_t n) {
    const uint64_t tail = prod_.tail.load(std::memory_order_relaxed);
    uint64_t room = capacity() - (tail - prod_.head_seen);
    if (room < n) {
      prod_.head_seen = cons_.head.load(std::memory_order_acquire);
      room = capacity() - (tail - prod_.head_seen);
    }
    if (n > room) n = static_cast<uint32_t>(room);
    for (uint32_t i = 0; i < n; ++i) items_[(tail + i) & mask_] = items[i];
    prod_.tail.store(tail + n, std::memory_order_release);
    return n;
  }

  // Consumer: takes up to n items into out and returns how many.
  uint32_t pop(T* out, uint32_t n) {
    const uint64_t head = cons_.head.load(std::memory_order_relaxed);
    uint64_t avail = cons_.tail_seen - head;
    if (avail < n) {
      cons_.tail_seen = prod_.tail.load(std::memory_order_acquire);
      avail = cons_.tail_seen - head;
    }
    if (n > avail) n = static_cast<uint32_t>(avail);
    for (uint32_t i = 0; i < n; ++i) out[i] = items_[(head + i) & mask_];
    cons_.head.store(head + n, std::memory_order_release);
    return n;
  }

  // Either side: items queued and not yet taken (a snapshot).
  uint64_t size() const {
    return prod_.tail.load(std::memory_order_acquire) - cons_.head.load(std::memory_order_acquire);
  }

 private:
  struct alignas(64) Producer {
    std::atomic<uint64_t> tail{0};
    uint64_t head_seen = 0;
  };
  struct alignas(64) Consumer {
    std::atomic<uint64_t> head{0};
    uint64_t tail_seen = 0;
  };
  Producer prod_;
  Consumer cons_;
  uint32_t mask_ = 0;
  std::unique_ptr<T[]> items_;
};

}  // namespace braid
