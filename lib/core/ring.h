// Rings whose slot is a sequence number & mask: they start small and
// double when full (an idle QP holds a few KiB, not its whole window or
// queue depth: thousands of QPs on a device). Growth allocates, once per
// doubling; entries keep their order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace braid {

// Moves the live entries [from, to) of `ring` (slot: sequence & *mask)
// into a ring of `size` entries (a power of two), and sets *mask for it.
template <typename T>
void grow_ring(std::vector<T>& ring, uint32_t* mask, uint32_t from, uint32_t to, size_t size) {
  std::vector<T> bigger(size);
  const uint32_t m = static_cast<uint32_t>(size - 1);
  for (uint32_t i = from; i != to; ++i) bigger[i & m] = std::move(ring[i & *mask]);
  ring.swap(bigger);
  *mask = m;
}

}  // namespace braid
