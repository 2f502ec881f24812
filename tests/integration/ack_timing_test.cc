// When ACKs go and how the sender reads their timing: a packet that closes
// a gap is acknowledged at once, the tail-loss probe waits for an ACK the
// peer's engine may hold for its application's answer, and a probe of a
// skipped path is judged on its path's delay, not on the receiver's
// coalescing. The test moves every frame (DirectPair) and owns the clock.
#include <algorithm>

#include "direct_pair.h"

namespace braid::test {
namespace {

// A message one byte longer than a packet: its short last packet may
// overtake the full one (spraying, or a shorter serialisation). The full
// one closes the gap and completes the message: its ACK goes at once, not
// after the coalescing timer.
TEST(AckTiming, APacketThatClosesAGapIsAcknowledgedAtOnce) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> src(1025, 3), dst(1025, 0);
  const std::vector<Frame> sent = p.post_write(p.qa, p.a, p.b, src.data(), dst.data(), 1025);
  ASSERT_EQ(sent.size(), 2u);
  p.deliver(p.b, {sent[1]});
  p.deliver(p.a, p.drain(p.b));  // out of order: its SACK goes at once
  p.deliver(p.b, {sent[0]});
  const std::vector<Frame> acks = p.drain(p.b);  // no time has passed
  ASSERT_EQ(acks.size(), 1u);
  p.deliver(p.a, acks);
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, src);
}

// The peer's engine holds an ACK asked for at once up to 30 us, so that it
// leaves with the application's answer. With a round trip of 2 us the probe
// would otherwise fire first and resend what arrived.
TEST(AckTiming, TheTailProbeWaitsForAnAckThePeerHoldsForItsAnswer) {
  ConnectionConfig c;
  c.peer_ack_hold_ns = 30'000;
  DirectPair p(c);
  std::vector<uint8_t> src(4096, 5), dst(4096, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 4096, dst.data(), key)),
            PostError::kOk);
  p.settle();
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  ASSERT_GT(p.qa->srtt(), 0u);
  ASSERT_LT(p.qa->srtt(), 5'000u);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kWrite, src.data(), 4096, dst.data(), key)),
            PostError::kOk);
  // b holds its ACK 25 us; whatever a sends meanwhile reaches b.
  for (int us = 0; us < 25; ++us) {
    p.deliver(p.b, p.drain(p.a));
    p.now += 1'000;
    p.a.advance(p.now);
    p.b.advance(p.now);
  }
  p.settle();
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  EXPECT_EQ(p.qa->stats().tail_probes, 0u);
  EXPECT_EQ(p.qb->stats().duplicates, 0u);
}

// A path far slower than the others is skipped; when it heals, the probe
// sent on it must revive it though the receiver coalesces ACKs (8 packets
// or 10 us): the probe asks for its own ACK, whose service time takes the
// receiver's hold out of the delay it is judged on.
TEST(AckTiming, AHealedSkippedPathIsRevivedByItsProbeDespiteCoalescedAcks) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.entropy.count = 4;
  c.entropy.policy = PathPolicy::kBitmap;
  c.entropy.probe_after_ns = 10'000;
  c.cc.pacing_rate_bps = 4'000'000'000;  // a 1 KiB packet every 2.2 us
  DirectPair p(c);
  std::vector<uint8_t> src(1 << 20, 1), dst(1 << 20, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  const uint16_t slow = p.qa->paths().entropy(1);
  TimeNs extra = 12'000;  // the slow path's added delay, each way a -> b
  std::vector<std::pair<TimeNs, Frame>> held;
  uint64_t probes = 0;  // frames on the slow path while it is set aside
  // One round of 1 us: frames on the slow path wait `extra` before b.
  const auto round = [&] {
    std::vector<Frame> ab = p.drain(p.a), ba = p.drain(p.b);
    p.now += 1'000;
    for (Frame& f : ab) {
      if (entropy_of(f) == slow && p.qa->paths().health(1).state != PathState::kGood) ++probes;
      if (entropy_of(f) == slow && extra > 0) held.emplace_back(p.now + extra, std::move(f));
    }
    std::erase_if(ab, [](const Frame& f) { return f.empty(); });
    for (auto it = held.begin(); it != held.end();) {
      if (it->first <= p.now) {
        ab.push_back(std::move(it->second));
        it = held.erase(it);
      } else {
        ++it;
      }
    }
    p.deliver(p.b, ab);
    p.deliver(p.a, ba);
    p.a.advance(p.now);
    p.b.advance(p.now);
  };
  // Ping-pong of one-packet WRITEs (each ACKed at once, no overtaking):
  // every path gets RTT samples and the slow one is skipped.
  uint64_t id = 1;
  for (int i = 0; i < 400 && p.qa->paths().health(1).state == PathState::kGood; ++i) {
    ASSERT_EQ(p.qa->post_send(request(id++, Opcode::kWrite, src.data(), 512, dst.data(), key)),
              PostError::kOk);
    for (int r = 0; r < 200 && p.a_scq.size() == 0; ++r) round();
    ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  }
  ASSERT_EQ(p.qa->paths().health(1).state, PathState::kSkip);
  EXPECT_EQ(p.qa->stats().lost_inferred + p.qa->stats().lost_timeout, 0u);
  // Healed. A paced stream whose ACKs b coalesces (only the last packet
  // of each batch of 64 asks for one at once).
  extra = 0;
  const uint64_t probes_before = probes;
  int batches = 0;
  for (; batches < 20 && p.qa->paths().health(1).state != PathState::kGood; ++batches) {
    for (int k = 0; k < 64; ++k) {
      ASSERT_EQ(p.qa->post_send(request(id++, Opcode::kWrite, src.data() + 1024 * k, 1024,
                                        dst.data() + 1024 * k, key)),
                PostError::kOk);
    }
    for (int r = 0; r < 2000 && p.a_scq.size() < 64; ++r) round();
    ASSERT_EQ(poll_all(p.a_scq).size(), 64u);
  }
  EXPECT_EQ(p.qa->paths().health(1).state, PathState::kGood);
  // Its first probe revived it.
  EXPECT_EQ(batches, 1);
  EXPECT_EQ(probes - probes_before, 1u);
}

}  // namespace
}  // namespace braid::test
