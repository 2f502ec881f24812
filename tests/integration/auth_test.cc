// The authenticated mode (issue 32): every packet sealed with AES-256-GCM
// under per-direction keys (wire/tss.h). Transfers stay byte-exact through
// loss; every forged, changed, replayed or clear frame is dropped and
// counted, and nothing is answered for it.
#include <algorithm>

#include "direct_pair.h"
#include "workload.h"

namespace braid::test {
namespace {

bool sealed(const Frame& f) {
  return f.size() > wire::kL2L4Size && (f[wire::kL2L4Size] >> 3) == wire::kPdsTypeSecurity;
}

TEST(Auth, SendWriteAndReadAreByteExactSealedThroughLoss) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c, 1024, false, AuthMode::kOn);
  std::vector<uint8_t> msg(5000), rbuf(5000, 0), wsrc(20000), wdst(20000, 0), rsrc(20000),
      rdst(20000, 0);
  fill_pattern(msg.data(), msg.size(), 1);
  fill_pattern(wsrc.data(), wsrc.size(), 2);
  fill_pattern(rsrc.data(), rsrc.size(), 3);
  const uint32_t wkey =
      p.b.memory().register_region(wdst.data(), wdst.size(), kAccessRemoteWrite, 0);
  const uint32_t rkey =
      p.b.memory().register_region(rsrc.data(), rsrc.size(), kAccessRemoteRead, 0);
  ASSERT_EQ(p.qb->post_recv(1, sgl_of(rbuf.data(), 5000)), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kSend, msg.data(), 5000)), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kWrite, wsrc.data(), 20000, wdst.data(), wkey)),
            PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(3, Opcode::kRead, rdst.data(), 20000, rsrc.data(), rkey)),
            PostError::kOk);
  size_t frames = 0, clear = 0;
  ASSERT_TRUE(p.run_for(
      2'000'000'000, 10'000, [&] { return p.a_scq.size() == 3; },
      [&](const Frame& f, bool) {
        ++frames;
        if (!sealed(f)) ++clear;
        return frames % 7 == 3;  // every 7th frame lost, either way
      }));
  EXPECT_EQ(clear, 0u);
  for (const WorkCompletion& wc : poll_all(p.a_scq)) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  const auto rw = poll_all(p.b_rcq);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].byte_len, 5000u);
  EXPECT_EQ(rbuf, msg);
  EXPECT_EQ(wdst, wsrc);
  EXPECT_EQ(rdst, rsrc);
  for (Connection* q : {p.qa, p.qb}) {
    EXPECT_EQ(q->stats().auth_failed, 0u);
    EXPECT_EQ(q->stats().unsealed, 0u);
  }
  EXPECT_GT(p.qa->stats().lost_inferred + p.qa->stats().lost_timeout, 0u);  // it did resend
}

// A READ responder left in RTR (perftest's ib_read_bw server) seals its
// responses and ACKs from the requester's initial PSN on: the requester's
// other key, taken for good once a packet authenticates with it.
TEST(Auth, AResponderInRtrIsHeardUnderTheKeyOfItsStart) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c, 1024, false, AuthMode::kOn);
  auto [qa, qb] = p.add_rtr_responder_pair(c);
  ASSERT_TRUE(qa && qb);
  std::vector<uint8_t> source(30000), local(30000, 0);
  fill_pattern(source.data(), source.size(), 9);
  const uint32_t rkey =
      p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(qa->post_send(request(i, Opcode::kRead, local.data() + i * 10000, 10000,
                                    source.data() + i * 10000, rkey)),
              PostError::kOk);
  }
  p.settle();
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 3u);
  for (const WorkCompletion& wc : wa) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(local, source);
  EXPECT_EQ(qa->stats().auth_failed, 0u);
}

// b, still in RTR (it sends from a's PSN), ACKs a's WRITE: a takes b's
// RTR key for good. b then moves to RTS with another PSN: what it sends
// next must still be sealed with the key a holds.
TEST(Auth, APeerThatSentInRtrKeepsItsKeyAtRts) {
  DirectPair p(ConnectionConfig{}, 1024, false, AuthMode::kOn);
  ConnectionConfig ca, cb;
  ca.tx_psn = 777;
  ca.rx_psn = 5000;
  cb.rx_psn = cb.tx_psn = 777;  // RTR: b knows no send PSN yet
  auto [qa, qb] = p.add_pair(ca, cb, 3, 4);
  std::vector<uint8_t> src(64, 5), at_b(64, 0), at_a(64, 0);
  const uint32_t bkey = p.b.memory().register_region(at_b.data(), 64, kAccessRemoteWrite, 0);
  const uint32_t akey = p.a.memory().register_region(at_a.data(), 64, kAccessRemoteWrite, 0);
  ASSERT_EQ(qa->post_send(request(1, Opcode::kWrite, src.data(), 64, at_b.data(), bkey)),
            PostError::kOk);
  p.settle();
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);  // by b's ACK, sealed in RTR
  ASSERT_TRUE(qb->set_send_psn(5000));
  ASSERT_EQ(qb->post_send(request(2, Opcode::kWrite, src.data(), 64, at_a.data(), akey)),
            PostError::kOk);
  p.settle();
  const auto wb = poll_all(p.b_scq);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WcStatus::kSuccess);
  EXPECT_EQ(at_a, src);
  EXPECT_EQ(qa->stats().auth_failed, 0u);
}

// A QP made again on the same ids and PSNs: with the same nonce (none)
// its keys are the old ones, and a frame recorded from the old QP
// authenticates (what the nonce is for); with a new nonce it does not.
TEST(Auth, ANonceMakesTheKeysOfEachConnectionNew) {
  DirectPair p(ConnectionConfig{}, 1024, false, AuthMode::kOn);
  std::vector<uint8_t> msg(64, 3), rbuf(64, 0);
  ASSERT_EQ(p.qb->post_recv(1, sgl_of(rbuf.data(), 64)), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kSend, msg.data(), 64)), PostError::kOk);
  const std::vector<Frame> recorded = p.drain(p.a);
  ASSERT_EQ(recorded.size(), 1u);
  for (const uint8_t nonce : {0, 1}) {
    p.a.destroy_connection(1);
    p.b.destroy_connection(2);
    ConnectionConfig c;
    c.auth_nonce[0] = nonce;
    auto [qa, qb] = p.add_pair(c, c, 1, 2);
    ASSERT_EQ(qb->post_recv(1, sgl_of(rbuf.data(), 64)), PostError::kOk);
    p.deliver(p.b, recorded);
    EXPECT_EQ(qb->stats().data_received, nonce == 0 ? 1u : 0u) << int{nonce};
    EXPECT_EQ(qb->stats().auth_failed, nonce == 0 ? 0u : 1u) << int{nonce};
  }
}

// A 64-byte WRITE by `q` (on `from`) into `target` at `to`, carried; the ACK
// `to` sends for it is returned, not delivered.
std::vector<Frame> write_and_keep_ack(DirectPair& p, Connection* q, Endpoint& from, Endpoint& to,
                                      uint8_t* src, uint8_t* target) {
  p.deliver(to, p.post_write(q, from, to, src, target, 64));
  p.now += 20'000;  // past the ACK delay
  to.advance(p.now);
  return p.drain(to);
}

// Closing under auth: b's last ACK is lost and b closes. Each copy of its
// CLOSE is sealed anew (its own counter: a copy again is not a replay);
// a's WRITE completes by it, a's sealed answer ends b's wait, and a clear
// answer forged in between does not.
TEST(Auth, ACloseIsSealedAtEachSendAndOnlyTheSealedAnswerEndsTheWait) {
  DirectPair p(ConnectionConfig{}, 1024, false, AuthMode::kOn);
  DirectPair clear;  // the same ids and addresses, in clear
  std::vector<uint8_t> src(64, 5), dst(64, 0);
  ASSERT_EQ(write_and_keep_ack(p, p.qa, p.a, p.b, src.data(), dst.data()).size(), 1u);  // lost
  ASSERT_EQ(dst, src);
  p.b.close_connection(2);
  ASSERT_EQ(p.b.closing(), 1u);
  const std::vector<Frame> first = p.drain(p.b);  // the CLOSE, lost too
  ASSERT_EQ(first.size(), 1u);
  p.now += p.b.config().close_retry_ns;
  p.b.advance(p.now);
  const std::vector<Frame> second = p.drain(p.b);
  ASSERT_EQ(second.size(), 1u);
  ASSERT_TRUE(sealed(first[0]) && sealed(second[0]));
  EXPECT_NE(parse(first[0]).tss.counter, parse(second[0]).tss.counter);
  // A forged clear answer (a's own kind of frame, from the clear pair): b
  // keeps waiting.
  std::vector<uint8_t> cdst(64, 0);
  std::vector<Frame> forged_answer =
      write_and_keep_ack(clear, clear.qb, clear.b, clear.a, src.data(), cdst.data());  // a's
  ASSERT_EQ(forged_answer.size(), 1u);
  forged_answer[0][wire::kL2L4Size + 1] |= wire::kAckFlagProbe;  // as a CLOSE's answer
  ASSERT_TRUE(parse(forged_answer[0]).ack.pro.flags & wire::kAckFlagProbe);
  p.deliver(p.b, forged_answer);
  EXPECT_EQ(p.b.closing(), 1u);
  // The real CLOSE: a's WRITE completes, a answers, b stops waiting.
  p.deliver(p.a, second);
  p.deliver(p.a, first);  // the first copy, late: its own counter, taken too
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
  p.deliver(p.a, second);  // again: a replay
  EXPECT_EQ(p.qa->stats().auth_replayed, 1u);
  p.deliver(p.b, p.drain(p.a));
  EXPECT_EQ(p.b.closing(), 0u);
  EXPECT_EQ(p.b.stats().closes_answered, 1u);
}

// A pair in clear with the same addresses, ids and PSNs: what an attacker
// who knows all of them can send.
ConnectionConfig mtu_1024() {
  ConnectionConfig c;
  c.mtu = 1024;
  return c;
}

struct Attack {
  DirectPair clear{mtu_1024()};
  DirectPair victim{mtu_1024(), 1024, false, AuthMode::kOn};
  std::vector<uint8_t> msg = std::vector<uint8_t>(3000, 0x11);
  std::vector<uint8_t> rbuf = std::vector<uint8_t>(3000, 0);
  std::vector<uint8_t> region = std::vector<uint8_t>(3000, 0);
  uint32_t key = 0;
  Attack() {
    key = victim.b.memory().register_region(region.data(), region.size(),
                                            kAccessRemoteWrite | kAccessRemoteRead, 0);
    EXPECT_EQ(victim.qb->post_recv(1, sgl_of(rbuf.data(), 3000)), PostError::kOk);
  }
};

TEST(Auth, ClearFramesOfEveryKindAreDroppedAndCounted) {
  Attack t;
  // The clear pair's own traffic: SENDs, a WRITE to the victim's region's
  // address with its key, ACKs, a CREDIT_REQ and a CLOSE. Delivered to
  // the victim's b, each is refused.
  std::vector<uint8_t> evil(3000, 0xee);
  ASSERT_EQ(t.clear.qb->post_recv(1, sgl_of(t.rbuf.data(), 3000)), PostError::kOk);
  ASSERT_EQ(t.clear.qa->post_send(request(1, Opcode::kSend, evil.data(), 3000)), PostError::kOk);
  ASSERT_EQ(
      t.clear.qa->post_send(request(2, Opcode::kWrite, evil.data(), 3000, t.region.data(), t.key)),
      PostError::kOk);
  std::vector<Frame> forged = t.clear.drain(t.clear.a);
  t.clear.deliver(t.clear.b, forged);
  for (Frame& f : t.clear.drain(t.clear.b)) forged.push_back(std::move(f));  // b's ACKs
  // Control frames of each kind the earlier attacks used: CLOSE, CNP,
  // CREDIT, CREDIT_REQ (naming PSNs the victim would take).
  for (const wire::CtrlType type : {wire::CtrlType::kBraidClose, wire::CtrlType::kCnp,
                                    wire::CtrlType::kCredit, wire::CtrlType::kCreditReq}) {
    forged.push_back(with_ctrl(forged[0], [type](wire::CtrlHeader& h) {
      h.pro.type = static_cast<uint8_t>(wire::PdsType::kCtrl);
      h.pro.next_hdr = static_cast<uint8_t>(type);
    }));
  }
  // A READ response in clear for a READ the victim's a has outstanding.
  std::vector<uint8_t> local(1000, 0);
  ASSERT_EQ(
      t.victim.qa->post_send(request(3, Opcode::kRead, local.data(), 1000, t.region.data(), t.key)),
      PostError::kOk);
  (void)t.victim.drain(t.victim.a);  // the READ itself: lost
  std::vector<uint8_t> remote(1000, 0xee);
  const uint32_t ckey =
      t.clear.b.memory().register_region(remote.data(), 1000, kAccessRemoteRead, 0);
  ASSERT_EQ(
      t.clear.qa->post_send(request(3, Opcode::kRead, local.data(), 1000, remote.data(), ckey)),
      PostError::kOk);
  t.clear.deliver(t.clear.b, t.clear.drain(t.clear.a));
  for (Frame& f : t.clear.drain(t.clear.b)) {
    if (f.size() > 1000) forged.push_back(std::move(f));  // the response, b -> a
  }
  ASSERT_GE(forged.size(), 11u);
  size_t to_b = 0;
  for (const Frame& f : forged) {
    ASSERT_FALSE(sealed(f));
    const wire::ParsedPacket pkt = parse(f);
    // Frames a->b go to the victim's b; b's ACKs (b->a) to the victim's a.
    Endpoint& to = pkt.ip.dst == kIpB ? t.victim.b : t.victim.a;
    if (&to == &t.victim.b) ++to_b;
    t.victim.deliver(to, {f});
  }
  EXPECT_EQ(t.victim.qb->stats().unsealed + t.victim.qb->stats().stale_closes, to_b);
  EXPECT_EQ(t.victim.qa->stats().unsealed, forged.size() - to_b);
  EXPECT_EQ(t.victim.qb->stats().data_received, 0u);
  EXPECT_TRUE(poll_all(t.victim.b_rcq).empty());
  EXPECT_EQ(t.region, std::vector<uint8_t>(3000, 0));
  EXPECT_EQ(t.victim.qa->stats().acks_received, 0u);
  EXPECT_EQ(t.victim.qa->stats().data_received, 0u);  // the READ response
  EXPECT_EQ(local, std::vector<uint8_t>(1000, 0));
  EXPECT_EQ(t.victim.qb->stats().credit_requests_received, 0u);
  EXPECT_EQ(t.victim.qb->stats().cnps_received, 0u);
}

TEST(Auth, ChangedAndReplayedSealedFramesAreDroppedAndCounted) {
  Attack t;
  ASSERT_EQ(t.victim.qa->post_send(request(1, Opcode::kSend, t.msg.data(), 3000)), PostError::kOk);
  const std::vector<Frame> real = t.victim.drain(t.victim.a);
  ASSERT_EQ(real.size(), 3u);
  // One bit changed anywhere past the security header's first word
  // (counter, PSN, ids, SES, payload, ICV): refused.
  // Changed PDC ids do not reach the connection (no key for them).
  uint64_t expected_failed = 0, strangers = 0;
  const Frame& f0 = real[0];
  for (size_t i = wire::kL2L4Size + 4; i < f0.size(); i += 7) {
    Frame f = f0;
    f[i] ^= 0x10;
    const size_t ids = wire::kL2L4Size + wire::kTssHeaderSize + 8;  // spdcid, dpdcid
    if (i >= ids && i < ids + 4) {
      ++strangers;
    } else {
      ++expected_failed;
    }
    t.victim.deliver(t.victim.b, {f});
  }
  EXPECT_EQ(t.victim.qb->stats().auth_failed, expected_failed);
  EXPECT_GE(t.victim.b.stats().drops[static_cast<size_t>(wire::DropReason::kUnknownConnection)],
            strangers);
  EXPECT_EQ(t.victim.qb->stats().data_received, 0u);
  EXPECT_TRUE(t.victim.drain(t.victim.b).empty());  // no answer to any of it

  // The real frames land; each again is a replay.
  t.victim.deliver(t.victim.b, real);
  EXPECT_EQ(t.victim.qb->stats().data_received, 3u);
  t.victim.deliver(t.victim.b, real);
  EXPECT_EQ(t.victim.qb->stats().auth_replayed, 3u);
  EXPECT_EQ(t.victim.qb->stats().duplicates, 0u);  // not even seen as duplicates
  t.victim.settle();
  const auto rw = poll_all(t.victim.b_rcq);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(t.rbuf, t.msg);
}

// A stranger's clear CLOSE for an id that is not live gets the stateless
// answer in kOn (one for one, rate-limited) and nothing in kRequired.
TEST(Auth, RequiredAnswersNoUnauthenticatedFrame) {
  for (const AuthMode mode : {AuthMode::kOn, AuthMode::kRequired}) {
    ConnectionConfig c;
    DirectPair clear(c);
    DirectPair victim(c, 1024, false, mode);
    std::vector<uint8_t> one(10, 1);
    ASSERT_EQ(clear.qa->post_send(request(1, Opcode::kWrite, one.data(), 10)), PostError::kOk);
    const std::vector<Frame> frames = clear.drain(clear.a);
    ASSERT_FALSE(frames.empty());
    const Frame forged = with_ctrl(frames[0], [](wire::CtrlHeader& h) {
      h.pro.type = static_cast<uint8_t>(wire::PdsType::kCtrl);
      h.pro.next_hdr = static_cast<uint8_t>(wire::CtrlType::kBraidClose);
      h.dpdcid = 999;  // no such connection
    });
    victim.deliver(victim.b, {forged});
    EXPECT_EQ(victim.drain(victim.b).size(), mode == AuthMode::kOn ? 1u : 0u);
  }
}

}  // namespace
}  // namespace braid::test
