// Loss recovery beyond the reach of one 64-PSN SACK bitmap: a burst loss of
// any length inside the window is inferred from the ACKs of the packets that
// follow it (the receiver rotates its SACK block over the holes), never left
// to the retransmission timer.
#include "direct_pair.h"
#include "workload.h"

namespace braid::test {
namespace {

class BurstLoss : public ::testing::TestWithParam<uint32_t> {};

TEST_P(BurstLoss, IsInferredWithoutATimeoutWhileLaterPacketsArrive) {
  const uint32_t burst = GetParam();
  SimPairOptions o;
  // Paths of 200-260 us: a recovery that takes one round trip per 64
  // packets outlasts the 2 ms RTO for the longer bursts.
  o.link = four_path_link();
  for (size_t i = 0; i < o.link.paths.size(); ++i) o.link.paths[i].delay_ns = 200'000 + 20'000 * i;
  o.conn.mtu = 1024;
  // New data keeps flowing while the burst is recovered (the congestion
  // window, not the message, limits what is in flight): most ACKs name a
  // new packet far above the holes.
  o.conn.window_packets = 4096;
  o.conn.cc.window_bytes = 1u << 20;
  SimPair p(o);
  constexpr uint32_t kSize = 16u << 20;  // 16384 packets
  std::vector<uint8_t> src(kSize), dst(kSize, 0);
  fill_pattern(src.data(), src.size(), burst);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), kSize, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), kSize, dst.data(), rkey)),
            PostError::kOk);
  ASSERT_TRUE(p.run_until([&] { return p.qb->stats().data_received >= 300; }));
  p.net.drop_burst(p.ha, p.hb, 0, burst);  // the next `burst` data packets
  ASSERT_TRUE(p.run_until([&] { return p.a_scq.size() > 0; }));
  WorkCompletion wc;
  ASSERT_EQ(p.a_scq.poll(&wc, 1), 1u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(p.net.link_stats(p.ha, p.hb).dropped_loss, burst);
  const ConnectionStats& s = p.qa->stats();
  EXPECT_EQ(s.timeouts, 0u) << "inferred " << s.lost_inferred << " acks " << p.qb->stats().acks_sent
                            << " recv " << s.acks_received;
  EXPECT_EQ(s.lost_timeout, 0u);
  EXPECT_EQ(s.lost_inferred, burst);
  EXPECT_EQ(s.retransmits, burst);
  EXPECT_TRUE(src == dst);
}

// The same where each side receives and answers in bursts of 32 frames, as
// an engine's poll does: one ACK answers a burst and names its newest
// packet, far above the holes. A round trip is two rounds (200 us), the RTO
// ten.
TEST_P(BurstLoss, IsInferredWithinARoundTripWhenAcksAnswerBursts) {
  const uint32_t burst = GetParam();
  ConnectionConfig c;
  c.mtu = 1024;
  c.window_packets = 4096;
  c.cc.window_bytes = 2u << 20;  // ~1900 packets a round trip
  DirectPair p(c);
  constexpr uint32_t kSize = 8u << 20;
  std::vector<uint8_t> src(kSize), dst(kSize, 0);
  fill_pattern(src.data(), src.size(), burst + 1);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), kSize, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), kSize, dst.data(), rkey)),
            PostError::kOk);
  constexpr TimeNs kRound = 250'000;  // a round trip is two
  uint64_t data_frames = 0;
  TimeNs burst_at = 0, all_inferred_at = 0;
  const auto drop = [&](const Frame& f, bool a_to_b) {
    if (!a_to_b || f.size() < 500) return false;
    ++data_frames;
    const bool lost = data_frames > 1000 && data_frames <= 1000 + burst;
    if (lost && burst_at == 0) burst_at = p.now;
    return lost;
  };
  const ConnectionStats& s = p.qa->stats();
  ASSERT_TRUE(p.run_for(
      2'000'000'000, kRound,
      [&] {
        if (all_inferred_at == 0 && s.lost_inferred >= burst) all_inferred_at = p.now;
        return p.a_scq.size() > 0;
      },
      drop));
  WorkCompletion wc;
  ASSERT_EQ(p.a_scq.poll(&wc, 1), 1u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(s.timeouts, 0u);
  EXPECT_EQ(s.lost_timeout, 0u);
  EXPECT_EQ(s.lost_inferred, burst);
  // Every lost packet is known lost from the ACKs of the first round trip
  // after the burst (virtual time: the rounds are the test's own clock).
  ASSERT_NE(all_inferred_at, 0u);
  EXPECT_LE(all_inferred_at - burst_at, 2 * 2 * kRound)
      << "declared lost over " << (all_inferred_at - burst_at) / (2 * kRound) << " round trips";
  EXPECT_TRUE(src == dst);
}

INSTANTIATE_TEST_SUITE_P(Lengths, BurstLoss, ::testing::Values(1u, 64u, 200u, 700u),
                         [](const auto& info) { return std::to_string(info.param); });

// The last packets of a message lost: nothing sent after them can show it.
// A probe two RTTs after the last new packet resends them, long before the
// RTO, and without spending the retry budget.
// The RTO fires while the packets are only late (a queue grew faster than
// srtt + 4 rttvar followed). The ACK of a first copy shows it: what the
// timeout queued and has not resent goes back in flight (only the packets
// really lost are resent), and the RTO stays where it backed off to.
// A WRITE of 4 packets of which the first has arrived and been ACKed; that
// ACK (returned) is still on its way back. The rest is in flight.
std::vector<Frame> first_of_four_acked_late(DirectPair& p, std::vector<Frame>* data,
                                            std::vector<uint8_t>& src, std::vector<uint8_t>& dst) {
  *data = p.post_write(p.qa, p.a, p.b, src.data(), dst.data(), 4000);
  if (data->size() != 4u) return {};
  p.deliver(p.b, {(*data)[0]});
  p.now += 20'000;
  p.b.advance(p.now);
  return p.drain(p.b);
}

TEST(SpuriousTimeout, TheFirstCopysAckStopsTheResendsAndKeepsTheRto) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> src(4000, 3), dst(4000, 0);
  std::vector<Frame> data;
  const std::vector<Frame> ack0 = first_of_four_acked_late(p, &data, src, dst);
  ASSERT_EQ(data.size(), 4u);
  ASSERT_EQ(ack0.size(), 1u);
  const TimeNs rto = p.qa->rto_ns();
  p.now += rto + 1'000;
  p.a.advance(p.now);
  ASSERT_EQ(p.qa->stats().timeouts, 1u);
  const TimeNs backed_off = p.qa->rto_ns();
  EXPECT_GT(backed_off, rto);
  p.deliver(p.a, ack0);  // the first copy's ACK, after the timer
  EXPECT_EQ(p.qa->stats().spurious_timeouts, 1u);
  EXPECT_TRUE(p.drain(p.a).empty());  // nothing resent
  EXPECT_EQ(p.qa->stats().retransmits, 0u);
  p.deliver(p.b, {data[1], data[2], data[3]});  // the rest was only late too
  p.settle();
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(p.qa->stats().retransmits, 0u);
  EXPECT_GE(p.qa->rto_ns(), backed_off - backed_off / 16);  // the floor fades slowly
}

// With NSCC, the window the timeout took comes back with the first copy's
// ACK (it had fallen by the packets the timer declared lost).
TEST(SpuriousTimeout, NsccGetsItsWindowBack) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.cc.algorithm = CcAlgorithm::kNscc;
  c.cc.base_rtt_ns = 10'000;
  c.cc.trimming = false;
  DirectPair p(c);
  const uint32_t before = p.qa->cc().cwnd_bytes();
  std::vector<uint8_t> src(4000, 3), dst(4000, 0);
  std::vector<Frame> data;
  const std::vector<Frame> ack0 = first_of_four_acked_late(p, &data, src, dst);
  ASSERT_EQ(data.size(), 4u);
  ASSERT_EQ(ack0.size(), 1u);
  p.now += p.qa->rto_ns() + 1'000;
  p.a.advance(p.now);
  ASSERT_EQ(p.qa->stats().timeouts, 1u);
  EXPECT_LT(p.qa->cc().cwnd_bytes(), before);
  p.deliver(p.a, ack0);
  EXPECT_EQ(p.qa->stats().spurious_timeouts, 1u);
  EXPECT_GE(p.qa->cc().cwnd_bytes(), before);
  p.deliver(p.b, {data[1], data[2], data[3]});
  p.settle();
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(p.qa->stats().retransmits, 0u);
}

TEST(TailLoss, IsRepairedByAProbeBeforeTheRto) {
  DirectPair p;
  std::vector<uint8_t> src(64 * 1024, 3), dst(64 * 1024);
  const uint32_t key = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 16 * 1024, dst.data(), key)),
            PostError::kOk);
  p.settle();  // an RTT sample: a round is 1 us each way
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  // Four packets; the last two are lost.
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kWrite, src.data(), 16 * 1024, dst.data(), key)),
            PostError::kOk);
  std::vector<Frame> sent = p.drain(p.a);
  ASSERT_EQ(sent.size(), 4u);
  sent.resize(2);
  p.deliver(p.b, sent);
  // Within 20 us (the RTO is 2 ms) the probe has resent both.
  const bool done = p.run_for(20'000, 1'000, [&] { return p.a_scq.size() == 1; });
  EXPECT_TRUE(done);
  EXPECT_EQ(p.qa->stats().tail_probes, 2u);
  EXPECT_EQ(p.qa->stats().timeouts, 0u);
  EXPECT_EQ(p.qa->stats().lost_inferred + p.qa->stats().lost_timeout, 0u);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 16 * 1024, dst.begin()));
}

// A packet alone on a path that is not used again: with REPS, a path that
// lost its packet is not recycled, so no later packet on it can show the
// loss. A packet sent more than an RTT later and acknowledged on another
// path does; round robin relies on its next turn on the same path.
TEST(PathLoss, RepsInfersALossFromALaterPacketOnAnotherPath) {
  for (const PathPolicy policy : {PathPolicy::kReps, PathPolicy::kRoundRobin}) {
    ConnectionConfig c;
    c.entropy.count = 8;
    c.entropy.policy = policy;
    DirectPair p(c);
    std::vector<uint8_t> src(64 * 1024, 7), dst(64 * 1024);
    const uint32_t key =
        p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
    // A first transfer gives an RTT (a round of DirectPair is 1 us each way).
    ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 16 * 1024, dst.data(), key)),
              PostError::kOk);
    p.settle();
    ASSERT_GT(p.qa->rto_ns(), 0u);
    // One packet, lost; 10 us later one more, delivered and acknowledged.
    ASSERT_EQ(p.qa->post_send(request(2, Opcode::kWrite, src.data(), 4096, dst.data(), key)),
              PostError::kOk);
    ASSERT_EQ(p.drain(p.a).size(), 1u);  // dropped
    p.now += 10'000;
    ASSERT_EQ(p.qa->post_send(
                  request(3, Opcode::kWrite, src.data() + 4096, 4096, dst.data() + 4096, key)),
              PostError::kOk);
    p.deliver(p.b, p.drain(p.a));
    p.deliver(p.a, p.drain(p.b));
    if (policy == PathPolicy::kReps) {
      EXPECT_EQ(p.qa->stats().lost_inferred, 1u);
    } else {
      EXPECT_EQ(p.qa->stats().lost_inferred, 0u);  // its next turn on the path would tell
    }
    // Either way everything completes, byte-exact, within 100 us (the RTO is
    // 2 ms): round robin's loss is found by the tail-loss probe.
    EXPECT_TRUE(p.run_for(100'000, 1'000, [&] { return p.a_scq.size() == 3; }));
    EXPECT_EQ(poll_all(p.a_scq).size(), 3u);
    EXPECT_TRUE(std::equal(src.begin(), src.begin() + 16 * 1024, dst.begin()));
    EXPECT_EQ(p.qa->stats().timeouts, 0u);
    EXPECT_EQ(p.qa->stats().tail_probes, policy == PathPolicy::kReps ? 0u : 1u);
  }
}

// One path silently dropping everything (a dead link that keeps its route):
// REPS assumes it bad after a few losses, sends around it and only probes
// it now and then. The transfer completes, byte-exact, without a timeout.
// When the path heals, a probe revives it. Round robin keeps a sixth of its
// packets on the dead path to the end.
TEST(PathLoss, RepsAbandonsASilentlyDeadPathAndRevivesItWhenItHeals) {
  for (const PathPolicy policy : {PathPolicy::kReps, PathPolicy::kRoundRobin}) {
    ConnectionConfig c;
    c.entropy.count = 6;
    c.entropy.policy = policy;
    c.entropy.probe_after_ns = 10'000;
    DirectPair p(c);
    constexpr size_t kSize = 8 << 20;
    std::vector<uint8_t> src(kSize), dst(kSize);
    for (size_t i = 0; i < kSize; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
    const uint32_t key = p.b.memory().register_region(dst.data(), kSize, kAccessRemoteWrite, 0);
    const uint16_t dead = p.qa->paths().entropy(2);
    auto src_port = [](const Frame& f) { return wire::load_be16(f.data() + 34); };
    bool healed = false;
    // Data frames a sends: in all, on the dead path, and on it once assumed bad.
    uint64_t total = 0, on_dead = 0, after_bad = 0;
    auto drop = [&](const Frame& f, bool a_to_b) {
      if (!a_to_b || f.size() < 256) return false;
      ++total;
      if (src_port(f) != dead) return false;
      ++on_dead;
      if (p.qa->paths().health(2).state != PathState::kGood) ++after_bad;
      return !healed;
    };
    ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), kSize, dst.data(), key)),
              PostError::kOk);
    // 1 us rounds; the RTO floor is 2 ms.
    ASSERT_TRUE(p.run_for(
        200'000'000, 1'000, [&] { return p.a_scq.size() == 1; }, drop))
        << "policy " << static_cast<int>(policy);
    const std::vector<WorkCompletion> wcs = poll_all(p.a_scq);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
    EXPECT_TRUE(src == dst);
    if (policy == PathPolicy::kRoundRobin) {
      EXPECT_GT(on_dead * 7, total);  // a sixth, to the end
      continue;
    }
    EXPECT_EQ(p.qa->stats().timeouts, 0u);
    EXPECT_EQ(p.qa->paths().health(2).state, PathState::kAssumedBad);
    // Found out within three windows (256 packets, a sixth of them on the
    // dead path: losses are inferred once packets sent an RTT later come
    // back); after that only probes, at growing intervals.
    EXPECT_LT(on_dead - after_bad, 3u * 256 / 6);
    EXPECT_LT(after_bad, 12u);
    // Healed: a probe is delivered within its (backed-off) interval, at most
    // 64 x 4 RTTs here, and the path is used again.
    healed = true;
    const TimeNs healed_at = p.now;
    for (uint64_t wr = 2; wr < 100 && p.qa->paths().health(2).state != PathState::kGood; ++wr) {
      ASSERT_EQ(p.qa->post_send(request(wr, Opcode::kWrite, src.data(), kSize, dst.data(), key)),
                PostError::kOk);
      ASSERT_TRUE(p.run_for(
          200'000'000, 1'000, [&] { return p.a_scq.size() == 1; }, drop));
      poll_all(p.a_scq);
    }
    EXPECT_EQ(p.qa->paths().health(2).state, PathState::kGood);
    EXPECT_LT(p.now - healed_at, 2'000'000u);
    // More than half its fair share (a sixth) of the next transfer.
    const uint64_t on_dead_before = on_dead, total_before = total;
    ASSERT_EQ(p.qa->post_send(request(100, Opcode::kWrite, src.data(), kSize, dst.data(), key)),
              PostError::kOk);
    ASSERT_TRUE(p.run_for(
        200'000'000, 1'000, [&] { return p.a_scq.size() == 1; }, drop));
    EXPECT_GT((on_dead - on_dead_before) * 12, total - total_before);
    EXPECT_EQ(p.qa->stats().timeouts, 0u);
  }
}

// One path is slower than the others (its frames arrive 3 us after the
// rest of their round): its packets are acknowledged after packets sent
// later on other paths, and its lateness says by how much; the other paths'
// stays 0. (Round robin: every path keeps its share.)
TEST(PathLoss, ASlowPathShowsAsLateness) {
  ConnectionConfig c;
  c.entropy.count = 4;
  c.entropy.policy = PathPolicy::kRoundRobin;
  DirectPair p(c);
  constexpr size_t kSize = 1 << 20;
  std::vector<uint8_t> src(kSize, 3), dst(kSize);
  const uint32_t key = p.b.memory().register_region(dst.data(), kSize, kAccessRemoteWrite, 0);
  const uint16_t slow = p.qa->paths().entropy(1);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), kSize, dst.data(), key)),
            PostError::kOk);
  std::vector<std::pair<TimeNs, Frame>> held;  // (due, frame) on the slow path
  for (int round = 0; round < 100'000 && p.a_scq.size() == 0; ++round) {
    std::vector<Frame> ab = p.drain(p.a), ba = p.drain(p.b);
    p.now += 1'000;
    for (Frame& f : ab) {
      if (entropy_of(f) == slow) held.emplace_back(p.now + 3'000, std::move(f));
    }
    std::erase_if(ab, [](const Frame& f) { return f.empty(); });
    for (auto it = held.begin(); it != held.end() && it->first <= p.now;) {
      ab.push_back(std::move(it->second));
      it = held.erase(it);
    }
    p.deliver(p.b, ab);
    p.deliver(p.a, ba);
    p.a.advance(p.now);
    p.b.advance(p.now);
  }
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  EXPECT_TRUE(src == dst);
  EXPECT_EQ(p.qa->stats().timeouts, 0u);
  const uint32_t late = p.qa->paths().stats(1).late_ns;
  // Its packets are overtaken by those sent up to 2 us later (those whose
  // ACKs are back when its own comes: less than its extra 3 us).
  EXPECT_GT(late, 1'000u);
  EXPECT_LT(late, 3'000u);
  EXPECT_EQ(p.qa->stats().lost_inferred, 0u);
  for (uint8_t i : {0, 2, 3}) EXPECT_EQ(p.qa->paths().stats(i).late_ns, 0u) << int{i};
}

// Everything stalls for longer than the RTO (a peer or host that stopped
// for a while): packets time out on every path at once. That is not the
// paths' fault, and REPS sets none aside (a timeout on one path alone
// still does: PathSet unit tests).
TEST(PathLoss, ATimeoutOnEveryPathAtOnceBlamesNoPath) {
  ConnectionConfig c;
  c.entropy.count = 8;
  c.entropy.policy = PathPolicy::kReps;
  DirectPair p(c);
  constexpr size_t kSize = 1 << 20;
  std::vector<uint8_t> src(kSize, 9), dst(kSize);
  const uint32_t key = p.b.memory().register_region(dst.data(), kSize, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), kSize, dst.data(), key)),
            PostError::kOk);
  const TimeNs stall_end = p.now + 5'000'000;  // the RTO floor is 2 ms
  uint16_t most_bad = 0;
  ASSERT_TRUE(p.run_for(
      100'000'000, 1'000,
      [&] {
        most_bad = std::max(most_bad, p.qa->paths().bad_count());
        return p.a_scq.size() == 1;
      },
      [&](const Frame&, bool) { return p.now < stall_end; }));
  EXPECT_EQ(poll_all(p.a_scq)[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(src == dst);
  EXPECT_GE(p.qa->stats().timeouts, 1u);
  EXPECT_EQ(most_bad, 0);
}

// A link that drops everything in both directions from mid-transfer, as an
// ECMP link blackholed at a switch: seven of sixteen entropies lose their
// data packets, and the ACKs the receiver sends on those entropies are lost
// too. The receiver runs in short slices (a process sharing its core: 30 us
// after 0.3-4 ms), so the whole window often times out at once, on every path,
// packets on good paths with it when all the ACKs that reported them took
// dead entropies. A good path delivered packets sent after them: only the
// dead paths are set aside, and the writes complete byte-exact.
TEST(PathLoss, RepsSurvivesALinkDeadInBothDirectionsBehindASlowReceiver) {
  ConnectionConfig c;
  c.entropy.count = 16;
  c.entropy.policy = PathPolicy::kReps;
  DirectPair p(c);
  constexpr size_t kSize = 4 << 20;
  std::vector<uint8_t> src(kSize), dst(kSize);
  for (size_t i = 0; i < kSize; ++i) src[i] = static_cast<uint8_t>(i * 13 + 5);
  const uint32_t key = p.b.memory().register_region(dst.data(), kSize, kAccessRemoteWrite, 0);
  const std::vector<uint8_t> dead_index = {1, 2, 5, 8, 10, 13, 14};
  std::vector<uint16_t> dead;
  for (uint8_t i : dead_index) {
    dead.push_back(p.qa->paths().entropy(i));
    dead.push_back(p.qb->paths().entropy(i));
  }
  bool blackhole = false;
  auto lost = [&](const Frame& f) {
    return blackhole && std::find(dead.begin(), dead.end(), entropy_of(f)) != dead.end();
  };
  std::vector<Frame> to_b, to_a;  // in flight, or waiting for b to run
  // b wakes for 30 us after gaps of 0.3 to 4 ms (a fixed pseudo-random
  // sequence).
  uint64_t lcg = 12345;
  TimeNs wake_at = 0, sleep_at = 30'000;
  auto run = [&] {
    for (int step = 0; step < 2'000'000 && p.a_scq.size() == 0; ++step) {
      // a's link takes one frame per microsecond.
      Frame f(9216);
      const uint32_t n = p.a.transmit(f.data(), static_cast<uint32_t>(f.size()), p.now);
      f.resize(n);
      if (n > 0 && !lost(f)) to_b.push_back(std::move(f));
      p.deliver(p.a, to_a);
      to_a.clear();
      p.now += 1'000;
      p.a.advance(p.now);
      if (p.now >= sleep_at) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        wake_at = p.now + 300'000 + (lcg >> 33) % 3'700'000;
        sleep_at = wake_at + 30'000;
      }
      if (p.now < wake_at) continue;  // b is not running
      p.b.advance(p.now);
      for (size_t i = 0; i < to_b.size(); i += DirectPair::kBurst) {
        for (size_t k = i; k < std::min(to_b.size(), i + DirectPair::kBurst); ++k) {
          p.b.receive(to_b[k].data(), static_cast<uint32_t>(to_b[k].size()), p.now);
        }
        for (Frame& f : p.drain(p.b)) {
          if (!lost(f)) to_a.push_back(std::move(f));
        }
      }
      to_b.clear();
    }
  };
  for (uint64_t wr = 1; wr <= 3; ++wr) {
    blackhole = wr > 1;
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_EQ(p.qa->post_send(request(wr, Opcode::kWrite, src.data(), kSize, dst.data(), key)),
              PostError::kOk);
    run();
    const std::vector<WorkCompletion> wcs = poll_all(p.a_scq);
    ASSERT_EQ(wcs.size(), 1u) << "write " << wr;
    ASSERT_EQ(wcs[0].status, WcStatus::kSuccess) << "write " << wr;
    EXPECT_TRUE(src == dst);
  }
}

// DCQCN end to end: the receiver answers CE-marked packets with CNPs (CTRL
// packets of Braid's kCnp type), at most one per 50 us; the sender cuts its
// paced rate on each and recovers once the marks stop.
TEST(Dcqcn, CnpsAreRateLimitedAtTheReceiverAndCutTheSendersRate) {
  ConnectionConfig c;
  c.entropy.count = 1;
  c.cc.algorithm = CcAlgorithm::kDcqcn;
  c.cc.link_bps = 100'000'000'000;
  DirectPair p(c);
  constexpr size_t kSize = 8 << 20;
  std::vector<uint8_t> src(kSize), dst(kSize);
  for (size_t i = 0; i < kSize; ++i) src[i] = static_cast<uint8_t>(i * 13);
  const uint32_t key = p.b.memory().register_region(dst.data(), kSize, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), kSize, dst.data(), key)),
            PostError::kOk);
  const TimeNs start = p.now, marks_end = start + 300'000;  // CE on every packet for 300 us
  uint64_t ctrl_frames = 0, lowest = ~uint64_t{0};
  for (int round = 0; round < 200'000 && p.a_scq.size() == 0; ++round) {
    std::vector<Frame> ab = p.drain(p.a), ba = p.drain(p.b);
    if (p.now < marks_end) {
      for (Frame& f : ab) {
        if (f.size() > 256) set_ecn(f, wire::kEcnCe);
      }
    }
    for (const Frame& f : ba) {
      if (f.size() >= wire::kL2L4Size + 1 &&
          (f[wire::kL2L4Size] >> 3) == static_cast<uint8_t>(wire::PdsType::kCtrl)) {
        ++ctrl_frames;
      }
    }
    p.now += 1'000;
    p.deliver(p.b, ab);
    p.deliver(p.a, ba);
    p.a.advance(p.now);
    p.b.advance(p.now);
    lowest = std::min(lowest, p.qa->cc().pacing_rate_bps());
  }
  ASSERT_EQ(p.a_scq.size(), 1u);
  EXPECT_EQ(poll_all(p.a_scq)[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(src == dst);
  const uint64_t sent = p.qb->stats().cnps_sent;
  // One per 50 us while the marks last (300 us): 6 or 7.
  EXPECT_GE(sent, 6u);
  EXPECT_LE(sent, 7u);
  EXPECT_EQ(ctrl_frames, sent);
  EXPECT_EQ(p.qa->stats().cnps_received, sent);
  EXPECT_EQ(p.qa->cc().dcqcn()->cnps(), sent);
  EXPECT_LT(lowest, 100'000'000'000u / 8);  // six cuts with alpha near 1
  // The marks stopped long before the end: the rate climbed back.
  EXPECT_GT(p.qa->cc().pacing_rate_bps(), 2 * lowest);
}

// The notification point answers CE whatever its own algorithm: a DCQCN
// sender whose receiver runs NSCC (or a fixed window) still gets CNPs and
// cuts its rate.
TEST(Dcqcn, AReceiverRunningAnotherAlgorithmStillAnswersCeWithCnps) {
  for (const CcAlgorithm receiver : {CcAlgorithm::kNscc, CcAlgorithm::kFixedWindow}) {
    ConnectionConfig ca, cb;
    ca.entropy.count = cb.entropy.count = 1;
    ca.cc.algorithm = CcAlgorithm::kDcqcn;
    ca.cc.link_bps = 100'000'000'000;
    cb.cc.algorithm = receiver;
    DirectPair p;
    auto [qa, qb] = p.add_pair(ca, cb, 3, 4);
    constexpr size_t kSize = 1 << 20;
    std::vector<uint8_t> src(kSize, 4), dst(kSize);
    const uint32_t key = p.b.memory().register_region(dst.data(), kSize, kAccessRemoteWrite, 0);
    ASSERT_EQ(qa->post_send(request(1, Opcode::kWrite, src.data(), kSize, dst.data(), key)),
              PostError::kOk);
    uint64_t lowest = ~uint64_t{0};
    for (int round = 0; round < 100'000 && p.a_scq.size() == 0; ++round) {
      std::vector<Frame> ab = p.drain(p.a), ba = p.drain(p.b);
      for (Frame& f : ab) {
        if (f.size() > 256) set_ecn(f, wire::kEcnCe);
      }
      p.now += 1'000;
      p.deliver(p.b, ab);
      p.deliver(p.a, ba);
      p.a.advance(p.now);
      p.b.advance(p.now);
      lowest = std::min(lowest, qa->cc().pacing_rate_bps());
    }
    ASSERT_EQ(p.a_scq.size(), 1u);
    EXPECT_EQ(poll_all(p.a_scq)[0].status, WcStatus::kSuccess);
    EXPECT_GT(qb->stats().cnps_sent, 0u) << static_cast<int>(receiver);
    EXPECT_EQ(qa->stats().cnps_received, qb->stats().cnps_sent);
    EXPECT_LT(lowest, 100'000'000'000u / 2);
  }
}

// An ACK whose service time (how long its packet waited at the receiver)
// is as long as the whole round trip gives no RTT sample: it cannot be
// right, and a sample near zero would stand as the base RTT for good.
TEST(AckServiceTime, ThatCannotBeRightGivesNoRttSample) {
  DirectPair p;
  std::vector<uint8_t> src(4096, 1), dst(4096);
  const uint32_t key = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  const auto samples = [&] {
    uint32_t n = 0;
    for (uint16_t e = 0; e < p.qa->paths().count(); ++e) {
      n += p.qa->paths().stats(static_cast<uint8_t>(e)).rtt_samples;
    }
    return n;
  };
  for (const bool bogus : {true, false}) {
    ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 4096, dst.data(), key)),
              PostError::kOk);
    // 2 us each way, 5 us at the receiver before its ACK leaves.
    std::vector<Frame> data = p.drain(p.a);
    p.now += 2'000;
    p.deliver(p.b, data);
    p.now += 5'000;
    std::vector<Frame> acks = p.drain(p.b);
    ASSERT_EQ(acks.size(), 1u);
    if (bogus) wire::store_be16(acks[0].data() + wire::kL2L4Size + 24, 0xffff);  // ~0.5 ms
    const uint32_t before = samples();
    p.now += 2'000;
    p.deliver(p.a, acks);
    EXPECT_EQ(samples(), before + (bogus ? 0u : 1u)) << (bogus ? "bogus" : "plain");
    EXPECT_EQ(poll_all(p.a_scq).size(), 1u);  // acknowledged either way
  }
}

// A TRIMMED NACK names the copy it is about by echoing its entropy. With
// three copies of a packet out, a NACK of the second says nothing about the
// third; the third's own NACK repairs it at once, however soon it comes back
// (its trimmed header skipped the queues the data waited in). Taking the
// time since the latest copy as the guide, as before, left an incast's
// packets to the backed-off RTO.
TEST(TrimNack, NamesTheCopyItIsAbout) {
  constexpr uint8_t kTrimDscp = 11;
  DirectPair p(ConnectionConfig{}, 1024, false, AuthMode::kOff, kTrimDscp);
  const auto data_of = [](std::vector<Frame> fs) {
    std::erase_if(fs, [](const Frame& f) {
      return parse(f).pro.type != static_cast<uint8_t>(wire::PdsType::kRudReq);
    });
    return fs;
  };
  std::vector<uint8_t> src(1000, 7), dst(1000, 0);
  p.deliver(p.b, p.post_write(p.qa, p.a, p.b, src.data(), dst.data(), 1000));
  p.settle();  // an RTT sample
  ASSERT_GT(p.qa->min_rtt(), 0);
  // A second packet: its first copy and a retransmission are lost, a third
  // copy goes out.
  ASSERT_EQ(data_of(p.post_write(p.qa, p.a, p.b, src.data(), dst.data(), 1000)).size(), 1u);
  std::vector<Frame> copies;
  for (int i = 0; i < 2; ++i) {
    p.now += p.qa->rto_ns();
    p.a.advance(p.now);
    auto sent = data_of(p.drain(p.a));
    ASSERT_EQ(sent.size(), 1u);
    copies.push_back(sent[0]);
  }
  ASSERT_NE(entropy_of(copies[0]), entropy_of(copies[1]));
  const auto nack_of = [&](const Frame& copy) {
    p.deliver(p.b, {trimmed(copy, kTrimDscp)});
    auto answer = p.drain(p.b);
    EXPECT_EQ(answer.size(), 1u);
    const wire::ParsedPacket n = parse(answer.at(0));
    EXPECT_EQ(n.pro.type, static_cast<uint8_t>(wire::PdsType::kNack));
    EXPECT_EQ(n.nack.nack_code, static_cast<uint8_t>(wire::NackCode::kTrimmed));
    EXPECT_EQ(n.nack.payload, wire::kNackEchoesEntropy | entropy_of(copy));
    return answer;
  };
  p.deliver(p.a, nack_of(copies[0]));
  EXPECT_TRUE(data_of(p.drain(p.a)).empty()) << "a NACK of the second copy resent the third";
  p.deliver(p.a, nack_of(copies[1]));
  const auto again = data_of(p.drain(p.a));
  ASSERT_EQ(again.size(), 1u) << "the third copy's NACK was not acted on";
  EXPECT_EQ(parse(again[0]).req.psn, parse(copies[1]).req.psn);
  EXPECT_EQ(p.qa->stats().lost_nacked, 1u);
  p.deliver(p.b, again);
  p.settle();
  WorkCompletion wc[2];
  ASSERT_EQ(p.a_scq.poll(wc, 2), 2u);
  EXPECT_EQ(wc[1].status, WcStatus::kSuccess);
  EXPECT_TRUE(src == dst);
}

}  // namespace
}  // namespace braid::test
