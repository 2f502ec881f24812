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
  forged.push_back(with_ctrl(forged[0], [](wire::CtrlHeader& h) {
    h.pro.type = static_cast<uint8_t>(wire::PdsType::kCtrl);
    h.pro.next_hdr = static_cast<uint8_t>(wire::CtrlType::kBraidClose);
  }));
  ASSERT_GE(forged.size(), 7u);
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
