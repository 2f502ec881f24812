// Multipath behaviour: spraying spreads one connection over every path,
// per-entropy statistics attribute ECN marks and losses to the right
// entropies, a dead path is survived, trimmed packets are NACKed and resent
// at once, and very large messages go through.
#include <map>

#include "workload.h"

namespace braid::test {
namespace {

struct Transfer {
  std::vector<uint8_t> src, dst;
  uint32_t rkey = 0;
};

void write_and_wait(SimPair& p, Transfer& t, uint64_t size, uint32_t count = 1) {
  t.src.assign(size, 0);
  t.dst.assign(size, 0);
  fill_pattern(t.src.data(), t.src.size(), size);
  t.rkey = p.b.memory().register_region(t.dst.data(), t.dst.size(), kAccessRemoteWrite, 0);
  for (uint32_t i = 0; i < count; ++i) {
    SendRequest wr;
    wr.wr_id = i;
    wr.opcode = Opcode::kWrite;
    wr.local = sgl_of(t.src.data(), static_cast<uint32_t>(size));
    wr.remote_addr = reinterpret_cast<uintptr_t>(t.dst.data());
    wr.rkey = t.rkey;
    ASSERT_EQ(p.qa->post_send(wr), PostError::kOk);
  }
  ASSERT_TRUE(p.run_until([&] { return p.a_scq.size() == count; }));
  WorkCompletion wc[64];
  const uint32_t n = p.a_scq.poll(wc, 64);
  ASSERT_EQ(n, count);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(wc[i].status, WcStatus::kSuccess);
  ASSERT_TRUE(t.src == t.dst);
}

TEST(Multipath, SprayingUsesEveryPathAndSinglePathUsesOne) {
  for (uint16_t entropies : {uint16_t{1}, uint16_t{64}}) {
    SimPairOptions o;
    o.link = four_path_link();
    o.conn.entropy.count = entropies;
    SimPair p(o);
    Transfer t;
    write_and_wait(p, t, 4 << 20);
    const auto& per_path = p.net.link_stats(p.ha, p.hb).per_path;
    size_t used = 0;
    for (uint64_t n : per_path) used += n > 0;
    EXPECT_EQ(used, entropies == 1 ? 1u : 4u) << "entropies " << entropies;
    uint64_t sent = 0;
    for (uint16_t e = 0; e < entropies; ++e) {
      const EntropyStats& s = p.qa->paths().stats(static_cast<uint8_t>(e));
      EXPECT_GT(s.sent, 0u);
      EXPECT_EQ(s.acked, s.sent);  // no loss: everything sent is acknowledged
      sent += s.sent;
    }
    EXPECT_EQ(sent, p.qa->stats().data_sent);
  }
}

TEST(Multipath, EcnMarksAreAttributedToTheMarkingPathsEntropies) {
  SimPairOptions o;
  o.link = four_path_link();
  o.link.paths[2].gbps = 5;  // a slow path: its queue builds and marks
  o.link.paths[2].ecn_kmin_bytes = 8 * 1024;
  o.link.paths[2].ecn_kmax_bytes = 64 * 1024;
  o.conn.entropy.count = 32;
  SimPair p(o);
  Transfer t;
  write_and_wait(p, t, 8 << 20);
  const uint64_t marked = p.net.link_stats(p.ha, p.hb).ecn_marked;
  ASSERT_GT(marked, 0u);
  uint64_t on_path = 0, elsewhere = 0;
  for (uint16_t e = 0; e < 32; ++e) {
    const auto& s = p.qa->paths().stats(static_cast<uint8_t>(e));
    const size_t path = sim::SimNetwork::path_of(p.qa->paths().entropy(static_cast<uint8_t>(e)), 4);
    (path == 2 ? on_path : elsewhere) += s.ecn_marked;
  }
  EXPECT_GT(on_path, 0u);
  EXPECT_LE(on_path + elsewhere, marked);
  EXPECT_LE(elsewhere * 10, on_path) << "ECN echoes must name the marked packet's entropy";
}

TEST(Multipath, DeadPathIsSurvivedAndBlamedOnItsEntropies) {
  SimPairOptions o;
  o.link = four_path_link();
  o.conn.entropy.count = 16;
  SimPair p(o);
  p.net.set_path_up(p.ha, p.hb, 1, false);  // black hole, data direction
  Transfer t;
  write_and_wait(p, t, 2 << 20);
  uint64_t lost_dead = 0, lost_alive = 0;
  for (uint16_t e = 0; e < 16; ++e) {
    const auto& s = p.qa->paths().stats(static_cast<uint8_t>(e));
    const size_t path = sim::SimNetwork::path_of(p.qa->paths().entropy(static_cast<uint8_t>(e)), 4);
    (path == 1 ? lost_dead : lost_alive) += s.lost;
    if (path == 1) {
      EXPECT_EQ(s.acked, 0u);
    }
  }
  EXPECT_GT(lost_dead, 0u);
  EXPECT_EQ(lost_alive, 0u);
  EXPECT_EQ(p.qa->state(), ConnectionState::kActive);
}

TEST(Multipath, TrimmedPacketsAreNackedAndResentWithoutTimeout) {
  SimPairOptions o;
  o.link = four_path_link();
  for (auto& path : o.link.paths) path.queue_bytes = 24 * 1024;  // shallow buffers
  o.link.impair.trim_on_overflow = true;
  o.conn.cc.window_bytes = 512 * 1024;  // overdrives the queues on purpose
  SimPair p(o);
  Transfer t;
  write_and_wait(p, t, 4 << 20);
  const auto& ab = p.net.link_stats(p.ha, p.hb);
  ASSERT_GT(ab.trimmed, 0u);
  EXPECT_EQ(p.qb->stats().trimmed_received, ab.trimmed);
  // Most are repaired on the NACK; an ACK overtaking its NACK on another
  // path may report the hole first. Either way: exactly the trimmed ones are
  // resent, and no timer was needed.
  EXPECT_GT(p.qa->stats().lost_nacked, ab.trimmed * 9 / 10);
  EXPECT_EQ(p.qa->stats().lost_nacked + p.qa->stats().lost_inferred, ab.trimmed);
  EXPECT_EQ(p.qa->stats().retransmits, ab.trimmed);
  EXPECT_EQ(p.qa->stats().timeouts, 0u);
}

TEST(Multipath, OneGibWriteArrivesIntact) {
  SimPairOptions o;
  o.link = four_path_link(0.0005);
  o.link.paths.resize(2);
  for (auto& path : o.link.paths) path.gbps = 400;
  o.link.host_gbps = 400;
  o.conn.window_packets = 4096;
  o.conn.cc.window_bytes = 4 << 20;
  SimPair p(o);
  Transfer t;
  write_and_wait(p, t, uint64_t{1} << 30);
  EXPECT_EQ(p.qa->stats().data_sent, (uint64_t{1} << 30) / 4096);
}

}  // namespace
}  // namespace braid::test
