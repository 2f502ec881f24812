// Receiver-driven credit's two halves alone (lib/core/credit.h): the
// sender's accounting (speculative allowance, cumulative grants, what it
// asks for), the receiver's per-connection grants (demand, whole frames,
// the cap on unused grants and its forgiveness) and its pacer (turns at
// the link's rate, unscheduled data and congestion pushing grants back, no
// banked turns).
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/credit.h"

namespace braid {
namespace {

TEST(CreditSender, SpendsTheSpeculativeAllowanceOnNewPacketsOnly) {
  CreditSender s(10000);
  EXPECT_TRUE(s.may_send(false));
  EXPECT_FALSE(s.may_send(true));  // a retransmission waits for credit
  EXPECT_TRUE(s.spend(4000));      // unscheduled
  EXPECT_TRUE(s.spend(4000));
  EXPECT_EQ(s.speculative_left(), 2000u);
  EXPECT_TRUE(s.spend(4000));  // the last one may take what is left
  EXPECT_EQ(s.speculative_left(), 0u);
  EXPECT_FALSE(s.may_send(false));
  EXPECT_EQ(s.used(), 0u);  // speculation is not charged to credit
}

TEST(CreditSender, GrantsAreCumulativeSoDuplicatesAndOldOnesAreIgnored) {
  CreditSender s(0);
  EXPECT_FALSE(s.may_send(false));
  EXPECT_TRUE(s.on_grant(8000));
  EXPECT_FALSE(s.on_grant(8000));  // a duplicate
  EXPECT_FALSE(s.on_grant(4000));  // overtaken
  EXPECT_EQ(s.available(), 8000);
  EXPECT_FALSE(s.spend(5000));  // scheduled
  EXPECT_TRUE(s.may_send(true));
  EXPECT_FALSE(s.spend(5000));  // overdraws by one packet
  EXPECT_EQ(s.available(), -2000);
  EXPECT_FALSE(s.may_send(true));
  EXPECT_TRUE(s.on_grant(12000));
  EXPECT_EQ(s.available(), 2000);
}

TEST(CreditSender, CountersWrapAround) {
  CreditSender s(0);
  // Far along (each grant less than 2^31 ahead of the last): the counters
  // wrap past 2^32.
  ASSERT_TRUE(s.on_grant(0x60000000u));
  s.spend(0x60000000u);
  ASSERT_TRUE(s.on_grant(0xc0000000u));
  s.spend(0x60000000u);
  ASSERT_TRUE(s.on_grant(0xfffff000u));
  s.spend(0x3fffe000u);
  EXPECT_EQ(s.available(), 0x1000);
  EXPECT_TRUE(s.on_grant(0x00001000u));  // 8 KiB more, past the wrap
  EXPECT_EQ(s.available(), 0x3000);
  EXPECT_FALSE(s.on_grant(0xfffff800u));  // from before the wrap: old
}

TEST(CreditSender, AsksForWhatSpeculationDoesNotCover) {
  CreditSender s(10000);
  // 50000 new bytes, none queued for retransmission: 40000 beyond the allowance.
  uint32_t t = s.target(50000, 0);
  EXPECT_EQ(t, 40000u);
  EXPECT_TRUE(s.request_due(t, 8000));
  s.asked(t);
  EXPECT_FALSE(s.request_due(t, 8000));
  // A retransmission's 4000 bytes: less than the step, and the last request
  // is not granted yet, so it waits to be asked with more.
  EXPECT_FALSE(s.request_due(s.target(50000, 4000), 8000));
  EXPECT_TRUE(s.request_due(s.target(50000, 9000), 8000));
  // Once everything asked is granted, any new demand is asked for at once.
  s.on_grant(40000);
  EXPECT_TRUE(s.request_due(s.target(50000, 100), 8000));
}

TEST(CreditSender, GoingIdleGivesCreditBackAndRestoresTheAllowance) {
  CreditSender s(10000);
  s.spend(10000);
  s.on_grant(30000);
  s.spend(4000);
  EXPECT_EQ(s.available(), 26000);
  s.on_idle();
  EXPECT_EQ(s.available(), 0);
  EXPECT_EQ(s.speculative_left(), 10000u);
  EXPECT_EQ(s.used(), 30000u);  // the receiver is told: target counts from here
  EXPECT_EQ(s.target(10000, 0), 30000u);
}

// A pacer over a fake endpoint: connection id -> demand left.
struct Harness {
  explicit Harness(uint64_t rate_bps, uint32_t quantum = 8000, uint32_t max_turn_quanta = 1,
                   std::atomic<TimeNs>* shared = nullptr)
      : wheel(100, 1024),
        pacer(CreditPacerConfig{rate_bps, quantum, max_turn_quanta, shared}, &wheel, &grant, this) {
    pacer.reserve_ids(16);
  }
  static uint32_t grant(void* owner, uint16_t id, uint32_t max, bool* more, TimeNs now) {
    auto* h = static_cast<Harness*>(owner);
    uint64_t& d = h->demand[id];
    const auto g = static_cast<uint32_t>(std::min<uint64_t>(d, max));
    d -= g;
    *more = d > 0;
    if (g > 0) h->log.push_back({now, id, g});
    return g;
  }
  void run_until(TimeNs t) {
    for (TimeNs x = now; x <= t; x += 100) wheel.advance(x);
    now = t;
  }
  struct Grant {
    TimeNs at;
    uint16_t id;
    uint32_t bytes;
  };
  TimeNs now = 0;
  TimingWheel wheel;
  CreditPacer pacer;
  std::map<uint16_t, uint64_t> demand;
  std::vector<Grant> log;
};

TEST(CreditPacer, GrantsInTurnsAtTheLinkRate) {
  Harness h(8'000'000'000);  // 1 byte per ns: a quantum of 8000 bytes each 8 us
  h.demand = {{1, 80000}, {2, 80000}, {3, 80000}};
  for (uint16_t id : {1, 2, 3}) h.pacer.want(id, 0, 0);
  h.run_until(1'000'000);
  ASSERT_EQ(h.log.size(), 30u);
  // The first asks and is granted at once; from then on, round robin.
  for (size_t i = 0; i < h.log.size(); ++i) {
    if (i > 0 && i < 28) {
      EXPECT_EQ(h.log[i].id, 1 + (i - 1) % 3) << i;  // 1 has had its 10 by then
    }
    EXPECT_EQ(h.log[i].bytes, 8000u);
    // The i-th grant goes once the i grants before it have had their time,
    // within one tick of the wheel.
    EXPECT_GE(h.log[i].at, i * 8000);
    EXPECT_LE(h.log[i].at, i * 8000 + 100);
  }
  EXPECT_FALSE(h.pacer.active());
  EXPECT_EQ(h.pacer.stats().granted_bytes, 240000u);
}

TEST(CreditPacer, UnscheduledDataAndCongestionPushTheNextGrantBack) {
  Harness h(8'000'000'000);
  h.demand = {{1, 16000}, {2, 16000}};
  h.pacer.want(2, 0, 0);  // granted 8000 at once, and waits for its next turn
  // While 2 waits, 40000 bytes from 1's peer arrive without credit: the
  // link carried them in 2's place, so 2's turn waits for their time.
  h.pacer.on_unscheduled(1, 40000, 0);
  h.pacer.want(1, 0, 0);
  h.run_until(100'000);
  ASSERT_EQ(h.log.size(), 4u);
  EXPECT_EQ(h.log[0].at, 0u);
  EXPECT_GE(h.log[1].at, 48000u);
  EXPECT_LE(h.log[1].at, 48100u);
  // A trimmed packet costs its whole time, a CE-marked one a sixteenth.
  h.demand[1] = 16000;
  h.pacer.on_congestion(16000, true, h.now);
  h.pacer.on_congestion(16000, false, h.now);
  h.pacer.want(1, 0, h.now);
  h.run_until(200'000);
  ASSERT_EQ(h.log.size(), 6u);
  EXPECT_GE(h.log[4].at, 100'000u + 16000 + 1000);
  EXPECT_LE(h.log[4].at, 100'000u + 16000 + 1000 + 100);
  EXPECT_EQ(h.pacer.stats().trimmed, 1u);
  EXPECT_EQ(h.pacer.stats().marked, 1u);
}

TEST(CreditPacer, ALoneSendersSpeculationDoesNotHoldItsGrantsBack) {
  // Its speculation covers the round trip before its first grant arrives.
  Harness h(8'000'000'000);
  h.demand = {{1, 16000}};
  h.pacer.on_unscheduled(1, 40000, 0);
  h.pacer.want(1, 0, 0);
  h.run_until(100'000);
  ASSERT_EQ(h.log.size(), 2u);
  EXPECT_EQ(h.log[0].at, 0u);
  EXPECT_LE(h.log[1].at, 8100u);
  EXPECT_EQ(h.pacer.stats().unscheduled_bytes, 40000u);
}

TEST(CreditPacer, ASendersSpeculationHoldsBackTheGrantsOfOthersBehindIt) {
  // A group's turns (a peer's QPs): one member's speculative data takes
  // the link's time that the grants of the others behind it would.
  Harness h(8'000'000'000);
  h.demand = {{1, 16000}};
  h.pacer.want(1, 0, 0);  // granted at once: 8000 B, next at 8 us
  h.pacer.on_unscheduled(1, 40000, 0, true);
  h.run_until(100'000);
  ASSERT_EQ(h.log.size(), 2u);
  EXPECT_GE(h.log[1].at, 48'000u);  // 8 us of grant and 40 us of speculation
}

TEST(CreditPacer, FewSendersTakeLargerTurns) {
  Harness h(8'000'000'000, 8000, 8);
  h.demand = {{1, 1'000'000}};
  h.pacer.want(1, 0, 0);
  h.run_until(1000);
  ASSERT_EQ(h.log.size(), 1u);
  EXPECT_EQ(h.log[0].bytes, 64000u);  // alone: 8 quanta
  h.demand[2] = 1'000'000;
  h.demand[3] = 1'000'000;
  h.pacer.want(2, 0, h.now);
  h.pacer.want(3, 0, h.now);
  h.run_until(200'000);
  // Three waiting: 8 / 3 = 2 quanta a turn, in turns.
  ASSERT_GT(h.log.size(), 4u);
  for (size_t i = 1; i < h.log.size(); ++i) EXPECT_EQ(h.log[i].bytes, 16000u) << i;
  // Nine waiting: one quantum each.
  for (uint16_t id = 4; id <= 9; ++id) {
    h.demand[id] = 1'000'000;
    h.pacer.want(id, 0, h.now);
  }
  const size_t before = h.log.size();
  h.run_until(400'000);
  for (size_t i = before + 1; i < h.log.size(); ++i) EXPECT_EQ(h.log[i].bytes, 8000u) << i;
}

TEST(CreditPacer, AnIdlePacerBanksNoTurns) {
  Harness h(8'000'000'000);
  h.demand = {{1, 8000}};
  h.pacer.want(1, 0, 0);
  h.run_until(1'000'000);  // a long idle spell after one grant
  h.demand = {{1, 80000}, {2, 80000}};
  h.pacer.want(1, 0, h.now);
  h.pacer.want(2, 0, h.now);
  h.run_until(h.now + 40'000);
  // 40 us at 8000 bytes per 8 us: 5 or 6 grants (the first at once), not
  // the 20 the idle millisecond would have paid for.
  EXPECT_GE(h.log.size(), 1u + 5u);
  EXPECT_LE(h.log.size(), 1u + 6u);
}

TEST(CreditPacer, TakesItsRateFromTheFirstRequesterWhenNoneIsConfigured) {
  Harness h(0);
  h.demand = {{1, 16000}};
  h.pacer.want(1, 8'000'000'000, 0);
  EXPECT_EQ(h.pacer.rate_bps(), 8'000'000'000u);
  h.run_until(100'000);
  ASSERT_EQ(h.log.size(), 2u);
  EXPECT_GE(h.log[1].at, 8000u);
}

// The pacers of one port's engines (each on its own wheel and thread in an
// engine) share their next grant's time: together they grant the link's
// rate, not twice it; one alone grants all of it.
TEST(CreditPacer, PacersSharingAClockGrantTheLinksRateTogether) {
  std::atomic<TimeNs> clock{0};
  Harness a(8'000'000'000, 8000, 1, &clock), b(8'000'000'000, 8000, 1, &clock);
  a.demand = {{1, 1'000'000}};
  b.demand = {{2, 1'000'000}};
  a.pacer.want(1, 0, 0);
  b.pacer.want(2, 0, 0);
  for (TimeNs t = 0; t <= 400'000; t += 100) {  // 400 us: 400 KB at 1 byte per ns
    a.run_until(t);
    b.run_until(t);
  }
  const uint64_t both = a.pacer.stats().granted_bytes + b.pacer.stats().granted_bytes;
  EXPECT_GE(both, 400'000u - 16'000u);
  EXPECT_LE(both, 400'000u + 16'000u);                 // a turn each at most beyond the rate
  EXPECT_GT(a.pacer.stats().granted_bytes, 150'000u);  // shared fairly
  EXPECT_GT(b.pacer.stats().granted_bytes, 150'000u);
  // Alone (b has nothing more to ask), a takes the whole rate.
  b.demand[2] = 0;
  const uint64_t before = a.pacer.stats().granted_bytes;
  for (TimeNs t = 400'100; t <= 800'000; t += 100) {
    a.run_until(t);
    b.run_until(t);
  }
  EXPECT_GE(a.pacer.stats().granted_bytes - before, 400'000u - 16'000u);
}

TEST(CreditGrantor, WithoutAPacerGrantsTheWholeDemandAtOnceAndRepeatsWhenNothingIsNew) {
  CreditGrantor g;
  EXPECT_FALSE(g.due());
  CreditGrantor::Request r = g.on_request(10000, 1000, 100000, 0);
  EXPECT_EQ(r.granted, 10000u);
  EXPECT_EQ(g.granted(), 10000u);
  EXPECT_FALSE(g.paced());  // no pacer shares a link
  ASSERT_TRUE(g.due());
  g.sent();
  EXPECT_FALSE(g.due());
  // The same demand, or an older one overtaken: our grant goes again (it
  // may have been lost), nothing more is granted.
  for (uint32_t demand : {10000u, 8000u}) {
    r = g.on_request(demand, 1000, 100000, 10);
    EXPECT_EQ(r.granted, 0u);
    EXPECT_TRUE(g.due());
    g.sent();
  }
  r = g.on_request(15000, 1000, 100000, 20);
  EXPECT_EQ(r.granted, 5000u);
  EXPECT_EQ(g.granted(), 15000u);
}

// A pacer whose turns nobody takes: the grantor's turns are taken by hand.
struct IdlePacer {
  static uint32_t none(void*, uint16_t, uint32_t, bool* more, TimeNs) {
    *more = false;
    return 0;
  }
  IdlePacer() { pacer.reserve_ids(16); }
  TimingWheel wheel;
  CreditPacer pacer{CreditPacerConfig{8'000'000'000}, &wheel, &none, nullptr};
};

TEST(CreditGrantor, ATurnGrantsWholeFramesOfTheDemandAndTheLastGrantGoesTwice) {
  IdlePacer p;
  CreditGrantor g;
  g.bind(&p.pacer, 3, 0);
  EXPECT_EQ(g.on_request(10000, 1000, 100000, 0).granted, 0u);  // the pacer's turns grant
  EXPECT_TRUE(g.paced());
  bool more = false, capped = false;
  // 4000 bytes a turn is one 4096-byte frame (rounded to the nearest).
  EXPECT_EQ(g.grant(4000, 4096, 0, &more, &capped, 0), 4096u);
  EXPECT_TRUE(more);
  EXPECT_FALSE(capped);
  ASSERT_TRUE(g.due());
  g.sent();
  EXPECT_FALSE(g.due());                                        // more will follow: no copy
  EXPECT_EQ(g.grant(8192, 4096, 0, &more, &capped, 1), 5904u);  // what is left of the demand
  EXPECT_FALSE(more);
  g.sent();
  EXPECT_TRUE(g.due());  // the demand's last grant has no later one to repair it
  g.sent();
  EXPECT_FALSE(g.due());
  EXPECT_EQ(g.grant(8192, 4096, 0, &more, &capped, 2), 0u);  // nothing asked
  EXPECT_EQ(g.granted(), 10000u);
}

TEST(CreditGrantor, APeerHoldingTheCapUnusedGetsNoTurnsUntilItsDataArrives) {
  IdlePacer p;
  CreditGrantor g;
  g.bind(&p.pacer, 3, 0);
  g.on_request(100000, 1000, 100000, 0);
  bool more = false, capped = false;
  EXPECT_EQ(g.grant(8192, 4096, 8192, &more, &capped, 0), 8192u);
  EXPECT_EQ(g.grant(8192, 4096, 8192, &more, &capped, 1), 0u);  // 8192 unused: capped
  EXPECT_TRUE(capped);
  EXPECT_EQ(g.grant(8192, 4096, 8192, &more, &capped, 2), 0u);
  EXPECT_FALSE(capped);         // counted once
  g.on_arrival(4096, 8192, 3);  // half of it arrived: below the cap again
  EXPECT_EQ(g.grant(8192, 4096, 8192, &more, &capped, 4), 8192u);
}

TEST(CreditGrantor, ACappedPeerWhoseDataStoppedIsForgivenOnlyAfterAWaitThatDoubles) {
  IdlePacer p;
  CreditGrantor g;
  g.bind(&p.pacer, 3, 0);
  const TimeNs rto = 1000, rto_max = 100000;
  g.on_request(100000, rto, rto_max, 0);
  bool more = false, capped = false;
  g.grant(8192, 4096, 8192, &more, &capped, 0);
  g.grant(8192, 4096, 8192, &more, &capped, 10);
  ASSERT_TRUE(capped);  // at 10
  // Nothing of it arrives. Asking again within one RTO of the cap: refused
  // (our grant repeated), not forgiven.
  EXPECT_FALSE(g.on_request(100000, rto, rto_max, 500).forgiven);
  EXPECT_EQ(g.grant(8192, 4096, 8192, &more, &capped, 600), 0u);
  // After the wait: forgiven, and turns grant again.
  EXPECT_TRUE(g.on_request(100000, rto, rto_max, 1010).forgiven);
  EXPECT_EQ(g.grant(8192, 4096, 8192, &more, &capped, 1020), 8192u);
  EXPECT_EQ(g.grant(8192, 4096, 8192, &more, &capped, 1030), 0u);
  ASSERT_TRUE(capped);  // capped again at 1030, still nothing arriving
  // The second time in a row the wait is two RTOs.
  EXPECT_FALSE(g.on_request(100000, rto, rto_max, 1030 + 1500).forgiven);
  EXPECT_TRUE(g.on_request(100000, rto, rto_max, 1030 + 2000).forgiven);
}

TEST(CreditGrantor, ACappedPeerWhoseDataStillArrivesIsForgivenAtOnce) {
  IdlePacer p;
  CreditGrantor g;
  g.bind(&p.pacer, 3, 0);
  g.on_request(100000, 1000, 100000, 0);
  bool more = false, capped = false;
  g.grant(16384, 4096, 16384, &more, &capped, 0);
  g.on_arrival(4096, 16384, 5);  // some arrives: 12288 unused, below the cap
  g.grant(8192, 4096, 16384, &more, &capped, 6);
  g.grant(8192, 4096, 16384, &more, &capped, 7);
  ASSERT_TRUE(capped);
  EXPECT_TRUE(g.on_request(100000, 1000, 100000, 8).forgiven);  // arrived within an RTO
}

}  // namespace
}  // namespace braid
