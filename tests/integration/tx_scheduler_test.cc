// The endpoint's transmit scheduler: connections queue themselves when they
// have something to send, ACKs and NACKs go before data, connections with
// data take turns a frame each, pacing spaces a connection's data at its
// rate, connections to one peer share its window and pacing, and a
// connection that goes away leaves nothing behind. Virtual time.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "direct_pair.h"

namespace braid::test {
namespace {

struct Sent {
  uint8_t type;   // PDS type
  uint16_t from;  // the sending connection (spdcid)
};

Sent what(const Frame& f) {
  wire::ParsedPacket pkt;
  EXPECT_EQ(wire::decode_frame(f.data(), f.size(), wire::DecodeOptions{}, &pkt),
            wire::DropReason::kNone);
  const auto type = static_cast<wire::PdsType>(pkt.pro.type);
  const bool ack = type == wire::PdsType::kAck || type == wire::PdsType::kAckCc;
  return Sent{pkt.pro.type, ack ? pkt.ack.spdcid : pkt.req.spdcid};
}

// Data frames a connection sends in a row (EndpointConfig::data_quantum).
constexpr uint32_t kTurn = EndpointConfig{}.data_quantum;
static_assert(kTurn % 4 == 0 && kTurn >= 4, "the turn tests split turns in quarters");

bool is_ack(const Sent& s) {
  return s.type == static_cast<uint8_t>(wire::PdsType::kAckCc);
}

// Pairs a:1 <-> b:2, a:3 <-> b:4, a:5 <-> b:6; every connection of b can
// WRITE into a's region.
struct ThreePairs {
  explicit ThreePairs(ConnectionConfig c = {}, bool cc_per_peer = true)
      : p(c, 1024, false, AuthMode::kOff, 0xff, cc_per_peer) {
    std::tie(qa3, qb4) = p.add_pair(c, c, 3, 4);
    std::tie(qa5, qb6) = p.add_pair(c, c, 5, 6);
    a_mem.assign(1 << 20, 0);
    b_mem.assign(1 << 20, 0);
    src.assign(1 << 20, 0x5a);
    a_key = p.a.memory().register_region(a_mem.data(), a_mem.size(), kAccessRemoteWrite, 0);
    b_key = p.b.memory().register_region(b_mem.data(), b_mem.size(), kAccessRemoteWrite, 0);
  }
  // A WRITE of `len` bytes from `q` to the peer's region.
  void write(Connection* q, uint32_t len, bool to_a) {
    ASSERT_EQ(q->post_send(request(++ids, Opcode::kWrite, src.data(), len,
                                   to_a ? a_mem.data() : b_mem.data(), to_a ? a_key : b_key)),
              PostError::kOk);
  }
  Frame one(Endpoint& from) {
    Frame buf(9216);
    const uint32_t n = from.transmit(buf.data(), static_cast<uint32_t>(buf.size()), p.now);
    buf.resize(n);
    return buf;
  }

  DirectPair p;
  Connection *qa3, *qb4, *qa5, *qb6;
  std::vector<uint8_t> a_mem, b_mem, src;
  uint32_t a_key = 0, b_key = 0;
  uint64_t ids = 0;
};

TEST(TxScheduler, AnAckGoesBeforeAnotherConnectionsData) {
  ThreePairs t;
  // b's connections 4 and 6 have data for a; b's connection 2 has nothing.
  t.write(t.qb4, 2 * kTurn * 4096, true);
  t.write(t.qb6, 2 * kTurn * 4096, true);
  // A turn of data frames from b, so that connection 6 is next.
  for (uint32_t i = 0; i < kTurn; ++i) ASSERT_EQ(what(t.one(t.p.b)).from, 4) << i;
  // A one-packet WRITE from a's connection 1 arrives at b's connection 2: it
  // asks for an ACK at once.
  t.write(t.p.qa, 100, false);
  t.p.deliver(t.p.b, t.p.drain(t.p.a));
  const Sent next = what(t.one(t.p.b));
  EXPECT_TRUE(is_ack(next));
  EXPECT_EQ(next.from, 2);
  // Then data again, where the turns left off.
  EXPECT_EQ(what(t.one(t.p.b)).from, 6);
}

// Turns of kTurn frames (EndpointConfig::data_quantum): a run of one
// connection's packets lets its receiver coalesce their ACKs.
TEST(TxScheduler, ConnectionsWithDataTakeTurnsOfAQuantumOfFrames) {
  ThreePairs t;
  const uint32_t q = kTurn, from4 = 2 * q + q / 2, from6 = q + q / 4;
  t.write(t.qb4, from4 * 4096, true);
  t.write(t.qb6, from6 * 4096, true);
  std::vector<uint16_t> order;
  for (const Frame& f : t.p.drain(t.p.b)) order.push_back(what(f).from);
  ASSERT_EQ(order.size(), size_t{from4 + from6});
  // Turns: 4 (q), 6 (q), 4 (q), 6 (its last q/4), then 4's last q/2 alone.
  const std::vector<uint16_t> turns = {4, 6, 4};
  for (size_t i = 0; i < 3 * q; ++i) EXPECT_EQ(order[i], turns[i / q]) << i;
  for (size_t i = 3 * q; i < 3 * q + q / 4; ++i) EXPECT_EQ(order[i], 6) << i;
  for (size_t i = 3 * q + q / 4; i < order.size(); ++i) EXPECT_EQ(order[i], 4) << i;
}

TEST(TxScheduler, AnEndpointSaysWhetherItHasAnythingToSend) {
  ThreePairs t;
  EXPECT_FALSE(t.p.b.wants_to_send());
  t.write(t.qb4, 4 * 4096, true);
  EXPECT_TRUE(t.p.b.wants_to_send());
  const auto frames = t.p.drain(t.p.b);
  EXPECT_EQ(frames.size(), 4u);
  EXPECT_FALSE(t.p.b.wants_to_send());  // everything sent, waiting for the ACK
  t.p.deliver(t.p.a, frames);
  EXPECT_TRUE(t.p.a.wants_to_send());  // the last packet asked for an ACK
  t.p.settle();
  EXPECT_FALSE(t.p.a.wants_to_send());
  EXPECT_FALSE(t.p.b.wants_to_send());
  ASSERT_EQ(poll_all(t.p.b_scq).size(), 1u);
}

TEST(TxScheduler, AConnectionDestroyedWhileQueuedLeavesNothingBehind) {
  ThreePairs t;
  t.write(t.qb4, 8 * 4096, true);
  t.write(t.qb6, 8 * 4096, true);
  ASSERT_TRUE(t.p.b.wants_to_send());
  t.p.b.destroy_connection(4);
  std::vector<uint16_t> from;
  for (const Frame& f : t.p.drain(t.p.b)) from.push_back(what(f).from);
  EXPECT_EQ(from, std::vector<uint16_t>(8, 6));
  // Its id can be used again; the new connection starts with nothing queued.
  ConnectionConfig c;
  c.local_id = 4;
  c.remote_id = 3;
  c.remote_mac = mac_of(1);
  c.remote_ip = kIpA;
  ASSERT_NE(t.p.b.create_connection(c, &t.p.b_scq, &t.p.b_rcq), nullptr);
  EXPECT_FALSE(t.p.b.wants_to_send());
}

// Sends a 64 KiB WRITE at `rate_bps` (0: unpaced) and returns when each
// frame left, in virtual time moving 100 ns at a time.
std::vector<std::pair<TimeNs, uint32_t>> send_paced(uint64_t rate_bps) {
  ConnectionConfig c;
  c.mtu = 4096;
  c.cc.pacing_rate_bps = rate_bps;
  DirectPair p(c);
  std::vector<uint8_t> src(64 * 1024, 1), dst(64 * 1024);
  const uint32_t key = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  EXPECT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 64 * 1024, dst.data(), key)),
            PostError::kOk);
  std::vector<std::pair<TimeNs, uint32_t>> sent;
  while (sent.size() < 16 && p.now < 1'000'000) {
    p.a.advance(p.now);
    for (const Frame& f : p.drain(p.a)) sent.emplace_back(p.now, static_cast<uint32_t>(f.size()));
    if (sent.size() < 16 && rate_bps != 0) {
      // While held back, the endpoint has nothing to send but a timer.
      EXPECT_FALSE(p.a.wants_to_send());
      EXPECT_LE(p.a.next_timer(), p.qa->next_send_at());
    }
    p.now += 100;
  }
  return sent;
}

TEST(TxScheduler, PacingSpacesAConnectionsDataAtItsRate) {
  const auto unpaced = send_paced(0);
  ASSERT_EQ(unpaced.size(), 16u);
  EXPECT_EQ(unpaced.back().first, 0u);  // all at once: the window allows it

  constexpr uint64_t kRate = 10'000'000'000;  // 10 Gb/s
  const auto paced = send_paced(kRate);
  ASSERT_EQ(paced.size(), 16u);
  // Frame i leaves once the frames before it have had their time at the
  // rate (less the two frames' catching up a late timer allows), and no
  // later than a timer tick (1 us) plus a step (100 ns) after that.
  uint64_t bits = 0;
  for (size_t i = 0; i < paced.size(); ++i) {
    const TimeNs due = bits * 1'000'000'000 / kRate;
    const TimeNs gap = uint64_t{paced[i].second} * 8 * 1'000'000'000 / kRate;
    EXPECT_GE(paced[i].first + 2 * gap, due) << "frame " << i;
    EXPECT_LE(paced[i].first, due + 1'100 + 2 * gap) << "frame " << i;
    bits += uint64_t{paced[i].second} * 8;
  }
  // 15 frames' time at 10 Gb/s is about 50 us: paced, not a burst.
  EXPECT_GE(paced.back().first, 15 * paced[0].second * 8 * 1'000'000'000ull / kRate - 2'000);
}

TEST(TxScheduler, ConnectionsToOnePeerShareItsWindow) {
  // b's three connections to a have 16 packets each to send, under a fixed
  // window of 8 packets.
  for (const bool per_peer : {true, false}) {
    SCOPED_TRACE(per_peer ? "per peer" : "per connection");
    ConnectionConfig c;
    c.cc.window_bytes = 8 * (c.mtu + Connection::kPacketCharge);
    ThreePairs t(c, per_peer);
    for (Connection* q : {t.p.qb, t.qb4, t.qb6}) t.write(q, 16 * c.mtu, true);
    // Nothing acknowledged yet: the first window's worth leaves.
    const std::vector<Frame> first = t.p.drain(t.p.b);
    EXPECT_EQ(first.size(), per_peer ? 8u : 24u);
    EXPECT_EQ(&t.p.qb->peer() == &t.qb6->peer(), per_peer);
    EXPECT_EQ(t.p.b.shared_peers(), per_peer ? 1u : 0u);
    if (per_peer) {
      EXPECT_EQ(t.p.qb->peer().inflight(), c.cc.window_bytes);
      EXPECT_EQ(t.p.qb->inflight_bytes() + t.qb4->inflight_bytes() + t.qb6->inflight_bytes(),
                c.cc.window_bytes);
    }
    // Every WRITE completes: the ACKs of one connection's packets open the
    // window for the others, which wait for it.
    t.p.deliver(t.p.a, first);
    size_t done = 0;
    EXPECT_TRUE(t.p.run_for(10'000'000, 1'000, [&] {
      done += poll_all(t.p.b_scq).size();
      return done == 3;
    }));
    EXPECT_EQ(t.p.a.stats().dropped() + t.p.b.stats().dropped(), 0u);
    for (Connection* q : {t.p.qb, t.qb4, t.qb6}) {
      EXPECT_EQ(q->stats().data_sent, 16u);
      EXPECT_EQ(q->stats().retransmits, 0u);
      EXPECT_EQ(q->inflight_bytes(), 0u);
    }
  }
}

// A connection that goes into error while it waits for the shared window
// does not take the turn of one still waiting behind it: when the window
// opens, the healthy one sends.
TEST(TxScheduler, AConnectionInErrorDoesNotTakeTheTurnOfOneWaitingForTheSharedWindow) {
  ConnectionConfig c;
  c.cc.window_bytes = 2 * (c.mtu + Connection::kPacketCharge);
  ThreePairs t(c);
  t.write(t.p.qb, 2 * c.mtu, true);
  const std::vector<Frame> first = t.p.drain(t.p.b);
  ASSERT_EQ(first.size(), 2u);  // the window is full
  t.write(t.qb4, c.mtu, true);  // both wait for it, qb4 first
  t.write(t.qb6, c.mtu, true);
  EXPECT_TRUE(t.p.drain(t.p.b).empty());
  t.qb4->set_error(WcStatus::kWrFlushErr);
  // qb's packets arrive and are acknowledged (its last asked for an ACK at
  // once): nothing is in flight any more.
  t.p.deliver(t.p.a, first);
  t.p.deliver(t.p.b, t.p.drain(t.p.a));
  EXPECT_EQ(t.p.qb->peer().inflight(), 0u);
  // qb6 sends without waiting for anything else.
  const std::vector<Frame> next = t.p.drain(t.p.b);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(what(next[0]).from, 6);
}

TEST(TxScheduler, ConnectionsToOnePeerShareItsPacing) {
  // Two connections to one peer at a paced 10 Gb/s: together at that rate,
  // not twice it.
  ConnectionConfig c;
  c.cc.pacing_rate_bps = 10'000'000'000;
  ThreePairs t(c);
  t.write(t.p.qb, 8 * c.mtu, true);
  t.write(t.qb4, 8 * c.mtu, true);
  std::vector<TimeNs> at;
  uint64_t bytes = 0;
  std::set<uint16_t> from;
  for (int step = 0; step < 200 && at.size() < 16; ++step) {
    for (const Frame& f : t.p.drain(t.p.b)) {
      const Sent s = what(f);
      if (!is_ack(s)) {
        at.push_back(t.p.now);
        bytes += f.size();
        from.insert(s.from);
      }
    }
    t.p.now += 1'000;
    t.p.b.advance(t.p.now);
  }
  ASSERT_EQ(at.size(), 16u);
  EXPECT_EQ(from.size(), 2u);  // both took turns
  // 16 frames at 10 Gb/s take at least 15 frames' time (less the two
  // frames' catching up a late timer allows); each connection at its own
  // 10 Gb/s would have taken half of it.
  const TimeNs frame_ns = (bytes / 16) * 8 * 1'000'000'000 / c.cc.pacing_rate_bps;
  EXPECT_GE(at.back() - at.front(), 13 * frame_ns);
}

}  // namespace
}  // namespace braid::test
