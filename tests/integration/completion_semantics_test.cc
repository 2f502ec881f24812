// Completion semantics a verbs user relies on: which work request an error
// lands on, unsignaled requests, completion-queue overrun, a READ whose
// source region disappears mid-response, and ECN attribution within a burst.
#include <algorithm>
#include <memory>

#include "direct_pair.h"
#include "workload.h"

namespace braid::test {
namespace {

SendRequest write_wr(uint64_t id, uint8_t* src, uint32_t len, uint8_t* dst, uint32_t rkey) {
  return request(id, Opcode::kWrite, src, len, dst, rkey);
}

TEST(CompletionSemantics, ErrorLandsOnTheRefusedRequestNotAnEarlierOne) {
  SimPairOptions o;
  o.link = four_path_link();
  SimPair p(o);
  std::vector<uint8_t> src(4096, 7), dst(4096, 0);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), 4096, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(write_wr(1, src.data(), 4096, dst.data(), rkey)), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(write_wr(2, src.data(), 4096, dst.data(), rkey + 1)), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(write_wr(3, src.data(), 4096, dst.data(), rkey)), PostError::kOk);
  ASSERT_TRUE(p.run_until([&] { return p.a_scq.size() == 3; }));
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);  // its data landed: it succeeds
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(wcs[2].wr_id, 3u);
  EXPECT_EQ(wcs[2].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(src, dst);
}

TEST(CompletionSemantics, ReceiveSideErrorFlushesTheReceiversOwnSends) {
  SimPairOptions o;
  o.link = four_path_link();
  SimPair p(o);
  // B has a large WRITE of its own under way when A's SEND overflows B's
  // receive buffer: B's receive fails with LOC_LEN_ERR, B's WRITE is flushed.
  std::vector<uint8_t> big(1 << 20, 3), a_target(1 << 20, 0), msg(5000, 1), rbuf(4000, 0);
  const uint32_t rkey =
      p.a.memory().register_region(a_target.data(), a_target.size(), kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qb->post_recv(9, sgl_of(rbuf.data(), 4000)), PostError::kOk);
  ASSERT_EQ(p.qb->post_send(write_wr(5, big.data(), 1 << 20, a_target.data(), rkey)),
            PostError::kOk);
  SendRequest send;
  send.wr_id = 1;
  send.opcode = Opcode::kSend;
  send.local = sgl_of(msg.data(), 5000);
  ASSERT_EQ(p.qa->post_send(send), PostError::kOk);
  ASSERT_TRUE(p.run_until([&] { return p.qb->state() == ConnectionState::kError; }));
  const auto r = poll_all(p.b_rcq);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, WcStatus::kLocLenErr);
  const auto s = poll_all(p.b_scq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 5u);
  EXPECT_EQ(s[0].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(rbuf, std::vector<uint8_t>(4000, 0));
}

TEST(CompletionSemantics, UnsignaledRequestsCompleteSilentlyButFlushLoudly) {
  SimPairOptions o;
  o.link = four_path_link();
  SimPair p(o);
  std::vector<uint8_t> src(8192, 9), dst(8192, 0);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), 8192, kAccessRemoteWrite, 0);
  for (uint64_t i = 0; i < 4; ++i) {
    SendRequest wr = write_wr(i, src.data(), 8192, dst.data(), rkey);
    wr.signaled = i == 3;
    ASSERT_EQ(p.qa->post_send(wr), PostError::kOk);
  }
  ASSERT_TRUE(p.run_until([&] { return p.a_scq.size() > 0; }));
  auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(p.qa->outstanding_sends(), 0u);
  // After an error every request completes, signaled or not.
  p.net.set_link_up(p.ha, p.hb, false);
  for (uint64_t i = 10; i < 13; ++i) {
    SendRequest wr = write_wr(i, src.data(), 8192, dst.data(), rkey);
    wr.signaled = false;
    ASSERT_EQ(p.qa->post_send(wr), PostError::kOk);
  }
  ASSERT_TRUE(p.run_until([&] { return p.qa->state() == ConnectionState::kError; }));
  wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(wcs[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(wcs[2].status, WcStatus::kWrFlushErr);
}

TEST(CompletionSemantics, CompletionQueueOverrunMovesToErrorAndKeepsCountersSane) {
  SimPairOptions o;
  o.link = four_path_link();
  o.cq_depth = 1;
  SimPair p(o);
  std::vector<uint8_t> src(100, 1), dst(100, 0);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), 100, kAccessRemoteWrite, 0);
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(p.qa->post_send(write_wr(i, src.data(), 100, dst.data(), rkey)), PostError::kOk);
  }
  ASSERT_TRUE(p.run_until([&] { return p.qa->state() == ConnectionState::kError; }));
  EXPECT_EQ(p.qa->outstanding_sends(), 0u);
  EXPECT_GT(p.a_scq.overruns(), 0u);
  EXPECT_EQ(p.a_scq.size(), 1u);
}

TEST(CompletionSemantics, ReadFailsCleanlyWhenItsSourceIsDeregisteredMidResponse) {
  SimPairOptions o;
  o.link = four_path_link();
  SimPair p(o);
  constexpr uint32_t kLen = 1 << 20;
  auto source = std::make_unique<uint8_t[]>(kLen);
  std::fill_n(source.get(), kLen, 0x5a);
  std::vector<uint8_t> local(kLen, 0);
  const uint32_t rkey = p.b.memory().register_region(source.get(), kLen, kAccessRemoteRead, 0);
  SendRequest wr;
  wr.wr_id = 77;
  wr.opcode = Opcode::kRead;
  wr.local = sgl_of(local.data(), kLen);
  wr.remote_addr = reinterpret_cast<uintptr_t>(source.get());
  wr.rkey = rkey;
  ASSERT_EQ(p.qa->post_send(wr), PostError::kOk);
  ASSERT_TRUE(p.run_until([&] { return p.qb->stats().data_sent > 20; }));
  // The responder's application deregisters and frees the region: the rest
  // of the response must not read it (ASan watches), and the READ fails.
  ASSERT_TRUE(p.b.memory().deregister(rkey));
  source.reset();
  ASSERT_TRUE(p.run_until([&] { return p.a_scq.size() > 0; }));
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 77u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_GT(p.qb->stats().access_errors, 0u);
}

TEST(CompletionSemantics, EcnMarkInABurstIsChargedToTheMarkedPacketsEntropy) {
  ConnectionConfig c;
  c.entropy.count = 8;
  DirectPair p(c);
  std::vector<uint8_t> src(8192, 1), dst(8192, 0);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), 8192, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(write_wr(1, src.data(), 8192, dst.data(), rkey)), PostError::kOk);
  auto frames = p.drain(p.a);
  ASSERT_EQ(frames.size(), 2u);
  ASSERT_NE(entropy_of(frames[0]), entropy_of(frames[1]));
  set_ecn(frames[0], wire::kEcnCe);
  p.deliver(p.b, frames);  // one burst: marked packet first, then a clean one
  p.settle();
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  for (uint8_t e = 0; e < 8; ++e) {
    const uint32_t marks = p.qa->paths().stats(e).ecn_marked;
    EXPECT_EQ(marks, p.qa->paths().entropy(e) == entropy_of(frames[0]) ? 1u : 0u)
        << "entropy index " << int{e};
  }
}

// Several marked packets in one burst (a receiver that ACKs seldom, e.g.
// behind a busy core): each is named by an ACK of its own, so every mark is
// charged to its own entropy and none is taken for a clean delivery.
TEST(CompletionSemantics, EveryEcnMarkInABurstIsChargedToItsOwnEntropy) {
  ConnectionConfig c;
  c.entropy.count = 8;
  c.entropy.policy = PathPolicy::kReps;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> src(16 * 1024, 1), dst(16 * 1024, 0);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(write_wr(1, src.data(), dst.size(), dst.data(), rkey)), PostError::kOk);
  auto frames = p.drain(p.a);
  ASSERT_EQ(frames.size(), 16u);
  // Entropies 1, 3 and 5 are marked (each carries two of the 16 packets).
  std::vector<uint32_t> expected(8, 0);
  for (Frame& f : frames) {
    for (uint8_t e : {1, 3, 5}) {
      if (entropy_of(f) == p.qa->paths().entropy(e)) {
        set_ecn(f, wire::kEcnCe);
        ++expected[e];
      }
    }
  }
  ASSERT_EQ(expected[1] + expected[3] + expected[5], 6u);
  p.deliver(p.b, frames);  // all in one burst, before b sends anything
  const auto acks = p.drain(p.b);
  EXPECT_GE(acks.size(), 6u);  // one per marked packet at least
  p.deliver(p.a, acks);
  p.settle();
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  EXPECT_TRUE(src == dst);
  for (uint8_t e = 0; e < 8; ++e) {
    EXPECT_EQ(p.qa->paths().stats(e).ecn_marked, expected[e]) << "entropy index " << int{e};
  }
}

// The ACK for a retransmitted packet goes out on three entropies: its
// sender already missed one answer, and a path that swallows ACKs (a silent
// failure in the ACKs' direction) must not take every copy.
TEST(CompletionSemantics, AnAckForARetransmissionGoesOutOnThreeEntropies) {
  ConnectionConfig c;
  c.entropy.count = 8;
  DirectPair p(c);
  std::vector<uint8_t> src(512, 5), dst(512, 0);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(write_wr(1, src.data(), dst.size(), dst.data(), rkey)), PostError::kOk);
  p.deliver(p.b, p.drain(p.a));
  ASSERT_EQ(p.drain(p.b).size(), 1u);  // its ACK, lost
  // The sender resends (a probe or the RTO); the receiver sees a duplicate.
  std::vector<Frame> again;
  for (int i = 0; i < 10'000 && again.empty(); ++i) {
    p.now += 1'000;
    p.a.advance(p.now);
    again = p.drain(p.a);
  }
  ASSERT_EQ(again.size(), 1u);
  p.deliver(p.b, again);
  const auto acks = p.drain(p.b);
  ASSERT_EQ(acks.size(), 3u);
  EXPECT_NE(entropy_of(acks[0]), entropy_of(acks[1]));
  EXPECT_NE(entropy_of(acks[1]), entropy_of(acks[2]));
  EXPECT_NE(entropy_of(acks[0]), entropy_of(acks[2]));
  // The last copy alone completes the write.
  p.deliver(p.a, {acks[2]});
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  EXPECT_TRUE(src == dst);
}

}  // namespace
// An InfiniBand responder answers READs while still in RTR, before any send
// PSN is set (perftest's ib_read_bw server): the requester expects the PSN
// the responder advertised, but the responses start elsewhere. The first
// response packet of the first READ tells the requester where; a stray
// response before it (a later offset) does not move anything.
TEST(CompletionSemantics, ReadFromAResponderWithoutItsSendPsnCompletes) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  // b (the responder) sends from PSN 0; a expects 5000.
  auto [qa, qb] = p.add_rtr_responder_pair(c);
  ASSERT_TRUE(qa && qb);

  std::vector<uint8_t> source(8000), local(8000, 0);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 7 + 3);
  const uint32_t rkey =
      p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
  SendRequest wr;
  wr.wr_id = 9;
  wr.opcode = Opcode::kRead;
  wr.local = sgl_of(local.data(), 8000);
  wr.remote_addr = reinterpret_cast<uintptr_t>(source.data());
  wr.rkey = rkey;
  ASSERT_EQ(qa->post_send(wr), PostError::kOk);
  p.deliver(p.b, p.drain(p.a));      // the READ request
  const auto frames = p.drain(p.b);  // 8 response packets and an ACK
  std::vector<Frame> responses;
  for (const Frame& f : frames) {
    if (f.size() > 400) responses.push_back(f);
  }
  ASSERT_EQ(responses.size(), 8u);
  // The second response packet first: a cannot place it yet.
  p.deliver(p.a, {responses[1]});
  EXPECT_EQ(qa->stats().data_received, 0u);
  EXPECT_EQ(std::count(local.begin(), local.end(), 0), 8000);  // nothing placed
  p.deliver(p.a, frames);
  p.settle();
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(local, source);
  EXPECT_EQ(qa->stats().data_received, 8u);
}

}  // namespace braid::test
