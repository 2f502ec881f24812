// Congestion-control algorithms alone: events in, window out. NSCC against
// the behaviour of each quadrant, its once-per-RTT decrease, QuickAdapt,
// fast increase and its bounds, at UET's reference point (100 Gb/s, 12 us).
#include <gtest/gtest.h>

#include <cmath>

#include "core/congestion_control.h"

namespace braid {
namespace {

constexpr uint32_t kPacket = 4096 + 64;
constexpr TimeNs kRtt = 12'000;

CcConfig nscc(TimeNs base_rtt = kRtt, uint32_t initial = 1024 * 1024) {
  CcConfig c;
  c.algorithm = CcAlgorithm::kNscc;
  c.base_rtt_ns = base_rtt;
  c.window_bytes = initial;
  c.link_bps = 100'000'000'000;
  c.trimming = true;
  return c;
}

// Feeds ACKs of one packet each for `rtts` round trips of a window's worth
// of packets, every one with queueing delay `delay` and the ECN echo `ecn`.
// Returns the time reached.
TimeNs feed(NsccCc& cc, TimeNs start, int rtts, TimeNs delay, bool ecn) {
  TimeNs now = start;
  for (int r = 0; r < rtts; ++r) {
    const uint32_t packets = cc.cwnd_bytes() / kPacket + 1;
    for (uint32_t i = 0; i < packets; ++i) {
      now += kRtt / packets;
      AckEvent e;
      e.now = now;
      e.acked_bytes = kPacket;
      e.acked_packets = 1;
      e.rtt_ns = kRtt + delay;
      e.ecn = ecn;
      e.inflight_bytes = cc.cwnd_bytes();
      cc.on_ack(e);
    }
  }
  return now;
}

TEST(Nscc, ParametersAtTheReferencePoint) {
  NsccCc cc(nscc(), kPacket);
  ASSERT_TRUE(cc.configured());
  EXPECT_DOUBLE_EQ(cc.target_delay_ns(), 9'000);  // 0.75 RTT with trimming
  EXPECT_DOUBLE_EQ(cc.max_window(), 225'000);     // 1.5 BDP
  EXPECT_EQ(cc.cwnd_bytes(), 225'000u);           // starts at the maximum
  CcConfig no_trim = nscc();
  no_trim.trimming = false;
  EXPECT_DOUBLE_EQ(NsccCc(no_trim, kPacket).target_delay_ns(), 12'000);
  // 400 Gb/s: four times the BDP, four times the window.
  CcConfig fast = nscc();
  fast.link_bps = 400'000'000'000;
  EXPECT_DOUBLE_EQ(NsccCc(fast, kPacket).max_window(), 900'000);
}

// A link rate and base RTT whose 1.5 x BDP passes 4 GiB (400 Gb/s x
// 114.5 ms: 8.59 GB) keep the largest window NSCC supports; it does not
// wrap to a few KB. The same from a measured RTT.
TEST(Nscc, AWindowBeyondFourGibIsClampedNotWrapped) {
  CcConfig c = nscc(114'500'000);
  c.link_bps = 400'000'000'000;
  NsccCc cc(c, kPacket);
  EXPECT_EQ(cc.max_window(), NsccCc::kMaxWindowBytes);
  EXPECT_EQ(cc.cwnd_bytes(), static_cast<uint32_t>(NsccCc::kMaxWindowBytes));
  CcConfig m = nscc(0);
  m.link_bps = 400'000'000'000;
  NsccCc measured(m, kPacket);
  AckEvent e;
  e.now = 200'000'000;
  e.acked_bytes = kPacket;
  e.rtt_ns = 114'500'000;
  measured.on_ack(e);
  EXPECT_EQ(measured.max_window(), NsccCc::kMaxWindowBytes);
  EXPECT_GE(measured.cwnd_bytes(), 1024u * 1024);  // the initial window, not a wrapped one
  EXPECT_LE(measured.cwnd_bytes(), static_cast<uint32_t>(NsccCc::kMaxWindowBytes));
}

TEST(Nscc, LearnsTheBaseRttFromTheFirstSampleWhenNotGivenOne) {
  NsccCc cc(nscc(0, 50'000), kPacket);
  EXPECT_FALSE(cc.configured());
  EXPECT_EQ(cc.cwnd_bytes(), 50'000u);
  AckEvent e;
  e.now = 20'000;
  e.acked_bytes = kPacket;
  cc.on_ack(e);  // no RTT sample: nothing to scale by
  EXPECT_FALSE(cc.configured());
  e.rtt_ns = kRtt;
  cc.on_ack(e);
  ASSERT_TRUE(cc.configured());
  EXPECT_EQ(cc.base_rtt_ns(), kRtt);
  EXPECT_GE(cc.cwnd_bytes(), 50'000u);  // the initial window stands (and may grow)
  EXPECT_LE(cc.cwnd_bytes(), 225'000u);
  // A smaller RTT later lowers the base RTT.
  e.rtt_ns = 10'000;
  e.now += 1'000;
  cc.on_ack(e);
  EXPECT_EQ(cc.base_rtt_ns(), 10'000);
}

// The receiver held the ACK for most of the round trip: the RTT less the
// hold (0.6 us through two routers, measured) does not set the base RTT,
// which would make the largest window a packet; the whole round trip
// bounds it. A sample with a short hold sets it.
TEST(Nscc, ARoundTripMostlyHeldAtTheReceiverDoesNotSetTheBaseRtt) {
  NsccCc cc(nscc(0, 50'000), kPacket);
  AckEvent e;
  e.now = 60'000;
  e.acked_bytes = kPacket;
  e.rtt_ns = 600;             // 10.3 us less a hold of 9.7 us
  e.base_sample_ns = 10'300;  // the whole round trip
  cc.on_ack(e);
  ASSERT_TRUE(cc.configured());
  EXPECT_EQ(cc.base_rtt_ns(), 10'300);
  EXPECT_DOUBLE_EQ(cc.max_window(), 1.5 * 10'300 * 100 / 8);
  e.now += 1'000;
  cc.on_ack(e);  // again: the base stays, and the delay is 0, not negative
  EXPECT_EQ(cc.base_rtt_ns(), 10'300);
  EXPECT_GE(cc.cwnd_bytes(), 50'000u);
  e.now += 1'000;
  e.rtt_ns = e.base_sample_ns = 8'000;  // held briefly: the wire's
  cc.on_ack(e);
  EXPECT_EQ(cc.base_rtt_ns(), 8'000);
}

TEST(Nscc, ASampleUnderHalfTheFirstRescalesEverything) {
  // The first sample waited behind the initial window (4x the network's
  // RTT): target and largest window are that queue's, until an RTT under
  // half of it shows the network's.
  NsccCc cc(nscc(0, 50'000), kPacket);
  AckEvent e;
  e.now = 60'000;
  e.acked_bytes = kPacket;
  e.rtt_ns = 4 * kRtt;
  cc.on_ack(e);
  EXPECT_DOUBLE_EQ(cc.target_delay_ns(), 0.75 * 4 * kRtt);
  EXPECT_DOUBLE_EQ(cc.max_window(), 4 * 225'000);
  e.now += 1'000;
  e.rtt_ns = 3 * kRtt;  // not under half: only the largest window follows
  cc.on_ack(e);
  EXPECT_DOUBLE_EQ(cc.target_delay_ns(), 0.75 * 4 * kRtt);
  EXPECT_DOUBLE_EQ(cc.max_window(), 3 * 225'000);
  e.now += 1'000;
  e.rtt_ns = kRtt;
  cc.on_ack(e);
  EXPECT_EQ(cc.base_rtt_ns(), kRtt);
  EXPECT_DOUBLE_EQ(cc.target_delay_ns(), 0.75 * kRtt);
  EXPECT_DOUBLE_EQ(cc.max_window(), 225'000);
  EXPECT_LE(cc.cwnd_bytes(), 225'000u);
}

TEST(Nscc, AConfiguredBaseRttKeepsItsScale) {
  // A software datapath: configured for 200 us, while a lucky packet comes
  // back in 20. The delay is measured from 20; the window stays 200's.
  CcConfig c = nscc(200'000);
  c.link_bps = 1'000'000'000;
  NsccCc cc(c, kPacket);
  const double max = cc.max_window();
  EXPECT_DOUBLE_EQ(max, 1.5 * 200'000 * 1e9 / 8e9);
  AckEvent e;
  e.now = 1'000;
  e.acked_bytes = kPacket;
  e.rtt_ns = 20'000;
  cc.on_ack(e);
  EXPECT_EQ(cc.base_rtt_ns(), 20'000);
  EXPECT_DOUBLE_EQ(cc.max_window(), max);
  EXPECT_DOUBLE_EQ(cc.target_delay_ns(), 150'000);
}

TEST(Nscc, GrowsMoreTheLowerTheDelayBelowTarget) {
  NsccCc low(nscc(0, 60'000), kPacket), high(nscc(0, 60'000), kPacket);
  // Configure both from a sample at the base RTT, then a few RTTs of
  // unmarked ACKs at 2 us and at 7 us of queueing (target 9 us).
  feed(low, 0, 1, 0, false);
  feed(high, 0, 1, 0, false);
  const uint32_t start_low = low.cwnd_bytes(), start_high = high.cwnd_bytes();
  feed(low, 20'000, 3, 2'000, false);
  feed(high, 20'000, 3, 7'000, false);
  EXPECT_GT(low.cwnd_bytes(), start_low);
  EXPECT_GT(high.cwnd_bytes(), start_high);
  EXPECT_GT(low.cwnd_bytes() - start_low, high.cwnd_bytes() - start_high);
}

TEST(Nscc, FairIncreaseAboveTargetWithoutMarks) {
  NsccCc cc(nscc(0, 60'000), kPacket);
  feed(cc, 0, 1, 0, false);
  const uint32_t before = cc.cwnd_bytes();
  feed(cc, 20'000, 4, 15'000, false);
  // About fi = 5 MSS (20 KB) per RTT, plus eta.
  const double grown = static_cast<double>(cc.cwnd_bytes()) - before;
  EXPECT_GT(grown, 4 * 0.5 * 5 * 4096);
  EXPECT_LT(grown, 4 * 2.0 * 5 * 4096 + 4 * 1000);
}

TEST(Nscc, MarksWithDelayAboveTargetCutOncePerRtt) {
  NsccCc cc(nscc(), kPacket);
  // Build up an average delay above target with marked, delayed ACKs.
  TimeNs now = 0;
  uint64_t cuts = 0;
  uint32_t before = cc.cwnd_bytes();
  for (int i = 0; i < 2000; ++i) {
    now += 500;
    AckEvent e;
    e.now = now;
    e.acked_bytes = kPacket;
    e.rtt_ns = kRtt + 40'000;
    e.ecn = true;
    e.inflight_bytes = cc.cwnd_bytes();
    cc.on_ack(e);
    if (cc.decreases() > cuts) {
      EXPECT_LT(cc.cwnd_bytes(), before);
      cuts = cc.decreases();
    }
    before = cc.cwnd_bytes();
  }
  ASSERT_GT(cc.decreases(), 0u);
  EXPECT_GT(cc.avg_delay_ns(), cc.target_delay_ns());
  // 1 ms of ACKs: at most one cut per base RTT (12 us).
  EXPECT_LE(cc.decreases(), 1'000'000 / kRtt + 1);
  // Down to about one packet (eta still adds a little each RTT), no further.
  EXPECT_GE(cc.cwnd_bytes(), kPacket);
  EXPECT_LT(cc.cwnd_bytes(), 2 * kPacket);
}

// Where the RTT is well above the base RTT (a software datapath's host
// turnaround), ACKs can come more than a base RTT apart: the marks of a
// window cut it once, not once per ACK.
TEST(Nscc, MarksOfAWindowAlreadyCutDoNotCutItAgain) {
  NsccCc cc(nscc(), kPacket);
  constexpr TimeNs kSlowRtt = kRtt + 30'000;  // below QuickAdapt's 4 x target
  constexpr TimeNs kGap = 14'000;             // more than the base RTT
  constexpr int kAcks = 200;
  TimeNs now = kSlowRtt;
  for (int i = 0; i < kAcks; ++i) {
    now += kGap;
    AckEvent e;
    e.now = now;
    e.acked_bytes = kPacket;
    e.rtt_ns = kSlowRtt;
    e.ecn = true;
    e.inflight_bytes = cc.cwnd_bytes();
    cc.on_ack(e);
  }
  // A cut, then the next only for a packet sent after it: at most one
  // per RTT (once per ACK, there were about 170).
  EXPECT_GT(cc.decreases(), 10u);
  EXPECT_LE(cc.decreases(), kAcks * kGap / kSlowRtt + 1);
}

TEST(Nscc, MarksWithDelayBelowTargetLeaveTheWindow) {
  NsccCc cc(nscc(), kPacket);
  feed(cc, 0, 1, 0, false);
  const uint32_t before = cc.cwnd_bytes();
  AckEvent e;
  e.now = 100'000;
  e.acked_bytes = kPacket;
  e.rtt_ns = kRtt + 3'000;
  e.ecn = true;
  e.inflight_bytes = before;
  for (int i = 0; i < 50; ++i, e.now += 100) cc.on_ack(e);
  EXPECT_EQ(cc.decreases(), 0u);
  EXPECT_GE(cc.cwnd_bytes(), before);
}

TEST(Nscc, QuickAdaptDropsToWhatGotThroughAfterATrim) {
  NsccCc cc(nscc(), kPacket);
  ASSERT_EQ(cc.cwnd_bytes(), 225'000u);
  // One ACK opens a QuickAdapt window; in it only 3 packets get through.
  TimeNs now = 1'000;
  for (int i = 0; i < 3; ++i, now += 1'000) {
    AckEvent e;
    e.now = now;
    e.acked_bytes = kPacket;
    e.rtt_ns = kRtt + 20'000;
    e.inflight_bytes = 200'000;
    cc.on_ack(e);
  }
  // After the window (base RTT + target) a trim: the window becomes what
  // was achieved in it.
  LossEvent trim;
  trim.now = now + kRtt + 9'000;
  trim.lost_bytes = kPacket;
  trim.kind = LossKind::kTrimmed;
  trim.inflight_bytes = 200'000;
  cc.on_loss(trim);
  EXPECT_EQ(cc.quick_adapts(), 1u);
  EXPECT_LE(cc.cwnd_bytes(), 2 * kPacket);
  EXPECT_GE(cc.cwnd_bytes(), kPacket);
  // Trims of what was in flight then are ignored.
  const uint32_t after = cc.cwnd_bytes();
  trim.now += 1'000;
  cc.on_loss(trim);
  EXPECT_EQ(cc.cwnd_bytes(), after);
}

// QuickAdapt on delay: a delay over 4 x target after a window in which
// little got through cuts the window to what did, when the ACK is marked
// (a queue at a switch). Unmarked, the same delay is a slow path or a late
// host: the window stays.
TEST(Nscc, QuickAdaptOnDelayWantsAMark) {
  for (bool ecn : {false, true}) {
    NsccCc cc(nscc(), kPacket);
    TimeNs now = 1'000;
    for (int i = 0; i < 4; ++i, now += kRtt + 9'000) {  // one ACK per QuickAdapt period
      AckEvent e;
      e.now = now;
      e.acked_bytes = kPacket;
      e.rtt_ns = kRtt + 50'000;  // delay 50 us > 4 x 9 us
      e.ecn = ecn;
      e.inflight_bytes = 200'000;
      cc.on_ack(e);
    }
    if (ecn) {
      EXPECT_GE(cc.quick_adapts(), 1u);
      EXPECT_LE(cc.cwnd_bytes(), 2 * kPacket);
    } else {
      EXPECT_EQ(cc.quick_adapts(), 0u);
      EXPECT_GE(cc.cwnd_bytes(), 200'000u);
    }
  }
}

// A timeout takes its packets out of the window; shown spurious, the
// window comes back. Once a packet sent after the timeout is acknowledged
// first, the timeout stands.
TEST(Nscc, ASpuriousTimeoutGivesTheWindowBack) {
  NsccCc cc(nscc(), kPacket);
  const uint32_t before = cc.cwnd_bytes();
  auto expire = [&](TimeNs now, int packets) {
    for (int i = 0; i < packets; ++i) {
      LossEvent l;
      l.now = now;
      l.lost_bytes = kPacket;
      l.kind = LossKind::kTimeout;
      cc.on_loss(l);
    }
  };
  expire(100'000, 20);
  expire(300'000, 10);  // backed off: expired again
  EXPECT_LE(cc.cwnd_bytes(), before - 30 * kPacket);
  cc.on_spurious_timeout();
  EXPECT_EQ(cc.cwnd_bytes(), before);
  EXPECT_EQ(cc.timeouts_undone(), 1u);
  cc.on_spurious_timeout();  // once
  EXPECT_EQ(cc.timeouts_undone(), 1u);
  // A real timeout: a packet sent after it is acknowledged, then an old
  // copy's ACK comes: nothing to undo.
  expire(400'000, 20);
  const uint32_t cut = cc.cwnd_bytes();
  AckEvent e;
  e.now = 420'000;
  e.acked_bytes = kPacket;
  e.rtt_ns = 15'000;  // sent at 405 us
  cc.on_ack(e);
  cc.on_spurious_timeout();
  EXPECT_EQ(cc.timeouts_undone(), 1u);
  EXPECT_LT(cc.cwnd_bytes(), cut + 2 * kPacket);
}

// A configured base RTT fixes the largest window, unless it is to follow
// the flow's own smallest RTT (a flow nearer than the network's base RTT,
// as htsim has it).
TEST(Nscc, TheLargestWindowFollowsTheMeasuredRttOnlyWhenAsked) {
  for (bool follow : {false, true}) {
    CcConfig c = nscc();
    c.max_window_from_measured_rtt = follow;
    NsccCc cc(c, kPacket);
    AckEvent e;
    e.now = 10'000;
    e.acked_bytes = kPacket;
    e.rtt_ns = kRtt / 3;  // a near peer: 4 us
    cc.on_ack(e);
    EXPECT_EQ(cc.base_rtt_ns(), kRtt / 3);
    EXPECT_DOUBLE_EQ(cc.target_delay_ns(), 9'000);  // the scale stays the network's
    EXPECT_DOUBLE_EQ(cc.max_window(), follow ? 225'000.0 / 3 : 225'000.0) << follow;
    EXPECT_LE(cc.cwnd_bytes(), cc.max_window());
  }
}

TEST(Nscc, ATrimOutsideQuickAdaptGivesUpThePacket) {
  NsccCc cc(nscc(), kPacket);
  feed(cc, 0, 2, 5'000, false);  // plenty got through: no QuickAdapt
  const uint32_t before = cc.cwnd_bytes();
  LossEvent trim;
  trim.now = 30'000;
  trim.lost_bytes = kPacket;
  trim.kind = LossKind::kTrimmed;
  cc.on_loss(trim);
  EXPECT_EQ(cc.quick_adapts(), 0u);
  EXPECT_EQ(cc.cwnd_bytes(), before - kPacket);
  // A loss inferred on a path alone is no congestion signal.
  LossEvent lost = trim;
  lost.kind = LossKind::kInferred;
  cc.on_loss(lost);
  EXPECT_EQ(cc.cwnd_bytes(), before - kPacket);
}

// `n` packets lost one after another, `every` ns apart, as `kind`; returns
// the time of the last.
template <typename Cc>
TimeNs lose_packets(Cc& cc, LossKind kind, int n, TimeNs every) {
  LossEvent e;
  e.lost_bytes = kPacket;
  e.kind = kind;
  for (int i = 0; i < n; ++i) {
    e.now += every;
    cc.on_loss(e);
  }
  return e.now;
}

// A 127:1 incast's fair share is under a packet per RTT: a window of at
// least a packet gave senders near the receiver (shorter RTTs) several
// times the share of far ones (Jain .91). Below a packet the window is a
// rate: one packet every RTT x packet / window.
TEST(Nscc, BelowAPacketTheWindowIsPaced) {
  CongestionControl cc(nscc(), kPacket);
  EXPECT_EQ(cc.pacing_rate_bps(), 0u);  // a window, not a rate
  const TimeNs end = lose_packets(cc, LossKind::kTrimmed, 200, 1'000);
  ASSERT_NE(cc.nscc(), nullptr);
  const NsccCc& n = *cc.nscc();
  EXPECT_EQ(cc.cwnd_bytes(), kPacket / 8);  // the floor: an eighth of a packet
  const double rtt = static_cast<double>(n.base_rtt_ns()) + n.avg_delay_ns();
  EXPECT_NEAR(static_cast<double>(cc.pacing_rate_bps()), (kPacket / 8) * 8e9 / rtt, 1e6);
  // An unmarked RTT with no queue gives the window back: unpaced again.
  AckEvent e;
  e.now = end;
  for (int i = 0; i < 400 && cc.pacing_rate_bps() != 0; ++i) {
    e.now += kRtt;
    e.acked_bytes = kPacket;
    e.acked_packets = 1;
    e.rtt_ns = kRtt;
    cc.on_ack(e);
  }
  EXPECT_GE(cc.cwnd_bytes(), kPacket);
  EXPECT_EQ(cc.pacing_rate_bps(), 0u);
}

// Timeouts say nothing of a queue's share: they take the window down to a
// packet, not below (a blackholed path's timeouts paced the flow that
// survived it down to an eighth of a packet per RTT: 2.06 -> 2.21 s).
TEST(Nscc, TimeoutsLeaveAtLeastAPacket) {
  NsccCc cc(nscc(), kPacket);
  lose_packets(cc, LossKind::kTimeout, 200, 1'000'000);
  EXPECT_EQ(cc.cwnd_bytes(), kPacket);
  EXPECT_EQ(cc.rate_bps(), 0u);
}

TEST(Nscc, FastIncreaseAfterAWindowWithNoQueue) {
  NsccCc cc(nscc(0, 40'000), kPacket);
  feed(cc, 0, 1, 0, false);
  EXPECT_EQ(cc.fast_increases(), 0u);
  const uint32_t before = cc.cwnd_bytes();
  feed(cc, 20'000, 3, 0, false);  // no queueing delay at all
  EXPECT_EQ(cc.fast_increases(), 1u);
  // 0.25 a per acked byte: by the third RTT, far more than proportional
  // increase alone would give (about 4 MSS a b per RTT).
  EXPECT_GT(cc.cwnd_bytes(), before + 3 * 4 * 4096);
  EXPECT_LE(cc.cwnd_bytes(), 225'000u);
}

TEST(CongestionControl, DispatchesToTheConfiguredAlgorithm) {
  CcConfig fixed;
  fixed.window_bytes = 77'777;
  fixed.pacing_rate_bps = 5'000'000'000;
  CongestionControl f(fixed, kPacket);
  EXPECT_EQ(f.algorithm(), CcAlgorithm::kFixedWindow);
  EXPECT_EQ(f.cwnd_bytes(), 77'777u);
  EXPECT_EQ(f.pacing_rate_bps(), 5'000'000'000u);
  EXPECT_EQ(f.nscc(), nullptr);
  LossEvent trim;
  trim.kind = LossKind::kTrimmed;
  trim.lost_bytes = kPacket;
  f.on_loss(trim);
  EXPECT_EQ(f.cwnd_bytes(), 77'777u);  // fixed

  CongestionControl n(nscc(), kPacket);
  EXPECT_EQ(n.algorithm(), CcAlgorithm::kNscc);
  ASSERT_NE(n.nscc(), nullptr);
  EXPECT_EQ(n.cwnd_bytes(), 225'000u);
  trim.now = 1'000;
  n.on_loss(trim);
  EXPECT_EQ(n.cwnd_bytes(), 225'000u - kPacket);  // the wrapper's copy follows
}

// --- DCQCN --------------------------------------------------------------

CcConfig dcqcn() {
  CcConfig c;
  c.algorithm = CcAlgorithm::kDcqcn;
  c.link_bps = 100'000'000'000;
  return c;
}

AckEvent ack_at(TimeNs now, uint32_t bytes = 0) {
  AckEvent e;
  e.now = now;
  e.acked_bytes = bytes;
  return e;
}

TEST(Dcqcn, StartsAtLineRateAndCutsByHalfAlphaOnACnp) {
  DcqcnCc cc(dcqcn());
  EXPECT_EQ(cc.rate_bps(), 100'000'000'000u);
  cc.on_ack(ack_at(0));
  cc.on_cnp(1'000);  // alpha starts at 1: the rate halves
  EXPECT_EQ(cc.rate_bps(), 50'000'000'000u);
  EXPECT_DOUBLE_EQ(cc.target_rate_bps(), 100e9);
  EXPECT_DOUBLE_EQ(cc.alpha(), 1.0);  // (1 - g) + g
  // A second CNP at once: cut by alpha / 2 again.
  cc.on_cnp(2'000);
  EXPECT_EQ(cc.rate_bps(), 25'000'000'000u);
  EXPECT_DOUBLE_EQ(cc.target_rate_bps(), 50e9);
  EXPECT_EQ(cc.cnps(), 2u);
}

TEST(Dcqcn, AlphaDecaysEveryPeriodWithoutACnp) {
  const CcConfig c = dcqcn();
  DcqcnCc cc(c);
  cc.on_ack(ack_at(0));
  cc.on_cnp(0);
  // 10 alpha periods later (and no CNP): alpha = (1 - g)^10.
  cc.on_ack(ack_at(10 * c.dcqcn.alpha_timer_ns));
  EXPECT_NEAR(cc.alpha(), std::pow(1 - c.dcqcn.g, 10), 1e-12);
  // The next cut is smaller: by alpha / 2.
  const double rate = static_cast<double>(cc.rate_bps());
  const double alpha = cc.alpha();
  cc.on_cnp(10 * c.dcqcn.alpha_timer_ns + 1);
  EXPECT_NEAR(static_cast<double>(cc.rate_bps()), rate * (1 - alpha / 2), rate * 1e-9);
}

TEST(Dcqcn, RecoversFastThenAdditivelyThenHyperTowardsLineRate) {
  const CcConfig c = dcqcn();
  DcqcnCc cc(c);
  cc.on_ack(ack_at(0));
  cc.on_cnp(0);  // RC 50, RT 100 Gb/s
  // Fast recovery: each timer period halves the distance to the target.
  TimeNs now = 0;
  double gap = 50e9;
  for (uint32_t i = 1; i <= c.dcqcn.fast_recovery_stages; ++i) {
    now += c.dcqcn.rate_timer_ns;
    cc.on_ack(ack_at(now));
    gap /= 2;
    EXPECT_EQ(cc.timer_stage(), i);
    EXPECT_DOUBLE_EQ(cc.target_rate_bps(), 100e9);
    EXPECT_NEAR(static_cast<double>(cc.rate_bps()), 100e9 - gap, 1);
  }
  // Past F timer stages: the target moves up by R_AI, but never past the link.
  now += c.dcqcn.rate_timer_ns;
  cc.on_ack(ack_at(now));
  EXPECT_DOUBLE_EQ(cc.target_rate_bps(), 100e9);
  // From a lower start the additive step shows: cut twice, recover F stages.
  DcqcnCc low(c);
  low.on_ack(ack_at(0));
  low.on_cnp(0);
  low.on_cnp(0);  // RC 25, RT 50 Gb/s
  now = 0;
  for (uint32_t i = 0; i <= c.dcqcn.fast_recovery_stages; ++i) {
    now += c.dcqcn.rate_timer_ns;
    low.on_ack(ack_at(now));
  }
  const double rai = 100e9 * c.dcqcn.rai_fraction;
  EXPECT_NEAR(low.target_rate_bps(), 50e9 + rai, 1);
  // Bytes acknowledged are not the byte counter's (the paper counts bytes
  // sent): no stage.
  low.on_ack(ack_at(now, static_cast<uint32_t>(3 * c.dcqcn.byte_counter)));
  EXPECT_EQ(low.byte_stage(), 0u);
  // Byte-counter stages from bytes sent: past F of both, hyper increase
  // (i x R_HAI).
  for (uint32_t i = 0; i <= c.dcqcn.fast_recovery_stages; ++i) {
    low.on_sent(static_cast<uint32_t>(c.dcqcn.byte_counter), now);
  }
  EXPECT_EQ(low.byte_stage(), c.dcqcn.fast_recovery_stages + 1);
  const double before = low.target_rate_bps();
  now += c.dcqcn.rate_timer_ns;
  low.on_ack(ack_at(now));
  EXPECT_NEAR(low.target_rate_bps() - before, rai * c.dcqcn.hai_factor, 1);  // i = 1
}

// A software host descheduled for milliseconds must not come back at line
// rate on the timers it slept through; a sender paced slowly by its own
// rate keeps every increase.
TEST(Dcqcn, AGapThePacingDoesNotExplainBringsNoIncreases) {
  const CcConfig c = dcqcn();
  DcqcnCc cc(c);
  cc.on_ack(ack_at(0));
  cc.on_cnp(0);  // RC 50, RT 100 Gb/s
  cc.on_sent(4096, 10);
  cc.on_sent(4096, 10 + 100 * c.dcqcn.rate_timer_ns);  // 100 periods later
  EXPECT_EQ(cc.gaps_skipped(), 1u);
  EXPECT_EQ(cc.timer_stage(), 4u);  // four periods' catch-up, not 100
  EXPECT_LE(cc.rate_bps(), static_cast<uint64_t>(100e9 - 50e9 / 16) + 1);
  // Cut to its floor (10 Mb/s), a 4 KiB frame every 3.3 ms (65 periods):
  // each gap is the pacing's, and counts in full.
  DcqcnCc slow(c);
  slow.on_ack(ack_at(0));
  for (int i = 0; i < 200; ++i) slow.on_cnp(0);
  ASSERT_LT(slow.rate_bps(), 11'000'000u);
  TimeNs now = 0;
  slow.on_sent(4096, now);
  now += 3'000'000;
  slow.on_sent(4096, now);
  EXPECT_EQ(slow.gaps_skipped(), 0u);
  EXPECT_EQ(slow.timer_stage(), 3'000'000 / c.dcqcn.rate_timer_ns);
}

TEST(Dcqcn, NeverFallsBelowItsFloorAndOnlyDcqcnAnswersCnps) {
  DcqcnCc cc(dcqcn());
  cc.on_ack(ack_at(0));
  for (int i = 0; i < 200; ++i) cc.on_cnp(static_cast<TimeNs>(i));
  EXPECT_GE(cc.rate_bps(), 10'000'000u);  // a ten-thousandth of the link
  CongestionControl w(dcqcn(), kPacket);
  EXPECT_EQ(w.pacing_rate_bps(), 100'000'000'000u);
  w.on_ack(ack_at(0));
  w.on_cnp(10);
  EXPECT_EQ(w.pacing_rate_bps(), 50'000'000'000u);
  CongestionControl n(nscc(), kPacket);
  const uint32_t cwnd = n.cwnd_bytes();
  n.on_cnp(10);  // ignored
  EXPECT_EQ(n.cwnd_bytes(), cwnd);
}

// The registry names each algorithm, and CongestionControl runs the one
// a configuration numbers (a number no algorithm has: the fixed window).
TEST(CcRegistry, EachAlgorithmIsFoundByItsNameAndRun) {
  EXPECT_EQ(cc_algorithm_named("fixed"), CcAlgorithm::kFixedWindow);
  EXPECT_EQ(cc_algorithm_named("nscc"), CcAlgorithm::kNscc);
  EXPECT_EQ(cc_algorithm_named("dcqcn"), CcAlgorithm::kDcqcn);
  EXPECT_EQ(cc_algorithm_named("NSCC"), std::nullopt);
  EXPECT_EQ(cc_algorithm_name(static_cast<CcAlgorithm>(kCcAlgorithmCount)), "");
  CcConfig c;
  c.base_rtt_ns = 10'000;
  for (size_t i = 0; i < kCcAlgorithmCount; ++i) {
    c.algorithm = static_cast<CcAlgorithm>(i);
    const CongestionControl cc(c, 4160);
    EXPECT_EQ(cc.algorithm(), c.algorithm);
    EXPECT_EQ(cc.nscc() != nullptr, c.algorithm == CcAlgorithm::kNscc);
    EXPECT_EQ(cc.dcqcn() != nullptr, c.algorithm == CcAlgorithm::kDcqcn);
  }
  c.algorithm = static_cast<CcAlgorithm>(kCcAlgorithmCount);
  EXPECT_EQ(CongestionControl(c, 4160).algorithm(), CcAlgorithm::kFixedWindow);
}

}  // namespace
}  // namespace braid
