// Shared receive queues: queue pairs take their receives from one queue,
// each receive is used once, in the order of each queue pair's messages
// whatever order their packets come in; a queue pair that stops gives
// back what it took and never used; the limit event fires once.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "direct_pair.h"

namespace braid::test {
namespace {

// Two connections from a to b whose b ends share `srq`.
struct SrqPairs {
  explicit SrqPairs(uint32_t srq_depth = 64, uint32_t rq_depth = 64) : srq(srq_depth) {
    ConnectionConfig ca, cb;
    cb.srq = &srq;
    cb.rq_depth = rq_depth;
    std::tie(a1, b1) = p.add_pair(ca, cb, 3, 4);
    std::tie(a2, b2) = p.add_pair(ca, cb, 5, 6);
  }
  SharedReceiveQueue srq;
  DirectPair p;
  Connection *a1, *b1, *a2, *b2;
};

TEST(SharedReceiveQueue, QueuePairsTakeEachReceiveOnce) {
  SrqPairs s;
  std::vector<std::vector<uint8_t>> bufs(6, std::vector<uint8_t>(256, 0));
  for (uint64_t i = 0; i < bufs.size(); ++i) {
    ASSERT_EQ(s.srq.post(100 + i, sgl_of(bufs[i].data(), 256)), PostError::kOk);
  }
  std::vector<uint8_t> m1(100, 1), m2(200, 2);
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(s.a1->post_send(request(i, Opcode::kSend, m1.data(), 100)), PostError::kOk);
    ASSERT_EQ(s.a2->post_send(request(i, Opcode::kSend, m2.data(), 200)), PostError::kOk);
  }
  ASSERT_TRUE(s.p.run_for(10'000'000, 1'000, [&] { return s.p.a_scq.size() == 6; }));
  EXPECT_EQ(s.srq.size(), 0u);
  EXPECT_EQ(s.srq.taken(), 6u);
  const auto rwc = poll_all(s.p.b_rcq);
  ASSERT_EQ(rwc.size(), 6u);
  std::set<uint64_t> ids;
  for (const WorkCompletion& wc : rwc) {
    EXPECT_EQ(wc.status, WcStatus::kSuccess);
    ids.insert(wc.wr_id);
    const std::vector<uint8_t>& b = bufs[wc.wr_id - 100];
    const uint8_t v = wc.byte_len == 100 ? 1 : 2;
    EXPECT_EQ(std::count(b.begin(), b.begin() + wc.byte_len, v), wc.byte_len);
    EXPECT_EQ(std::count(b.begin() + wc.byte_len, b.end(), 0), 256 - wc.byte_len);
  }
  EXPECT_EQ(ids.size(), 6u);  // every receive used once
}

// Message 2 of a queue pair arrives before messages 0 and 1: it takes the
// receives for all three at once, in its RSN order, and they complete in
// message order with the bytes of their own message.
TEST(SharedReceiveQueue, ReceivesAreBoundInMessageOrderWhateverOrderPacketsComeIn) {
  SrqPairs s;
  std::vector<std::vector<uint8_t>> bufs(3, std::vector<uint8_t>(64, 0));
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(s.srq.post(i, sgl_of(bufs[i].data(), 64)), PostError::kOk);
  }
  std::vector<std::vector<uint8_t>> msgs = {
      std::vector<uint8_t>(10, 7), std::vector<uint8_t>(20, 8), std::vector<uint8_t>(30, 9)};
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(s.a1->post_send(request(i, Opcode::kSend, msgs[i].data(), msgs[i].size())),
              PostError::kOk);
  }
  const std::vector<Frame> sent = s.p.drain(s.p.a);
  ASSERT_EQ(sent.size(), 3u);
  s.p.deliver(s.p.b, {sent[2]});
  EXPECT_EQ(s.srq.size(), 0u);  // all three bound
  EXPECT_EQ(s.p.b_rcq.size(), 0u);
  s.p.deliver(s.p.b, {sent[1], sent[0]});
  const auto rwc = poll_all(s.p.b_rcq);
  ASSERT_EQ(rwc.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rwc[i].wr_id, i);
    EXPECT_EQ(rwc[i].byte_len, msgs[i].size());
    EXPECT_TRUE(std::equal(msgs[i].begin(), msgs[i].end(), bufs[i].begin()));
  }
}

// With the queue empty the message is refused for want of a receive (RNR);
// one posted later is taken when the message comes again.
TEST(SharedReceiveQueue, AnEmptyQueueRefusesUntilAReceiveIsPosted) {
  SrqPairs s;
  std::vector<uint8_t> msg(300, 5), buf(300, 0);
  ASSERT_EQ(s.a1->post_send(request(1, Opcode::kSend, msg.data(), 300)), PostError::kOk);
  ASSERT_TRUE(s.p.run_for(1'000'000, 1'000, [&] { return s.b1->stats().rnr_nacks > 0; }));
  EXPECT_EQ(s.p.b_rcq.size(), 0u);
  ASSERT_EQ(s.srq.post(9, sgl_of(buf.data(), 300)), PostError::kOk);
  ASSERT_TRUE(s.p.run_for(2'000'000'000, 100'000, [&] { return s.p.a_scq.size() == 1; }));
  const auto rwc = poll_all(s.p.b_rcq);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].wr_id, 9u);
  EXPECT_EQ(buf, msg);
  EXPECT_EQ(poll_all(s.p.a_scq)[0].status, WcStatus::kSuccess);
}

// A queue pair that stops gives back the receives it took for messages
// that never came, in their order; the one its message had begun to fill
// completes on the queue pair with the flush.
TEST(SharedReceiveQueue, AStoppedQueuePairGivesBackWhatItNeverUsed) {
  SrqPairs s;
  std::vector<std::vector<uint8_t>> bufs(4, std::vector<uint8_t>(64, 0));
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_EQ(s.srq.post(i, sgl_of(bufs[i].data(), 64)), PostError::kOk);
  }
  std::vector<uint8_t> msg(16, 3);
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(s.a1->post_send(request(i, Opcode::kSend, msg.data(), 16)), PostError::kOk);
  }
  const std::vector<Frame> sent = s.p.drain(s.p.a);
  ASSERT_EQ(sent.size(), 3u);
  s.p.deliver(s.p.b, {sent[2]});  // binds receives 0, 1, 2; places into 2
  ASSERT_EQ(s.srq.size(), 1u);
  s.b1->set_error(WcStatus::kWrFlushErr);
  EXPECT_EQ(s.srq.size(), 3u);
  const auto rwc = poll_all(s.p.b_rcq);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].wr_id, 2u);
  EXPECT_EQ(rwc[0].status, WcStatus::kWrFlushErr);
  // The given-back ones come first, in their order, then the one never taken.
  SharedReceiveQueue::Entry e;
  for (uint64_t want : {0u, 1u, 3u}) {
    ASSERT_TRUE(s.srq.take(&e));
    EXPECT_EQ(e.wr_id, want);
    EXPECT_EQ(e.sgl.sge[0].addr, bufs[want].data());
  }
  EXPECT_FALSE(s.srq.take(&e));
}

// A peer that names a receive further ahead than the queue pair may hold
// bound takes nothing from the shared queue: refused for want of one.
TEST(SharedReceiveQueue, ARequestNamingAReceiveTooFarAheadTakesNothing) {
  SrqPairs s(64, 2);  // b's queue pairs hold at most 2 bound
  std::vector<uint8_t> buf(64);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_EQ(s.srq.post(i, sgl_of(buf.data(), 64)), PostError::kOk);
  std::vector<uint8_t> msg(16, 3);
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(s.a1->post_send(request(i, Opcode::kSend, msg.data(), 16)), PostError::kOk);
  }
  const std::vector<Frame> sent = s.p.drain(s.p.a);
  ASSERT_EQ(sent.size(), 3u);
  s.p.deliver(s.p.b, {sent[2]});  // RSN 2, two ahead of the oldest
  EXPECT_EQ(s.srq.size(), 8u);
  EXPECT_EQ(s.b1->stats().rnr_nacks, 1u);
  s.p.deliver(s.p.b, {sent[0], sent[1]});  // within reach: taken
  EXPECT_EQ(s.srq.size(), 6u);
  EXPECT_EQ(s.p.b_rcq.size(), 2u);
}

TEST(SharedReceiveQueue, TheLimitEventFiresOnceBelowTheLimitAndDisarms) {
  SharedReceiveQueue q(8);
  int fired = 0;
  q.set_limit_hook([](void* arg) { ++*static_cast<int*>(arg); }, &fired);
  std::vector<uint8_t> buf(8);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_EQ(q.post(i, sgl_of(buf.data(), 8)), PostError::kOk);
  q.arm_limit(3);
  SharedReceiveQueue::Entry e;
  ASSERT_TRUE(q.take(&e));  // 4 left
  ASSERT_TRUE(q.take(&e));  // 3 left: not below
  EXPECT_EQ(fired, 0);
  ASSERT_TRUE(q.take(&e));  // 2 left
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(q.limit(), 0u);
  ASSERT_TRUE(q.take(&e));
  EXPECT_EQ(fired, 1);  // disarmed
  // Armed again above what waits: the next take fires it.
  q.arm_limit(4);
  ASSERT_TRUE(q.take(&e));
  EXPECT_EQ(fired, 2);
}

TEST(SharedReceiveQueue, PostsAreBoundedAndAQueuePairOnItRefusesItsOwnReceives) {
  SrqPairs s(2);
  std::vector<uint8_t> buf(8);
  ASSERT_EQ(s.srq.post(1, sgl_of(buf.data(), 8)), PostError::kOk);
  ASSERT_EQ(s.srq.post(2, sgl_of(buf.data(), 8)), PostError::kOk);
  EXPECT_EQ(s.srq.post(3, sgl_of(buf.data(), 8)), PostError::kQueueFull);
  EXPECT_FALSE(s.srq.resize(1));  // two wait
  EXPECT_TRUE(s.srq.resize(4));
  EXPECT_EQ(s.srq.post(3, sgl_of(buf.data(), 8)), PostError::kOk);
  EXPECT_EQ(s.b1->post_recv(4, sgl_of(buf.data(), 8)), PostError::kInvalid);
}

// dereg_mr of a region a waiting receive uses: the message that takes it
// fails (the receive completes with LOC_PROT_ERR), no byte is written.
TEST(SharedReceiveQueue, AReceiveWhoseRegionWentFailsItsMessage) {
  SrqPairs s;
  std::vector<uint8_t> buf(64, 0), msg(16, 3);
  Sge sge{buf.data(), 64, 77};
  SgList l;
  l.sge[0] = sge;
  l.num = 1;
  ASSERT_EQ(s.srq.post(1, l), PostError::kOk);
  EXPECT_TRUE(s.srq.revoke_local_key(77));
  EXPECT_FALSE(s.srq.revoke_local_key(78));
  ASSERT_EQ(s.a1->post_send(request(1, Opcode::kSend, msg.data(), 16)), PostError::kOk);
  ASSERT_TRUE(s.p.run_for(10'000'000, 1'000, [&] { return s.p.a_scq.size() == 1; }));
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 0), 64);
  const auto rwc = poll_all(s.p.b_rcq);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, WcStatus::kLocProtErr);
  EXPECT_NE(poll_all(s.p.a_scq)[0].status, WcStatus::kSuccess);
}

// A receive whose region went, taken ahead for an earlier message when a
// later message's packet came first: the earlier message still finds it
// revoked when it arrives, and writes nothing.
TEST(SharedReceiveQueue, AReceiveTakenAheadWhoseRegionWentIsNotWritten) {
  SrqPairs s;
  std::vector<uint8_t> b0(64, 0xee), b1(64, 0xee);
  SgList l0 = sgl_of(b0.data(), 64);
  l0.sge[0].lkey = 5;
  ASSERT_EQ(s.srq.post(0, l0), PostError::kOk);
  ASSERT_EQ(s.srq.post(1, sgl_of(b1.data(), 64)), PostError::kOk);
  EXPECT_TRUE(s.srq.revoke_local_key(5));
  std::vector<uint8_t> msg(16, 3);
  for (uint64_t i = 0; i < 2; ++i) {
    ASSERT_EQ(s.a1->post_send(request(i, Opcode::kSend, msg.data(), 16)), PostError::kOk);
  }
  const std::vector<Frame> sent = s.p.drain(s.p.a);
  ASSERT_EQ(sent.size(), 2u);
  s.p.deliver(s.p.b, {sent[1]});  // binds receives 0 and 1; places into 1
  s.p.deliver(s.p.b, {sent[0]});  // receive 0 is revoked: refused
  EXPECT_EQ(std::count(b0.begin(), b0.end(), 0xee), 64);
  EXPECT_GE(s.b1->stats().invalid_requests, 1u);
}

}  // namespace
}  // namespace braid::test
