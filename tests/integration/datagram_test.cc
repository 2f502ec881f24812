// Unreliable datagram queue pairs: a datagram lands whole behind its GRH
// with the sender's QP number and immediate; what the queue pair should
// not take (another Q_Key, no receive, a receive too small, no such QP, a
// forged header) is dropped and counted, never placed.
#include <gtest/gtest.h>

#include <algorithm>

#include "direct_pair.h"
#include "wire/byte_order.h"

namespace braid::test {
namespace {

struct UdPair {
  UdPair() : scq_a(64), rcq_a(64), scq_b(64), rcq_b(64) {
    DatagramConfig ca, cb;
    ca.qp_num = 0x1234;
    ca.qkey = 0x11111111;
    ca.mtu = 1024;
    cb.qp_num = 0x5678;
    cb.qkey = 0x22222222;
    cb.mtu = 1024;
    qa = p.a.create_datagram_qp(ca, &scq_a, &rcq_a);
    qb = p.b.create_datagram_qp(cb, &scq_b, &rcq_b);
    qa->set_receiving(true);  // in RTR
    qb->set_receiving(true);
  }
  // A datagram from a to b (b's QP number and Q_Key unless told).
  DatagramRequest to_b(uint64_t id, uint8_t* data, uint32_t len) {
    DatagramRequest r;
    r.wr_id = id;
    if (len > 0) r.local = sgl_of(data, len);
    r.dst_mac = mac_of(2);
    r.dst_ip = kIpB;
    r.dst_qpn = 0x5678;
    r.qkey = 0x22222222;
    return r;
  }
  void send(const DatagramRequest& r) {
    ASSERT_EQ(qa->post_send(r), PostError::kOk);
    p.a.datagram_posted(qa->config().qp_num);
    p.deliver(p.b, p.drain(p.a));
  }
  DirectPair p;
  CompletionQueue scq_a, rcq_a, scq_b, rcq_b;
  DatagramQueuePair* qa;
  DatagramQueuePair* qb;
};

TEST(Datagrams, ADatagramLandsBehindItsGrhWithItsSenderAndImmediate) {
  UdPair u;
  ASSERT_NE(u.qa, nullptr);
  ASSERT_NE(u.qb, nullptr);
  EXPECT_EQ(u.p.a.create_datagram_qp(u.qa->config(), &u.scq_a, &u.rcq_a), nullptr);  // taken
  std::vector<uint8_t> msg(1000), buf(2048, 0xee);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 3 + 1);
  ASSERT_EQ(u.qb->post_recv(7, sgl_of(buf.data(), 2048)), PostError::kOk);
  DatagramRequest r = u.to_b(1, msg.data(), 1000);
  r.has_imm = true;
  r.imm_data = 0xabcdef01;
  u.send(r);
  const auto s = poll_all(u.scq_a);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, WcStatus::kSuccess);
  EXPECT_EQ(s[0].wr_id, 1u);
  const auto w = poll_all(u.rcq_b);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, WcStatus::kSuccess);
  EXPECT_EQ(w[0].wr_id, 7u);
  EXPECT_EQ(w[0].byte_len, 1040u);
  EXPECT_EQ(w[0].src_qp, 0x1234u);
  EXPECT_TRUE(w[0].grh);
  EXPECT_TRUE(w[0].has_imm);
  EXPECT_EQ(w[0].imm_data, 0xabcdef01u);
  EXPECT_EQ(w[0].opcode, WcOpcode::kRecv);
  // The GRH: IP version 6, payload length, next header 0x1b, hop limit,
  // then the IPv4-mapped GIDs of a (source) and b (destination).
  EXPECT_EQ(buf[0], 0x60);
  EXPECT_EQ(wire::load_be16(buf.data() + 4), 1000u);
  EXPECT_EQ(buf[6], 0x1b);
  EXPECT_GT(buf[7], 0);
  const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  EXPECT_EQ(std::memcmp(buf.data() + 8, mapped, 12), 0);
  EXPECT_EQ(wire::load_be32(buf.data() + 20), kIpA);
  EXPECT_EQ(std::memcmp(buf.data() + 24, mapped, 12), 0);
  EXPECT_EQ(wire::load_be32(buf.data() + 36), kIpB);
  EXPECT_TRUE(std::equal(msg.begin(), msg.end(), buf.begin() + 40));
  EXPECT_EQ(std::count(buf.begin() + 1040, buf.end(), 0xee), 2048 - 1040);
  EXPECT_EQ(u.qb->stats().received, 1u);
}

TEST(Datagrams, WhatTheQueuePairShouldNotTakeIsDroppedAndCounted) {
  UdPair u;
  std::vector<uint8_t> msg(100, 5), small(100, 0xee), big(512, 0xee);
  // No receive posted.
  u.send(u.to_b(1, msg.data(), 100));
  EXPECT_EQ(u.qb->stats().no_receive, 1u);
  // Another Q_Key.
  ASSERT_EQ(u.qb->post_recv(2, sgl_of(small.data(), 100)), PostError::kOk);
  DatagramRequest wrong = u.to_b(2, msg.data(), 100);
  wrong.qkey = 0x33333333;
  u.send(wrong);
  EXPECT_EQ(u.qb->stats().wrong_qkey, 1u);
  EXPECT_EQ(u.rcq_b.size(), 0u);
  // A receive too small for the GRH and the data: LOC_LEN_ERR, nothing written.
  u.send(u.to_b(3, msg.data(), 100));
  auto w = poll_all(u.rcq_b);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(std::count(small.begin(), small.end(), 0xee), 100);
  // No such QP at b.
  ASSERT_EQ(u.qb->post_recv(4, sgl_of(big.data(), 512)), PostError::kOk);
  DatagramRequest stray = u.to_b(4, msg.data(), 100);
  stray.dst_qpn = 0x9999;
  u.send(stray);
  EXPECT_EQ(u.p.b.stats().drops_for(wire::DropReason::kUnknownDatagramQp), 1u);
  EXPECT_EQ(u.rcq_b.size(), 0u);
  // More than the MTU is refused at post; every send still completed.
  std::vector<uint8_t> huge(1025);
  EXPECT_EQ(u.qa->post_send(u.to_b(5, huge.data(), 1025)), PostError::kInvalid);
  EXPECT_EQ(poll_all(u.scq_a).size(), 4u);
  EXPECT_EQ(u.qb->stats().received, 0u);
}

// A forged datagram: an opcode other than DGRAM_SEND, a length that is not
// the payload's, no source QP. Each is dropped as malformed.
TEST(Datagrams, ForgedDatagramsAreDroppedAsMalformed) {
  UdPair u;
  std::vector<uint8_t> msg(64, 5), buf(512, 0xee);
  ASSERT_EQ(u.qb->post_recv(1, sgl_of(buf.data(), 512)), PostError::kOk);
  ASSERT_EQ(u.qa->post_send(u.to_b(1, msg.data(), 64)), PostError::kOk);
  u.p.a.datagram_posted(u.qa->config().qp_num);
  const std::vector<Frame> sent = u.p.drain(u.p.a);
  ASSERT_EQ(sent.size(), 1u);
  const size_t ses = wire::kL2L4Size + wire::kUudSize;
  for (int variant = 0; variant < 3; ++variant) {
    Frame f = sent[0];
    if (variant == 0) f[ses] = static_cast<uint8_t>(wire::SesOpcode::kSend);
    if (variant == 1) wire::store_be32(f.data() + ses + 40, 63);  // request_length
    if (variant == 2) wire::store_be32(f.data() + ses + 20, 0);   // initiator
    u.p.deliver(u.p.b, {f});
  }
  EXPECT_EQ(u.qb->stats().malformed, 3u);
  EXPECT_EQ(u.rcq_b.size(), 0u);
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 0xee), 512);
  u.p.deliver(u.p.b, sent);  // the genuine one is taken
  EXPECT_EQ(u.qb->stats().received, 1u);
}

TEST(Datagrams, AStoppedQueuePairFlushesItsQueuesAndTakesNothingMore) {
  UdPair u;
  std::vector<uint8_t> msg(64, 5), buf(512, 0xee);
  ASSERT_EQ(u.qb->post_recv(1, sgl_of(buf.data(), 512)), PostError::kOk);
  ASSERT_EQ(u.qb->post_recv(2, sgl_of(buf.data(), 512)), PostError::kOk);
  u.qb->flush();
  const auto w = poll_all(u.rcq_b);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(w[1].wr_id, 2u);
  EXPECT_EQ(u.qb->post_recv(3, sgl_of(buf.data(), 512)), PostError::kConnectionError);
  u.send(u.to_b(1, msg.data(), 64));
  EXPECT_EQ(u.rcq_b.size(), 0u);
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 0xee), 512);
}

// Before RTR a queue pair takes no datagram (InfiniBand drops them); a
// receive or send whose region went (dereg_mr) completes with
// LOC_PROT_ERR and touches no byte.
TEST(Datagrams, NothingBeforeRtrAndNothingThroughARevokedRegion) {
  UdPair u;
  std::vector<uint8_t> msg(64, 5), buf(512, 0xee);
  SgList l = sgl_of(buf.data(), 512);
  l.sge[0].lkey = 9;
  ASSERT_EQ(u.qb->post_recv(1, l), PostError::kOk);
  u.qb->set_receiving(false);
  u.send(u.to_b(1, msg.data(), 64));
  EXPECT_EQ(u.qb->stats().not_ready, 1u);
  EXPECT_EQ(u.rcq_b.size(), 0u);
  u.qb->set_receiving(true);
  u.qb->revoke_local_key(9);
  u.send(u.to_b(2, msg.data(), 64));
  auto w = poll_all(u.rcq_b);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 0xee), 512);
  // A send whose source went is not read: it completes with the error.
  DatagramRequest r = u.to_b(3, msg.data(), 64);
  r.local.sge[0].lkey = 11;
  ASSERT_EQ(u.qa->post_send(r), PostError::kOk);
  u.qa->revoke_local_key(11);
  u.p.a.datagram_posted(u.qa->config().qp_num);
  EXPECT_TRUE(u.p.drain(u.p.a).empty());
  const auto s = poll_all(u.scq_a);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[2].status, WcStatus::kLocProtErr);
  EXPECT_EQ(u.qa->stats().sent, 2u);
}

}  // namespace
}  // namespace braid::test
