// Out-of-order placement and programs that poll memory: the last bytes of a
// multi-packet WRITE (a cache line) are not placed before every earlier
// packet of the connection is, so a program polling a message's last byte
// (perftest's ib_write_lat, MPI eager-RDMA footers) never reads a torn
// message. The test moves every frame (DirectPair).
#include <algorithm>

#include "direct_pair.h"

namespace braid::test {
namespace {

TEST(Placement, AWritesLastBytesWaitForTheRestOfItsMessage) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> src(3000), dst(3000, 0);
  fill_pattern(src.data(), src.size(), 11);
  src.back() = 0xab;  // the byte a program polls
  const uint32_t key = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 3000, dst.data(), key)),
            PostError::kOk);
  const std::vector<Frame> sent = p.drain(p.a);
  ASSERT_EQ(sent.size(), 3u);
  // The last packet first: placed but for its last 64 bytes.
  p.deliver(p.b, {sent[2]});
  EXPECT_TRUE(std::equal(src.begin() + 2048, src.end() - 64, dst.begin() + 2048));
  EXPECT_TRUE(std::all_of(dst.end() - 64, dst.end(), [](uint8_t v) { return v == 0; }));
  EXPECT_EQ(p.qb->stats().tails_deferred, 1u);
  p.deliver(p.b, {sent[0]});
  EXPECT_EQ(dst.back(), 0);  // the middle packet is still missing
  p.deliver(p.b, {sent[1]});
  EXPECT_EQ(dst, src);  // all in: the tail with them
  p.settle();
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

// Many tails at once (the store grows; nothing is refused, so nothing looks
// like loss to the sender), and one-packet messages, which never wait.
TEST(Placement, ManyTailsAreHeldAtOnceAndEveryMessageArrivesIntact) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.sq_depth = 64;
  DirectPair p(c);
  constexpr int kMessages = 40;
  std::vector<uint8_t> src(kMessages * 2048), dst(kMessages * 2048, 0);
  fill_pattern(src.data(), src.size(), 12);
  const uint32_t key = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  for (int m = 0; m < kMessages; ++m) {
    ASSERT_EQ(p.qa->post_send(request(m, Opcode::kWrite, src.data() + 2048 * m, 2000,
                                      dst.data() + 2048 * m, key)),
              PostError::kOk);
  }
  std::vector<Frame> sent = p.drain(p.a);
  ASSERT_EQ(sent.size(), 2u * kMessages);
  // Every message's last packet before any first packet.
  std::vector<Frame> lasts, firsts;
  for (size_t i = 0; i < sent.size(); ++i) (i % 2 ? lasts : firsts).push_back(sent[i]);
  p.deliver(p.b, lasts);
  EXPECT_EQ(p.qb->stats().tails_deferred, static_cast<uint64_t>(kMessages));
  p.deliver(p.b, firsts);
  ASSERT_TRUE(p.run_for(100'000'000, 1'000, [&] { return p.a_scq.size() == kMessages; }));
  for (const WorkCompletion& wc : poll_all(p.a_scq)) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(p.qa->stats().retransmits, 0u);
  for (int m = 0; m < kMessages; ++m) {
    EXPECT_TRUE(
        std::equal(src.begin() + 2048 * m, src.begin() + 2048 * m + 2000, dst.begin() + 2048 * m))
        << m;
  }
  // One-packet messages never wait.
  const uint64_t deferred = p.qb->stats().tails_deferred;
  ASSERT_EQ(p.qa->post_send(request(100, Opcode::kWrite, src.data(), 1000, dst.data(), key)),
            PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(101, Opcode::kWrite, src.data(), 1000, dst.data() + 1024, key)),
            PostError::kOk);
  sent = p.drain(p.a);
  ASSERT_EQ(sent.size(), 2u);
  p.deliver(p.b, {sent[1]});
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 1000, dst.begin() + 1024));
  EXPECT_EQ(p.qb->stats().tails_deferred, deferred);
}

// A held tail never undoes a later WRITE: WRITE A's tail waits while
// WRITE B (one packet, later) lands on the same bytes. Memory ends as
// InfiniBand's order says: the later WRITE's bytes.
TEST(Placement, AHeldTailNeverOverwritesALaterWrite) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> a(2000, 0xaa), b(2000, 0xbb), dst(2000, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  // A: 2 packets over [0, 2000); B: one packet over [1900, 2000).
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, a.data(), 2000, dst.data(), key)),
            PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kWrite, b.data(), 100, dst.data() + 1900, key)),
            PostError::kOk);
  const std::vector<Frame> sent = p.drain(p.a);
  ASSERT_EQ(sent.size(), 3u);
  const auto one = [&](size_t i) {
    p.b.receive(sent[i].data(), static_cast<uint32_t>(sent[i].size()), p.now);
  };
  one(1);  // A's last: its tail [1936, 2000) waits
  one(2);  // B: [1900, 2000) placed now
  one(0);  // A's first: A's tail goes
  EXPECT_TRUE(std::all_of(dst.begin(), dst.begin() + 1900, [](uint8_t v) { return v == 0xaa; }));
  EXPECT_TRUE(std::all_of(dst.begin() + 1900, dst.end(), [](uint8_t v) { return v == 0xbb; }));
  p.settle();
  ASSERT_EQ(poll_all(p.a_scq).size(), 2u);
}

}  // namespace
}  // namespace braid::test
