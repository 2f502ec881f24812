// Blind injection (issue 32): an off-path host forges data frames for a
// live connection (the peer's IP and PDC ids, its own MAC and UDP port) and
// sweeps the PSN space. The receive window takes any PSN within 1024 of the
// expected one, so the sweep needs 2^14 frames to land one; what keeps the
// frames out is the SES job id of the direction, derived from the PSN the
// direction started at (direction_job_id): the attacker must guess that
// start exactly, RoCEv2's work factor (2^24 with InfiniBand's PSNs).
#include <algorithm>

#include "direct_pair.h"

namespace braid::test {
namespace {

constexpr uint32_t kStart = 0x3c1f77;  // a's initial PSN (not a multiple of the window)
constexpr uint16_t kIdA = 5, kIdB = 6;

struct Victim {
  DirectPair p;
  Connection* qa;
  Connection* qb;
  std::vector<uint8_t> msg = std::vector<uint8_t>(64, 0x11);
  std::vector<uint8_t> rbuf = std::vector<uint8_t>(64, 0);
  Frame send;  // a's real SEND, held back

  Victim() {
    ConnectionConfig ca, cb;
    ca.tx_psn = cb.rx_psn = kStart;
    std::tie(qa, qb) = p.add_pair(ca, cb, kIdA, kIdB);
    EXPECT_EQ(qb->post_recv(9, sgl_of(rbuf.data(), 64)), PostError::kOk);
    EXPECT_EQ(qa->post_send(request(1, Opcode::kSend, msg.data(), 64)), PostError::kOk);
    std::vector<Frame> out = p.drain(p.a);
    EXPECT_EQ(out.size(), 1u);
    if (!out.empty()) send = out[0];
  }

  // The real SEND, as an attacker would send it: its MAC, a UDP port of its
  // choosing, the PSN and job id it guesses, its own bytes.
  Frame forge(uint32_t psn, uint32_t job_id, uint16_t port) const {
    Frame f = send;
    const wire::MacAddr attacker{0x02, 0xba, 0xd0, 0xba, 0xd0, 0x01};
    std::copy(attacker.begin(), attacker.end(), f.begin() + 6);
    wire::store_be16(f.data() + wire::kEthernetSize + wire::kIpv4Size, port);
    wire::store_be32(f.data() + wire::kL2L4Size + 4, psn);
    wire::store_be24(f.data() + wire::kL2L4Size + wire::kRequestSize + 5, job_id);
    std::fill(f.end() - 64, f.end(), 0xee);
    return f;
  }
};

TEST(BlindInjection, ASweepOfForgedSendsOverThePsnSpaceIsRefused) {
  Victim v;
  ASSERT_FALSE(v.send.empty());
  ASSERT_EQ(parse(v.send).req.psn, kStart);
  // One frame per window over the 24-bit PSN space (16,384 frames), each
  // with the job id that would be right if the direction had started at
  // the PSN it carries. Without the job id check one of them is taken.
  uint32_t frames = 0;
  for (uint32_t psn = 0; psn < (1u << 24); psn += 1024, ++frames) {
    const uint32_t job = direction_job_id(psn, kIdA, kIdB, kIpA, kIpB);
    v.p.deliver(v.p.b, {v.forge(psn, job, static_cast<uint16_t>(49152 + frames % 16384))});
  }
  EXPECT_EQ(v.qb->stats().wrong_job_id, frames);
  EXPECT_EQ(v.qb->stats().data_received, 0u);
  EXPECT_TRUE(v.p.drain(v.p.b).empty());  // not even an ACK to the peer
  EXPECT_TRUE(poll_all(v.p.b_rcq).empty());

  // The real SEND still lands, byte for byte.
  v.p.deliver(v.p.b, {v.send});
  v.p.settle();
  const auto rw = poll_all(v.p.b_rcq);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(v.rbuf, v.msg);
  const auto sw = poll_all(v.p.a_scq);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kSuccess);
}

// What guards the connection is the start PSN: a host that knows it (and
// the ids) is in, as it is with RoCEv2. Here its one frame at the expected
// PSN is taken and the real SEND becomes a duplicate.
TEST(BlindInjection, AnAttackerWhoKnowsTheStartPsnGetsIn) {
  Victim v;
  ASSERT_FALSE(v.send.empty());
  const uint32_t job = direction_job_id(kStart, kIdA, kIdB, kIpA, kIpB);
  EXPECT_EQ(parse(v.send).ses.job_id, job);
  v.p.deliver(v.p.b, {v.forge(kStart, job, 50000)});
  const auto rw = poll_all(v.p.b_rcq);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(v.rbuf, std::vector<uint8_t>(64, 0xee));
  v.p.deliver(v.p.b, {v.send});
  EXPECT_EQ(v.qb->stats().duplicates, 1u);
}

// Each direction, and each start, has its own id: the READ responses and
// the data of the other direction do not share the requester's.
TEST(BlindInjection, JobIdsDifferByDirectionAndStart) {
  const uint32_t ab = direction_job_id(kStart, kIdA, kIdB, kIpA, kIpB);
  EXPECT_NE(ab, direction_job_id(kStart, kIdB, kIdA, kIpB, kIpA));
  EXPECT_NE(ab, direction_job_id(kStart + 1, kIdA, kIdB, kIpA, kIpB));
  EXPECT_NE(ab, direction_job_id(kStart, kIdA, kIdB + 1, kIpA, kIpB));
  EXPECT_NE(ab, direction_job_id(kStart, kIdA, kIdB, kIpA + 1, kIpB));
  EXPECT_LE(ab, 0xffffffu);
}

}  // namespace
}  // namespace braid::test
