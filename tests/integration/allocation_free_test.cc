// The fast path allocates nothing: once connections exist, moving data in
// both directions (segmentation, placement, ACKs, completions, timers, even
// loss recovery) never calls the allocator. This binary counts every
// operator new, so it lives apart from the other tests.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>

#include "direct_pair.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

// GCC pairs the library's `new T` with these and warns although both halves
// are replaced consistently.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace braid::test {
namespace {

// Moves `messages` 64 KiB messages (SEND_WITH_IMM and WRITE by turns) from
// A to B in bursts, dropping one data packet in 97.
struct Transfer {
  explicit Transfer(const ConnectionConfig& c) : p(c, 4096) {
    rkey = p.b.memory().register_region(dst, kMsg, kAccessRemoteWrite, 0);
  }
  static constexpr uint32_t kBurst = 32, kFrame = 9216, kMsg = 64 * 1024;
  DirectPair p;
  uint8_t frames[kBurst][kFrame];
  uint32_t lens[kBurst];
  uint8_t src[kMsg], dst[kMsg], rbuf[kMsg];
  uint32_t rkey;
  WorkCompletion wc[64];
  uint64_t dropped = 0;
  size_t footprint() const { return p.qa->memory_footprint() + p.qb->memory_footprint(); }
  void run(int messages) {
    for (int m = 0; m < messages; ++m) {
      SendRequest wr;
      wr.wr_id = static_cast<uint64_t>(m);
      wr.opcode = m % 2 ? Opcode::kWrite : Opcode::kSendImm;
      wr.local = sgl_of(src, kMsg);
      wr.remote_addr = reinterpret_cast<uintptr_t>(dst);
      wr.rkey = rkey;
      if (wr.opcode == Opcode::kSendImm) {
        ASSERT_EQ(p.qb->post_recv(1, sgl_of(rbuf, kMsg)), PostError::kOk);
      }
      ASSERT_EQ(p.qa->post_send(wr), PostError::kOk);
    }
    int done = 0;
    for (int round = 0; done < messages && round < 100000; ++round) {
      for (Endpoint* from : {&p.a, &p.b}) {
        Endpoint* to = from == &p.a ? &p.b : &p.a;
        uint32_t n = 0;
        while (n < kBurst) {
          const uint32_t len = from->transmit(frames[n], kFrame, p.now);
          if (len == 0) break;
          lens[n++] = len;
        }
        for (uint32_t i = 0; i < n; ++i) {
          // Drop one data packet in 97 so retransmission is exercised too.
          if (from == &p.a && lens[i] > 1000 && (p.now / 1000 + i) % 97 == 0) {
            ++dropped;
            continue;
          }
          to->receive(frames[i], lens[i], p.now);
        }
      }
      p.now += 2000;
      p.a.advance(p.now);
      p.b.advance(p.now);
      done += static_cast<int>(p.a_scq.poll(wc, 64));
      p.b_rcq.poll(wc, 64);
    }
    ASSERT_EQ(done, messages);
  }
};

TEST(AllocationFree, SteadyStateTransferWithLossRecoveryAllocatesNothing) {
  ConnectionConfig c;
  c.entropy.count = 16;
  c.sq_depth = 64;
  c.grow_rings = false;
  auto t = std::make_unique<Transfer>(c);

  t->run(8);  // warm-up
  const uint64_t before = g_allocations.load();
  ASSERT_GT(before, 0u) << "the counter sees the setup's allocations";
  t->run(48);
  const uint64_t during = g_allocations.load() - before;
  EXPECT_EQ(during, 0u);
  EXPECT_GT(t->dropped, 0u);
  EXPECT_GT(t->p.qa->stats().retransmits, 0u);
  EXPECT_EQ(t->p.qa->state(), ConnectionState::kActive);
}

// By default the rings start small and grow on first use: only by doubling
// (a few allocations per QP in its life), never past their full size, and
// not at all once at the size the load needs.
TEST(AllocationFree, RingsGrowOnlyByDoublingUpToTheirFullSize) {
  ConnectionConfig c;
  c.entropy.count = 16;
  c.sq_depth = 64;  // window 1024 packets, rq_depth 256: the defaults
  c.grow_rings = false;
  const size_t full = std::make_unique<Transfer>(c)->footprint();
  c.grow_rings = true;
  auto t = std::make_unique<Transfer>(c);
  const size_t small = t->footprint();
  EXPECT_LT(small * 4, full);
  const uint64_t before = g_allocations.load();
  for (int i = 0; i < 3; ++i) t->run(48);
  // Doublings at most: A's records 64 -> 1024 (4, two vectors each), its
  // send queue 16 -> 64 (2), B's receive queue 16 -> 256 (4).
  EXPECT_LE(g_allocations.load() - before, 14u);
  EXPECT_GT(t->footprint(), small);
  EXPECT_LE(t->footprint(), full);
  const size_t grown = t->footprint();
  const uint64_t after = g_allocations.load();
  t->run(8);
  EXPECT_EQ(t->footprint(), grown);
  EXPECT_EQ(g_allocations.load(), after);
}

}  // namespace
}  // namespace braid::test

#include "fabric/workload.h"

namespace braid::fabric {
namespace {

// The fabric simulator in steady state: once its packet pool and event heap
// have grown to the fabric's occupancy, moving packets through switches,
// trimming, ECN marking and the hosts' protocol cores allocates nothing.
TEST(AllocationFree, FabricSteadyStateAllocatesNothing) {
  ExperimentConfig c;
  c.topo.k = 4;
  c.topo.sw.buffer_bytes = 170'000;
  c.topo.sw.trim = true;
  c.topo.sw.ecn_kmin_bytes = 34'000;
  c.topo.sw.ecn_kmax_bytes = 136'000;
  Experiment x(c);
  for (const FlowSpec& f : permutation(16, 64u << 20, 5)) x.add_flow(f);
  // Warm up: connections made, pools and heap at their size.
  x.run(600'000);
  const uint64_t before = g_allocations.load();
  const uint64_t events = x.fabric().stats().events;
  x.run(900'000);
  EXPECT_GT(x.fabric().stats().events - events, 100'000u);  // it did run
  EXPECT_GT(x.fabric().stats().trimmed, 0u);
  EXPECT_EQ(g_allocations.load() - before, 0u);
}

}  // namespace
}  // namespace braid::fabric
