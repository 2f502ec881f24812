// InfiniBand RC semantics the core must keep where a verbs program can tell:
// a READ whose responder dies, the ACK a failing receiver still owes, RNR
// waits that outlast the retry budget, a responder that refuses a request,
// zero-length operations, fences, and a responder answering READs before RTS.
// The test moves every frame (DirectPair) and owns the clock.
#include <algorithm>

#include "direct_pair.h"
#include "workload.h"

namespace braid::test {
namespace {

// b's SEND finds no receive at a, so b waits its RNR delay before it tries
// again; meanwhile a READs `local.size()` bytes of `source` from b.
void read_during_rnr_wait(DirectPair& p, std::vector<uint8_t>& source,
                          std::vector<uint8_t>& local) {
  static std::vector<uint8_t> msg(100, 1);  // outlives the SEND
  fill_pattern(source.data(), source.size(), 8);
  ASSERT_EQ(p.qb->post_send(request(1, Opcode::kSend, msg.data(), 100)), PostError::kOk);
  ASSERT_TRUE(p.run_for(10'000'000, 100'000, [&] { return p.qb->stats().rnr_nacks_received > 0; }));
  const uint32_t rkey =
      p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kRead, local.data(),
                                    static_cast<uint32_t>(local.size()), source.data(), rkey)),
            PostError::kOk);
}

constexpr size_t kAckFrameMax = 200;  // ACKs and NACKs; data frames here are larger

// An acknowledged READ request is not the end of a READ: a responder that
// dies before its response arrives must not leave the READ waiting forever.
TEST(RcSemantics, ReadWhoseResponderDiesAfterTheAckEndsInRetryExceeded) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.retry_limit = 3;
  c.rto_max_ns = 8'000'000;
  DirectPair p(c);
  std::vector<uint8_t> source(8000, 5), local(8000, 0);
  const uint32_t rkey =
      p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kRead, local.data(), 8000, source.data(), rkey)),
            PostError::kOk);
  p.deliver(p.b, p.drain(p.a));  // the READ request
  std::vector<Frame> acks;
  for (const Frame& f : p.drain(p.b)) {
    if (f.size() < kAckFrameMax) acks.push_back(f);  // the responses are lost
  }
  ASSERT_FALSE(acks.empty());
  p.deliver(p.a, acks);
  EXPECT_EQ(p.qa->unacked_packets(), 0u);  // the request is acknowledged
  p.b.destroy_connection(2);               // the responder dies
  // The budget: retry_limit + 1 timeouts, each at most rto_max.
  const bool failed = p.run_for(200'000'000, 100'000, [&] { return p.a_scq.size() > 0; });
  ASSERT_TRUE(failed) << "the READ never completed";
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(p.qa->state(), ConnectionState::kError);
  EXPECT_GT(p.qa->stats().read_timeouts, 0u);
}

// A READ whose response comes slowly but steadily is not timed out.
TEST(RcSemantics, SlowReadResponsesKeepTheReadAlive) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.retry_limit = 1;
  c.rto_max_ns = 4'000'000;
  DirectPair p(c);
  std::vector<uint8_t> source(64 * 1024), local(64 * 1024, 0);
  fill_pattern(source.data(), source.size(), 4);
  const uint32_t rkey =
      p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kRead, local.data(), 65536, source.data(), rkey)),
            PostError::kOk);
  // One response frame per 1.5 ms (the RTO is 2 ms, the budget two of them):
  // the READ as a whole takes ~100 ms.
  p.deliver(p.b, p.drain(p.a));
  std::vector<Frame> backlog;
  for (int i = 0; i < 200 && p.a_scq.size() == 0; ++i) {
    for (Frame& f : p.drain(p.b)) backlog.push_back(std::move(f));
    p.now += 1'500'000;
    if (!backlog.empty()) {
      p.deliver(p.a, {backlog.front()});
      backlog.erase(backlog.begin());
    }
    p.deliver(p.b, p.drain(p.a));
    p.a.advance(p.now);
    p.b.advance(p.now);
  }
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(local, source);
}

// A receiver that goes to error still acknowledges what it accepted before:
// the WRITE it placed completes with success at the requester, the SEND
// that did not fit with REM_INV_REQ_ERR (the NACK says why).
TEST(RcSemantics, ReceiverErrorStillSendsTheAckItOwes) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.ack_every = 64;  // the WRITE's ACK is still owed when the SEND arrives
  DirectPair p(c);
  std::vector<uint8_t> src(5000, 1), target(100, 0), rbuf(4000, 0);
  const uint32_t rkey = p.b.memory().register_region(target.data(), 100, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qb->post_recv(7, sgl_of(rbuf.data(), 4000)), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 100, target.data(), rkey)),
            PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kSend, src.data(), 5000)), PostError::kOk);
  ASSERT_TRUE(p.run_for(100'000'000, 1000, [&] { return p.a_scq.size() >= 2; }));
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(p.qa->stats().timeouts, 0u);
  const auto r = poll_all(p.b_rcq);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(target, std::vector<uint8_t>(100, 1));
}

// The same when the receiver is moved to error (modify_qp ERR) with a
// coalesced ACK pending.
TEST(RcSemantics, ReceiverMovedToErrorSendsItsPendingAck) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> src(3000, 2), target(3000, 0);
  const uint32_t rkey = p.b.memory().register_region(target.data(), 3000, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 3000, target.data(), rkey)),
            PostError::kOk);
  p.deliver(p.b, p.drain(p.a));
  p.qb->set_error(WcStatus::kWrFlushErr);
  const auto ba = p.drain(p.b);
  ASSERT_EQ(ba.size(), 1u);  // the ACK, and nothing more
  p.deliver(p.a, ba);
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(target, src);
}

// RNR waits count against rnr_retry only: a 655 ms RNR delay (min_rnr_timer
// 0) with infinite RNR retries outlasts the retry budget of the RTO, and the
// SEND still completes once the receive is posted.
TEST(RcSemantics, LongRnrWaitIsNotChargedToTheRetryBudget) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.retry_limit = 7;
  c.rnr_retry_limit = 7;  // infinite
  c.rnr_delay_ns = 655'360'000;
  DirectPair p(c);
  std::vector<uint8_t> msg(3000, 9), rbuf(3000, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kSend, msg.data(), 3000)), PostError::kOk);
  bool posted = false;
  const bool done = p.run_for(3'000'000'000, 1'000'000, [&] {
    if (!posted && p.now >= 400'000'000) {
      posted = p.qb->post_recv(5, sgl_of(rbuf.data(), 3000)) == PostError::kOk;
    }
    return p.a_scq.size() > 0;
  });
  ASSERT_TRUE(done);
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess) << wc_status_name(wcs[0].status);
  EXPECT_GE(p.now, 655'000'000u);  // it waited for the RNR delay
  EXPECT_EQ(rbuf, msg);
  EXPECT_GT(p.qa->stats().rnr_nacks_received, 0u);
}

// A retransmission that waits for the connection's own pacing (a DCQCN rate
// cut low, here a fixed 1 Mb/s: a packet every 8 ms, longer than the RTO) is
// not a stalled port: the wait is not charged to the retry budget.
TEST(RcSemantics, RetransmissionsHeldByPacingAreNotChargedToTheRetryBudget) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.retry_limit = 1;  // one timeout per packet allowed, no more
  c.cc.pacing_rate_bps = 1'000'000;
  DirectPair p(c);
  std::vector<uint8_t> src(6 * 1024), dst(6 * 1024, 0);
  fill_pattern(src.data(), src.size(), 3);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(),
                                    static_cast<uint32_t>(src.size()), dst.data(), rkey)),
            PostError::kOk);
  // Every first transmission is lost: each times out (its one allowed
  // timeout) 2 ms after it left, and its retransmission waits for the next
  // pacing slot, up to 6 ms more: longer than the RTO.
  const bool done = p.run_for(
      2'000'000'000, 100'000, [&] { return p.a_scq.size() > 0; },
      [&](const Frame& f, bool a_to_b) {
        wire::ParsedPacket pkt;
        if (!a_to_b || wire::decode_frame(f.data(), f.size(), wire::DecodeOptions{}, &pkt) !=
                           wire::DropReason::kNone) {
          return false;
        }
        const bool request = pkt.pro.type == static_cast<uint8_t>(wire::PdsType::kRudReq);
        return request && !(pkt.req.pro.flags & wire::kReqFlagRetx);
      });
  ASSERT_TRUE(done);
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess) << wc_status_name(wcs[0].status);
  EXPECT_EQ(dst, src);
  EXPECT_GE(p.qa->stats().retransmits, 6u);
}

// An RNR wait holds back the waiting side's requests, not its answers to the
// peer's READs.
TEST(RcSemantics, RnrWaitDoesNotHoldBackReadResponses) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.rnr_delay_ns = 655'360'000;
  DirectPair p(c);
  std::vector<uint8_t> source(4000), local(4000, 0);
  ASSERT_NO_FATAL_FAILURE(read_during_rnr_wait(p, source, local));
  ASSERT_TRUE(p.run_for(50'000'000, 100'000, [&] { return p.a_scq.size() > 0; }))
      << "the READ waited for b's RNR delay";
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(local, source);
}

// A responder that refuses a request (bad rkey) goes to error as an
// InfiniBand responder does: its receives flush, and nothing after the
// refused request is placed.
TEST(RcSemantics, RefusedRequestPutsTheResponderInErrorAndPlacesNothingAfter) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> src(2000, 3), target(2000, 0), rbuf(2000, 0);
  const uint32_t rkey = p.b.memory().register_region(target.data(), 2000, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qb->post_recv(8, sgl_of(rbuf.data(), 2000)), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 2000, target.data(), rkey + 1)),
            PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kSend, src.data(), 2000)), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(3, Opcode::kWrite, src.data(), 2000, target.data(), rkey)),
            PostError::kOk);
  ASSERT_TRUE(p.run_for(100'000'000, 1000, [&] { return p.a_scq.size() >= 3; }));
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 3u);
  EXPECT_EQ(wa[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(wa[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(wa[2].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(p.qb->state(), ConnectionState::kError);
  const auto wb = poll_all(p.b_rcq);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].wr_id, 8u);
  EXPECT_EQ(wb[0].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(rbuf, std::vector<uint8_t>(2000, 0));
  EXPECT_EQ(target, std::vector<uint8_t>(2000, 0));
}

// The refusal's NACK is lost: the requester's retransmission gets it again
// (from the responder in error), not silence until RETRY_EXC_ERR.
TEST(RcSemantics, LostRefusalNackIsAnsweredAgain) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> src(100, 3), target(100, 0);
  const uint32_t rkey = p.b.memory().register_region(target.data(), 100, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 100, target.data(), rkey ^ 1)),
            PostError::kOk);
  int dropped = 0;
  ASSERT_TRUE(p.run_for(
      100'000'000, 100'000, [&] { return p.a_scq.size() > 0; },
      [&](const Frame&, bool a_to_b) { return !a_to_b && dropped++ == 0; }));
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(dropped, 2);  // one NACK lost, the second one through
}

// The refused request's packet overtakes the packets of an earlier, valid
// request (another path): the responder places and acknowledges those first,
// then goes to error. The earlier WRITE succeeds without a retransmission.
TEST(RcSemantics, RefusalThatOvertakesEarlierPacketsWaitsForThem) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> src(3000, 6), target(3000, 0);
  const uint32_t rkey = p.b.memory().register_region(target.data(), 3000, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 3000, target.data(), rkey)),
            PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kWrite, src.data(), 100, target.data(), rkey ^ 1)),
            PostError::kOk);
  std::vector<Frame> frames = p.drain(p.a);
  ASSERT_EQ(frames.size(), 4u);  // three packets of WRITE 1, one of WRITE 2
  std::rotate(frames.begin(), frames.begin() + 3, frames.end());  // WRITE 2's first
  p.deliver(p.b, frames);
  ASSERT_TRUE(p.run_for(100'000'000, 1000, [&] { return p.a_scq.size() >= 2; }));
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wa[1].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(p.qa->stats().retransmits, 0u);
  EXPECT_EQ(target, src);
  EXPECT_EQ(p.qb->state(), ConnectionState::kError);
}

// The responder's last ACK (and its NACK) are lost: the requester's
// retransmissions get them again from the responder in error.
TEST(RcSemantics, ResponderInErrorAcknowledgesWhatItAcceptedAgain) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.ack_every = 64;
  DirectPair p(c);
  std::vector<uint8_t> src(2000, 6), target(2000, 0);
  const uint32_t rkey = p.b.memory().register_region(target.data(), 2000, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 2000, target.data(), rkey)),
            PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kWrite, src.data(), 100, target.data(), rkey ^ 1)),
            PostError::kOk);
  p.deliver(p.b, p.drain(p.a));
  ASSERT_EQ(p.qb->state(), ConnectionState::kError);
  EXPECT_FALSE(p.drain(p.b).empty());  // the ACK and the NACK, lost
  ASSERT_TRUE(p.run_for(200'000'000, 100'000, [&] { return p.a_scq.size() >= 2; }));
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wa[1].status, WcStatus::kRemAccessErr);
}

// A region deregistered under outstanding work: the request that uses it
// says LOC_PROT_ERR even when an earlier request is still unfinished.
TEST(RcSemantics, RevokedRegionsRequestCompletesWithLocalProtectionError) {
  DirectPair p;
  std::vector<uint8_t> one(100, 1), two(100, 2), target(200, 0);
  const uint32_t rkey = p.b.memory().register_region(target.data(), 200, kAccessRemoteWrite, 0);
  const uint32_t lkey = p.a.memory().register_region(two.data(), 100, kAccessLocalWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, one.data(), 100, target.data(), rkey)),
            PostError::kOk);
  SendRequest w = request(2, Opcode::kWrite, two.data(), 100, target.data() + 100, rkey);
  w.local.sge[0].lkey = lkey;
  ASSERT_EQ(p.qa->post_send(w), PostError::kOk);
  EXPECT_TRUE(p.qa->revoke_local_key(lkey));
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(wa[1].wr_id, 2u);
  EXPECT_EQ(wa[1].status, WcStatus::kLocProtErr);
}

// A lost READ response during the responder's own RNR wait is resent at
// once, not after the wait (655 ms here, longer than the READ's budget).
TEST(RcSemantics, LostReadResponseIsResentDuringAnRnrWait) {
  ConnectionConfig c;
  c.mtu = 1024;
  c.rnr_delay_ns = 655'360'000;
  DirectPair p(c);
  std::vector<uint8_t> source(4000), local(4000, 0);
  ASSERT_NO_FATAL_FAILURE(read_during_rnr_wait(p, source, local));
  int responses = 0;
  ASSERT_TRUE(p.run_for(
      100'000'000, 100'000, [&] { return p.a_scq.size() > 0; },
      [&](const Frame& f, bool a_to_b) { return !a_to_b && f.size() > 500 && responses++ == 0; }))
      << "the lost response waited for b's RNR delay";
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
  EXPECT_EQ(local, source);
}

// Trailers on both sides: a packet whose CRC flag a bit error cleared (its
// trailer would read as payload) is dropped, not placed, and resent.
TEST(RcSemantics, PacketWithoutTheTrailerItsPeerAlwaysSendsIsDropped) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c, 1024, true);
  std::vector<uint8_t> src(4000), target(4000, 0);
  fill_pattern(src.data(), src.size(), 3);
  const uint32_t rkey = p.b.memory().register_region(target.data(), 4000, kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 4000, target.data(), rkey)),
            PostError::kOk);
  std::vector<Frame> frames = p.drain(p.a);
  ASSERT_EQ(frames.size(), 4u);
  Frame& f = frames[2];
  f[wire::kL2L4Size + 1] &= static_cast<uint8_t>(~wire::kFlagCrcTrailer);  // the flag flips
  p.deliver(p.b, frames);
  EXPECT_EQ(p.qb->stats().missing_crc, 1u);
  ASSERT_TRUE(p.run_for(100'000'000, 100'000, [&] { return p.a_scq.size() > 0; }));
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
  EXPECT_EQ(target, src);
}

// Zero-length operations touch no memory and check no key (InfiniBand):
// a WRITE_IMM doorbell and a READ used as a fence, both with rkey 0.
TEST(RcSemantics, ZeroLengthWriteImmAndReadCheckNoKey) {
  DirectPair p;
  std::vector<uint8_t> rbuf(16, 0);
  ASSERT_EQ(p.qb->post_recv(4, sgl_of(rbuf.data(), 16)), PostError::kOk);
  SendRequest doorbell = request(1, Opcode::kWriteImm, nullptr, 0);
  doorbell.imm_data = 0x1234;
  ASSERT_EQ(p.qa->post_send(doorbell), PostError::kOk);
  ASSERT_EQ(p.qa->post_send(request(2, Opcode::kRead, nullptr, 0)), PostError::kOk);
  p.settle();
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wa[1].status, WcStatus::kSuccess);
  EXPECT_EQ(wa[1].opcode, WcOpcode::kRdmaRead);
  const auto wb = poll_all(p.b_rcq);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wb[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(wb[0].byte_len, 0u);
  EXPECT_TRUE(wb[0].has_imm);
  EXPECT_EQ(wb[0].imm_data, 0x1234u);
  EXPECT_EQ(p.qb->state(), ConnectionState::kActive);
}

// IBV_SEND_FENCE: a WRITE after a READ of the same remote bytes, fenced,
// is not sent before the READ's data has arrived, so the READ returns the
// bytes as they were.
TEST(RcSemantics, FencedWriteAfterAReadOfTheSameBytesWaitsForIt) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> remote(3000, 0x0d), local(3000, 0), fresh(3000, 0xfe);
  const uint32_t rkey = p.b.memory().register_region(remote.data(), remote.size(),
                                                     kAccessRemoteRead | kAccessRemoteWrite, 0);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kRead, local.data(), 3000, remote.data(), rkey)),
            PostError::kOk);
  SendRequest w = request(2, Opcode::kWrite, fresh.data(), 3000, remote.data(), rkey);
  w.fence = true;
  ASSERT_EQ(p.qa->post_send(w), PostError::kOk);
  // The first burst is the READ request alone.
  const auto first = p.drain(p.a);
  EXPECT_EQ(first.size(), 1u);
  p.deliver(p.b, first);
  p.settle();
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wa[1].status, WcStatus::kSuccess);
  EXPECT_EQ(local, std::vector<uint8_t>(3000, 0x0d));
  EXPECT_EQ(remote, fresh);
}

// A responder that answered a READ in RTR (its PSN space started with the
// response) can still move to RTS and send; the requester follows.
TEST(RcSemantics, ResponderThatAnsweredAReadInRtrMovesToRtsAndSends) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  auto [qa, qb] = p.add_rtr_responder_pair(c);
  ASSERT_TRUE(qa && qb);
  std::vector<uint8_t> source(3000, 4), local(3000, 0), back(500, 6), a_target(500, 0);
  const uint32_t rkey =
      p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
  ASSERT_EQ(qa->post_send(request(1, Opcode::kRead, local.data(), 3000, source.data(), rkey)),
            PostError::kOk);
  p.settle();
  ASSERT_EQ(poll_all(p.a_scq).size(), 1u);
  EXPECT_EQ(local, source);
  // RTS now, with the PSN the application exchanged (5000).
  ASSERT_TRUE(qb->set_send_psn(5000));
  const uint32_t akey =
      p.a.memory().register_region(a_target.data(), a_target.size(), kAccessRemoteWrite, 0);
  ASSERT_EQ(qb->post_send(request(2, Opcode::kWrite, back.data(), 500, a_target.data(), akey)),
            PostError::kOk);
  p.settle();
  const auto wb = poll_all(p.b_scq);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WcStatus::kSuccess);
  EXPECT_EQ(a_target, back);
}

// A forged first READ response (issue 32): it used to restart the
// requester's window at any PSN, and one frame completed the READ with the
// attacker's bytes. Only the PSN an RTR responder starts at (the
// requester's own initial one) restarts it now.
TEST(RcSemantics, AForgedFirstReadResponseDoesNotRestartTheWindow) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  auto [qa, qb] = p.add_rtr_responder_pair(c);
  ASSERT_TRUE(qa && qb);
  std::vector<uint8_t> source(1000, 4), local(1000, 0);
  const uint32_t rkey =
      p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
  ASSERT_EQ(qa->post_send(request(1, Opcode::kRead, local.data(), 1000, source.data(), rkey)),
            PostError::kOk);
  p.deliver(p.b, p.drain(p.a));
  const auto frames = p.drain(p.b);  // the response (and an ACK of the request)
  std::vector<Frame> response;
  for (const Frame& f : frames) {
    if (f.size() > 1000) response.push_back(f);
  }
  ASSERT_EQ(response.size(), 1u);
  for (const uint32_t psn : {123456u, 777u + 1, 5000u + 2000}) {
    Frame forged = response[0];
    wire::RequestHeader h;
    ASSERT_GT(wire::decode_request(forged.data() + wire::kL2L4Size, wire::kRequestSize, &h), 0u);
    h.psn = psn;
    wire::encode_request(forged.data() + wire::kL2L4Size, h);
    std::fill(forged.end() - 1000, forged.end(), 0xee);  // the attacker's bytes
    p.deliver(p.a, {forged});
    EXPECT_TRUE(poll_all(p.a_scq).empty()) << psn;
  }
  EXPECT_EQ(local, std::vector<uint8_t>(1000, 0));
  p.deliver(p.a, frames);  // the real ones: the response at 777
  p.settle();
  const auto wa = poll_all(p.a_scq);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
  EXPECT_EQ(local, source);
}

// READ responses once the requester has taken data (the short receive
// way): one whose lengths do not match its READ (the rest of it
// unchanged) is refused as invalid, as the first one would be; its bytes
// are not placed and the READ does not complete as done. One naming
// another job is dropped and counted, and the READ completes once the
// responder sends it again.
TEST(RcSemantics, AReadResponseAfterTheFirstIsCheckedAsTheFirstIs) {
  for (const bool wrong_job : {false, true}) {
    SCOPED_TRACE(wrong_job ? "wrong job id" : "wrong length");
    ConnectionConfig c;
    c.mtu = 1024;
    c.remote_access = kAccessRemoteRead;
    DirectPair p(c);
    std::vector<uint8_t> source(4096), local(4096, 0), second(3000, 0);
    fill_pattern(source.data(), source.size(), 3);
    const uint32_t rkey =
        p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
    ASSERT_EQ(p.qa->post_send(request(1, Opcode::kRead, local.data(), 4096, source.data(), rkey)),
              PostError::kOk);
    p.settle();
    auto wa = poll_all(p.a_scq);
    ASSERT_EQ(wa.size(), 1u);
    ASSERT_EQ(wa[0].status, WcStatus::kSuccess);
    ASSERT_EQ(local, source);
    ASSERT_EQ(p.qa->post_send(request(2, Opcode::kRead, second.data(), 3000, source.data(), rkey)),
              PostError::kOk);
    p.deliver(p.b, p.drain(p.a));
    std::vector<Frame> frames = p.drain(p.b);
    std::vector<size_t> responses;
    for (size_t i = 0; i < frames.size(); ++i) {
      if (parse(frames[i]).has_ses_response) responses.push_back(i);
    }
    ASSERT_EQ(responses.size(), 3u);  // 1024 + 1024 + 952
    Frame& f = frames[responses[1]];
    wire::ParsedPacket pkt = parse(f);
    const size_t ses_at = static_cast<size_t>(pkt.payload - f.data()) - wire::kSesResponseDataSize;
    if (wrong_job) {
      pkt.resp.job_id ^= 1;
    } else {
      pkt.resp.modified_length = 4096;  // the READ asked for 3000
    }
    wire::encode_ses_response_data(f.data() + ses_at, pkt.resp);
    const ConnectionStats before = p.qa->stats();
    p.deliver(p.a, frames);
    EXPECT_TRUE(std::all_of(second.begin() + 1024, second.begin() + 2048,
                            [](uint8_t v) { return v == 0; }));
    if (wrong_job) {
      EXPECT_EQ(p.qa->stats().wrong_job_id, before.wrong_job_id + 1);
      EXPECT_EQ(p.qa->stats().invalid_requests, before.invalid_requests);
      ASSERT_TRUE(p.run_for(100'000'000, 100'000, [&] { return p.a_scq.size() == 1; }));
      wa = poll_all(p.a_scq);
      EXPECT_EQ(wa[0].wr_id, 2u);
      EXPECT_EQ(wa[0].status, WcStatus::kSuccess);
      EXPECT_TRUE(std::equal(second.begin(), second.end(), source.begin()));
    } else {
      EXPECT_EQ(p.qa->stats().invalid_requests, before.invalid_requests + 1);
      // The requester stops, as on any malformed response: the READ
      // completes, in error.
      ASSERT_TRUE(p.run_for(100'000'000, 100'000, [&] { return p.a_scq.size() == 1; }));
      wa = poll_all(p.a_scq);
      EXPECT_EQ(wa[0].wr_id, 2u);
      EXPECT_NE(wa[0].status, WcStatus::kSuccess);
      EXPECT_EQ(p.qa->state(), ConnectionState::kError);
    }
  }
}

// The responder's QP access flags are checked besides its region's (IB's
// qp_access_flags): a WRITE through a QP that allows no remote access, and
// a READ through one that allows WRITE only, are refused with a remote
// access error though the region allows both. Nothing is written or read,
// and the responder's QP goes to error.
TEST(RcSemantics, AResponderQpRefusesWhatItsAccessFlagsDoNotAllow) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  ConnectionConfig none = c, write_only = c;
  none.remote_access = 0;
  write_only.remote_access = kAccessRemoteWrite;
  std::vector<uint8_t> src(3000, 7), region(8192, 0x5a), local(4096, 0);
  const std::vector<uint8_t> before = region;
  const uint32_t key = p.b.memory().register_region(region.data(), region.size(),
                                                    kAccessRemoteWrite | kAccessRemoteRead, 0);
  auto [qa, qb] = p.add_pair(c, none, 3, 4);
  ASSERT_EQ(qa->post_send(request(1, Opcode::kWrite, src.data(), 3000, region.data(), key)),
            PostError::kOk);
  p.settle();
  auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(qb->state(), ConnectionState::kError);
  EXPECT_GE(qb->stats().access_errors, 1u);
  EXPECT_EQ(region, before);

  auto [qc, qd] = p.add_pair(c, write_only, 5, 6);
  ASSERT_EQ(qc->post_send(request(2, Opcode::kWrite, src.data(), 3000, region.data(), key)),
            PostError::kOk);
  ASSERT_EQ(qc->post_send(request(3, Opcode::kRead, local.data(), 4096, region.data() + 4096, key)),
            PostError::kOk);
  p.settle();
  wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);  // the WRITE it allows
  EXPECT_EQ(wcs[1].status, WcStatus::kRemAccessErr);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), region.begin()));
  EXPECT_TRUE(std::all_of(local.begin(), local.end(), [](uint8_t v) { return v == 0; }));
  EXPECT_EQ(qd->state(), ConnectionState::kError);

  // Changed on a live QP, the flags apply to the next request.
  auto [qe, qf] = p.add_pair(c, c, 7, 8);
  qf->set_remote_access(kAccessRemoteRead);
  ASSERT_EQ(qe->post_send(request(4, Opcode::kWrite, src.data(), 100, region.data() + 6000, key)),
            PostError::kOk);
  p.settle();
  wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(region[6000], 0x5a);
}

// max_rd_atomic and max_dest_rd_atomic: a requester never has more READs
// outstanding than its own limit (the others wait, and all complete); a
// READ beyond what the responder accepts is refused there as an invalid
// request, as an InfiniBand responder does.
TEST(RcSemantics, ReadLimitsAreHonouredAtBothEnds) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  std::vector<uint8_t> source(4 * 3000), local(4 * 3000, 0);
  fill_pattern(source.data(), source.size(), 21);
  const uint32_t key =
      p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
  ConnectionConfig one = c, dest_one = c;
  one.max_rd_atomic = 1;
  dest_one.max_dest_rd_atomic = 1;
  // A requester limited to 1, a responder that accepts 1: the four READs
  // go one at a time and all succeed.
  auto [qa, qb] = p.add_pair(one, dest_one, 3, 4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(qa->post_send(request(i, Opcode::kRead, local.data() + 3000 * i, 3000,
                                    source.data() + 3000 * i, key)),
              PostError::kOk);
  }
  // (Had the requester sent a second READ before the first completed, the
  // responder would have refused it.)
  ASSERT_TRUE(p.run_for(100'000'000, 1'000, [&] { return p.a_scq.size() == 4; }));
  for (const WorkCompletion& wc : poll_all(p.a_scq)) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(local, source);
  // A requester that allows itself 4 against a responder that accepts 1:
  // the second READ is refused, and the first, accepted before it, is
  // still answered (as an InfiniBand responder answers it).
  ConnectionConfig four = c;
  four.max_rd_atomic = 4;
  auto [qe, qf] = p.add_pair(four, dest_one, 7, 8);
  std::fill(local.begin(), local.end(), 0);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(qe->post_send(request(20 + i, Opcode::kRead, local.data() + 3000 * i, 3000,
                                    source.data() + 3000 * i, key)),
              PostError::kOk);
  }
  p.settle();
  auto two = poll_all(p.a_scq);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].status, WcStatus::kSuccess);
  EXPECT_EQ(two[1].status, WcStatus::kRemInvReqErr);
  EXPECT_TRUE(std::equal(source.begin(), source.begin() + 3000, local.begin()));
  EXPECT_EQ(qf->state(), ConnectionState::kError);
  // A responder that accepts none (max_dest_rd_atomic 0) refuses a READ
  // as an invalid request.
  ConnectionConfig dest_none = c;
  dest_none.max_dest_rd_atomic = 0;
  auto [qc, qd] = p.add_pair(c, dest_none, 5, 6);
  std::fill(local.begin(), local.end(), 0);
  ASSERT_EQ(qc->post_send(request(10, Opcode::kRead, local.data(), 3000, source.data(), key)),
            PostError::kOk);
  p.settle();
  const auto wcs = poll_all(p.a_scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(qd->state(), ConnectionState::kError);
  EXPECT_TRUE(std::all_of(local.begin(), local.end(), [](uint8_t v) { return v == 0; }));
}

// A responder granted 128 READs (the device's max_qp_rd_atom) holds room
// for what arrives, not for all 128 from the start: at first it costs what
// one granted 16 costs. 100 READs outstanding at once all complete, byte
// exact, while its rings grow.
TEST(RcSemantics, AResponderGrantedManyReadsGrowsItsRoomAsTheyCome) {
  ConnectionConfig c;
  c.mtu = 1024;
  DirectPair p(c);
  constexpr int kReads = 100;
  std::vector<uint8_t> source(kReads * 64), local(kReads * 64, 0);
  fill_pattern(source.data(), source.size(), 33);
  const uint32_t key =
      p.b.memory().register_region(source.data(), source.size(), kAccessRemoteRead, 0);
  ConnectionConfig many = c, dest16 = c, dest128 = c;
  many.max_rd_atomic = 128;
  dest16.max_dest_rd_atomic = 16;
  dest128.max_dest_rd_atomic = 128;
  auto [q1, q16] = p.add_pair(many, dest16, 3, 4);
  auto [qa, q128] = p.add_pair(many, dest128, 5, 6);
  (void)q1;
  const size_t at_first = q128->memory_footprint();
  EXPECT_EQ(at_first, q16->memory_footprint());
  for (int i = 0; i < kReads; ++i) {
    ASSERT_EQ(qa->post_send(request(i, Opcode::kRead, local.data() + 64 * i, 64,
                                    source.data() + 64 * i, key)),
              PostError::kOk);
  }
  ASSERT_TRUE(p.run_for(100'000'000, 1'000, [&] { return p.a_scq.size() == kReads; }));
  for (const WorkCompletion& wc : poll_all(p.a_scq)) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(local, source);
  EXPECT_GT(q128->memory_footprint(), at_first);
  EXPECT_EQ(q128->state(), ConnectionState::kActive);
}

// IB's timeout 0 is infinite: a peer away for far longer than the retry
// budget (two seconds against 8 ms) ends in no error, and the WRITE
// completes once the peer is back. Without it, the same wait ends in
// RETRY_EXC_ERR.
TEST(RcSemantics, RetryForeverWaitsOutAnAbsentPeerAndSucceedsWhenItReturns) {
  for (const bool forever : {true, false}) {
    ConnectionConfig c;
    c.mtu = 1024;
    c.retry_limit = 1;
    c.rto_max_ns = 4'000'000;
    c.retry_forever = forever;
    DirectPair p(c);
    std::vector<uint8_t> src(8000), dst(8000, 0);
    fill_pattern(src.data(), src.size(), 3);
    const uint32_t key =
        p.b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
    ASSERT_EQ(p.qa->post_send(request(1, Opcode::kWrite, src.data(), 8000, dst.data(), key)),
              PostError::kOk);
    bool cut = true;
    const auto drop = [&](const Frame&, bool) { return cut; };
    const bool ended = p.run_for(
        2'000'000'000, 100'000, [&] { return p.a_scq.size() > 0; }, drop);
    if (!forever) {
      ASSERT_TRUE(ended);
      EXPECT_EQ(poll_all(p.a_scq)[0].status, WcStatus::kRetryExcErr);
      continue;
    }
    EXPECT_FALSE(ended);
    EXPECT_EQ(p.qa->state(), ConnectionState::kActive);
    EXPECT_GT(p.qa->stats().timeouts, 10u);
    cut = false;
    ASSERT_TRUE(p.run_for(
        100'000'000, 100'000, [&] { return p.a_scq.size() > 0; }, drop));
    const auto wcs = poll_all(p.a_scq);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(dst, src);
  }
}

// A packet refused for want of a receive does not hold its PSN: the
// requester fills it with a NOP at once and sends the refused part again
// under a new PSN after the wait. So the PSN space (and everything after
// the refused SEND) is acknowledged within round trips, not after a 655 ms
// RNR wait; completions still come in order once the receive is there.
TEST(RcSemantics, ARefusedSendsPsnIsFilledAtOnceAndTheSendGoesAgainUnderANewOne) {
  ConnectionConfig ca, cb;
  cb.rnr_delay_ns = 655'360'000;
  DirectPair p;
  auto [qa, qb] = p.add_pair(ca, cb, 3, 4);
  static std::vector<uint8_t> msg(100, 9), wsrc(4096, 5);
  std::vector<uint8_t> rbuf(256, 0), wdst(4096, 0);
  const uint32_t key = p.b.memory().register_region(wdst.data(), 4096, kAccessRemoteWrite, 0);
  ASSERT_EQ(qa->post_send(request(1, Opcode::kSend, msg.data(), 100)), PostError::kOk);
  ASSERT_EQ(qa->post_send(request(2, Opcode::kWrite, wsrc.data(), 4096, wdst.data(), key)),
            PostError::kOk);
  ASSERT_TRUE(p.run_for(200'000, 1'000, [&] {
    return qa->stats().rnr_nacks_received > 0 && qa->unacked_packets() == 0;
  }));
  EXPECT_EQ(qb->stats().nops_received, 1u);
  EXPECT_EQ(wdst, wsrc);
  EXPECT_EQ(p.a_scq.size(), 0u);  // the WRITE completes after the SEND
  const TimeNs nacked_at = p.now;
  ASSERT_EQ(qb->post_recv(7, sgl_of(rbuf.data(), 256)), PostError::kOk);
  ASSERT_TRUE(p.run_for(2'000'000'000, 1'000, [&] { return p.a_scq.size() == 2; }));
  EXPECT_GE(p.now - nacked_at, 655'000'000u - 200'000u);  // the responder's wait
  const auto wcs = poll_all(p.a_scq);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(msg.begin(), msg.end(), rbuf.begin()));
  const auto rwc = poll_all(p.b_rcq);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].byte_len, 100u);
}

// The receive is posted between the packets of its SEND: the first was
// refused (it comes again under a new PSN after the wait), the others are
// placed. The receive completes only once every byte is in, though the
// NOP that fills the refused PSN puts the message's last PSN in order.
TEST(RcSemantics, AReceivePostedWhileItsSendArrivesCompletesOnlyWithEveryByte) {
  DirectPair p;
  std::vector<uint8_t> msg(3 * 4096), rbuf(3 * 4096, 0);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kSend, msg.data(), 3 * 4096)), PostError::kOk);
  const std::vector<Frame> sent = p.drain(p.a);
  ASSERT_EQ(sent.size(), 3u);
  p.deliver(p.b, {sent[0]});  // no receive: refused
  ASSERT_EQ(p.qb->stats().rnr_nacks, 1u);
  ASSERT_EQ(p.qb->post_recv(7, sgl_of(rbuf.data(), 3 * 4096)), PostError::kOk);
  p.deliver(p.b, {sent[1], sent[2]});
  p.deliver(p.a, p.drain(p.b));  // the NACK (and ACKs)
  p.deliver(p.b, p.drain(p.a));  // the NOP at the refused PSN
  EXPECT_EQ(p.qb->stats().nops_received, 1u);
  EXPECT_EQ(p.b_rcq.size(), 0u);  // the first 4096 bytes are not in
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return p.a_scq.size() > 0; }));
  const auto rwc = poll_all(p.b_rcq);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rwc[0].byte_len, 3u * 4096);
  EXPECT_EQ(rbuf, msg);
  EXPECT_EQ(poll_all(p.a_scq)[0].status, WcStatus::kSuccess);
}

// The network duplicates the first packet of a SEND that was refused for
// want of a receive, and the duplicate arrives after the receive is
// posted. It is not taken: its sender fills the PSN and sends the part
// again under a new one, so taking the copy would place the part twice
// (the receive, counting its bytes, would then never complete).
TEST(RcSemantics, ADuplicateOfARefusedPacketIsNotTaken) {
  DirectPair p;
  std::vector<uint8_t> msg(3 * 4096), buf1(3 * 4096, 0), buf2(256, 0);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 5 + 3);
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kSend, msg.data(), 3 * 4096)), PostError::kOk);
  const std::vector<Frame> sent = p.drain(p.a);
  ASSERT_EQ(sent.size(), 3u);
  p.deliver(p.b, {sent[0]});  // no receive: refused
  const std::vector<Frame> nack = p.drain(p.b);
  ASSERT_EQ(p.qb->post_recv(7, sgl_of(buf1.data(), 3 * 4096)), PostError::kOk);
  ASSERT_EQ(p.qb->post_recv(8, sgl_of(buf2.data(), 256)), PostError::kOk);
  p.deliver(p.b, {sent[0]});  // the network's copy
  EXPECT_EQ(p.qb->stats().duplicates, 1u);
  p.deliver(p.b, {sent[1], sent[2]});
  p.deliver(p.a, nack);  // a NOP, and the first part again after the wait
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return p.a_scq.size() > 0; }));
  EXPECT_EQ(poll_all(p.a_scq)[0].status, WcStatus::kSuccess);
  const auto rwc = poll_all(p.b_rcq);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].wr_id, 7u);
  EXPECT_EQ(rwc[0].byte_len, 3u * 4096);
  EXPECT_EQ(buf1, msg);
  EXPECT_EQ(buf2, std::vector<uint8_t>(256, 0));
  EXPECT_EQ(p.qb->stats().duplicate_messages, 0u);
}

// The RNR wait is the responder's: its timer travels in the RNR NACK (as
// in IB's RNR NAK), whatever the requester's own setting. A responder that
// asks for 10 us has the SEND retried within about that once its receive
// is posted; one that asks for 655 ms is not retried before.
TEST(RcSemantics, TheRnrWaitIsTheRespondersTimerCarriedInTheNack) {
  for (const TimeNs responder : {TimeNs{10'000}, TimeNs{655'360'000}}) {
    ConnectionConfig ca, cb;
    ca.rnr_delay_ns = responder == 10'000 ? 655'360'000 : 10'000;  // the requester's own
    cb.rnr_delay_ns = responder;
    DirectPair p;
    auto [qa, qb] = p.add_pair(ca, cb, 3, 4);
    static std::vector<uint8_t> msg(100, 9);
    std::vector<uint8_t> rbuf(256, 0);
    ASSERT_EQ(qa->post_send(request(1, Opcode::kSend, msg.data(), 100)), PostError::kOk);
    ASSERT_TRUE(p.run_for(1'000'000, 1'000, [&] { return qa->stats().rnr_nacks_received > 0; }));
    const TimeNs nacked_at = p.now;
    ASSERT_EQ(qb->post_recv(7, sgl_of(rbuf.data(), 256)), PostError::kOk);
    ASSERT_TRUE(p.run_for(2'000'000'000, 1'000, [&] { return p.a_scq.size() > 0; }));
    const auto wcs = poll_all(p.a_scq);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
    EXPECT_TRUE(std::equal(msg.begin(), msg.end(), rbuf.begin()));
    if (responder == 10'000) {
      EXPECT_LT(p.now - nacked_at, 100'000u);  // 10 us and a round trip, not 655 ms
    } else {
      EXPECT_GE(p.now - nacked_at, 655'000'000u);
    }
  }
}

}  // namespace
}  // namespace braid::test

namespace braid::test {
namespace {

// A receive's buffers are checked when its SEND arrives, not when posted:
// a region moved to another PD (ibv_rereg_mr) in between fails the
// receive with LOC_PROT_ERR, writing nothing, and the sender with
// REM_OP_ERR (IB's remote operation error), as a NIC does.
TEST(RcSemantics, AReceiveWhoseRegionChangedSinceItsPostFailsAsARemoteOperationError) {
  DirectPair p;
  std::vector<uint8_t> msg(100, 9), rbuf(256, 0xee);
  const uint32_t key = p.b.memory().register_region(rbuf.data(), 256, kAccessLocalWrite, 0);
  SgList l = sgl_of(rbuf.data(), 256);
  l.sge[0].lkey = key;
  ASSERT_EQ(p.qb->post_recv(7, l), PostError::kOk);
  ASSERT_TRUE(p.b.memory().reregister(key, rbuf.data(), 256, kAccessLocalWrite, 1));
  ASSERT_EQ(p.qa->post_send(request(1, Opcode::kSend, msg.data(), 100)), PostError::kOk);
  ASSERT_TRUE(p.run_for(100'000'000, 1'000, [&] { return p.a_scq.size() > 0; }));
  const auto s = poll_all(p.a_scq);
  EXPECT_EQ(s[0].status, WcStatus::kRemOpErr) << wc_status_name(s[0].status);
  const auto r = poll_all(p.b_rcq);
  ASSERT_GE(r.size(), 1u);
  EXPECT_EQ(r[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(std::count(rbuf.begin(), rbuf.end(), 0xee), 256);
}

}  // namespace
}  // namespace braid::test
