// The ring that hands frames from one engine's thread to another's.
#include "engine/spsc_ring.h"

#include <gtest/gtest.h>

#include <numeric>
#include <thread>
#include <vector>

namespace braid {
namespace {

TEST(SpscRing, HoldsItsCapacityAndGivesBackInOrder) {
  SpscRing<uint32_t> ring(5);  // rounded up to 8
  ASSERT_EQ(ring.capacity(), 8u);
  std::vector<uint32_t> in(12);
  std::iota(in.begin(), in.end(), 100);
  // A full ring takes a prefix only.
  EXPECT_EQ(ring.push(in.data(), 12), 8u);
  EXPECT_EQ(ring.push(in.data(), 1), 0u);
  EXPECT_EQ(ring.size(), 8u);
  uint32_t out[16] = {};
  EXPECT_EQ(ring.pop(out, 3), 3u);
  EXPECT_EQ(out[0], 100u);
  EXPECT_EQ(out[2], 102u);
  // Room again, across the wrap.
  EXPECT_EQ(ring.push(in.data() + 8, 4), 3u);
  EXPECT_EQ(ring.pop(out, 16), 8u);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(out[i], 103 + i);
  EXPECT_EQ(ring.pop(out, 16), 0u);
  EXPECT_EQ(ring.size(), 0u);
}

// One thread pushes a sequence in bursts of changing sizes, another pops in
// other sizes: every item arrives once, in order, whatever the interleaving.
TEST(SpscRing, TwoThreadsPassASequenceWithoutLossOrReordering) {
  constexpr uint64_t kItems = 2'000'000;
  SpscRing<uint64_t> ring(64);
  std::thread producer([&] {
    uint64_t next = 0;
    uint64_t burst[32];
    uint32_t size = 1;
    while (next < kItems) {
      const auto n = static_cast<uint32_t>(std::min<uint64_t>(size, kItems - next));
      for (uint32_t i = 0; i < n; ++i) burst[i] = next + i;
      const uint32_t pushed = ring.push(burst, n);
      next += pushed;
      if (pushed == 0) std::this_thread::yield();
      size = size % 31 + 1;
    }
  });
  uint64_t expect = 0, bad = 0;
  uint64_t out[32];
  uint32_t size = 7;
  while (expect < kItems) {
    const uint32_t got = ring.pop(out, size);
    for (uint32_t i = 0; i < got; ++i) bad += out[i] != expect++;
    if (got == 0) std::this_thread::yield();
    size = size % 32 + 1;
  }
  producer.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(ring.size(), 0u);
}

}  // namespace
}  // namespace braid
