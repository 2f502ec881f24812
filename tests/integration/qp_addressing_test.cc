// A request names the queue pair it is for (SES pid_on_fep:resource_index,
// the peer's QP number) and a READ response the slot of the READ's
// requester (its message_id): what names another is dropped and counted,
// never placed, as the first step to several queue pairs on one PDC.
#include <algorithm>

#include "direct_pair.h"

namespace braid::test {
namespace {

constexpr size_t kSes = wire::kL2L4Size + wire::kRequestSize;

std::pair<Connection*, Connection*> pair_of(DirectPair& p) {
  ConnectionConfig ca, cb;
  ca.qp_num = cb.remote_qpn = 0x12345;  // beyond 12 bits: both fields carry it
  cb.qp_num = ca.remote_qpn = 0x00abc;
  return p.add_pair(ca, cb, 3, 4);
}

TEST(QpAddressing, ARequestNamingAnotherQpIsDroppedAndCounted) {
  DirectPair p;
  auto [qa, qb] = pair_of(p);
  static std::vector<uint8_t> msg(64, 0x5a);
  std::vector<uint8_t> rbuf(64, 0);
  ASSERT_EQ(qb->post_recv(9, sgl_of(rbuf.data(), 64)), PostError::kOk);
  ASSERT_EQ(qa->post_send(request(1, Opcode::kSend, msg.data(), 64)), PostError::kOk);
  const std::vector<Frame> sent = p.drain(p.a);
  ASSERT_EQ(sent.size(), 1u);
  const wire::ParsedPacket pkt = parse(sent[0]);
  EXPECT_EQ((uint32_t{pkt.ses.pid_on_fep} << 12) | pkt.ses.resource_index, 0x00abcu);
  for (const auto& [fep, index] : {std::pair{0x000, 0xabd}, std::pair{0x001, 0xabc}}) {
    Frame other = sent[0];
    wire::store_be16(other.data() + kSes + 8, static_cast<uint16_t>(fep));
    wire::store_be16(other.data() + kSes + 10, static_cast<uint16_t>(index));
    p.deliver(p.b, {other});
  }
  EXPECT_EQ(qb->stats().wrong_qp, 2u);
  EXPECT_EQ(qb->stats().data_received, 0u);
  EXPECT_EQ(rbuf, std::vector<uint8_t>(64, 0));
  EXPECT_TRUE(p.drain(p.b).empty());  // no ACK, no NACK
  p.deliver(p.b, sent);
  ASSERT_EQ(p.b_rcq.size(), 1u);
  EXPECT_EQ(rbuf, msg);
  // The other way, to the QP whose number needs both fields (0x12345).
  std::vector<uint8_t> abuf(64, 0);
  ASSERT_EQ(qa->post_recv(3, sgl_of(abuf.data(), 64)), PostError::kOk);
  ASSERT_EQ(qb->post_send(request(4, Opcode::kSend, msg.data(), 64)), PostError::kOk);
  ASSERT_TRUE(p.run_for(1'000'000, 1'000, [&] { return p.a_rcq.size() > 0; }));
  EXPECT_EQ(abuf, msg);
  EXPECT_EQ(qa->stats().wrong_qp, 0u);
}

TEST(QpAddressing, AReadResponseNamingAnotherRequesterIsDroppedAndCounted) {
  DirectPair p;
  auto [qa, qb] = pair_of(p);
  std::vector<uint8_t> src(256), dst(256, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i);
  const uint32_t key = p.b.memory().register_region(src.data(), 256, kAccessRemoteRead, 0);
  // Three WRITEs first: the READ's message id (3) is not its slot (0).
  std::vector<uint8_t> wdst(64, 0);
  const uint32_t wkey = p.b.memory().register_region(wdst.data(), 64, kAccessRemoteWrite, 0);
  for (uint64_t k = 0; k < 3; ++k) {
    ASSERT_EQ(qa->post_send(request(k, Opcode::kWrite, src.data(), 64, wdst.data(), wkey)),
              PostError::kOk);
  }
  ASSERT_EQ(qa->post_send(request(3, Opcode::kRead, dst.data(), 256, src.data(), key)),
            PostError::kOk);
  p.deliver(p.b, p.drain(p.a));
  std::vector<Frame> responses, acks;
  for (const Frame& f : p.drain(p.b)) {
    (parse(f).has_ses_response ? responses : acks).push_back(f);
  }
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(parse(responses[0]).resp.message_id, 0u);  // the requester's slot
  EXPECT_EQ(parse(responses[0]).resp.read_request_message_id, 3u);
  Frame other = responses[0];
  wire::store_be16(other.data() + kSes + 2, 1);
  p.deliver(p.a, {other});
  EXPECT_EQ(qa->stats().wrong_qp, 1u);
  EXPECT_EQ(dst, std::vector<uint8_t>(256, 0));
  p.deliver(p.a, acks);
  p.deliver(p.a, responses);
  ASSERT_TRUE(p.run_for(1'000'000, 1'000, [&] { return p.a_scq.size() == 4; }));
  EXPECT_EQ(poll_all(p.a_scq)[3].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace braid::test
