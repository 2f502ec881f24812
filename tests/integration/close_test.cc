// Closing a connection (Endpoint::close_connection), as an RC QP goes: the
// peer's last sends complete although our last ACK never reached it (lost,
// or left in a ring the peer had not read when our port closed), and the
// closing end stops waiting once the peer answers, closes too, or the
// retries are spent.
#include <set>

#include "direct_pair.h"
#include "wire/pds.h"

namespace braid::test {
namespace {

constexpr uint16_t kIdA = 1, kIdB = 2;  // DirectPair's qa and qb

uint8_t pds_type(const Frame& f) {
  return wire::decode_prologue(f.data() + wire::kL2L4Size).type;
}
bool is_ack(const Frame& f) {
  const auto t = static_cast<wire::PdsType>(pds_type(f));
  return t == wire::PdsType::kAck || t == wire::PdsType::kAckCc || t == wire::PdsType::kAckCcx;
}
bool is_close(const Frame& f) {
  const wire::Prologue p = wire::decode_prologue(f.data() + wire::kL2L4Size);
  return p.type == static_cast<uint8_t>(wire::PdsType::kCtrl) &&
         p.next_hdr == static_cast<uint8_t>(wire::CtrlType::kBraidClose);
}

// A 64-byte WRITE from `from` into `to`'s `dst`, carried and acknowledged.
void write_64(DirectPair& p, Connection* from, Endpoint& to, std::vector<uint8_t>& dst,
              CompletionQueue& cq) {
  static std::vector<uint8_t> src(64, 1);
  const uint32_t key = to.memory().register_region(dst.data(), 64, kAccessRemoteWrite, 0);
  ASSERT_EQ(from->post_send(request(1, Opcode::kWrite, src.data(), 64, dst.data(), key)),
            PostError::kOk);
  p.settle();
  ASSERT_EQ(poll_all(cq).size(), 1u);
}

// a WRITEs one packet to b; b takes it in and its ACK is lost.
struct LastAckLost : ::testing::Test {
  void SetUp() override {
    rkey = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
    ASSERT_EQ(p.qa->post_send(request(7, Opcode::kWrite, src.data(), 64, dst.data(), rkey)),
              PostError::kOk);
    p.deliver(p.b, p.drain(p.a));
    p.now += 20'000;  // past b's ACK delay
    p.b.advance(p.now);
    const auto acks = p.drain(p.b);
    ASSERT_EQ(acks.size(), 1u);
    ASSERT_TRUE(is_ack(acks[0]));
    ASSERT_EQ(dst, src);
  }
  DirectPair p;
  std::vector<uint8_t> src = std::vector<uint8_t>(64, 5), dst = std::vector<uint8_t>(64, 0);
  uint32_t rkey = 0;
};

// What the close is for: without it, a's WRITE, complete at b, fails.
TEST_F(LastAckLost, WithoutACloseThePeersWriteEndsInRetryExceeded) {
  p.b.destroy_connection(kIdB);
  ASSERT_TRUE(p.run_for(2'000'000'000, 100'000, [&] { return p.a_scq.size() == 1; }));
  const auto wcs = poll_all(p.a_scq);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
}

TEST_F(LastAckLost, TheCloseCompletesThePeersWriteAndItsAnswerEndsTheWait) {
  p.b.close_connection(kIdB);
  EXPECT_EQ(p.b.connection(kIdB), nullptr);
  EXPECT_EQ(p.b.closing(), 1u);
  auto out = p.drain(p.b);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(is_close(out[0]));  // lost as well
  // The CLOSE goes again after close_retry_ns, before a's RTO (2 ms).
  p.now += p.b.config().close_retry_ns;
  p.b.advance(p.now);
  out = p.drain(p.b);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(is_close(out[0]));
  p.deliver(p.a, out);
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(p.qa->unacked_packets(), 0u);
  p.deliver(p.b, p.drain(p.a));  // the answer
  EXPECT_EQ(p.b.closing(), 0u);
  EXPECT_EQ(p.b.stats().closes_sent, 2u);
  EXPECT_EQ(p.b.stats().closes_answered, 1u);
  EXPECT_EQ(p.b.stats().closes_unanswered, 0u);
  // Nothing more either way, and nothing dropped.
  p.now += 100'000'000;
  p.a.advance(p.now);
  p.b.advance(p.now);
  EXPECT_TRUE(p.drain(p.a).empty());
  EXPECT_TRUE(p.drain(p.b).empty());
  EXPECT_EQ(p.a.stats().dropped() + p.b.stats().dropped(), 0u);
}

// The peer's retransmission (its RTO) brings the CLOSE at once.
TEST_F(LastAckLost, ThePeersRetransmissionIsAnsweredWithTheClose) {
  p.b.close_connection(kIdB);
  ASSERT_TRUE(is_close(p.drain(p.b).at(0)));  // lost
  p.now += p.qa->rto_ns();
  p.a.advance(p.now);
  const auto retx = p.drain(p.a);
  ASSERT_EQ(retx.size(), 1u);
  ASSERT_FALSE(is_ack(retx[0]) || is_close(retx[0]));
  p.deliver(p.b, retx);
  const auto out = p.drain(p.b);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(is_close(out[0]));
  p.deliver(p.a, out);
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

// An ACK without the P flag (one a sent before our CLOSE reached it) does
// not end the wait: only the answer says a has our cumulative PSN.
TEST_F(LastAckLost, APlainAckFromThePeerDoesNotEndTheWait) {
  // b sends a packet to a, so that a has an ACK of its own to send.
  const uint32_t akey = p.a.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qb->post_send(request(8, Opcode::kWrite, src.data(), 64, dst.data(), akey)),
            PostError::kOk);
  p.deliver(p.a, p.drain(p.b));
  p.now += 20'000;
  p.a.advance(p.now);
  auto plain = p.drain(p.a);
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_TRUE(is_ack(plain[0]));
  p.b.close_connection(kIdB);
  p.drain(p.b);  // the CLOSE, lost
  p.deliver(p.b, plain);
  EXPECT_EQ(p.b.closing(), 1u);
  EXPECT_EQ(p.b.stats().closes_answered, 0u);
}

TEST_F(LastAckLost, AnUnansweredCloseIsGivenUpAfterItsRetries) {
  // Nothing comes back (the peer's host is gone): b's CLOSEs reach no one.
  p.b.close_connection(kIdB);
  uint32_t closes = 0;
  const TimeNs start = p.now;
  TimeNs last_close = 0;
  while (p.b.closing() > 0 && p.now - start < 1'000'000'000) {
    for (const Frame& f : p.drain(p.b)) {
      ASSERT_TRUE(is_close(f));
      ++closes;
      last_close = p.now - start;
    }
    p.now += 100'000;
    p.b.advance(p.now);
  }
  const EndpointConfig& c = p.b.config();
  EXPECT_EQ(closes, c.close_sends);
  EXPECT_EQ(p.b.closing(), 0u);
  EXPECT_EQ(p.b.stats().closes_unanswered, 1u);
  // Sent at 0, 1, 3, 7, 15 and 31 intervals; given up at 63.
  const TimeNs span = c.close_retry_ns * ((TimeNs{1} << c.close_sends) - 1);
  EXPECT_GE(last_close, c.close_retry_ns * ((TimeNs{1} << (c.close_sends - 1)) - 1));
  EXPECT_GE(p.now - start, span);
  EXPECT_LT(p.now - start, span + 200'000);
}

// A peer whose connection is gone without a record (it received nothing,
// or closed first) answers the CLOSE all the same: nothing there waits.
TEST_F(LastAckLost, APeerWithoutTheConnectionAnswersAtOnce) {
  p.a.destroy_connection(kIdA);
  p.b.close_connection(kIdB);
  p.deliver(p.a, p.drain(p.b));
  const auto answer = p.drain(p.a);
  ASSERT_EQ(answer.size(), 1u);
  ASSERT_TRUE(is_ack(answer[0]));
  EXPECT_EQ(p.a.stats().closes_answered_unknown, 1u);
  p.deliver(p.b, answer);
  EXPECT_EQ(p.b.closing(), 0u);
  EXPECT_EQ(p.b.stats().closes_answered, 1u);
  EXPECT_EQ(p.a.stats().dropped() + p.b.stats().dropped(), 0u);
}

// The peer's retransmissions each bring a CLOSE at once, outside the timed
// budget: the timed sends still all go, on their schedule.
TEST_F(LastAckLost, CloseSentForThePeersDataDoNotSpendTheRetries) {
  p.b.close_connection(kIdB);
  ASSERT_TRUE(is_close(p.drain(p.b).at(0)));  // timed send 1, lost
  // a's retransmission, three times over, before b's next timed send.
  p.now += p.qa->rto_ns();
  p.a.advance(p.now);
  const auto retx = p.drain(p.a);
  ASSERT_EQ(retx.size(), 1u);
  for (int i = 0; i < 3; ++i) {
    p.deliver(p.b, retx);
    const auto out = p.drain(p.b);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_TRUE(is_close(out[0]));  // lost
  }
  uint32_t timed = 1;
  while (p.b.closing() > 0 && timed < 100) {
    p.now += 100'000;
    p.b.advance(p.now);
    timed += static_cast<uint32_t>(p.drain(p.b).size());
  }
  EXPECT_EQ(timed, p.b.config().close_sends);
  EXPECT_EQ(p.b.stats().closes_sent, p.b.config().close_sends + 3u);
  EXPECT_EQ(p.b.stats().closes_unanswered, 1u);
}

// The sends go out on the connection's entropies in turn (one dead path
// must not take them all).
TEST(Close, TheClosesGoOutOnTheConnectionsEntropies) {
  ConnectionConfig c;
  c.entropy.count = 4;
  DirectPair p(c);
  std::vector<uint8_t> dst(64, 0);
  write_64(p, p.qa, p.b, dst, p.a_scq);
  std::set<uint16_t> expected;
  for (uint8_t e = 0; e < 4; ++e) expected.insert(p.qb->paths().entropy(e));
  p.b.close_connection(kIdB);
  std::set<uint16_t> seen_ports;
  for (int i = 0; i < 4; ++i) {
    const auto out = p.drain(p.b);
    ASSERT_EQ(out.size(), 1u);
    seen_ports.insert(entropy_of(out[0]));
    p.now += p.b.config().close_retry_ns << i;
    p.b.advance(p.now);
  }
  EXPECT_EQ(seen_ports, expected);
}

// A CLOSE acknowledges only what the connection sent and is outstanding:
// one naming a PSN beyond snd_nxt completes nothing; one naming the first of
// two packets completes the first message only.
TEST(Close, ACloseAcknowledgesOnlyOutstandingPackets) {
  DirectPair p;
  std::vector<uint8_t> src(64, 1), dst(128, 0);
  const uint32_t kb = p.b.memory().register_region(dst.data(), 128, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 64, dst.data(), kb)),
            PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kWrite, src.data(), 64, dst.data() + 64, kb)),
            PostError::kOk);
  const auto data = p.drain(p.a);
  ASSERT_EQ(data.size(), 2u);
  p.deliver(p.b, {data[0]});  // the second is lost
  p.drain(p.b);               // its ACK, if any: lost
  p.b.close_connection(kIdB);
  auto close = p.drain(p.b);
  ASSERT_EQ(close.size(), 1u);
  ASSERT_TRUE(is_close(close[0]));
  // A forged copy naming a PSN far beyond what a sent.
  const Frame forged = with_ctrl(close[0], [](wire::CtrlHeader& h) { h.psn += 1000; });
  p.deliver(p.a, {forged});
  EXPECT_TRUE(poll_all(p.a_scq).empty());
  EXPECT_EQ(p.qa->unacked_packets(), 2u);
  p.deliver(p.a, close);
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(p.qa->unacked_packets(), 1u);
}

// A CLOSE that names PSNs this connection never sent came from an earlier
// connection on the same ids (its PSNs started elsewhere) or a stranger: it
// does not mark the peer closed (this end still sends its own CLOSE as it
// goes), and it is answered as a CLOSE for an unknown id is (echoing its
// PSN, telling nothing of ours), so that live ids do not show.
TEST(Close, ACloseFromAnEarlierConnectionOnTheIdsChangesNothing) {
  DirectPair p;
  std::vector<uint8_t> at_a(64, 0), at_b(64, 0);
  write_64(p, p.qa, p.b, at_b, p.a_scq);  // b received data: it owes a a CLOSE
  write_64(p, p.qb, p.a, at_a, p.b_scq);  // a too
  p.a.close_connection(kIdA);
  auto close = p.drain(p.a);
  ASSERT_EQ(close.size(), 1u);
  ASSERT_TRUE(is_close(close[0]));
  for (const uint32_t shift : {0x10000000u, 0x00800000u, 0xfffffff0u}) {
    const uint32_t psn = parse(close[0]).ctrl.psn + shift;
    p.deliver(p.b, {with_ctrl(close[0], [&](wire::CtrlHeader& h) { h.psn = psn; })});
    const auto answers = p.drain(p.b);
    ASSERT_EQ(answers.size(), 1u) << shift;
    EXPECT_EQ(parse(answers[0]).ack.cack_psn, psn);  // its own PSN back, not ours
  }
  EXPECT_EQ(p.qb->stats().stale_closes, 3u);
  EXPECT_EQ(p.b.stats().closes_answered_unknown, 0u);
  p.b.close_connection(kIdB);
  EXPECT_EQ(p.b.closing(), 1u);
}

// Live-id scanning (issue 32): a stranger's CLOSE gets the same answer
// whether the id it names is live or not.
TEST(Close, AStrangersCloseIsAnsweredAlikeForLiveAndUnknownIds) {
  DirectPair p;
  std::vector<uint8_t> at_b(64, 0);
  write_64(p, p.qa, p.b, at_b, p.a_scq);
  p.b.close_connection(kIdB);  // a CLOSE from b, to a: a template
  auto close = p.drain(p.b);
  ASSERT_EQ(close.size(), 1u);
  std::vector<Frame> answers;
  for (const uint16_t id : {kIdA, uint16_t{777}}) {
    p.deliver(p.a, {with_ctrl(close[0], [&](wire::CtrlHeader& h) {
                h.psn = 0x5a5a5a5a;
                h.dpdcid = id;
                h.spdcid = 4242;  // not a's peer's id
              })});
    auto got = p.drain(p.a);
    ASSERT_EQ(got.size(), 1u) << id;
    answers.push_back(got[0]);
  }
  // Alike but for the ids they name.
  const wire::ParsedPacket x = parse(answers[0]), y = parse(answers[1]);
  EXPECT_EQ(answers[0].size(), answers[1].size());
  EXPECT_EQ(x.ack.cack_psn, 0x5a5a5a5au);
  EXPECT_EQ(y.ack.cack_psn, 0x5a5a5a5au);
  EXPECT_EQ(x.ack.pro.flags, y.ack.pro.flags);
  EXPECT_EQ(x.ack.spdcid, kIdA);
  EXPECT_EQ(y.ack.spdcid, 777);
}

// A flood of forged CLOSEs gets at most the token bucket's answers: 64 at
// once, then 10,000 a second.
TEST(Close, StatelessAnswersAreRateLimited) {
  DirectPair p;
  std::vector<uint8_t> at_b(64, 0);
  write_64(p, p.qa, p.b, at_b, p.a_scq);
  p.b.close_connection(kIdB);
  auto close = p.drain(p.b);
  ASSERT_EQ(close.size(), 1u);
  auto flood = [&](int n) {
    size_t answered = 0;
    for (int i = 0; i < n; ++i) {
      p.deliver(p.a, {with_ctrl(close[0], [&](wire::CtrlHeader& h) {
                  h.dpdcid = static_cast<uint16_t>(1000 + i);
                })});
      answered += p.drain(p.a).size();
    }
    return answered;
  };
  EXPECT_EQ(flood(200), 64u);
  EXPECT_EQ(p.a.stats().stateless_limited, 136u);
  p.now += 1'000'000;  // 1 ms: 10 more
  EXPECT_EQ(flood(200), 10u);
}

// The same CLOSE as sent is answered, and ends b's need to send its own.
TEST(Close, TheCloseOfThisConnectionIsAnsweredAndEndsTheOwedClose) {
  DirectPair p;
  std::vector<uint8_t> at_a(64, 0), at_b(64, 0);
  write_64(p, p.qa, p.b, at_b, p.a_scq);
  write_64(p, p.qb, p.a, at_a, p.b_scq);
  p.a.close_connection(kIdA);
  auto close = p.drain(p.a);
  ASSERT_EQ(close.size(), 1u);
  p.deliver(p.b, close);
  EXPECT_EQ(p.drain(p.b).size(), 1u);  // the answer
  EXPECT_EQ(p.qb->stats().stale_closes, 0u);
  p.b.close_connection(kIdB);
  EXPECT_EQ(p.b.closing(), 0u);
}

// Both ends received data and close at once: each CLOSE ends the other's
// wait, and neither gives up.
TEST(Close, BothEndsClosingEndEachOthersWait) {
  DirectPair p;
  std::vector<uint8_t> at_a(64, 0), at_b(64, 0);
  write_64(p, p.qa, p.b, at_b, p.a_scq);
  write_64(p, p.qb, p.a, at_a, p.b_scq);
  p.a.close_connection(kIdA);
  p.b.close_connection(kIdB);
  ASSERT_EQ(p.a.closing() + p.b.closing(), 2u);
  p.settle();
  EXPECT_EQ(p.a.closing() + p.b.closing(), 0u);
  EXPECT_EQ(p.a.stats().closes_unanswered + p.b.stats().closes_unanswered, 0u);
  EXPECT_EQ(p.a.stats().closes_answered, 1u);
  EXPECT_EQ(p.b.stats().closes_answered, 1u);
}

// A connection that received nothing owes its peer nothing: no CLOSE.
TEST(Close, NoCloseFromAnEndThatReceivedNoData) {
  DirectPair p;
  std::vector<uint8_t> dst(64, 0);
  write_64(p, p.qa, p.b, dst, p.a_scq);
  p.a.close_connection(kIdA);
  EXPECT_EQ(p.a.closing(), 0u);
  EXPECT_TRUE(p.drain(p.a).empty());
  // b received a's data: it does send one.
  p.b.close_connection(kIdB);
  EXPECT_EQ(p.b.closing(), 1u);
}

// A new connection that takes a closing record's id ends that record.
TEST(Close, ANewConnectionOnTheIdEndsTheRecord) {
  DirectPair p;
  std::vector<uint8_t> dst(64, 0);
  write_64(p, p.qa, p.b, dst, p.a_scq);
  p.b.close_connection(kIdB);
  ASSERT_EQ(p.b.closing(), 1u);
  ConnectionConfig c;
  c.local_id = kIdB;
  c.remote_id = 9;
  c.remote_ip = kIpA;
  c.remote_mac = mac_of(1);
  ASSERT_NE(p.b.create_connection(c, &p.b_scq, &p.b_rcq), nullptr);
  EXPECT_EQ(p.b.closing(), 0u);
  EXPECT_TRUE(p.drain(p.b).empty());
}

}  // namespace
}  // namespace braid::test
