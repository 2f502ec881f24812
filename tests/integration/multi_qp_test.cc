// Several queue pairs on one connection (one PDC): they share its PSN
// spaces, window, paths and ACKs, and keep their own queues, completion
// queues, RC order, RNR waits and errors.
#include <algorithm>
#include <deque>
#include <memory>

#include "direct_pair.h"

namespace braid::test {
namespace {

// `n` more queue pairs on each side of p's connections: a's QP 100 + i
// talks to b's 200 + i; each has completion queues of its own.
struct Qps {
  struct Side {
    std::vector<uint16_t> slot;
    std::deque<CompletionQueue> scq, rcq;
  };
  Side a, b;
  Qps(DirectPair& p, int n) {
    for (int i = 0; i < n; ++i) {
      const auto qa = static_cast<uint32_t>(100 + i), qb = static_cast<uint32_t>(200 + i);
      a.scq.emplace_back(256);
      a.rcq.emplace_back(256);
      b.scq.emplace_back(256);
      b.rcq.emplace_back(256);
      a.slot.push_back(
          p.qa->add_queue_pair(p.qa->queue_pair_config(qa, qb), &a.scq.back(), &a.rcq.back()));
      b.slot.push_back(
          p.qb->add_queue_pair(p.qb->queue_pair_config(qb, qa), &b.scq.back(), &b.rcq.back()));
      EXPECT_NE(a.slot.back(), Connection::kNoSlot);
      EXPECT_NE(b.slot.back(), Connection::kNoSlot);
    }
  }
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 13 + seed);
  return v;
}

TEST(MultiQp, QueuePairsOnOneConnectionShareItsPsnsAndKeepTheirOwnOrder) {
  DirectPair p;
  Qps q(p, 3);
  constexpr uint32_t kLen = 10'000;  // three packets each
  std::vector<std::vector<uint8_t>> wsrc, wdst, ssrc, rbuf, rsrc, rdst;
  for (int i = 0; i < 3; ++i) {
    wsrc.push_back(pattern(kLen, static_cast<uint8_t>(i)));
    wdst.emplace_back(kLen, 0);
    ssrc.push_back(pattern(kLen, static_cast<uint8_t>(50 + i)));
    rbuf.emplace_back(kLen, 0);
    rsrc.push_back(pattern(kLen, static_cast<uint8_t>(90 + i)));
    rdst.emplace_back(kLen, 0);
  }
  for (int i = 0; i < 3; ++i) {
    const uint16_t sa = q.a.slot[i], sb = q.b.slot[i];
    const uint32_t wkey = p.b.memory().register_region(wdst[i].data(), kLen, kAccessRemoteWrite, 0);
    const uint32_t rkey = p.b.memory().register_region(rsrc[i].data(), kLen, kAccessRemoteRead, 0);
    ASSERT_EQ(p.qb->post_recv(sb, 7, sgl_of(rbuf[i].data(), kLen)), PostError::kOk);
    ASSERT_EQ(
        p.qa->post_send(sa, request(1, Opcode::kWrite, wsrc[i].data(), kLen, wdst[i].data(), wkey)),
        PostError::kOk);
    ASSERT_EQ(p.qa->post_send(sa, request(2, Opcode::kSend, ssrc[i].data(), kLen)), PostError::kOk);
    ASSERT_EQ(
        p.qa->post_send(sa, request(3, Opcode::kRead, rdst[i].data(), kLen, rsrc[i].data(), rkey)),
        PostError::kOk);
  }
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] {
    return std::all_of(q.a.scq.begin(), q.a.scq.end(), [](auto& c) { return c.size() == 3; });
  }));
  for (int i = 0; i < 3; ++i) {
    const auto wcs = poll_all(q.a.scq[i]);
    ASSERT_EQ(wcs.size(), 3u);
    for (uint64_t k = 0; k < 3; ++k) {
      EXPECT_EQ(wcs[k].wr_id, k + 1);  // in order, each queue pair its own
      EXPECT_EQ(wcs[k].status, WcStatus::kSuccess);
      EXPECT_EQ(wcs[k].qp_num, 100u + static_cast<uint32_t>(i));
    }
    const auto rwc = poll_all(q.b.rcq[i]);
    ASSERT_EQ(rwc.size(), 1u);
    EXPECT_EQ(rwc[0].qp_num, 200u + static_cast<uint32_t>(i));
    EXPECT_EQ(wdst[i], wsrc[i]);
    EXPECT_EQ(rbuf[i], ssrc[i]);
    EXPECT_EQ(rdst[i], rsrc[i]);
  }
  EXPECT_EQ(p.a_scq.size(), 0u);  // the connection's own queue pair had nothing
  // One PSN space each way: every request packet (3 x (3 + 3 + 1)) in b's.
  EXPECT_EQ(p.qb->stats().data_received, 21u);
  EXPECT_EQ(p.qa->unacked_packets(), 0u);
}

// One queue pair's SEND finds no receive (and its responder asks for a
// 655 ms wait): the others' WRITEs on the same connection complete at
// once, and it completes once its receive is posted.
TEST(MultiQp, AQueuePairWithoutAReceiveDoesNotHoldTheOthers) {
  ConnectionConfig c;
  c.rnr_delay_ns = 655'360'000;
  DirectPair p(c);
  Qps q(p, 2);
  static std::vector<uint8_t> msg(100, 3), wsrc(4096, 4);
  std::vector<uint8_t> rbuf(256, 0), wdst(4096, 0);
  const uint32_t key = p.b.memory().register_region(wdst.data(), 4096, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(q.a.slot[0], request(1, Opcode::kSend, msg.data(), 100)),
            PostError::kOk);
  for (uint64_t k = 0; k < 20; ++k) {
    ASSERT_EQ(p.qa->post_send(q.a.slot[1],
                              request(k, Opcode::kWrite, wsrc.data(), 4096, wdst.data(), key)),
              PostError::kOk);
  }
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return q.a.scq[1].size() == 20; }));
  EXPECT_LT(p.now, 10'000'000u);
  EXPECT_EQ(q.a.scq[0].size(), 0u);
  EXPECT_GE(p.qb->stats().rnr_nacks, 1u);
  for (const WorkCompletion& wc : poll_all(q.a.scq[1])) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(p.qb->post_recv(q.b.slot[0], 9, sgl_of(rbuf.data(), 256)), PostError::kOk);
  ASSERT_TRUE(p.run_for(2'000'000'000, 1'000, [&] { return q.a.scq[0].size() == 1; }));
  EXPECT_EQ(poll_all(q.a.scq[0])[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(msg.begin(), msg.end(), rbuf.begin()));
}

// A WRITE with a bad key ends its queue pair at both ends; the other
// queue pairs and the connection go on.
TEST(MultiQp, ARefusedRequestEndsItsQueuePairAlone) {
  DirectPair p;
  Qps q(p, 2);
  static std::vector<uint8_t> wsrc(4096, 6);
  std::vector<uint8_t> wdst(4096, 0), other(4096, 0), rbuf(64, 0);
  const uint32_t key = p.b.memory().register_region(wdst.data(), 4096, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qb->post_recv(q.b.slot[0], 9, sgl_of(rbuf.data(), 64)), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(q.a.slot[0], request(1, Opcode::kWrite, wsrc.data(), 4096, other.data(),
                                                 key + 1000)),
            PostError::kOk);
  ASSERT_EQ(
      p.qa->post_send(q.a.slot[0], request(2, Opcode::kWrite, wsrc.data(), 4096, wdst.data(), key)),
      PostError::kOk);
  for (uint64_t k = 0; k < 8; ++k) {
    ASSERT_EQ(p.qa->post_send(q.a.slot[1],
                              request(10 + k, Opcode::kWrite, wsrc.data(), 4096, wdst.data(), key)),
              PostError::kOk);
  }
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] {
    return q.a.scq[0].size() == 2 && q.a.scq[1].size() == 8 && q.b.rcq[0].size() == 1;
  }));
  const auto bad = poll_all(q.a.scq[0]);
  EXPECT_EQ(bad[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(bad[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(poll_all(q.b.rcq[0])[0].status, WcStatus::kWrFlushErr);  // b's end flushed
  for (const WorkCompletion& wc : poll_all(q.a.scq[1])) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(other, std::vector<uint8_t>(4096, 0));
  EXPECT_EQ(p.qa->state(), ConnectionState::kActive);
  EXPECT_EQ(p.qb->state(), ConnectionState::kActive);
  EXPECT_EQ(p.qa->queue_pair(q.a.slot[0]).state(), ConnectionState::kError);
  EXPECT_EQ(
      p.qa->post_send(q.a.slot[0], request(3, Opcode::kWrite, wsrc.data(), 64, wdst.data(), key)),
      PostError::kConnectionError);
  ASSERT_EQ(
      p.qa->post_send(q.a.slot[1], request(20, Opcode::kWrite, wsrc.data(), 64, wdst.data(), key)),
      PostError::kOk);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return q.a.scq[1].size() == 1; }));
  EXPECT_EQ(p.qa->unacked_packets(), 0u);  // the refused PSN was filled
}

// The packet before a refused WRITE of the same queue pair is lost and
// comes again: the responder's queue pair ends only once it is in, so the
// first WRITE is placed and completes, the refused one fails, and the
// queue pair ends at both ends (as an InfiniBand responder, which
// completes what came before the refused request).
TEST(MultiQp, ARefusalWaitsForThePacketsBeforeIt) {
  DirectPair p;
  Qps q(p, 2);
  static std::vector<uint8_t> wsrc(1000, 8);
  std::vector<uint8_t> wdst(1000, 0), other(1000, 0);
  const uint32_t key = p.b.memory().register_region(wdst.data(), 1000, kAccessRemoteWrite, 0);
  ASSERT_EQ(
      p.qa->post_send(q.a.slot[0], request(1, Opcode::kWrite, wsrc.data(), 1000, wdst.data(), key)),
      PostError::kOk);
  ASSERT_EQ(p.qa->post_send(q.a.slot[0], request(2, Opcode::kWrite, wsrc.data(), 1000, other.data(),
                                                 key + 1000)),
            PostError::kOk);
  bool dropped = false;
  ASSERT_TRUE(p.run_for(
      100'000'000, 1'000, [&] { return q.a.scq[0].size() == 2; },
      [&](const Frame& f, bool a_to_b) {
        if (dropped || !a_to_b || !parse(f).has_ses_request) return false;
        return dropped = true;  // the first WRITE's first copy
      }));
  const auto wcs = poll_all(q.a.scq[0]);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(wdst, wsrc);
  EXPECT_EQ(other, std::vector<uint8_t>(1000, 0));
  EXPECT_EQ(p.qb->queue_pair(q.b.slot[0]).state(), ConnectionState::kError);
  EXPECT_EQ(p.qb->queue_pair(q.b.slot[1]).state(), ConnectionState::kActive);
}

// A READ refused by its responder fails its queue pair; the READ timer it
// started does not run on and end the connection (every queue pair on it).
TEST(MultiQp, AFailedReadDoesNotEndTheConnectionLater) {
  DirectPair p;
  Qps q(p, 2);
  std::vector<uint8_t> dst(256, 0), src(256, 4);
  const uint32_t key = p.b.memory().register_region(src.data(), 256, kAccessRemoteRead, 0);
  ASSERT_EQ(p.qa->post_send(q.a.slot[0],
                            request(1, Opcode::kRead, dst.data(), 256, src.data(), key + 1000)),
            PostError::kOk);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return q.a.scq[0].size() == 1; }));
  EXPECT_EQ(poll_all(q.a.scq[0])[0].status, WcStatus::kRemAccessErr);
  // Longer than the retry budget (8 x 50 ms): nothing is outstanding.
  p.run_for(1'000'000'000, 100'000, [] { return false; });
  EXPECT_EQ(p.qa->state(), ConnectionState::kActive);
  ASSERT_EQ(
      p.qa->post_send(q.a.slot[1], request(2, Opcode::kRead, dst.data(), 256, src.data(), key)),
      PostError::kOk);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return q.a.scq[1].size() == 1; }));
  EXPECT_EQ(poll_all(q.a.scq[1])[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, src);
}

// 1024 queue pairs between two hosts hold one connection's transport
// state: each costs its queues, not a PDC (transmit records, receive
// bitmap, paths, timers). One WRITE on each completes.
TEST(MultiQp, AThousandQueuePairsHoldOneConnectionsTransportState) {
  DirectPair p;
  const size_t before = p.qa->memory_footprint();
  Qps q(p, 1023);
  const size_t per_qp = (p.qa->memory_footprint() - before) / 1023;
  // A second connection (a QP of its own, as before): what a QP cost.
  ConnectionConfig c;
  auto [own, peer] = p.add_pair(c, c, 7, 8);
  const size_t per_connection = own->memory_footprint();
  std::printf("bytes per queue pair on one connection: %zu; a connection's own: %zu\n", per_qp,
              per_connection);
  // At least the transmit records (64 to start, 32 B each) and the
  // receive bitmap are the connection's alone.
  EXPECT_GE(per_connection, per_qp + 64 * 32 + 1024 / 8);
  static std::vector<uint8_t> src(64, 1);
  std::vector<uint8_t> dst(64 * 1023, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  for (size_t i = 0; i < 1023; ++i) {
    ASSERT_EQ(p.qa->post_send(q.a.slot[i],
                              request(i, Opcode::kWrite, src.data(), 64, dst.data() + 64 * i, key)),
              PostError::kOk);
  }
  ASSERT_TRUE(p.run_for(100'000'000, 1'000, [&] {
    return std::all_of(q.a.scq.begin(), q.a.scq.end(), [](auto& c) { return c.size() == 1; });
  }));
  EXPECT_EQ(dst, std::vector<uint8_t>(64 * 1023, 1));
  EXPECT_EQ(p.qb->stats().data_received, 1023u);  // one PSN space
}

}  // namespace
}  // namespace braid::test
