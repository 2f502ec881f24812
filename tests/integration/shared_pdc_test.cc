// A PDC shared by the queue pairs of two endpoints (ConnectionConfig::
// shared, Endpoint::attach_queue_pair): its ids on the wire are QP numbers,
// and each side learns from the other's first data which of its queue
// pairs the peer names and so where the peer's PSNs start. Queue pairs
// leave it (destroy) with packets in flight.
#include <algorithm>
#include <deque>

#include "direct_pair.h"

namespace braid::test {
namespace {

// a's QPs 10 and 11 talk to b's 20 and 21. As two hosts may, each side set
// its PDC up from another pair: a's from 10 <-> 20, b's from 21 <-> 11.
// Each QP has its own PSNs, as an application exchanges them: a10 sends
// from 1000, a11 from 7000, b20 from 5000, b21 from 9000.
struct Shared {
  DirectPair& p;
  Connection* ca = nullptr;
  Connection* cb = nullptr;
  std::deque<CompletionQueue> cqs;  // a10, a11, b20, b21: send and receive each
  uint16_t a11 = Connection::kNoSlot, b20 = Connection::kNoSlot;

  CompletionQueue* cq() { return &cqs.emplace_back(256); }
  explicit Shared(DirectPair& pair, bool speak = true) : p(pair) {
    ConnectionConfig c;
    c.shared = true;
    c.local_id = 10;
    c.remote_id = 20;
    c.qp_num = 10;
    c.remote_qpn = 20;
    c.rx_psn = c.tx_psn = 5000;  // until RTS: its rq_psn (as the verbs layer)
    c.remote_mac = mac_of(2);
    c.remote_ip = kIpB;
    CompletionQueue* q = cq();
    ca = p.a.create_connection(c, q, q);
    c.local_id = 21;
    c.remote_id = 11;
    c.qp_num = 21;
    c.remote_qpn = 11;
    c.rx_psn = c.tx_psn = 7000;
    c.remote_mac = mac_of(1);
    c.remote_ip = kIpA;
    q = cq();
    cb = p.b.create_connection(c, q, q);
    EXPECT_NE(ca, nullptr);
    EXPECT_NE(cb, nullptr);
    QpConfig qa = ca->queue_pair_config(11, 21);
    qa.rx_psn = 9000;
    q = cq();
    a11 = p.a.attach_queue_pair(10, qa, q, q);
    QpConfig qb = cb->queue_pair_config(20, 10);
    qb.rx_psn = 1000;
    q = cq();
    b20 = p.b.attach_queue_pair(21, qb, q, q);
    EXPECT_NE(a11, Connection::kNoSlot);
    EXPECT_NE(b20, Connection::kNoSlot);
    if (!speak) return;
    // RTS: a11 first on a, b20 first on b; the later ones change nothing.
    ca->speak_as(a11, 7000);
    ca->speak_as(0, 1000);
    cb->speak_as(b20, 5000);
    cb->speak_as(0, 9000);
  }
  CompletionQueue& a10cq() { return cqs[0]; }
  CompletionQueue& b21cq() { return cqs[1]; }
  CompletionQueue& a11cq() { return cqs[2]; }
  CompletionQueue& b20cq() { return cqs[3]; }
};

// Retries that run out within a test's budget: an RTO of 1 to 4 ms, two
// retries.
ConnectionConfig quick_retries() {
  ConnectionConfig c;
  c.rto_min_ns = 1'000'000;
  c.rto_max_ns = 4'000'000;
  c.retry_limit = 2;
  return c;
}

// Shared PDCs with one QP each: a's 10 <-> b's 20, settings from `c`, CQs
// cq[0] (a) and cq[1] (b), both at RTS from PSN 0.
std::pair<Connection*, Connection*> one_qp_pdcs(DirectPair& p, ConnectionConfig c,
                                                std::deque<CompletionQueue>& cq) {
  c.shared = true;
  c.local_id = c.qp_num = 10;
  c.remote_id = c.remote_qpn = 20;
  c.remote_mac = mac_of(2);
  c.remote_ip = kIpB;
  Connection* ca = p.a.create_connection(c, &cq[0], &cq[0]);
  c.local_id = c.qp_num = 20;
  c.remote_id = c.remote_qpn = 10;
  c.remote_mac = mac_of(1);
  c.remote_ip = kIpA;
  Connection* cb = p.b.create_connection(c, &cq[1], &cq[1]);
  if (ca != nullptr && cb != nullptr) {
    ca->speak_as(0, 0);
    cb->speak_as(0, 0);
  }
  return {ca, cb};
}

// Posts `wr` on the queue pair in `slot` of `c` and moves frames until
// `cq` holds one completion (at most `budget` of virtual time): its status.
WcStatus post_and_wait(DirectPair& p, Connection* c, uint16_t slot, CompletionQueue& cq,
                       const SendRequest& wr, TimeNs budget) {
  if (c->post_send(slot, wr) != PostError::kOk) {
    ADD_FAILURE() << "post_send refused";
    return WcStatus::kWrFlushErr;
  }
  if (!p.run_for(budget, 1'000, [&] { return cq.size() == 1; })) {
    ADD_FAILURE() << "no completion";
    return WcStatus::kWrFlushErr;
  }
  return poll_all(cq)[0].status;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

TEST(SharedPdc, EndsThatSetItUpFromDifferentQueuePairsLearnEachOthersNamesAndPsns) {
  DirectPair p;
  Shared s(p);
  constexpr uint32_t kLen = 5000;
  // Every QP WRITEs to its peer and SENDs to it.
  struct Flow {
    Connection* from;
    uint16_t slot;
    Endpoint* to_ep;
    Connection* to;
    uint16_t to_slot;
    CompletionQueue* scq;
    CompletionQueue* rcq;
  };
  const Flow flows[] = {{s.ca, 0, &p.b, s.cb, s.b20, &s.a10cq(), &s.b20cq()},
                        {s.ca, s.a11, &p.b, s.cb, 0, &s.a11cq(), &s.b21cq()},
                        {s.cb, s.b20, &p.a, s.ca, 0, &s.b20cq(), &s.a10cq()},
                        {s.cb, 0, &p.a, s.ca, s.a11, &s.b21cq(), &s.a11cq()}};
  std::vector<std::vector<uint8_t>> src, wdst, rdst;
  for (int i = 0; i < 4; ++i) {
    src.push_back(pattern(kLen, static_cast<uint8_t>(i)));
    wdst.emplace_back(kLen, 0);
    rdst.emplace_back(kLen, 0);
  }
  for (int i = 0; i < 4; ++i) {
    const Flow& f = flows[i];
    const uint32_t key =
        f.to_ep->memory().register_region(wdst[i].data(), kLen, kAccessRemoteWrite, 0);
    ASSERT_EQ(f.to->post_recv(f.to_slot, 50 + i, sgl_of(rdst[i].data(), kLen)), PostError::kOk);
    ASSERT_EQ(f.from->post_send(
                  f.slot, request(1, Opcode::kWrite, src[i].data(), kLen, wdst[i].data(), key)),
              PostError::kOk);
    ASSERT_EQ(f.from->post_send(f.slot, request(2, Opcode::kSend, src[i].data(), kLen)),
              PostError::kOk);
  }
  // What each side names on the wire: the pair of its first QP to reach RTS.
  for (const Frame& f : p.drain(p.a)) {
    const wire::ParsedPacket pkt = parse(f);
    EXPECT_EQ(pkt.req.spdcid, 11);
    EXPECT_EQ(pkt.req.dpdcid, 21);
    EXPECT_LT(pkt.req.psn - 7000, 64u);  // a11's PSNs
    p.b.receive(f.data(), static_cast<uint32_t>(f.size()), p.now);
  }
  EXPECT_TRUE(s.cb->peer_named());
  ASSERT_TRUE(p.run_for(20'000'000, 1'000, [&] {
    return std::all_of(std::begin(flows), std::end(flows),
                       [](const Flow& f) { return f.rcq->size() >= 1; }) &&
           s.a10cq().size() == 3 && s.a11cq().size() == 3 && s.b20cq().size() == 3 &&
           s.b21cq().size() == 3;
  }));
  for (CompletionQueue* q : {&s.a10cq(), &s.a11cq(), &s.b20cq(), &s.b21cq()}) {
    for (const WorkCompletion& wc : poll_all(*q)) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wdst[i], src[i]) << i;
    EXPECT_EQ(rdst[i], src[i]) << i;
  }
  EXPECT_EQ(s.ca->wire_id(), 11);
  EXPECT_EQ(s.cb->wire_id(), 20);
  EXPECT_EQ(s.ca->peer_wire_id(), 20);
  EXPECT_EQ(s.cb->peer_wire_id(), 11);
  EXPECT_EQ(s.ca->stats().wrong_job_id + s.cb->stats().wrong_job_id, 0u);
  // One PSN space each way: 2 WRITEs + 2 SENDs of 2 packets at 4096.
  EXPECT_EQ(s.cb->stats().data_received, 8u);
  EXPECT_EQ(s.ca->stats().data_received, 8u);
}

// Only a queue pair's own peer may name it, and the first data must carry
// the job id of the pair it names: a stranger's frame teaches nothing.
TEST(SharedPdc, AFrameNamingAPairThatIsNotOursTeachesNothing) {
  DirectPair p;
  Shared s(p);
  static std::vector<uint8_t> src(100, 9);
  std::vector<uint8_t> dst(100, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), 100, kAccessRemoteWrite, 0);
  ASSERT_EQ(s.ca->post_send(s.a11, request(1, Opcode::kWrite, src.data(), 100, dst.data(), key)),
            PostError::kOk);
  const std::vector<Frame> frames = p.drain(p.a);
  ASSERT_EQ(frames.size(), 1u);
  auto renamed = [](Frame f, uint16_t src_id, uint16_t dst_id) {
    const wire::ParsedPacket pkt = parse(f);
    wire::RequestHeader h = pkt.req;
    h.spdcid = src_id;
    h.dpdcid = dst_id;
    wire::encode_request(f.data() + wire::kL2L4Size, h);
    return f;
  };
  const uint64_t unknown = p.b.stats().drops_for(wire::DropReason::kUnknownConnection);
  // 20's peer is 10, not 11; 22 is no QP of b's.
  for (const Frame& f : {renamed(frames[0], 11, 20), renamed(frames[0], 11, 22)}) {
    p.b.receive(f.data(), static_cast<uint32_t>(f.size()), p.now);
  }
  EXPECT_EQ(p.b.stats().drops_for(wire::DropReason::kUnknownConnection), unknown + 2);
  // A pair of b's (20 <-> 10), but the job id is the one of 21 <-> 11.
  const Frame forged = renamed(frames[0], 10, 20);
  p.b.receive(forged.data(), static_cast<uint32_t>(forged.size()), p.now);
  EXPECT_FALSE(s.cb->peer_named());
  EXPECT_EQ(s.cb->stats().wrong_job_id, 1u);
  EXPECT_EQ(dst[0], 0);
  // The real one still teaches and writes.
  p.deliver(p.b, frames);
  EXPECT_TRUE(s.cb->peer_named());
  EXPECT_EQ(s.cb->peer_wire_id(), 11);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return s.a11cq().size() == 1; }));
  EXPECT_EQ(poll_all(s.a11cq())[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, src);
}

// b destroys QP 21 while a's WRITEs to it are on their way: they are
// refused, a's QP 11 alone ends, and the PDC carries QP 10's WRITEs on.
// Nothing reaches 21's completion queue once it has gone.
TEST(SharedPdc, AQueuePairDestroyedUnderItsPeersWritesEndsOnlyThatPeer) {
  DirectPair p;
  Shared s(p);
  static std::vector<uint8_t> src(4096, 5);
  std::vector<uint8_t> dst(4096, 0), other(4096, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), 4096, kAccessRemoteWrite, 0);
  const uint32_t okey = p.b.memory().register_region(other.data(), 4096, kAccessRemoteWrite, 0);
  ASSERT_EQ(s.ca->post_send(s.a11, request(1, Opcode::kWrite, src.data(), 100, dst.data(), key)),
            PostError::kOk);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return s.a11cq().size() == 1; }));
  poll_all(s.a11cq());
  std::vector<uint8_t> rbuf(64);
  ASSERT_EQ(s.cb->post_recv(0, 77, sgl_of(rbuf.data(), 64)), PostError::kOk);  // (never completes)
  for (uint64_t k = 0; k < 4; ++k) {
    ASSERT_EQ(
        s.ca->post_send(s.a11, request(10 + k, Opcode::kWrite, src.data(), 4096, dst.data(), key)),
        PostError::kOk);
  }
  const std::vector<Frame> in_flight = p.drain(p.a);
  ASSERT_EQ(in_flight.size(), 4u);
  std::fill(dst.begin(), dst.end(), 0);
  // 21 is the QP b's PDC is kept under: it goes, the PDC stays.
  EXPECT_EQ(p.b.detach_queue_pair(21, 0), Endpoint::Detach::kNumberHeld);  // the PDC's number
  EXPECT_TRUE(s.cb->removed(0));
  EXPECT_EQ(s.cb->live_queue_pairs(), 1u);
  p.deliver(p.b, in_flight);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return s.a11cq().size() == 4; }));
  const auto wcs = poll_all(s.a11cq());
  EXPECT_NE(wcs[0].status, WcStatus::kSuccess);
  for (size_t i = 1; i < wcs.size(); ++i) EXPECT_EQ(wcs[i].status, WcStatus::kWrFlushErr);
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(s.b21cq().size(), 0u);
  EXPECT_GE(s.cb->stats().wrong_qp, 4u);
  // The PDC goes on: QP 10 -> 20.
  ASSERT_EQ(
      post_and_wait(p, s.ca, 0, s.a10cq(),
                    request(20, Opcode::kWrite, src.data(), 4096, other.data(), okey), 10'000'000),
      WcStatus::kSuccess);
  EXPECT_EQ(other, src);
  EXPECT_EQ(s.ca->state(), ConnectionState::kActive);
  EXPECT_EQ(s.cb->state(), ConnectionState::kActive);
}

// a destroys QP 10 with its WRITEs lost on the way: they go again as
// NO_OPs (their buffers are the program's again), the PSN space moves on,
// and QP 11 goes on. 10's completion queue gets nothing.
TEST(SharedPdc, ARemovedQueuePairsLostRequestsGoAgainAsNoOps) {
  DirectPair p;
  Shared s(p);
  static std::vector<uint8_t> src(4096, 8);
  std::vector<uint8_t> dst(4096, 0), other(4096, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), 4096, kAccessRemoteWrite, 0);
  const uint32_t okey = p.b.memory().register_region(other.data(), 4096, kAccessRemoteWrite, 0);
  for (uint64_t k = 0; k < 3; ++k) {
    ASSERT_EQ(s.ca->post_send(0, request(k, Opcode::kWrite, src.data(), 4096, dst.data(), key)),
              PostError::kOk);
  }
  ASSERT_EQ(p.drain(p.a).size(), 3u);                                      // lost
  EXPECT_EQ(p.a.detach_queue_pair(10, 0), Endpoint::Detach::kNumberHeld);  // 10 keeps the PDC
  EXPECT_TRUE(s.ca->removed(0));
  ASSERT_EQ(
      post_and_wait(p, s.ca, s.a11, s.a11cq(),
                    request(9, Opcode::kWrite, src.data(), 4096, other.data(), okey), 100'000'000),
      WcStatus::kSuccess);
  EXPECT_EQ(other, src);
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(s.cb->stats().nops_received, 3u);
  EXPECT_EQ(s.a10cq().size(), 0u);
  EXPECT_EQ(s.ca->unacked_packets(), 0u);
}

// A QP that was not the PDC's first may leave and give its number back.
TEST(SharedPdc, AnotherQueuePairsNumberIsFreeOnceItLeaves) {
  DirectPair p;
  Shared s(p);
  static std::vector<uint8_t> src(64, 1);
  std::vector<uint8_t> dst(64, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), 64, kAccessRemoteWrite, 0);
  std::vector<uint8_t> back(64, 0);
  const uint32_t bkey = p.a.memory().register_region(back.data(), 64, kAccessRemoteWrite, 0);
  ASSERT_EQ(s.ca->post_send(0, request(1, Opcode::kWrite, src.data(), 64, dst.data(), key)),
            PostError::kOk);
  ASSERT_EQ(s.cb->post_send(0, request(2, Opcode::kWrite, src.data(), 64, back.data(), bkey)),
            PostError::kOk);
  ASSERT_TRUE(
      p.run_for(10'000'000, 1'000, [&] { return s.a10cq().size() == 1 && s.b21cq().size() == 1; }));
  ASSERT_TRUE(s.ca->peer_named());
  // b's PDC: kept under 21, speaks as 20, the peer names 21: 20 stays too.
  EXPECT_EQ(p.b.detach_queue_pair(21, s.b20), Endpoint::Detach::kNumberHeld);
  // a's: kept under 10, speaks as 11, b names 10; a QP 12 joins and leaves.
  QpConfig q = s.ca->queue_pair_config(12, 22);
  CompletionQueue cq(16);
  const uint16_t slot = p.a.attach_queue_pair(10, q, &cq, &cq);
  ASSERT_NE(slot, Connection::kNoSlot);
  EXPECT_EQ(p.a.attach_queue_pair(10, q, &cq, &cq), Connection::kNoSlot);  // taken
  EXPECT_EQ(p.a.detach_queue_pair(10, slot), Endpoint::Detach::kNumberFree);
  EXPECT_EQ(p.a.detach_queue_pair(10, slot), Endpoint::Detach::kRefused);  // gone already
  EXPECT_NE(p.a.attach_queue_pair(10, s.ca->queue_pair_config(12, 23), &cq, &cq),
            Connection::kNoSlot);
}

// A responder that answers READs in RTR (no QP of b's reaches RTS): its
// responses start at a's PSN under a's names reversed, and a takes them.
TEST(SharedPdc, ReadsAreAnsweredByAResponderThatStaysInRtr) {
  DirectPair p;
  Shared s(p, /*speak=*/false);
  s.ca->speak_as(s.a11, 7000);
  std::vector<uint8_t> src = pattern(6000, 3), dst(6000, 0);
  const uint32_t key = p.b.memory().register_region(src.data(), 6000, kAccessRemoteRead, 0);
  ASSERT_EQ(s.ca->post_send(s.a11, request(1, Opcode::kRead, dst.data(), 6000, src.data(), key)),
            PostError::kOk);
  ASSERT_TRUE(p.run_for(20'000'000, 1'000, [&] { return s.a11cq().size() == 1; }));
  EXPECT_EQ(poll_all(s.a11cq())[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(s.cb->wire_id(), 21);  // a's pair reversed
  EXPECT_EQ(s.ca->stats().wrong_job_id, 0u);
}

// A request for a QP the peer has not attached yet (its side is not at
// RTR) waits as for a missing receive and arrives once it is there.
TEST(SharedPdc, ARequestForAQueuePairNotThereYetWaitsForIt) {
  DirectPair p;
  Shared s(p);
  CompletionQueue a12(16), b22(16);
  const uint16_t slot = p.a.attach_queue_pair(10, s.ca->queue_pair_config(12, 22), &a12, &a12);
  ASSERT_NE(slot, Connection::kNoSlot);
  std::vector<uint8_t> msg = pattern(3000, 4), rbuf(3000, 0);
  ASSERT_EQ(s.ca->post_send(slot, request(1, Opcode::kSend, msg.data(), 3000)), PostError::kOk);
  ASSERT_TRUE(p.run_for(2'000'000, 1'000, [&] { return s.cb->stats().rnr_nacks > 0; }));
  EXPECT_EQ(a12.size(), 0u);
  const uint16_t bslot = p.b.attach_queue_pair(21, s.cb->queue_pair_config(22, 12), &b22, &b22);
  ASSERT_NE(bslot, Connection::kNoSlot);
  ASSERT_EQ(s.cb->post_recv(bslot, 5, sgl_of(rbuf.data(), 3000)), PostError::kOk);
  ASSERT_TRUE(p.run_for(100'000'000, 1'000, [&] { return a12.size() == 1 && b22.size() == 1; }));
  EXPECT_EQ(poll_all(a12)[0].status, WcStatus::kSuccess);
  EXPECT_EQ(poll_all(b22)[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rbuf, msg);
  EXPECT_EQ(s.ca->state(), ConnectionState::kActive);
}

// A CLOSE naming one of a shared PDC's pairs with a PSN the PDC never sent
// (a stale one, or a stranger's guess) acknowledges nothing.
TEST(SharedPdc, ACloseNamingAPsnNeverSentIsIgnored) {
  DirectPair p;
  Shared s(p);
  static std::vector<uint8_t> src(4096, 2);
  std::vector<uint8_t> dst(4096, 0), back(64, 0);
  const uint32_t key = p.a.memory().register_region(dst.data(), 4096, kAccessRemoteWrite, 0);
  const uint32_t bkey = p.b.memory().register_region(back.data(), 64, kAccessRemoteWrite, 0);
  // Both learn each other's names first.
  ASSERT_EQ(s.ca->post_send(s.a11, request(1, Opcode::kWrite, src.data(), 64, back.data(), bkey)),
            PostError::kOk);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return s.a11cq().size() == 1; }));
  ASSERT_EQ(s.cb->post_send(s.b20, request(2, Opcode::kWrite, src.data(), 64, dst.data(), key)),
            PostError::kOk);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return s.b20cq().size() == 1; }));
  poll_all(s.b20cq());
  // b's WRITEs on their way; a CLOSE "from a" claims a PSN far beyond them.
  for (uint64_t k = 0; k < 3; ++k) {
    ASSERT_EQ(
        s.cb->post_send(s.b20, request(3 + k, Opcode::kWrite, src.data(), 4096, dst.data(), key)),
        PostError::kOk);
  }
  ASSERT_EQ(p.drain(p.b).size(), 3u);
  Frame close(256);
  close.resize(s.ca->build_close(close.data(), static_cast<uint32_t>(close.size())));
  ASSERT_GT(close.size(), 0u);
  const Frame forged = with_ctrl(close, [](wire::CtrlHeader& h) { h.psn += 100'000; });
  p.b.receive(forged.data(), static_cast<uint32_t>(forged.size()), p.now);
  EXPECT_EQ(s.cb->stats().stale_closes, 1u);
  EXPECT_EQ(s.b20cq().size(), 0u);
  EXPECT_EQ(s.cb->unacked_packets(), 3u);
}

// b's PDC has one QP (20) while a's QPs 11 and 12 already send to b's 21
// and 22: requests of any kind for them are filled with NO_OPs and go
// again later, QP 10's traffic goes on meanwhile, 11's complete once b's
// 21 is there, and 12's, for a QP that never comes, end in RETRY_EXC_ERR
// alone.
TEST(SharedPdc, RequestsForQueuePairsNotThereDoNotHoldThePdc) {
  DirectPair p;
  const ConnectionConfig c = quick_retries();
  std::deque<CompletionQueue> cq;
  for (int i = 0; i < 5; ++i) cq.emplace_back(64);
  auto [ca, cb] = one_qp_pdcs(p, c, cq);
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(cb, nullptr);
  const uint16_t a11 = p.a.attach_queue_pair(10, ca->queue_pair_config(11, 21), &cq[2], &cq[2]);
  const uint16_t a12 = p.a.attach_queue_pair(10, ca->queue_pair_config(12, 22), &cq[3], &cq[3]);
  std::vector<uint8_t> src = pattern(5000, 6), d10(5000, 0), d11(5000, 0), d12(5000, 0),
                       rsrc = pattern(3000, 9), rdst(3000, 0);
  const uint32_t k10 = p.b.memory().register_region(d10.data(), 5000, kAccessRemoteWrite, 0);
  const uint32_t k11 = p.b.memory().register_region(d11.data(), 5000, kAccessRemoteWrite, 0);
  const uint32_t k12 = p.b.memory().register_region(d12.data(), 5000, kAccessRemoteWrite, 0);
  const uint32_t kr = p.b.memory().register_region(rsrc.data(), 3000, kAccessRemoteRead, 0);
  ASSERT_EQ(ca->post_send(a11, request(1, Opcode::kWrite, src.data(), 5000, d11.data(), k11)),
            PostError::kOk);
  ASSERT_EQ(ca->post_send(a11, request(2, Opcode::kRead, rdst.data(), 3000, rsrc.data(), kr)),
            PostError::kOk);
  ASSERT_EQ(ca->post_send(a12, request(3, Opcode::kWrite, src.data(), 5000, d12.data(), k12)),
            PostError::kOk);
  ASSERT_EQ(ca->post_send(0, request(4, Opcode::kWrite, src.data(), 5000, d10.data(), k10)),
            PostError::kOk);
  // QP 10's WRITE completes while b has no 21 or 22.
  ASSERT_TRUE(p.run_for(5'000'000, 1'000, [&] { return cq[0].size() == 1; }));
  EXPECT_EQ(poll_all(cq[0])[0].status, WcStatus::kSuccess);
  EXPECT_EQ(d10, src);
  EXPECT_GE(cb->stats().rnr_nacks, 2u);
  EXPECT_EQ(cq[2].size(), 0u);
  // b's 21 comes; 11's WRITE and READ complete, 12's ends alone.
  const uint16_t b21 = p.b.attach_queue_pair(20, cb->queue_pair_config(21, 11), &cq[4], &cq[4]);
  ASSERT_NE(b21, Connection::kNoSlot);
  ASSERT_TRUE(
      p.run_for(1'000'000'000, 1'000, [&] { return cq[2].size() == 2 && cq[3].size() == 1; }));
  for (const WorkCompletion& wc : poll_all(cq[2])) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(d11, src);
  EXPECT_EQ(rdst, rsrc);
  EXPECT_EQ(poll_all(cq[3])[0].status, WcStatus::kRetryExcErr);
  EXPECT_TRUE(std::all_of(d12.begin(), d12.end(), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(ca->state(), ConnectionState::kActive);
  EXPECT_EQ(cb->state(), ConnectionState::kActive);
  // The PDC still carries QP 10.
  ASSERT_EQ(post_and_wait(p, ca, 0, cq[0],
                          request(5, Opcode::kWrite, src.data(), 100, d10.data(), k10), 10'000'000),
            WcStatus::kSuccess);
}

// A shared PDC's only QP going to ERR ends the QP, not the PDC: the peer's
// PDC goes on, and a new QP of ours finds this one and talks through it.
TEST(SharedPdc, ItsOnlyQueuePairsErrorLeavesThePdc) {
  DirectPair p;
  std::deque<CompletionQueue> cq;
  for (int i = 0; i < 4; ++i) cq.emplace_back(64);
  auto [ca, cb] = one_qp_pdcs(p, ConnectionConfig{}, cq);
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(cb, nullptr);
  std::vector<uint8_t> src = pattern(2000, 1), dst(2000, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), 2000, kAccessRemoteWrite, 0);
  ASSERT_EQ(ca->post_send(0, request(1, Opcode::kWrite, src.data(), 2000, dst.data(), key)),
            PostError::kOk);
  ASSERT_TRUE(p.run_for(5'000'000, 1'000, [&] { return cq[0].size() == 1; }));
  poll_all(cq[0]);
  ca->set_queue_pair_error(0, WcStatus::kWrFlushErr);
  EXPECT_EQ(ca->state(), ConnectionState::kActive);
  EXPECT_EQ(ca->queue_pair(0).state(), ConnectionState::kError);
  const uint16_t a11 = p.a.attach_queue_pair(10, ca->queue_pair_config(11, 21), &cq[2], &cq[2]);
  const uint16_t b21 = p.b.attach_queue_pair(20, cb->queue_pair_config(21, 11), &cq[3], &cq[3]);
  ASSERT_NE(a11, Connection::kNoSlot);
  ASSERT_NE(b21, Connection::kNoSlot);
  std::fill(dst.begin(), dst.end(), 0);
  ASSERT_EQ(post_and_wait(p, ca, a11, cq[2],
                          request(2, Opcode::kWrite, src.data(), 2000, dst.data(), key), 5'000'000),
            WcStatus::kSuccess);
  EXPECT_EQ(dst, src);
}

// b "restarts": its PDC goes without a CLOSE (a crash), and its new self
// sets up a new QP 30 with a new QP 12 of a's, which joins a's PDC (still
// active: nothing told it b went). b's new PDC names the pair 30 <-> 12;
// a's names 10 <-> 20, which b no longer has. Neither end takes the
// other's data, and each WRITE ends in an error completion, with no byte
// placed at either end (docs/architecture.md: a known limit).
TEST(SharedPdc, APeerThatRestartedIsNotReachedThroughTheStalePdcAndEachEndFails) {
  DirectPair p;
  const ConnectionConfig c = quick_retries();
  std::deque<CompletionQueue> cq;
  for (int i = 0; i < 4; ++i) cq.emplace_back(64);
  auto [ca, cb] = one_qp_pdcs(p, c, cq);
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(cb, nullptr);
  std::vector<uint8_t> src = pattern(3000, 4), da(3000, 0), db(3000, 0);
  const uint32_t ka = p.a.memory().register_region(da.data(), 3000, kAccessRemoteWrite, 0);
  // a's PDC learns b's names from b's first data.
  ASSERT_EQ(post_and_wait(p, cb, 0, cq[1],
                          request(1, Opcode::kWrite, src.data(), 3000, da.data(), ka), 5'000'000),
            WcStatus::kSuccess);
  ASSERT_TRUE(ca->peer_named());
  std::fill(da.begin(), da.end(), 0);
  // The crash: b's PDC is gone, a hears nothing of it.
  p.b.destroy_connection(20);
  ConnectionConfig nb = c;
  nb.shared = true;
  nb.local_id = nb.qp_num = 30;
  nb.remote_id = nb.remote_qpn = 12;
  nb.rx_psn = nb.tx_psn = 4000;
  nb.remote_mac = mac_of(1);
  nb.remote_ip = kIpA;
  Connection* cb2 = p.b.create_connection(nb, &cq[3], &cq[3]);
  ASSERT_NE(cb2, nullptr);
  cb2->speak_as(0, 4000);
  QpConfig q12 = ca->queue_pair_config(12, 30);
  q12.rx_psn = 4000;
  const uint16_t a12 = p.a.attach_queue_pair(10, q12, &cq[2], &cq[2]);
  ASSERT_NE(a12, Connection::kNoSlot);
  ca->speak_as(a12, 6000);  // changes nothing: the PDC has spoken
  const uint32_t kb = p.b.memory().register_region(db.data(), 3000, kAccessRemoteWrite, 0);
  ASSERT_EQ(ca->post_send(a12, request(2, Opcode::kWrite, src.data(), 3000, db.data(), kb)),
            PostError::kOk);
  ASSERT_EQ(cb2->post_send(0, request(3, Opcode::kWrite, src.data(), 3000, da.data(), ka)),
            PostError::kOk);
  ASSERT_TRUE(
      p.run_for(1'000'000'000, 1'000, [&] { return cq[2].size() == 1 && cq[3].size() == 1; }));
  EXPECT_EQ(poll_all(cq[2])[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(poll_all(cq[3])[0].status, WcStatus::kRetryExcErr);
  EXPECT_TRUE(std::all_of(da.begin(), da.end(), [](uint8_t v) { return v == 0; }));
  EXPECT_TRUE(std::all_of(db.begin(), db.end(), [](uint8_t v) { return v == 0; }));
  // Why: b's new frames reach a's stale PDC through QP 12's number and are
  // not of its job; a's reach b under a pair b no longer has.
  EXPECT_GT(ca->stats().wrong_job_id, 0u);
  EXPECT_GT(p.b.stats().drops_for(wire::DropReason::kUnknownConnection), 0u);
}

// QPs come and go on a long-lived PDC: a removed one's slot, and its
// memory, go to the next one once no packet of it is unacknowledged, so
// the PDC does not grow with the QPs it has carried. A request for the
// removed QP's number is still refused, and does not reach the QP that
// took its slot.
TEST(SharedPdc, ALeftQueuePairsSlotGoesToTheNextOnceItsPacketsAreAcknowledged) {
  DirectPair p;
  std::deque<CompletionQueue> cq;
  for (int i = 0; i < 5; ++i) cq.emplace_back(64);
  auto [ca, cb] = one_qp_pdcs(p, ConnectionConfig{}, cq);
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(cb, nullptr);
  std::vector<uint8_t> src = pattern(3000, 2), dst(3000, 0), back(3000, 0);
  const uint32_t key = p.b.memory().register_region(dst.data(), 3000, kAccessRemoteWrite, 0);
  const uint32_t bkey = p.a.memory().register_region(back.data(), 3000, kAccessRemoteWrite, 0);
  // Each side's PDC learns the other's names (until then a leaving QP's
  // number stays held: the peer may name it).
  ASSERT_EQ(
      post_and_wait(p, cb, 0, cq[1],
                    request(1, Opcode::kWrite, src.data(), 3000, back.data(), bkey), 10'000'000),
      WcStatus::kSuccess);
  std::fill(back.begin(), back.end(), 0);
  ASSERT_EQ(
      post_and_wait(p, ca, 0, cq[0], request(2, Opcode::kWrite, src.data(), 3000, dst.data(), key),
                    10'000'000),
      WcStatus::kSuccess);
  uint16_t first = Connection::kNoSlot;
  uint16_t kept_b = Connection::kNoSlot;  // b's QP 200, kept after a's 100 leaves
  for (uint32_t i = 0; i < 40; ++i) {
    const uint32_t qa = 100 + i, qb = 200 + i;
    const uint16_t sa = p.a.attach_queue_pair(10, ca->queue_pair_config(qa, qb), &cq[2], &cq[2]);
    const uint16_t sb = p.b.attach_queue_pair(20, cb->queue_pair_config(qb, qa), &cq[3], &cq[3]);
    ASSERT_NE(sa, Connection::kNoSlot);
    ASSERT_NE(sb, Connection::kNoSlot);
    if (i == 0) first = sa;
    EXPECT_EQ(sa, first) << "QP " << qa;
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_EQ(ca->post_send(sa, request(i, Opcode::kWrite, src.data(), 3000, dst.data(), key)),
              PostError::kOk);
    ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return cq[2].size() == 1; }));
    ASSERT_EQ(poll_all(cq[2])[0].status, WcStatus::kSuccess);
    ASSERT_EQ(dst, src);
    EXPECT_EQ(p.a.detach_queue_pair(10, sa), Endpoint::Detach::kNumberFree);
    if (i == 0) {
      kept_b = sb;
      continue;
    }
    EXPECT_EQ(p.b.detach_queue_pair(20, sb), Endpoint::Detach::kNumberFree);
    if (i == 1) {
      // a's 101 has 100's slot; b's 200 writes to 100: refused, nothing
      // placed, nothing completes on a.
      ASSERT_EQ(
          cb->post_send(kept_b, request(99, Opcode::kWrite, src.data(), 3000, back.data(), bkey)),
          PostError::kOk);
      ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return cq[3].size() == 1; }));
      EXPECT_EQ(poll_all(cq[3])[0].status, WcStatus::kRemInvReqErr);
      EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t v) { return v == 0; }));
      EXPECT_EQ(cq[2].size(), 0u);
    }
  }
  EXPECT_EQ(ca->queue_pair_slots(), 2u);
  EXPECT_EQ(ca->live_queue_pairs(), 1u);
  EXPECT_EQ(ca->state(), ConnectionState::kActive);
}

// A QP that leaves with a READ outstanding keeps its slot: the READ's
// responses name it, and must not reach a QP that took it. So does one
// whose error (modify_qp to ERR) came first and flushed the READ.
void leave_with_a_read_outstanding(bool error_first) {
  DirectPair p;
  std::deque<CompletionQueue> cq;
  for (int i = 0; i < 4; ++i) cq.emplace_back(64);
  auto [ca, cb] = one_qp_pdcs(p, ConnectionConfig{}, cq);
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(cb, nullptr);
  std::vector<uint8_t> remote = pattern(3000, 7), into(3000, 0);
  const uint32_t rkey = p.b.memory().register_region(remote.data(), 3000, kAccessRemoteRead, 0);
  const uint16_t sa = p.a.attach_queue_pair(10, ca->queue_pair_config(100, 200), &cq[2], &cq[2]);
  const uint16_t sb = p.b.attach_queue_pair(20, cb->queue_pair_config(200, 100), &cq[3], &cq[3]);
  ASSERT_NE(sa, Connection::kNoSlot);
  ASSERT_NE(sb, Connection::kNoSlot);
  cb->set_remote_access(sb, kAccessRemoteRead);
  ca->set_remote_access(sa, kAccessRemoteRead);
  ASSERT_EQ(ca->post_send(sa, request(1, Opcode::kRead, into.data(), 3000, remote.data(), rkey)),
            PostError::kOk);
  // The READ reaches b; its responses are held back.
  p.deliver(p.b, p.drain(p.a));
  const std::vector<Frame> responses = p.drain(p.b);
  ASSERT_FALSE(responses.empty());
  if (error_first) ca->set_queue_pair_error(sa, WcStatus::kWrFlushErr);
  EXPECT_EQ(p.a.detach_queue_pair(10, sa), Endpoint::Detach::kNumberHeld);  // b sent no data
  p.deliver(p.a, responses);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return ca->unacked_packets() == 0; }));
  const uint16_t sa2 = p.a.attach_queue_pair(10, ca->queue_pair_config(101, 201), &cq[2], &cq[2]);
  ASSERT_NE(sa2, Connection::kNoSlot);
  EXPECT_NE(sa2, sa);
  EXPECT_TRUE(std::all_of(into.begin(), into.end(), [](uint8_t v) { return v == 0; }));
  EXPECT_EQ(cq[2].size(), error_first ? 1u : 0u);  // (the flush's)
}

TEST(SharedPdc, AQueuePairThatLeftWithAReadOutstandingKeepsItsSlot) {
  for (const bool error_first : {false, true}) {
    SCOPED_TRACE(error_first ? "in error first" : "active");
    leave_with_a_read_outstanding(error_first);
  }
}

// a's QP 11 READs 3000 bytes from b's 21, which takes the READ and goes
// before answering; a's QP 10 and b's 20 (the PDCs' first) stay. Retries
// are quick: a retry budget of 2 x 0.4 ms.
struct ReadFromALeftResponder {
  DirectPair p;
  std::deque<CompletionQueue> cq;  // a10, b20, a11, b21
  Connection* ca = nullptr;
  Connection* cb = nullptr;
  std::vector<uint8_t> remote = pattern(3000, 3), into = std::vector<uint8_t>(3000, 0);

  void start(bool retry_forever) {
    ConnectionConfig c;
    c.rto_min_ns = c.rto_initial_ns = 200'000;
    c.rto_max_ns = 400'000;
    c.retry_limit = 1;
    c.retry_forever = retry_forever;
    for (int i = 0; i < 4; ++i) cq.emplace_back(256);
    std::tie(ca, cb) = one_qp_pdcs(p, c, cq);
    ASSERT_NE(ca, nullptr);
    ASSERT_NE(cb, nullptr);
    const uint16_t sa = p.a.attach_queue_pair(10, ca->queue_pair_config(11, 21), &cq[2], &cq[2]);
    const uint16_t sb = p.b.attach_queue_pair(20, cb->queue_pair_config(21, 11), &cq[3], &cq[3]);
    ASSERT_NE(sa, Connection::kNoSlot);
    ASSERT_NE(sb, Connection::kNoSlot);
    cb->set_remote_access(sb, kAccessRemoteRead);
    const uint32_t rkey = p.b.memory().register_region(remote.data(), 3000, kAccessRemoteRead, 0);
    ASSERT_EQ(ca->post_send(sa, request(1, Opcode::kRead, into.data(), 3000, remote.data(), rkey)),
              PostError::kOk);
    p.deliver(p.b, p.drain(p.a));
    EXPECT_EQ(p.b.detach_queue_pair(20, sb), Endpoint::Detach::kNumberFree);
  }
};

// With several QPs on the PDC, each QP's READs are timed on their own: that
// QP ends (RETRY_EXC_ERR) after the retry budget, while the PDC idles or
// while another QP keeps it busy, and the others go on.
void read_from_a_responder_that_left(bool busy) {
  ReadFromALeftResponder r;
  ASSERT_NO_FATAL_FAILURE(r.start(false));
  DirectPair& p = r.p;
  std::deque<CompletionQueue>& cq = r.cq;
  Connection* ca = r.ca;
  std::vector<uint8_t> src = pattern(65536, 5), dst(65536, 0);
  const uint32_t wkey = p.b.memory().register_region(dst.data(), 65536, kAccessRemoteWrite, 0);
  uint64_t writes = 0;
  auto post_write = [&] {
    ASSERT_EQ(ca->post_send(
                  0, request(100 + writes, Opcode::kWrite, src.data(), 65536, dst.data(), wkey)),
              PostError::kOk);
  };
  if (busy) post_write();
  // Busy: QP 10 WRITEs all along, a new one as each completes.
  ASSERT_TRUE(p.run_for(100'000'000, 10'000, [&] {
    for (const WorkCompletion& wc : poll_all(cq[0])) {
      EXPECT_EQ(wc.status, WcStatus::kSuccess);
      ++writes;
      if (busy) post_write();
    }
    return cq[2].size() == 1;
  }));
  EXPECT_EQ(poll_all(cq[2])[0].status, WcStatus::kRetryExcErr);
  if (busy) {
    EXPECT_GT(writes, 10u);
  }
  EXPECT_EQ(ca->state(), ConnectionState::kActive);
  EXPECT_GE(ca->stats().read_timeouts, 1u);
  EXPECT_TRUE(std::all_of(r.into.begin(), r.into.end(), [](uint8_t v) { return v == 0; }));
  // QP 10 goes on (the last WRITE of the busy phase completes first).
  ASSERT_TRUE(p.run_for(100'000'000, 10'000, [&] { return ca->unacked_packets() == 0; }));
  std::fill(dst.begin(), dst.end(), 0);
  ASSERT_EQ(ca->post_send(0, request(7, Opcode::kWrite, src.data(), 65536, dst.data(), wkey)),
            PostError::kOk);
  bool done = false;
  ASSERT_TRUE(p.run_for(100'000'000, 10'000, [&] {
    for (const WorkCompletion& wc : poll_all(cq[0])) {
      EXPECT_EQ(wc.status, WcStatus::kSuccess);
      done = done || wc.wr_id == 7;
    }
    return done;
  }));
  EXPECT_EQ(dst, src);
}

TEST(SharedPdc, AReadWhoseResponderLeftEndsItsQueuePairAloneIdleOrBusy) {
  for (const bool busy : {false, true}) {
    SCOPED_TRACE(busy ? "busy" : "idle");
    read_from_a_responder_that_left(busy);
  }
}

// The same READ on a QP that retries for ever (verbs' timeout 0) waits for
// good, as a single QP's does.
TEST(SharedPdc, AReadWhoseResponderLeftWaitsForGoodWhenRetriesNeverEnd) {
  ReadFromALeftResponder r;
  ASSERT_NO_FATAL_FAILURE(r.start(true));
  // 50 retry budgets of virtual time.
  EXPECT_FALSE(r.p.run_for(40'000'000, 10'000, [&] { return r.cq[2].size() > 0; }));
  EXPECT_EQ(r.ca->queue_pair(1).state(), ConnectionState::kActive);
  EXPECT_EQ(r.ca->state(), ConnectionState::kActive);
}

}  // namespace
}  // namespace braid::test
