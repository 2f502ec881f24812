// Atomics (FETCH_AND_ADD, CMP_AND_SWP on 8 bytes): the old value comes
// back in the requester's byte order, each runs exactly once however its
// packets are lost or duplicated, and what InfiniBand refuses is refused
// with its error.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "direct_pair.h"

namespace braid::test {
namespace {

constexpr uint32_t kAll = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

SendRequest atomic(uint64_t id, Opcode op, uint64_t* result, uint64_t* target, uint32_t rkey,
                   uint64_t operand, uint64_t compare = 0) {
  SendRequest wr = request(id, op, reinterpret_cast<uint8_t*>(result), 8,
                           reinterpret_cast<uint8_t*>(target), rkey);
  wr.set_atomic_operands(operand, compare);
  return wr;
}

ConnectionConfig atomics_allowed() {
  ConnectionConfig c;
  c.remote_access = kAll;
  return c;
}

TEST(Atomics, FetchAddAndCompareSwapReturnTheOldValue) {
  DirectPair p(atomics_allowed());
  alignas(8) uint64_t target[2] = {0x0102030405060708ull, 50};
  const uint32_t key = p.b.memory().register_region(target, sizeof target, kAll, 0);
  uint64_t r[4] = {0, 0, 0, 0};
  ASSERT_EQ(p.qa->post_send(atomic(1, Opcode::kAtomicFetchAdd, &r[0], &target[0], key, 0x10)),
            PostError::kOk);
  // Compare matches: swapped.
  ASSERT_EQ(p.qa->post_send(atomic(2, Opcode::kAtomicCmpSwap, &r[1], &target[1], key, 7, 50)),
            PostError::kOk);
  // Compare does not match (7 now): left alone.
  ASSERT_EQ(p.qa->post_send(atomic(3, Opcode::kAtomicCmpSwap, &r[2], &target[1], key, 9, 50)),
            PostError::kOk);
  ASSERT_EQ(p.qa->post_send(atomic(4, Opcode::kAtomicFetchAdd, &r[3], &target[0], key, 1)),
            PostError::kOk);
  ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return p.a_scq.size() == 4; }));
  EXPECT_EQ(r[0], 0x0102030405060708ull);
  EXPECT_EQ(r[1], 50u);
  EXPECT_EQ(r[2], 7u);
  EXPECT_EQ(r[3], 0x0102030405060718ull);
  EXPECT_EQ(target[0], 0x0102030405060719ull);
  EXPECT_EQ(target[1], 7u);
  const auto wcs = poll_all(p.a_scq);
  const WcOpcode want[] = {WcOpcode::kFetchAdd, WcOpcode::kCompSwap, WcOpcode::kCompSwap,
                           WcOpcode::kFetchAdd};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[i].opcode, want[i]);
    EXPECT_EQ(wcs[i].byte_len, 8u);
  }
  EXPECT_EQ(p.qb->stats().atomics_executed, 4u);
}

// A fifth of the frames each way is lost, requests and responses alike:
// every FETCH_AND_ADD of 1 still runs exactly once, so the counter ends at
// the number posted and the old values returned are each number below it
// once.
TEST(Atomics, EachRunsExactlyOnceThroughLossAndRetransmission) {
  for (uint64_t seed : {1, 2, 3}) {
    ConnectionConfig c = atomics_allowed();
    c.rto_initial_ns = c.rto_min_ns = 200'000;
    c.retry_forever = true;
    DirectPair p(c);
    alignas(8) uint64_t counter = 0;
    const uint32_t key = p.b.memory().register_region(&counter, 8, kAll, 0);
    constexpr uint32_t kN = 200;
    std::vector<uint64_t> olds(kN, ~0ull);
    uint32_t posted = 0;
    std::mt19937_64 g(seed);
    const bool done = p.run_for(
        10'000'000'000, 10'000,
        [&] {
          while (posted < kN && p.qa->outstanding_sends() < 16) {
            EXPECT_EQ(p.qa->post_send(
                          atomic(posted, Opcode::kAtomicFetchAdd, &olds[posted], &counter, key, 1)),
                      PostError::kOk);
            ++posted;
          }
          return posted == kN && p.a_scq.size() == kN;
        },
        [&](const Frame&, bool) { return g() % 5 == 0; });
    ASSERT_TRUE(done) << "seed " << seed;
    EXPECT_EQ(counter, kN) << "seed " << seed;
    std::vector<uint64_t> sorted = olds;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < kN; ++i) ASSERT_EQ(sorted[i], i) << "seed " << seed;
    EXPECT_EQ(p.qb->stats().atomics_executed, kN);
    EXPECT_GT(p.qa->stats().retransmits + p.qb->stats().retransmits, 0u);
    for (const WorkCompletion& wc : poll_all(p.a_scq)) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  }
}

// Two queue pairs add to one word: neither loses the other's.
TEST(Atomics, QueuePairsAddingToOneWordLoseNothing) {
  DirectPair p(atomics_allowed());
  auto [qa2, qb2] = p.add_pair(atomics_allowed(), atomics_allowed(), 3, 4);
  (void)qb2;
  alignas(8) uint64_t counter = 0;
  const uint32_t key = p.b.memory().register_region(&counter, 8, kAll, 0);
  std::vector<uint64_t> olds(64);
  for (uint32_t i = 0; i < 32; ++i) {
    ASSERT_EQ(p.qa->post_send(atomic(i, Opcode::kAtomicFetchAdd, &olds[i], &counter, key, 1)),
              PostError::kOk);
    ASSERT_EQ(qa2->post_send(atomic(i, Opcode::kAtomicFetchAdd, &olds[32 + i], &counter, key, 1)),
              PostError::kOk);
  }
  ASSERT_TRUE(p.run_for(100'000'000, 1'000, [&] { return p.a_scq.size() == 64; }));
  EXPECT_EQ(counter, 64u);
  EXPECT_EQ(std::set<uint64_t>(olds.begin(), olds.end()).size(), 64u);
}

// InfiniBand's errors: a misaligned target is an invalid request; a region
// or a QP without REMOTE_ATOMIC is an access error; the target is untouched.
TEST(Atomics, MisalignedOrNotAllowedTargetsGetInfinibandsErrors) {
  struct Case {
    const char* what;
    size_t offset;       // into the target buffer
    uint32_t mr_access;  // the region's
    uint32_t qp_access;  // the responder QP's
    WcStatus want;
  };
  const Case cases[] = {
      {"misaligned", 4, kAll, kAll, WcStatus::kRemInvReqErr},
      {"region without REMOTE_ATOMIC", 0, kAccessRemoteWrite | kAccessRemoteRead, kAll,
       WcStatus::kRemAccessErr},
      {"QP without REMOTE_ATOMIC", 0, kAll, kAccessRemoteWrite | kAccessRemoteRead,
       WcStatus::kRemAccessErr},
  };
  for (const Case& k : cases) {
    ConnectionConfig ca = atomics_allowed(), cb = atomics_allowed();
    cb.remote_access = k.qp_access;
    DirectPair p;
    auto [qa, qb] = p.add_pair(ca, cb, 3, 4);
    alignas(8) uint8_t target[16];
    std::memset(target, 0x5a, sizeof target);
    const uint32_t key = p.b.memory().register_region(target, sizeof target, k.mr_access, 0);
    uint64_t old = 0;
    ASSERT_EQ(qa->post_send(atomic(1, Opcode::kAtomicFetchAdd, &old,
                                   reinterpret_cast<uint64_t*>(target + k.offset), key, 1)),
              PostError::kOk);
    ASSERT_TRUE(p.run_for(10'000'000, 1'000, [&] { return p.a_scq.size() == 1; })) << k.what;
    EXPECT_EQ(poll_all(p.a_scq)[0].status, k.want) << k.what;
    EXPECT_EQ(std::count(target, target + 16, 0x5a), 16) << k.what;
    EXPECT_EQ(qb->stats().atomics_executed, 0u) << k.what;
  }
}

TEST(Atomics, ARequestWithoutRoomForTheOldValueIsRefusedAtPost) {
  DirectPair p(atomics_allowed());
  alignas(8) uint64_t target = 0;
  const uint32_t key = p.b.memory().register_region(&target, 8, kAll, 0);
  uint64_t big[2];
  SendRequest wr = request(1, Opcode::kAtomicFetchAdd, reinterpret_cast<uint8_t*>(big), 16,
                           reinterpret_cast<uint8_t*>(&target), key);
  EXPECT_EQ(p.qa->post_send(wr), PostError::kInvalid);
  wr.local = sgl_of(reinterpret_cast<uint8_t*>(big), 4);
  EXPECT_EQ(p.qa->post_send(wr), PostError::kInvalid);
}

// A forged atomic whose payload is not one Braid knows (an unknown code, a
// datatype other than 64-bit, a short operand) is refused as invalid and
// runs nothing.
TEST(Atomics, MalformedAtomicPayloadsAreRefused) {
  for (int variant = 0; variant < 3; ++variant) {
    DirectPair p(atomics_allowed());
    alignas(8) uint64_t target = 5;
    const uint32_t key = p.b.memory().register_region(&target, 8, kAll, 0);
    uint64_t old = 0;
    ASSERT_EQ(p.qa->post_send(atomic(1, Opcode::kAtomicFetchAdd, &old, &target, key, 1)),
              PostError::kOk);
    std::vector<Frame> sent = p.drain(p.a);
    ASSERT_EQ(sent.size(), 1u);
    Frame f = sent[0];
    const wire::ParsedPacket pkt = parse(f);
    uint8_t* payload = f.data() + (pkt.payload - f.data());
    if (variant == 0) payload[0] = 0x7f;  // unknown code
    if (variant == 1) payload[1] = 0x05;  // UINT32
    if (variant == 2) payload[3] = 1;     // the reserved byte
    p.deliver(p.b, {f});
    EXPECT_EQ(p.qb->stats().invalid_requests, 1u) << variant;
    EXPECT_EQ(p.qb->stats().atomics_executed, 0u) << variant;
    EXPECT_EQ(target, 5u) << variant;
  }
}

// A response to an atomic that does not carry exactly the 8-byte old value
// (here cut to 4 bytes, its lengths made to match) is refused as an invalid
// response (the requester stops, as on any malformed response): nothing is
// written into its buffer, and the atomic does not complete as done.
TEST(Atomics, AResponseWithoutTheWholeOldValueIsRefused) {
  DirectPair p(atomics_allowed());
  alignas(8) uint64_t target = 7;
  const uint32_t key = p.b.memory().register_region(&target, 8, kAll, 0);
  uint64_t old = 0x5a5a5a5a5a5a5a5aull;
  ASSERT_EQ(p.qa->post_send(atomic(1, Opcode::kAtomicFetchAdd, &old, &target, key, 1)),
            PostError::kOk);
  p.deliver(p.b, p.drain(p.a));
  std::vector<Frame> back = p.drain(p.b);
  Frame* resp = nullptr;
  for (Frame& f : back) {
    if (parse(f).has_ses_response) resp = &f;
  }
  ASSERT_NE(resp, nullptr);
  Frame f = *resp;
  // The SES header says 4 bytes of payload too, as a peer would that meant it.
  wire::ParsedPacket pkt = parse(f);
  const size_t ses_at = static_cast<size_t>(pkt.payload - f.data()) - wire::kSesResponseDataSize;
  pkt.resp.payload_length = 4;
  wire::encode_ses_response_data(f.data() + ses_at, pkt.resp);
  f.resize(f.size() - 4);
  uint8_t* ip = f.data() + wire::kEthernetSize;
  wire::store_be16(ip + 2, static_cast<uint16_t>(f.size() - wire::kEthernetSize));
  wire::store_be16(ip + wire::kIpv4Size + 4,
                   static_cast<uint16_t>(f.size() - wire::kEthernetSize - wire::kIpv4Size));
  wire::store_be16(ip + 10, 0);
  wire::store_be16(ip + 10, wire::ipv4_checksum(ip, wire::kIpv4Size));
  const uint64_t invalid = p.qa->stats().invalid_requests;
  p.deliver(p.a, {f});
  EXPECT_EQ(old, 0x5a5a5a5a5a5a5a5aull);
  EXPECT_EQ(p.qa->stats().invalid_requests, invalid + 1);
  for (const WorkCompletion& wc : poll_all(p.a_scq)) EXPECT_NE(wc.status, WcStatus::kSuccess);
}

}  // namespace
}  // namespace braid::test
