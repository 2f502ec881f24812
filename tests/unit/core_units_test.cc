// Unit tests of the core's building blocks: PSN arithmetic, the receive
// window, the timing wheel, memory regions, entropy selection, scatter/gather
// copies and the completion queue.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "core/completion_queue.h"
#include "core/memory_table.h"
#include "core/path_set.h"
#include "core/ready_queue.h"
#include "core/receive_window.h"
#include "core/rtt.h"
#include "core/sg_list.h"
#include "core/timing_wheel.h"
#include "core/types.h"

namespace braid {
namespace {

TEST(Psn, SerialArithmeticAcrossWrap) {
  EXPECT_TRUE(psn_lt(0xfffffffeu, 1u));
  EXPECT_FALSE(psn_lt(1u, 0xfffffffeu));
  EXPECT_TRUE(psn_le(5u, 5u));
  EXPECT_EQ(psn_diff(2u, 0xffffffffu), 3);
}

// The ready list keeps its order and membership when it grows, with the
// ring wrapped, and grows by doubling (not by one id at a time).
TEST(ReadyQueue, GrowingKeepsOrderAndMembership) {
  ReadyQueue q;
  q.reserve_ids(4);
  for (uint16_t id : {0, 1, 2}) q.push(id);
  q.pop();
  q.pop();
  q.push(3);
  q.push(0);  // the ring has wrapped: 2, 3, 0
  q.push(3);  // already queued: no second entry
  q.reserve_ids(5);
  for (uint16_t id = 4; id < 9; ++id) {
    q.reserve_ids(id + 1u);
    q.push(id);
  }
  std::vector<uint16_t> order;
  while (!q.empty()) {
    order.push_back(q.front());
    q.pop();
  }
  EXPECT_EQ(order, (std::vector<uint16_t>{2, 3, 0, 4, 5, 6, 7, 8}));
  EXPECT_FALSE(q.contains(3));
  // Doubling: 4 -> 8 -> 16 ids, not 9.
  EXPECT_EQ(q.ids(), 16u);
  q.reserve_ids(60000);
  EXPECT_EQ(q.ids(), 60000u);
  q.reserve_ids(60001);
  EXPECT_EQ(q.ids(), 65536u);  // the id space, no more
}

TEST(ReceiveWindow, InOrderAdvancesCumulativePoint) {
  ReceiveWindow w(128, 100);
  EXPECT_EQ(w.cack(), 99u);
  for (uint32_t p = 100; p < 400; ++p) {
    ASSERT_EQ(w.check(p), ReceiveWindow::Verdict::kNew);
    EXPECT_EQ(w.mark(p), 1u);
  }
  EXPECT_EQ(w.cack(), 399u);
  EXPECT_EQ(w.held_out_of_order(), 0u);
}

TEST(ReceiveWindow, OutOfOrderHoldsThenReleasesRun) {
  ReceiveWindow w(256, 0xffffffc0u);  // crosses the 32-bit wrap
  const uint32_t base = 0xffffffc0u;
  for (uint32_t i = 1; i < 200; ++i) EXPECT_EQ(w.mark(base + i), 0u);
  EXPECT_EQ(w.held_out_of_order(), 199u);
  EXPECT_EQ(w.cack(), base - 1);
  EXPECT_EQ(w.mark(base), 200u);
  EXPECT_EQ(w.cack(), base + 199);
  EXPECT_EQ(w.held_out_of_order(), 0u);
}

TEST(ReceiveWindow, DuplicatesAndOutOfWindow) {
  ReceiveWindow w(128, 0);
  w.mark(0);
  w.mark(5);
  EXPECT_EQ(w.check(0), ReceiveWindow::Verdict::kDuplicate);
  EXPECT_EQ(w.check(5), ReceiveWindow::Verdict::kDuplicate);
  EXPECT_EQ(w.check(4), ReceiveWindow::Verdict::kNew);
  EXPECT_EQ(w.check(128), ReceiveWindow::Verdict::kNew);  // cack 0: window is 1..128
  EXPECT_EQ(w.check(129), ReceiveWindow::Verdict::kOutOfWindow);
  EXPECT_EQ(w.check(0xffffff00u), ReceiveWindow::Verdict::kDuplicate);  // far behind
}

TEST(ReceiveWindow, RandomOrderMatchesReferenceSet) {
  std::mt19937 g(42);
  ReceiveWindow w(512, 7);
  std::set<uint32_t> got;
  uint32_t cack = 6;
  std::vector<uint32_t> order(2000);
  std::iota(order.begin(), order.end(), 7u);
  // Shuffle in blocks smaller than the window so every PSN stays in range.
  for (size_t i = 0; i < order.size(); i += 256) {
    std::shuffle(order.begin() + i, order.begin() + std::min(order.size(), i + 256), g);
  }
  for (uint32_t p : order) {
    ASSERT_EQ(w.check(p), ReceiveWindow::Verdict::kNew) << p;
    w.mark(p);
    got.insert(p);
    while (got.count(cack + 1)) ++cack;
    ASSERT_EQ(w.cack(), cack);
    // SACK bits agree with the reference above cack.
    const uint64_t bits = w.sack_bits(cack + 1);
    for (uint32_t i = 0; i < 64; ++i) {
      ASSERT_EQ((bits >> i) & 1, got.count(cack + 1 + i) ? 1u : 0u) << "bit " << i;
    }
  }
}

// In-order packets with nothing held take a path that touches no bitmap
// word; runs of them between reordered bursts, over many laps of the window,
// must leave no stale bit behind (a stale bit would make a PSN of a later
// lap a duplicate) and keep the SACK bits exact.
TEST(ReceiveWindow, InOrderRunsBetweenReorderedBurstsLeaveNoStaleBits) {
  std::mt19937 g(7);
  ReceiveWindow w(128, 0);
  std::set<uint32_t> got;
  uint32_t cack = 0xffffffffu;
  uint32_t next = 0;
  uint32_t fast = 0;
  while (next < 20 * 128) {
    std::vector<uint32_t> burst(std::uniform_int_distribution<uint32_t>(1, 48)(g));
    std::iota(burst.begin(), burst.end(), next);
    next += static_cast<uint32_t>(burst.size());
    if (g() % 2 == 0) std::shuffle(burst.begin(), burst.end(), g);
    for (uint32_t p : burst) {
      ASSERT_EQ(w.check(p), ReceiveWindow::Verdict::kNew) << p;
      if (w.held_out_of_order() == 0 && p == w.cack() + 1) ++fast;
      const uint32_t before = cack;
      got.insert(p);
      while (got.count(cack + 1)) got.erase(++cack);
      ASSERT_EQ(w.mark(p), cack - before) << p;
      ASSERT_EQ(w.cack(), cack);
      ASSERT_EQ(w.check(p), ReceiveWindow::Verdict::kDuplicate);
      const uint64_t bits = w.sack_bits(cack + 1);
      for (uint32_t i = 0; i < 64; ++i) {
        ASSERT_EQ((bits >> i) & 1, got.count(cack + 1 + i) ? 1u : 0u) << "bit " << i;
      }
    }
  }
  EXPECT_GT(fast, 128u);  // the in-order path was taken, many times
  EXPECT_EQ(w.held_out_of_order(), 0u);
}

TEST(ReceiveWindow, SackBitsNeverReportBeyondWindow) {
  ReceiveWindow w(128, 0);
  w.mark(1);  // cack stays -1, PSN 1 held
  w.mark(127);
  // base 100: window ends at PSN 127 (cack 0xffffffff + 128), bits past it are 0.
  const uint64_t bits = w.sack_bits(100);
  EXPECT_EQ(bits, uint64_t{1} << 27);
}

TimingWheel* g_wheel = nullptr;

struct Fired {
  std::vector<int> ids;
};

void record(Timer* t, TimeNs) {
  auto* f = static_cast<std::pair<Fired*, int>*>(t->owner);
  f->first->ids.push_back(f->second);
}

TEST(TimingWheel, FiresInDeadlineOrderAndNotEarly) {
  TimingWheel w(1000, 64);
  Fired f;
  std::pair<Fired*, int> ctx[3] = {{&f, 0}, {&f, 1}, {&f, 2}};
  Timer t[3];
  for (int i = 0; i < 3; ++i) {
    t[i].fn = record;
    t[i].owner = &ctx[i];
  }
  w.schedule(&t[0], 5'000);
  w.schedule(&t[1], 2'000);
  w.schedule(&t[2], 200'000);  // beyond one rotation (64 us)
  EXPECT_EQ(w.next_deadline(), 2'000u);
  w.advance(1'999);
  EXPECT_TRUE(f.ids.empty());
  w.advance(5'000);
  EXPECT_EQ(f.ids, (std::vector<int>{1, 0}));
  EXPECT_EQ(w.next_deadline(), 200'000u);
  w.advance(130'000);  // two rotations pass: the far timer must not fire yet
  EXPECT_EQ(f.ids.size(), 2u);
  w.advance(200'000);
  EXPECT_EQ(f.ids, (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(w.armed_count(), 0u);
  EXPECT_EQ(w.next_deadline(), kNever);
}

TEST(TimingWheel, CancelAndRescheduleAndReArmFromCallback) {
  TimingWheel w(1000, 16);
  int fired = 0;
  Timer t;
  t.owner = &fired;
  t.fn = [](Timer* self, TimeNs now) {
    int* n = static_cast<int*>(self->owner);
    if (++*n < 3) {
      // Re-arm from inside the callback for a later time.
      g_wheel->schedule(self, now + 10'000);
    }
  };
  g_wheel = &w;
  w.schedule(&t, 10'000);
  w.cancel(&t);
  w.advance(20'000);
  EXPECT_EQ(fired, 0);
  w.schedule(&t, 30'000);
  w.advance(30'000);
  EXPECT_EQ(fired, 1);
  w.advance(45'000);
  EXPECT_EQ(fired, 2);
  w.advance(1'000'000);
  EXPECT_EQ(fired, 3);
  EXPECT_FALSE(t.armed());
}

TEST(TimingWheel, DeadlineAlreadyDueScheduledFromACallbackFiresInTheSameAdvance) {
  TimingWheel w(1000, 64);
  g_wheel = &w;
  int first = 0, second = 0;
  Timer a, b;
  // Callbacks are plain functions: they reach the test's state via statics.
  static int* s_first;
  static int* s_second;
  static Timer* s_b;
  s_first = &first;
  s_second = &second;
  s_b = &b;
  a.fn = [](Timer*, TimeNs now) {
    ++*s_first;
    g_wheel->schedule(s_b, now - 15'000);  // due before the slot being walked
  };
  b.fn = [](Timer*, TimeNs) { ++*s_second; };
  w.schedule(&a, 20'000);
  w.advance(30'000);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
  EXPECT_EQ(w.armed_count(), 0u);
  EXPECT_EQ(w.next_deadline(), kNever);
}

TEST(TimingWheel, RandomOperationsMatchAReferenceModel) {
  std::mt19937_64 g(99);
  TimingWheel w(1000, 64);  // small wheel: many timers lie rotations ahead
  constexpr int kTimers = 40;
  Timer t[kTimers];
  int fired[kTimers] = {};
  TimeNs deadline[kTimers];
  for (int i = 0; i < kTimers; ++i) {
    t[i].owner = &fired[i];
    t[i].fn = [](Timer* self, TimeNs) { ++*static_cast<int*>(self->owner); };
    deadline[i] = kNever;
  }
  TimeNs now = 0;
  for (int step = 0; step < 20000; ++step) {
    const int i = static_cast<int>(g() % kTimers);
    switch (g() % 4) {
      case 0:
      case 1:
        deadline[i] = now + g() % 300'000;
        w.schedule(&t[i], deadline[i]);
        break;
      case 2:
        w.cancel(&t[i]);
        deadline[i] = kNever;
        break;
      case 3: {
        now += g() % 20'000;
        int expect[kTimers];
        for (int k = 0; k < kTimers; ++k) expect[k] = fired[k] + (deadline[k] <= now ? 1 : 0);
        w.advance(now);
        for (int k = 0; k < kTimers; ++k) {
          ASSERT_EQ(fired[k], expect[k]) << "timer " << k << " step " << step;
          if (deadline[k] <= now) deadline[k] = kNever;
        }
        break;
      }
    }
    const TimeNs ref = *std::min_element(deadline, deadline + kTimers);
    ASSERT_EQ(w.next_deadline(), ref) << "step " << step;
  }
}

TEST(MemoryTable, ChecksKeyPdBoundsAndPermission) {
  MemoryRegionTable mt;
  std::vector<uint8_t> buf(4096);
  const uint32_t key = mt.register_region(buf.data(), buf.size(), kAccessRemoteWrite, 3);
  const uint64_t va = reinterpret_cast<uintptr_t>(buf.data());
  uint8_t* p = nullptr;
  EXPECT_EQ(mt.resolve(key, va + 10, 100, kAccessRemoteWrite, 3, &p), AccessError::kNone);
  EXPECT_EQ(p, buf.data() + 10);
  EXPECT_EQ(mt.resolve(key, va, 4096, kAccessRemoteWrite, 3, &p), AccessError::kNone);
  EXPECT_EQ(mt.resolve(key, va, 4097, kAccessRemoteWrite, 3, &p), AccessError::kOutOfBounds);
  EXPECT_EQ(mt.resolve(key, va - 1, 1, kAccessRemoteWrite, 3, &p), AccessError::kOutOfBounds);
  EXPECT_EQ(mt.resolve(key, va + 4096, 0, kAccessRemoteWrite, 3, &p), AccessError::kNone);
  EXPECT_EQ(mt.resolve(key, va + 10, ~uint64_t{0} - 5, kAccessRemoteWrite, 3, &p),
            AccessError::kOutOfBounds);  // wraps
  EXPECT_EQ(mt.resolve(key, va, 1, kAccessRemoteRead, 3, &p), AccessError::kNoPermission);
  EXPECT_EQ(mt.resolve(key, va, 1, kAccessRemoteWrite, 4, &p), AccessError::kWrongPd);
  EXPECT_EQ(mt.resolve(key ^ 0x100, va, 1, kAccessRemoteWrite, 3, &p), AccessError::kBadKey);
}

TEST(MemoryTable, StaleKeyOfReusedSlotIsRejected) {
  MemoryRegionTable mt;
  std::vector<uint8_t> a(64), b(64);
  const uint32_t ka = mt.register_region(a.data(), 64, kAccessRemoteRead, 0);
  ASSERT_TRUE(mt.deregister(ka));
  EXPECT_FALSE(mt.deregister(ka));
  const uint32_t kb = mt.register_region(b.data(), 64, kAccessRemoteRead, 0);
  EXPECT_EQ(ka >> 12, kb >> 12);  // same slot
  EXPECT_NE(ka, kb);
  uint8_t* p;
  EXPECT_EQ(mt.resolve(ka, reinterpret_cast<uintptr_t>(b.data()), 1, kAccessRemoteRead, 0, &p),
            AccessError::kBadKey);
}

TEST(MemoryTable, StaleKeyStaysInvalidAcrossThousandsOfReuses) {
  MemoryRegionTable mt;
  std::vector<uint8_t> buf(64);
  const uint32_t stale = mt.register_region(buf.data(), 64, kAccessRemoteWrite, 0);
  ASSERT_NE(stale, 0u);
  ASSERT_TRUE(mt.deregister(stale));
  uint8_t* p;
  for (int i = 0; i < 4000; ++i) {
    const uint32_t k = mt.register_region(buf.data(), 64, kAccessRemoteWrite, 0);
    ASSERT_NE(k, 0u);
    ASSERT_NE(k, stale) << "reuse " << i;
    ASSERT_EQ(
        mt.resolve(stale, reinterpret_cast<uintptr_t>(buf.data()), 1, kAccessRemoteWrite, 0, &p),
        AccessError::kBadKey);
    ASSERT_TRUE(mt.deregister(k));
  }
}

TEST(PathSet, RoundRobinCoversEveryEntropyEvenly) {
  EntropyConfig c;
  c.count = 8;
  PathSet s(c);
  std::vector<int> hits(8, 0);
  std::set<uint16_t> ports;
  for (int i = 0; i < 800; ++i) {
    const uint8_t e = s.choose(0);
    ASSERT_LT(e, 8);
    ++hits[e];
    ports.insert(s.entropy(e));
  }
  for (int h : hits) EXPECT_EQ(h, 100);
  EXPECT_EQ(ports.size(), 8u);
  for (uint16_t p : ports) EXPECT_GE(p, 49152);
}

TEST(PathSet, SinglePathAndStatistics) {
  EntropyConfig c;
  c.count = 1;
  PathSet s(c);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.choose(0), 0);
  s.on_rtt(0, 10'000);
  s.on_rtt(0, 2'000);
  s.on_ecn(0);
  EXPECT_EQ(s.stats(0).min_rtt_ns, 2'000u);
  EXPECT_EQ(s.stats(0).rtt_samples, 2u);
  EXPECT_EQ(s.stats(0).ecn_marked, 1u);
  EXPECT_EQ(s.stats(0).srtt_ns, 10'000u - 10'000u / 8 + 2'000u / 8);
  // Lateness: an EWMA of 1/8 with the RTT samples (0 so far).
  s.on_rtt(0, 2'000, 0, 8'000);
  EXPECT_EQ(s.stats(0).late_ns, 1'000u);
  s.on_rtt(0, 2'000, 0, 0);
  EXPECT_EQ(s.stats(0).late_ns, 1'000u - 1'000u / 8);
}

TEST(PathSet, PathSequencesSayWhatWasOvertakenOnEachPath) {
  EntropyConfig c;
  c.count = 2;
  PathSet s(c);
  // Three packets on entropy 0, one on entropy 1.
  EXPECT_EQ(s.on_sent(0), 0u);
  EXPECT_EQ(s.on_sent(0), 1u);
  EXPECT_EQ(s.on_sent(1), 0u);
  EXPECT_EQ(s.on_sent(0), 2u);
  EXPECT_LE(s.overtaken_by(0, 0), 0);  // nothing acknowledged yet
  s.on_acked(0, 2, /*sent_once=*/true, false);
  EXPECT_EQ(s.overtaken_by(0, 0), 2);  // packet 0 was overtaken by 1 and 2 on its path ...
  EXPECT_EQ(s.overtaken_by(0, 1), 1);
  EXPECT_EQ(s.overtaken_by(0, 2), 0);
  EXPECT_LE(s.overtaken_by(1, 0), 0);  // ... and entropy 1 knows nothing of it
  // An older ACK does not move the path back; the ACK of a packet sent twice
  // says nothing about its path.
  s.on_acked(0, 0, true, false);
  EXPECT_EQ(s.overtaken_by(0, 0), 2);
  s.on_acked(1, 5, /*sent_once=*/false, false);
  EXPECT_LE(s.overtaken_by(1, 0), 0);
  EXPECT_EQ(s.stats(0).acked, 2u);
  EXPECT_EQ(s.stats(1).acked, 1u);
  EXPECT_EQ(s.stats(0).sent, 3u);
  s.on_lost(1, LossKind::kTimeout, 0);
  EXPECT_EQ(s.stats(1).lost, 1u);
  // ACKs and NACKs take every entropy in turn.
  std::set<uint16_t> ports;
  for (int i = 0; i < 4; ++i) ports.insert(s.control_port());
  EXPECT_EQ(ports, (std::set<uint16_t>{s.entropy(0), s.entropy(1)}));
}

// 8 entropies by REPS, frozen for 1 us after a timeout.
EntropyConfig reps_config() {
  EntropyConfig c;
  c.count = 8;
  c.policy = PathPolicy::kReps;
  c.freeze_ns = 1'000;
  return c;
}

TEST(PathSet, RepsUsesAgainWhatCameBackUnmarkedAndExploresOtherwise) {
  PathSet s(reps_config());
  // Nothing came back yet: entropies in turn (exploring).
  EXPECT_EQ(s.choose(0), 0);
  EXPECT_EQ(s.choose(0), 1);
  EXPECT_EQ(s.explored(), 2);
  // 5 came back clean, 6 marked: 5 is used again, 6 is not.
  s.on_sent(5);
  s.on_sent(6);
  s.on_acked(5, 0, true, /*marked=*/false);
  s.on_acked(6, 0, true, /*marked=*/true);
  EXPECT_EQ(s.choose(0), 5);
  EXPECT_EQ(s.choose(0), 2);  // the ring is empty again: explore on
  // A retransmission avoids the entropy that lost it.
  s.on_sent(3);
  s.on_acked(3, 0, true, false);
  s.on_sent(4);
  s.on_acked(4, 0, true, false);
  EXPECT_EQ(s.choose_retransmit(3, 0), 4);
  EXPECT_EQ(s.choose(0), 3);  // 3 stays recycled for a new packet
  // A packet sent twice says nothing of its path.
  s.on_acked(7, 0, /*sent_once=*/false, false);
  EXPECT_NE(s.choose(0), 7);
}

// A receiver names every marked packet in an ACK, but not every clean one:
// an entropy whose named packets are mostly marked is not recycled on a
// packet acknowledged unmarked, and is again once its named packets are
// mostly clean.
TEST(PathSet, RepsDoesNotRecycleAnEntropyThatMarksPersistently) {
  PathSet s(reps_config());
  for (int i = 0; i < 8; ++i) s.on_named(5, /*marked=*/true);
  EXPECT_GE(s.health(5).mark_rate, PathSet::kMarkedPersistently);
  s.on_sent(5);
  s.on_acked(5, 0, true, /*marked=*/false);  // covered by an ACK, not named
  s.on_sent(4);
  s.on_acked(4, 0, true, false);
  EXPECT_EQ(s.choose(0), 4);
  EXPECT_EQ(s.choose(0), 0);  // 5 was not recycled: explore
  // Exploring passes it over too, but its rate decays each time: with no
  // new mark named, it is explored again after a few turns. Of 16 turns of
  // the 8 entropies it gets 13 (3 passed over).
  int on_5 = 0;
  for (int i = 0; i < 16 * 8; ++i) on_5 += s.choose(0) == 5;
  EXPECT_EQ(on_5, 13);
  EXPECT_LT(s.health(5).mark_rate, PathSet::kMarkedPersistently);
  for (int i = 0; i < 8; ++i) s.on_named(5, true);  // marked again
  s.on_sent(5);
  s.on_acked(5, 1, true, false);
  EXPECT_NE(s.choose(0), 5);
  for (int i = 0; i < 8; ++i) s.on_named(5, false);
  EXPECT_LT(s.health(5).mark_rate, PathSet::kMarkedPersistently);
  s.on_sent(5);
  s.on_acked(5, 2, true, false);
  EXPECT_EQ(s.choose(0), 5);
}

TEST(PathSet, RepsStopsExploringForAWhileAfterATimeout) {
  PathSet s(reps_config());
  s.on_sent(2);
  s.on_acked(2, 0, true, false);
  EXPECT_EQ(s.choose(0), 2);  // recycled once
  s.on_lost(6, LossKind::kTimeout, 100);
  // Frozen: the last entropy known good, again and again.
  const uint16_t explored = s.explored();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.choose(500), 2);
  EXPECT_EQ(s.explored(), explored);
  // The freeze ends: exploring resumes.
  s.choose(1'200);
  EXPECT_EQ(s.explored(), explored + 1);
  // A timeout on the last good entropy itself leaves nothing known good.
  s.on_lost(2, LossKind::kTimeout, 2'000);
  EXPECT_NE(s.choose(2'100), 2);
}

// Sends n packets on entropy e and returns the path sequence of the last.
uint32_t send_on(PathSet& s, uint8_t e, int n = 1) {
  uint32_t seq = 0;
  for (int i = 0; i < n; ++i) seq = s.on_sent(e);
  return seq;
}

// Explores k times (no ring) and returns how often each entropy came up.
std::vector<int> explore_counts(PathSet& s, int k, TimeNs now) {
  std::vector<int> seen(s.count(), 0);
  for (int i = 0; i < k; ++i) ++seen[s.choose(now)];
  return seen;
}

TEST(PathSet, RepsAssumesAPathBadAfterLossesInARowAndExploresAroundIt) {
  PathSet s(reps_config());  // probe_after_ns 100 us
  send_on(s, 3, 3);
  s.on_lost(3, LossKind::kInferred, 0);
  s.on_lost(3, LossKind::kInferred, 0);
  EXPECT_EQ(s.health(3).state, PathState::kGood);  // two could be chance
  // A delivery between losses resets the count.
  const uint32_t seq = send_on(s, 3);
  s.on_acked(3, seq, true, false);
  EXPECT_EQ(s.health(3).losses_in_row, 0);
  s.choose(0);  // takes 3 from the ring
  for (int i = 0; i < PathSet::kBadAfter; ++i) s.on_lost(3, LossKind::kInferred, 1'000);
  EXPECT_EQ(s.health(3).state, PathState::kAssumedBad);
  EXPECT_EQ(s.bad_count(), 1);
  // A trimmed packet says congestion, not failure: no penalty.
  for (int i = 0; i < 5; ++i) s.on_lost(5, LossKind::kTrimmed, 1'000);
  EXPECT_EQ(s.health(5).state, PathState::kGood);
  // Exploring skips 3 until its probe is due.
  std::vector<int> seen = explore_counts(s, 70, 50'000);
  EXPECT_EQ(seen[3], 0);
  for (int e = 0; e < 8; ++e) {
    if (e != 3) {
      EXPECT_EQ(seen[e], 10) << "entropy " << e;
    }
  }
}

TEST(PathSet, RepsProbesABadPathOnceAndRevivesItWhenTheProbeIsDelivered) {
  PathSet s(reps_config());
  send_on(s, 2, 4);                     // path sequences 0..3
  s.on_lost(2, LossKind::kTimeout, 0);  // one timeout is enough
  EXPECT_EQ(s.health(2).state, PathState::kAssumedBad);
  // An ACK of a packet sent before it went bad says nothing of it now.
  s.on_acked(2, 1, true, false);
  EXPECT_EQ(s.health(2).state, PathState::kAssumedBad);
  // 100 us later one packet, and only one, goes on it as a probe.
  std::vector<int> seen = explore_counts(s, 16, 100'000);
  EXPECT_EQ(seen[2], 1);
  EXPECT_TRUE(s.health(2).probing);
  const uint32_t probe = s.on_sent(2);
  s.on_acked(2, probe, true, false);
  EXPECT_EQ(s.health(2).state, PathState::kGood);
  EXPECT_EQ(s.bad_count(), 0);
}

TEST(PathSet, RepsBacksOffAPathWhoseProbesAreLost) {
  PathSet s(reps_config());
  send_on(s, 1);
  s.on_lost(1, LossKind::kTimeout, 0);
  TimeNs now = 0;
  TimeNs wait = 100'000;
  for (int round = 0; round < 4; ++round) {
    // Not before its time...
    EXPECT_EQ(explore_counts(s, 16, now + wait - 1)[1], 0) << "round " << round;
    // ...then once.
    EXPECT_EQ(explore_counts(s, 16, now + wait)[1], 1) << "round " << round;
    now += wait;
    s.on_sent(1);
    s.on_lost(1, LossKind::kInferred, now);  // the probe is lost
    EXPECT_EQ(s.health(1).state, PathState::kAssumedBad);
    wait *= 2;
  }
  EXPECT_EQ(s.health(1).backoff, 4);
}

// A retransmission of a packet a bad path lost never goes back on it, even
// when its probe is due, and the probe stays owed to it.
TEST(PathSet, RepsRetransmitsAroundABadPathWhoseProbeIsDue) {
  PathSet s(reps_config());
  send_on(s, 0);
  s.on_lost(0, LossKind::kTimeout, 0);
  // Explore 1..7 so that 0 is next in turn when its probe comes due.
  for (int i = 0; i < 7; ++i) ASSERT_NE(s.choose(50'000), 0);
  EXPECT_NE(s.choose_retransmit(0, 100'000), 0);
  EXPECT_FALSE(s.health(0).probing);
  EXPECT_EQ(s.choose(100'000), 0);  // the next new packet is its probe
  EXPECT_TRUE(s.health(0).probing);
}

TEST(PathSet, RepsUsesEveryPathInTurnWhenAllAreBad) {
  PathSet s(reps_config());
  for (uint8_t e = 0; e < 8; ++e) {
    send_on(s, e);
    s.on_lost(e, LossKind::kTimeout, 0);
  }
  EXPECT_EQ(s.bad_count(), 8);
  // No probe is due: the connection still sends, every path in turn.
  const std::vector<int> seen = explore_counts(s, 16, 10);
  for (int e = 0; e < 8; ++e) EXPECT_EQ(seen[e], 2) << "entropy " << e;
}

TEST(PathSet, RepsSkipsAPathFarSlowerThanTheOthersUntilAProbeIsFast) {
  PathSet s(reps_config());
  // Entropies 0..6 at 10 us; 7 at 100 us (more than 4x the median).
  for (int round = 0; round < 16; ++round) {
    for (uint8_t e = 0; e < 7; ++e) s.on_rtt(e, 10'000, 0);
  }
  EXPECT_EQ(s.median_srtt(), 10'000u);
  for (int i = 0; i < 7; ++i) s.on_rtt(7, 100'000, 0);
  EXPECT_EQ(s.health(7).state, PathState::kGood);  // too few samples to judge
  s.on_rtt(7, 100'000, 0);
  EXPECT_EQ(s.health(7).state, PathState::kSkip);
  EXPECT_EQ(explore_counts(s, 70, 1'000)[7], 0);
  // Its probe comes back slow: skipped on, for twice as long.
  EXPECT_EQ(explore_counts(s, 8, 100'000)[7], 1);
  uint32_t probe = s.on_sent(7);
  s.on_acked(7, probe, true, false, 100'000, 90'000);
  EXPECT_EQ(s.health(7).state, PathState::kSkip);
  EXPECT_EQ(explore_counts(s, 8, 299'999)[7], 0);
  EXPECT_EQ(explore_counts(s, 8, 300'000)[7], 1);
  // Within twice the median: back in use, its RTT restarted from the probe's.
  probe = s.on_sent(7);
  s.on_acked(7, probe, true, false, 300'000, 15'000);
  EXPECT_EQ(s.health(7).state, PathState::kGood);
  EXPECT_EQ(s.stats(7).srtt_ns, 15'000u);
  EXPECT_EQ(s.bad_count(), 0);
}

// The registry names each policy, and a PathSet runs the one its
// configuration numbers (a number no policy has: round robin).
TEST(PathSet, EachPolicyIsFoundByItsNameAndRun) {
  EXPECT_EQ(path_policy_named("round-robin"), PathPolicy::kRoundRobin);
  EXPECT_EQ(path_policy_named("reps"), PathPolicy::kReps);
  EXPECT_EQ(path_policy_named("bitmap"), PathPolicy::kBitmap);
  EXPECT_EQ(path_policy_named("REPS"), std::nullopt);
  EntropyConfig c;
  c.policy = PathPolicy::kReps;
  EXPECT_NE(PathSet(c).policy_state<RepsPaths>(), nullptr);
  EXPECT_TRUE(PathSet(c).adaptive());
  c.policy = PathPolicy::kBitmap;
  EXPECT_NE(PathSet(c).policy_state<BitmapPaths>(), nullptr);
  c.policy = static_cast<PathPolicy>(kPathPolicyCount);
  const PathSet unknown(c);
  EXPECT_EQ(unknown.policy(), PathPolicy::kRoundRobin);
  EXPECT_FALSE(unknown.adaptive());
  EXPECT_NE(unknown.policy_state<RoundRobinPaths>(), nullptr);
}

// The bitmap policy's own state (its penalties).
const BitmapPaths& bitmap(const PathSet& s) {
  const BitmapPaths* b = s.policy_state<BitmapPaths>();
  EXPECT_NE(b, nullptr);
  static const BitmapPaths kNone{EntropyConfig{}};
  return b != nullptr ? *b : kNone;
}

EntropyConfig bitmap_config() {
  EntropyConfig c = reps_config();
  c.policy = PathPolicy::kBitmap;
  return c;
}

// Bitmap penalty: every entropy in turn while nothing is penalised, even
// those acknowledged clean (REPS would use those again and again).
TEST(PathSet, BitmapUsesEveryEntropyInTurnWhileNoneIsPenalised) {
  PathSet s(bitmap_config());
  s.on_sent(3);
  s.on_acked(3, 0, true, false);
  s.on_named(3, false);
  const std::vector<int> seen = explore_counts(s, 80, 0);
  for (int e = 0; e < 8; ++e) EXPECT_EQ(seen[e], 10) << "entropy " << e;
  EXPECT_EQ(bitmap(s).penalized_count(), 0);
}

// Each mark named on an entropy passes it over once more; trims twice,
// inferred losses four times, up to 15. A loss that is not the path's
// fault (blame false), and a timeout, add nothing.
TEST(PathSet, BitmapPassesOverAPenalisedEntropyOnceForEachTurnOfPenalty) {
  PathSet s(bitmap_config());
  s.on_named(5, true);
  s.on_named(5, true);
  EXPECT_EQ(bitmap(s).penalty(5), 2);
  EXPECT_EQ(bitmap(s).penalized_count(), 1);
  // 80 choices visit 82 entropies in turn: 0 and 1 eleven times, the others
  // ten, and 5 is passed over on its first two visits.
  const std::vector<int> seen = explore_counts(s, 80, 0);
  EXPECT_EQ(seen, (std::vector<int>{11, 11, 10, 10, 10, 8, 10, 10}));
  EXPECT_EQ(bitmap(s).penalty(5), 0);
  EXPECT_EQ(bitmap(s).penalized_count(), 0);
  s.on_lost(2, LossKind::kTrimmed, 0);
  EXPECT_EQ(bitmap(s).penalty(2), BitmapPaths::kTrimPenalty);
  s.on_lost(4, LossKind::kInferred, 0);
  EXPECT_EQ(bitmap(s).penalty(4), BitmapPaths::kLossPenalty);
  for (int i = 0; i < 20; ++i) s.on_named(4, true);
  EXPECT_EQ(bitmap(s).penalty(4), BitmapPaths::kMaxPenalty);
  s.on_lost(6, LossKind::kInferred, 0, 0, /*blame=*/false);
  EXPECT_EQ(bitmap(s).penalty(6), 0);
  s.on_named(7, false);
  EXPECT_EQ(bitmap(s).penalty(7), 0);
  EXPECT_EQ(bitmap(s).penalized_count(), 2);
  // A retransmission avoids the path that lost it and penalised paths.
  EXPECT_NE(s.choose_retransmit(3, 0), 3);
}

// Timeouts and dead paths are handled by the same path states as REPS: a
// timeout sets the path aside, its probe revives it.
TEST(PathSet, BitmapSetsATimedOutPathAsideAndRevivesItByProbe) {
  PathSet s(bitmap_config());  // probe_after_ns 100 us
  send_on(s, 2, 2);
  s.on_lost(2, LossKind::kTimeout, 0);
  EXPECT_EQ(s.health(2).state, PathState::kAssumedBad);
  EXPECT_EQ(bitmap(s).penalty(2), 0);
  EXPECT_EQ(explore_counts(s, 70, 50'000)[2], 0);
  EXPECT_EQ(explore_counts(s, 16, 100'000)[2], 1);  // the probe
  const uint32_t probe = s.on_sent(2);
  s.on_acked(2, probe, true, false);
  EXPECT_EQ(s.health(2).state, PathState::kGood);
  EXPECT_EQ(s.bad_count(), 0);
}

// A retransmission never carries a bad path's probe either: its ACK could not say which
// copy arrived, the probe would stay unjudged and the path unused for good
// (seen after a 20 ms stall of a memif loopback's receiver).
TEST(PathSet, RepsAndBitmapNeverProbeWithARetransmission) {
  for (const EntropyConfig& cfg : {reps_config(), bitmap_config()}) {
    PathSet s(cfg);
    send_on(s, 2);
    s.on_lost(2, LossKind::kTimeout, 0);
    // Its probe is due; retransmissions of packets lost on 5 go elsewhere.
    for (int i = 0; i < 16; ++i) {
      const uint8_t e = s.choose_retransmit(5, 200'000);
      EXPECT_NE(e, 2) << "retransmission " << i;
      s.on_acked(e, s.on_sent(e), false, false, 200'000, 10'000);
    }
    EXPECT_FALSE(s.health(2).probing);
    // The next new packet is its probe, and its ACK revives it.
    const std::vector<int> seen = explore_counts(s, 8, 200'000);
    ASSERT_EQ(seen[2], 1);
    s.on_acked(2, s.on_sent(2), true, false, 200'000, 10'000);
    EXPECT_EQ(s.health(2).state, PathState::kGood);
  }
}

TEST(PathSet, RoundRobinIgnoresWhatComesBack) {
  EntropyConfig c;
  c.count = 4;
  PathSet s(c);
  s.on_sent(3);
  s.on_acked(3, 0, true, false);
  EXPECT_EQ(s.choose(0), 0);
  EXPECT_EQ(s.choose_retransmit(1, 0), 1);  // its turn, even the same path
  EXPECT_EQ(s.explored(), 0);
}

TEST(SgList, CopiesAcrossEntries) {
  std::vector<uint8_t> a(5), b(3), c(10);
  SgList l;
  l.sge[0] = {a.data(), 5};
  l.sge[1] = {b.data(), 3};
  l.sge[2] = {c.data(), 10};
  l.num = 3;
  EXPECT_EQ(l.total_length(), 18u);
  std::vector<uint8_t> src(18);
  std::iota(src.begin(), src.end(), 1);
  copy_to_sgl(l, 3, src.data() + 3, 7);  // bytes 3..9
  EXPECT_EQ(a[3], 4);
  EXPECT_EQ(a[4], 5);
  EXPECT_EQ(b[0], 6);
  EXPECT_EQ(b[2], 8);
  EXPECT_EQ(c[0], 9);
  EXPECT_EQ(c[1], 10);
  EXPECT_EQ(c[2], 0);
  std::vector<uint8_t> out(7);
  copy_from_sgl(l, 3, out.data(), 7);
  EXPECT_EQ(out, std::vector<uint8_t>(src.begin() + 3, src.begin() + 10));
}

TEST(SgList, CopyPayloadCopiesExactlyItsBytesForEverySize) {
  // Small copies take overlapping fixed-size moves: each size from 0 past
  // the inline limit copies its bytes, at any alignment, and touches none
  // beyond them.
  std::vector<uint8_t> src(200);
  std::iota(src.begin(), src.end(), 1);
  for (size_t n = 0; n <= 130; ++n) {
    for (size_t at = 0; at < 4; ++at) {
      std::vector<uint8_t> dst(200, 0xee);
      copy_payload(dst.data() + 8 + at, src.data() + at, n);
      for (size_t i = 0; i < dst.size(); ++i) {
        const bool inside = i >= 8 + at && i < 8 + at + n;
        ASSERT_EQ(dst[i], inside ? src[i - 8] : 0xee) << "n " << n << " at " << at << " byte " << i;
      }
    }
  }
}

TEST(CompletionQueue, RingOrderAndOverrun) {
  CompletionQueue cq(3);
  for (uint64_t i = 0; i < 3; ++i) {
    WorkCompletion wc;
    wc.wr_id = i;
    EXPECT_TRUE(cq.push(wc));
  }
  EXPECT_FALSE(cq.push(WorkCompletion{}));
  EXPECT_EQ(cq.overruns(), 1u);
  WorkCompletion out[4];
  EXPECT_EQ(cq.poll(out, 2), 2u);
  EXPECT_EQ(out[0].wr_id, 0u);
  EXPECT_EQ(out[1].wr_id, 1u);
  EXPECT_TRUE(cq.push(WorkCompletion{}));
  EXPECT_EQ(cq.poll(out, 4), 2u);
  EXPECT_EQ(out[0].wr_id, 2u);
}

}  // namespace

}  // namespace braid

namespace braid {
namespace {

// Keys do not tell the order of registration: the first region of a table
// does not get key 1, nor the same key in two tables; a key still names its
// region and nothing else, and a stale key is refused.
TEST(MemoryRegionKeys, AreUnpredictableButResolveExactly) {
  std::vector<uint8_t> buf(4096);
  std::set<uint32_t> first_keys;
  for (uint64_t seed = 1; seed <= 32; ++seed) {
    MemoryRegionTable t(seed);
    first_keys.insert(t.register_region(buf.data(), buf.size(), kAccessRemoteWrite, 0));
  }
  EXPECT_GT(first_keys.size(), 30u);
  EXPECT_EQ(first_keys.count(1u), 0u);
  MemoryRegionTable t;  // seeded by the system
  std::set<uint32_t> keys;
  for (int i = 0; i < 100; ++i) {
    const uint32_t k = t.register_region(buf.data() + i, 1, kAccessRemoteWrite, 0);
    ASSERT_NE(k, 0u);
    EXPECT_TRUE(keys.insert(k).second);
    uint8_t* p = nullptr;
    ASSERT_EQ(
        t.resolve(k, reinterpret_cast<uintptr_t>(buf.data() + i), 1, kAccessRemoteWrite, 0, &p),
        AccessError::kNone);
    EXPECT_EQ(p, buf.data() + i);
  }
  const uint32_t gone = *keys.begin();
  ASSERT_TRUE(t.deregister(gone));
  const uint32_t again = t.register_region(buf.data(), 1, kAccessRemoteWrite, 0);
  EXPECT_NE(again, gone);
  uint8_t* p = nullptr;
  EXPECT_EQ(t.resolve(gone, reinterpret_cast<uintptr_t>(buf.data()), 1, kAccessRemoteWrite, 0, &p),
            AccessError::kBadKey);
}

TEST(RttEstimator, SmoothsSamplesAndTakesTheRtoFromThemOnlyOnProgress) {
  RttEstimator e(2'000'000, 10'000, 1'000'000);
  EXPECT_EQ(e.rto(), 2'000'000);  // the initial RTO until progress
  e.sample(100'000);
  EXPECT_EQ(e.srtt(), 100'000);
  EXPECT_EQ(e.rttvar(), 50'000);
  EXPECT_EQ(e.rto(), 2'000'000);
  e.on_progress();
  EXPECT_EQ(e.rto(), 300'000);  // srtt + 4 rttvar
  e.sample(20'000);
  EXPECT_EQ(e.min_rtt(), 20'000);
  EXPECT_EQ(e.srtt(), 100'000 - 100'000 / 8 + 20'000 / 8);
  EXPECT_EQ(e.rttvar(), 50'000 - 50'000 / 4 + 80'000 / 4);
  for (int i = 0; i < 200; ++i) e.sample(1'000);
  e.on_progress();
  EXPECT_EQ(e.rto(), 10'000);  // never below the least
  for (int i = 0; i < 20; ++i) e.back_off();
  EXPECT_EQ(e.rto(), 1'000'000);  // nor above the ceiling
}

TEST(RttEstimator, ASpuriousTimeoutRaisesTheFloorWhichThenFades) {
  RttEstimator e(400'000, 10'000, 1'000'000);
  for (int i = 0; i < 50; ++i) e.sample(10'000);
  e.back_off();  // 800 us
  e.on_spurious_timeout();
  e.on_progress();
  EXPECT_EQ(e.rto(), 800'000);  // the samples say far less: the floor holds
  TimeNs last = e.rto();
  for (int i = 0; i < 500; ++i) {
    e.on_progress();
    EXPECT_LE(e.rto(), last);
    last = e.rto();
  }
  EXPECT_LT(e.rto(), 10'000 + 800'000 / 1000);  // faded to the samples' RTO
}

TEST(RttEstimator, ALowerCeilingTakesEffectAtOnce) {
  RttEstimator e(2'000'000, 10'000, 50'000'000);
  e.set_max(500'000);
  EXPECT_EQ(e.rto(), 500'000);
  e.set_max(1'000);  // never below the least
  EXPECT_EQ(e.rto_max(), 10'000);
  EXPECT_EQ(e.rto(), 10'000);
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

// A QP moved to RESET takes its completions out of a CQ it shares; the
// others stay, in their order, and the ring keeps working after.
TEST(CompletionQueueErase, OneQueuePairsCompletionsLeaveTheOthersKeepTheirOrder) {
  CompletionQueue cq(4);
  for (uint64_t i = 0; i < 3; ++i) {  // wrap the ring once first
    WorkCompletion w;
    w.qp_num = 9;
    ASSERT_TRUE(cq.push(w));
  }
  std::vector<WorkCompletion> out(4);
  ASSERT_EQ(cq.poll(out.data(), 3), 3u);
  const uint32_t qps[] = {1, 2, 1, 2};
  for (uint64_t i = 0; i < 4; ++i) {
    WorkCompletion w;
    w.wr_id = i;
    w.qp_num = qps[i];
    ASSERT_TRUE(cq.push(w));
  }
  EXPECT_EQ(cq.erase_qp(1), 2u);
  EXPECT_EQ(cq.size(), 2u);
  WorkCompletion extra;
  extra.wr_id = 7;
  extra.qp_num = 3;
  ASSERT_TRUE(cq.push(extra));
  ASSERT_EQ(cq.poll(out.data(), 4), 3u);
  EXPECT_EQ(out[0].wr_id, 1u);
  EXPECT_EQ(out[1].wr_id, 3u);
  EXPECT_EQ(out[2].wr_id, 7u);
  EXPECT_EQ(cq.erase_qp(5), 0u);
}

}  // namespace
}  // namespace braid
