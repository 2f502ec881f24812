// Receiver-driven credit between two endpoints (lib/core/credit.h): a
// sender sends its speculative allowance, then only what the receiver
// grants; grants survive lost control packets; a receiver's pacer shares
// its turns among the connections that ask. Virtual time.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "direct_pair.h"

namespace braid::test {
namespace {

constexpr uint32_t kSpeculative = 16 * 1024;

ConnectionConfig credit_config() {
  ConnectionConfig c;
  c.mtu = 4096;
  c.cc.credit = true;
  c.cc.credit_speculative_bytes = kSpeculative;
  c.cc.link_bps = 10'000'000'000;  // the receiver grants 10 Gb/s
  return c;
}

bool is_data(const wire::ParsedPacket& p) {
  return static_cast<wire::PdsType>(p.pro.type) == wire::PdsType::kRudReq;
}

bool is_ctrl(const Frame& f, wire::CtrlType t) {
  const wire::ParsedPacket p = parse(f);
  return static_cast<wire::PdsType>(p.pro.type) == wire::PdsType::kCtrl &&
         p.ctrl.pro.next_hdr == static_cast<uint8_t>(t);
}

struct Transfer {
  explicit Transfer(ConnectionConfig c, uint32_t bytes) : p(c), src(bytes), dst(bytes, 0) {
    for (uint32_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
    rkey = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  }
  void post() {
    ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(),
                                      static_cast<uint32_t>(src.size()), dst.data(), rkey)),
              PostError::kOk);
  }
  bool done() {
    WorkCompletion wc[4];
    const uint32_t n = p.a_scq.poll(wc, 4);
    for (uint32_t i = 0; i < n; ++i) {
      EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
      completed = true;
    }
    return completed;
  }
  DirectPair p;
  std::vector<uint8_t> src, dst;
  uint32_t rkey = 0;
  bool completed = false;
};

TEST(Credit, AWriteBeyondTheAllowanceWaitsForGrantsAndArrivesIntact) {
  Transfer t(credit_config(), 1 << 20);
  t.post();
  // Before any answer from the receiver: the allowance and a request.
  const std::vector<Frame> first = t.p.drain(t.p.a);
  uint32_t data = 0, unscheduled = 0, requests = 0;
  for (const Frame& f : first) {
    const wire::ParsedPacket pkt = parse(f);
    if (is_data(pkt)) {
      ++data;
      if (pkt.req.pro.flags & wire::kReqFlagUnscheduled) ++unscheduled;
    }
    if (is_ctrl(f, wire::CtrlType::kCreditReq)) ++requests;
  }
  const uint32_t frame = 4096 + wire::kL2L4Size + wire::kRequestSize + wire::kSesStandardSize;
  EXPECT_EQ(data, (kSpeculative + frame - 1) / frame);  // the allowance, no more
  EXPECT_EQ(unscheduled, data);
  EXPECT_EQ(requests, 1u);
  t.p.deliver(t.p.b, first);
  ASSERT_TRUE(t.p.run_for(100'000'000, 1000, [&] { return t.done(); }));
  EXPECT_EQ(t.src, t.dst);
  const ConnectionStats& s = t.p.qa->stats();
  const ConnectionStats& r = t.p.qb->stats();
  EXPECT_EQ(s.unscheduled_sent, data);  // everything after went with credit
  EXPECT_GT(s.credits_received, 0u);
  EXPECT_GE(r.credit_bytes_granted, (1u << 20) - kSpeculative);
  // The grants paid for what was sent, and no more than a packet beyond.
  EXPECT_GE(t.p.qa->credit().used() + kSpeculative, (1u << 20));
  EXPECT_LE(t.p.qa->credit().used(), t.p.qa->credit().granted() + frame);
  EXPECT_EQ(s.retransmits, 0u);
  EXPECT_EQ(t.p.b.credit_pacer().stats().granted_bytes, r.credit_bytes_granted);
}

TEST(Credit, GrantsPaceTheSenderAtTheReceiversRate) {
  Transfer t(credit_config(), 4 << 20);
  t.post();
  ASSERT_TRUE(t.p.run_for(100'000'000, 1000, [&] { return t.done(); }));
  EXPECT_EQ(t.src, t.dst);
  // 4 MiB and its headers at 10 Gb/s take 3.4 ms of the receiver's link;
  // direct wires would take a few rounds. Within a round trip's slack
  // either way.
  const double wire_ns = (4.0 * 1024 * 1024 * (4096 + 98) / 4096) * 8 / 10;
  EXPECT_GT(static_cast<double>(t.p.now), 0.95 * wire_ns);
  EXPECT_LT(static_cast<double>(t.p.now), 1.05 * wire_ns);
}

TEST(Credit, LostRequestsAndGrantsAreAskedForAgain) {
  Transfer t(credit_config(), 1 << 20);
  t.post();
  int dropped_requests = 0, dropped_grants = 0, n = 0, m = 0;
  // Every third CREDIT_REQ and every second CREDIT is lost: the counts are
  // cumulative, so the next one repairs, and a sender left waiting asks
  // again after its timer.
  ASSERT_TRUE(t.p.run_for(
      500'000'000, 1000, [&] { return t.done(); },
      [&](const Frame& f, bool a_to_b) {
        if (a_to_b && is_ctrl(f, wire::CtrlType::kCreditReq)) {
          if (++n % 3 == 1) return ++dropped_requests, true;
        }
        if (!a_to_b && is_ctrl(f, wire::CtrlType::kCredit)) {
          if (++m % 2 == 0) return ++dropped_grants, true;
        }
        return false;
      }));
  EXPECT_EQ(t.src, t.dst);
  EXPECT_GT(dropped_requests, 0);
  EXPECT_GT(dropped_grants, 0);
  EXPECT_EQ(t.p.qa->state(), ConnectionState::kActive);
}

TEST(Credit, TheOnlyGrantLostLeavesTheSenderAskingUntilItComes) {
  Transfer t(credit_config(), 256 * 1024);
  t.post();
  // The first CREDIT_REQ and the first CREDIT are lost: nothing else would
  // ever move the sender after its allowance.
  int reqs = 0, grants = 0;
  ASSERT_TRUE(t.p.run_for(
      500'000'000, 1000, [&] { return t.done(); },
      [&](const Frame& f, bool a_to_b) {
        if (a_to_b && is_ctrl(f, wire::CtrlType::kCreditReq)) return ++reqs == 1;
        if (!a_to_b && is_ctrl(f, wire::CtrlType::kCredit)) return ++grants == 1;
        return false;
      }));
  EXPECT_EQ(t.src, t.dst);
  EXPECT_GE(t.p.qa->stats().credit_stalls, 1u);
}

TEST(Credit, TheGrantThatCompletesADemandGoesOutTwice) {
  // No later grant would repair it if lost: a copy follows on the next
  // entropy, and losing the first costs the sender nothing.
  Transfer t(credit_config(), 256 * 1024);
  t.post();
  uint32_t last_value = 0;
  int copies = 0, dropped = 0;
  ASSERT_TRUE(t.p.run_for(
      100'000'000, 1000, [&] { return t.done(); },
      [&](const Frame& f, bool a_to_b) {
        if (a_to_b || !is_ctrl(f, wire::CtrlType::kCredit)) return false;
        const wire::ParsedPacket pkt = parse(f);
        const uint32_t v = wire::load_be32(pkt.payload);
        copies = v == last_value ? copies + 1 : 1;
        last_value = v;
        // The first CREDIT granting everything asked is lost.
        if (copies == 1 && v == t.p.qa->credit().last_asked()) return ++dropped, true;
        return false;
      }));
  EXPECT_EQ(t.src, t.dst);
  EXPECT_EQ(dropped, 1);
  EXPECT_EQ(copies, 2);
  EXPECT_EQ(t.p.qa->stats().credit_stalls, 0u);  // the copy came before any timer
}

TEST(Credit, AReceiverSharesItsTurnsAmongTheConnectionsThatAsk) {
  // b's three connections each WRITE 512 KiB into a: a's pacer grants in
  // turns, so when the first finishes the others are within a few turns.
  ConnectionConfig c = credit_config();
  DirectPair p(c);
  auto [qa3, qb4] = p.add_pair(c, c, 3, 4);
  auto [qa5, qb6] = p.add_pair(c, c, 5, 6);
  Connection* senders[3] = {p.qb, qb4, qb6};
  Connection* receivers[3] = {p.qa, qa3, qa5};
  constexpr uint32_t kBytes = 512 * 1024;
  std::vector<uint8_t> src(kBytes, 0x5a), dst(3 * kBytes, 0);
  const uint32_t rkey = p.a.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(senders[i]->post_send(
                  request(i, Opcode::kWrite, src.data(), kBytes, dst.data() + i * kBytes, rkey)),
              PostError::kOk);
  }
  ASSERT_TRUE(p.run_for(100'000'000, 1000, [&] { return p.b_scq.size() > 0; }));
  uint64_t placed[3];
  for (int i = 0; i < 3; ++i) placed[i] = receivers[i]->stats().bytes_placed;
  const uint64_t lo = *std::min_element(placed, placed + 3);
  const uint64_t hi = *std::max_element(placed, placed + 3);
  EXPECT_EQ(hi, kBytes);
  // The first to ask may take a lone sender's turn (16 packets); then three
  // share, four packets a turn, and a few turns may be under way.
  EXPECT_GE(lo + 24 * 4096, hi) << placed[0] << " " << placed[1] << " " << placed[2];
  ASSERT_TRUE(p.run_for(100'000'000, 1000, [&] { return p.b_scq.size() == 3; }));
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t x) { return x == 0x5a; }));
  for (int i = 0; i < 3; ++i) EXPECT_GT(receivers[i]->stats().credit_bytes_granted, 0u);
}

TEST(Credit, AConnectionWithoutCreditIsNotHeldBack) {
  // Credit is the sender's choice: a receiver answers whoever asks, and a
  // sender that does not ask sends as before.
  ConnectionConfig off;
  Transfer t(off, 1 << 20);
  t.post();
  ASSERT_TRUE(t.p.run_for(100'000'000, 1000, [&] { return t.done(); }));
  EXPECT_EQ(t.src, t.dst);
  EXPECT_EQ(t.p.qa->stats().credit_requests_sent, 0u);
  EXPECT_EQ(t.p.qa->stats().unscheduled_sent, 0u);
  EXPECT_EQ(t.p.qb->stats().credits_sent, 0u);
}

// A peer that asks for credit and whose data never arrives (dead after
// asking, or lying) takes the receiver's turns up to the cap of granted and
// unused bytes; asking again, it is forgiven after waits that double up to
// the RTO's maximum: a cap per rto_max_ns at most. Before the cap: 10 Gb/s
// of grants for as long as it asked (331.9 MB in a second).
TEST(Credit, APeerWhoseDataNeverArrivesGetsAtMostTheCapOfGrants) {
  ConnectionConfig c = credit_config();
  c.retry_forever = true;  // the sender keeps asking
  Transfer t(c, 64 << 20);
  t.post();
  const auto drop_data = [&](const Frame& f, bool a_to_b) { return a_to_b && is_data(parse(f)); };
  t.p.run_for(
      1'000'000'000, 10'000, [] { return false; }, drop_data);
  const uint64_t cap = c.cc.credit_unused_cap_bytes;
  const ConnectionStats& rx = t.p.qb->stats();
  EXPECT_GE(rx.credit_capped, 1u);
  EXPECT_GE(rx.credit_forgiven, 1u);
  // The cap, then one per forgiveness: waits of 2, 4, ... 32 ms, then one
  // per 50 ms (each grant may overdraw the cap by one turn).
  const uint64_t most = (1 + 5 + 1'000'000'000 / c.rto_max_ns + 1) * (cap + 64 * 1024);
  EXPECT_LE(rx.credit_bytes_granted, most) << rx.credit_bytes_granted;
  EXPECT_GT(t.p.qa->stats().credit_requests_sent, 20u);  // it kept asking
  EXPECT_EQ(t.p.qb->stats().bytes_placed, 0u);
}

// Data lost for longer than many forgivenesses (a path that drops data
// frames while control frames pass): the transfer still completes once
// data passes again (with at most 7 forgivenesses in a row, it stalled
// for good).
TEST(Credit, ALongOutageUnderCreditEndsWhenTheLinkIsBack) {
  ConnectionConfig c = credit_config();
  c.retry_forever = true;
  c.cc.credit_unused_cap_bytes = 256 * 1024;
  Transfer t(c, 4 << 20);
  t.post();
  ASSERT_TRUE(t.p.run_for(100'000'000, 1000, [&] { return t.p.qb->stats().bytes_placed > 0; }));
  const TimeNs back_at = t.p.now + 2'000'000'000;  // 2 s of lost data
  ASSERT_TRUE(t.p.run_for(
      20'000'000'000, 10'000, [&] { return t.done(); },
      [&](const Frame& f, bool a_to_b) {
        return a_to_b && t.p.now < back_at && is_data(parse(f));
      }));
  EXPECT_EQ(t.src, t.dst);
  EXPECT_GT(t.p.qb->stats().credit_forgiven, 7u);
}

// Credited data lost for longer than the cap covers (a link down for a
// while): the sender asks again, is forgiven, and the transfer completes.
TEST(Credit, ASenderWhoseCreditedDataWasLostIsForgivenAndCompletes) {
  ConnectionConfig c = credit_config();
  c.cc.credit_unused_cap_bytes = 256 * 1024;
  Transfer t(c, 4 << 20);
  t.post();
  // The first 600 KiB of credited data frames are lost.
  uint64_t lost = 0;
  const auto drop = [&](const Frame& f, bool a_to_b) {
    if (!a_to_b) return false;
    const wire::ParsedPacket pkt = parse(f);
    if (!is_data(pkt) || (pkt.req.pro.flags & wire::kReqFlagUnscheduled)) return false;
    if (lost >= 600 * 1024) return false;
    lost += f.size();
    return true;
  };
  ASSERT_TRUE(t.p.run_for(
      2'000'000'000, 1000, [&] { return t.done(); }, drop));
  EXPECT_EQ(t.src, t.dst);
  EXPECT_GE(t.p.qb->stats().credit_capped, 1u);
  EXPECT_GE(t.p.qb->stats().credit_forgiven, 1u);
}

// CREDIT_REQ amplification (issue 32): a CREDIT_REQ naming a PSN its
// sender could not have sent (a stranger's, or an earlier connection's) is
// dropped and counted: no CREDIT answers it (one forged frame made the host
// send 3,726 CREDITs). A forged CREDIT is refused the same way.
TEST(Credit, ControlFramesNamingPsnsOutOfReachAreIgnored) {
  Transfer t(credit_config(), 1 << 20);
  t.post();
  const std::vector<Frame> first = t.p.drain(t.p.a);
  Frame req;
  for (const Frame& f : first) {
    if (is_ctrl(f, wire::CtrlType::kCreditReq)) req = f;
  }
  ASSERT_FALSE(req.empty());
  req = with_ctrl(req, [](wire::CtrlHeader& h) { h.psn += 0x40000000; });
  wire::store_be32(req.data() + wire::kL2L4Size + wire::kCtrlSize, 1u << 30);  // 1 GiB
  t.p.deliver(t.p.b, {req});
  for (const Frame& f : t.p.drain(t.p.b)) EXPECT_FALSE(is_ctrl(f, wire::CtrlType::kCredit));
  EXPECT_EQ(t.p.qb->stats().stale_ctrl, 1u);
  EXPECT_EQ(t.p.qb->stats().credit_requests_received, 0u);
  // A's real frames get b's CREDIT; a copy naming a PSN a never sent, and
  // granting 1 GiB, is refused.
  t.p.deliver(t.p.b, first);
  Frame credit;
  for (const Frame& f : t.p.drain(t.p.b)) {
    if (is_ctrl(f, wire::CtrlType::kCredit)) credit = f;
  }
  ASSERT_FALSE(credit.empty());
  credit = with_ctrl(credit, [](wire::CtrlHeader& h) { h.psn += 0x40000000; });
  wire::store_be32(credit.data() + wire::kL2L4Size + wire::kCtrlSize, 1u << 30);
  t.p.deliver(t.p.a, {credit});
  EXPECT_EQ(t.p.qa->stats().stale_ctrl, 1u);
  EXPECT_LT(t.p.qa->credit().granted(), 1u << 30);
}

// A receiver that goes away while its sender waits for credit: asking
// again is not exempt from the retry budget. Whether it dies mid-transfer
// (packets in flight) or right after its sender's speculative allowance was
// acknowledged, before any grant (nothing in flight, only asks), the
// WRITE ends in RETRY_EXC_ERR within the budget, as it would without credit.
TEST(Credit, ADeadReceiverEndsTheWaitForCreditInRetryExceeded) {
  for (const bool mid_transfer : {true, false}) {
    ConnectionConfig c = credit_config();
    c.retry_limit = 3;
    c.rto_max_ns = 4'000'000;  // a budget of 16 ms
    Transfer t(c, 1 << 20);
    t.post();
    bool grants_lost = !mid_transfer;
    const auto drop = [&](const Frame& f, bool a_to_b) {
      return !a_to_b && grants_lost && is_ctrl(f, wire::CtrlType::kCredit);
    };
    if (mid_transfer) {
      ASSERT_TRUE(t.p.run_for(
          100'000'000, 1000, [&] { return t.p.qb->stats().bytes_placed > 256 * 1024; }, drop));
    } else {
      ASSERT_TRUE(t.p.run_for(
          100'000'000, 1000,
          [&] { return t.p.qa->stats().unscheduled_sent > 0 && t.p.qa->unacked_packets() == 0; },
          drop));
      EXPECT_EQ(t.p.qa->stats().credits_received, 0u);
    }
    const TimeNs died_at = t.p.now;
    t.p.b.destroy_connection(2);
    const uint64_t asked = t.p.qa->stats().credit_requests_sent;
    ASSERT_TRUE(t.p.run_for(
        10'000'000'000, 10'000, [&] { return t.p.a_scq.size() > 0; }, drop))
        << (mid_transfer ? "mid-transfer" : "before any grant");
    const auto wcs = poll_all(t.p.a_scq);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
    EXPECT_EQ(t.p.qa->state(), ConnectionState::kError);
    // The budget and the last backed-off wait, no more.
    EXPECT_LT(t.p.now - died_at, 40'000'000u);
    EXPECT_LT(t.p.qa->stats().credit_requests_sent - asked, 30u);
  }
}

}  // namespace
}  // namespace braid::test
