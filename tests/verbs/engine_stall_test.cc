// An engine that was not polled for a while (its core taken away by the
// host, or an application busy elsewhere) finds the ACKs of everything it
// sent waiting in its ring. They go in before its timers run: otherwise,
// with more connections than a burst has frames, the retransmission timer
// of every connection whose ACK is still in the ring fires, and packets
// that arrived are declared lost and sent again.
// Two engines over a software cable, driven on one thread with a clock of
// the test's own (Engine::poll_at): the stall is exact.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/completion_queue.h"
#include "engine/engine.h"
#include "loopback/pipe_io.h"

namespace braid {
namespace {

constexpr uint32_t kIpA = 0xc6120001;  // 198.18.0.1
constexpr uint32_t kIpB = 0xc6120002;  // 198.18.0.2
constexpr uint16_t kConns = 64;        // two bursts of ACKs
constexpr uint32_t kSize = 1024;       // one packet each

struct Result {
  uint64_t timeouts = 0, lost_timeout = 0, retransmits = 0, completions = 0, gaps = 0;
  TimeNs longest_gap = 0;
  bool bytes_match = false;
};

// A's kConns connections each send one WRITE of one packet to B, which
// acknowledges each at once: kConns ACKs, two bursts' worth, queue up at A.
// A is then polled again only `stall` later, with a drain of up to
// `drain_bursts` bursts.
Result write_then_stall(TimeNs stall, uint16_t drain_bursts) {
  const wire::MacAddr mac_a{2, 0, 0, 0, 0, 1}, mac_b{2, 0, 0, 0, 0, 2};
  auto [io_a, io_b] = PipeIo::make_pair(mac_a, mac_b, 1514);
  EngineConfig ca;
  ca.ip = kIpA;
  ca.stall_drain_bursts = drain_bursts;
  EngineConfig cb;
  cb.ip = kIpB;
  Engine a(std::move(io_a), ca), b(std::move(io_b), cb);
  a.add_neighbor(kIpB, mac_b);
  b.add_neighbor(kIpA, mac_a);
  CompletionQueue scq_a(256), rcq_a(256), scq_b(256), rcq_b(256);
  std::vector<uint8_t> src(kConns * kSize), dst(kConns * kSize, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + (i >> 10));
  const uint32_t rkey = b.endpoint().memory().register_region(
      dst.data(), dst.size(), kAccessLocalWrite | kAccessRemoteWrite, 0);
  std::vector<Connection*> senders;
  Result r;
  for (uint16_t i = 0; i < kConns; ++i) {
    ConnectionConfig cc;
    cc.mtu = kSize;
    cc.local_id = static_cast<uint16_t>(1 + i);
    cc.remote_id = static_cast<uint16_t>(1 + i);
    cc.qp_num = 1 + i;
    cc.remote_qpn = 1 + i;
    cc.remote_mac = mac_b;
    cc.remote_ip = kIpB;
    Connection* x = a.endpoint().create_connection(cc, &scq_a, &rcq_a);
    cc.remote_mac = mac_a;
    cc.remote_ip = kIpA;
    Connection* y = b.endpoint().create_connection(cc, &scq_b, &rcq_b);
    EXPECT_TRUE(x != nullptr && y != nullptr);
    if (x == nullptr || y == nullptr) return r;
    SendRequest wr;
    wr.wr_id = i;
    wr.opcode = Opcode::kWrite;
    wr.local.num = 1;
    wr.local.sge[0] = Sge{src.data() + size_t{i} * kSize, kSize, 0};
    wr.remote_addr = reinterpret_cast<uintptr_t>(dst.data()) + size_t{i} * kSize;
    wr.rkey = rkey;
    EXPECT_EQ(x->post_send(wr), PostError::kOk);
    senders.push_back(x);
  }

  TimeNs t = 1'000'000'000;
  // A sends everything (bursts of 32), B takes it in and answers at once.
  for (int i = 0; i < 4; ++i) a.poll_at(t += 1000);
  for (int i = 0; i < 4; ++i) b.poll_at(t += 1000, Engine::kAckNow);
  EXPECT_EQ(b.endpoint().stats().rx_frames, kConns);
  // A's next poll comes `stall` after its last, every ACK waiting in its ring.
  t += stall;
  for (int i = 0; i < 8; ++i) a.poll_at(t += 1000);
  for (Connection* x : senders) {
    r.timeouts += x->stats().timeouts;
    r.lost_timeout += x->stats().lost_timeout;
    r.retransmits += x->stats().retransmits;
  }
  WorkCompletion c;
  while (scq_a.poll(&c, 1) == 1) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    ++r.completions;
  }
  r.gaps = a.stats().poll_gaps;
  r.longest_gap = a.stats().longest_poll_gap_ns;
  r.bytes_match = src == dst;
  return r;
}

TEST(EngineStall, AcksWaitingInTheRingGoInBeforeTheTimersRun) {
  constexpr TimeNs kStall = 10'000'000;  // 10 ms: five initial RTOs
  const Result r = write_then_stall(kStall, EngineConfig{}.stall_drain_bursts);
  EXPECT_EQ(r.timeouts, 0u);
  EXPECT_EQ(r.lost_timeout, 0u);
  EXPECT_EQ(r.retransmits, 0u);
  EXPECT_EQ(r.completions, kConns);
  EXPECT_TRUE(r.bytes_match);
  EXPECT_EQ(r.gaps, 1u);
  EXPECT_GE(r.longest_gap, kStall);
  EXPECT_LT(r.longest_gap, kStall + 100'000);  // B's four polls came between
}

// The same without the drain (one burst per poll, as between stalls): the
// connections whose ACKs are in the second burst time out before it goes
// in, and their packets, which arrived, are declared lost. This is what
// the test above guards against.
TEST(EngineStall, WithoutTheDrainTheTimersFireFirst) {
  const Result r = write_then_stall(10'000'000, 1);
  EXPECT_EQ(r.lost_timeout, kConns / 2);
  EXPECT_EQ(r.completions, kConns);  // recovered all the same
  EXPECT_TRUE(r.bytes_match);
}

// A gap shorter than EngineConfig::stall_ns is not one.
TEST(EngineStall, ShortGapsAreNotCounted) {
  const Result r = write_then_stall(EngineConfig{}.stall_ns / 2, EngineConfig{}.stall_drain_bursts);
  EXPECT_EQ(r.gaps, 0u);
  EXPECT_EQ(r.lost_timeout, 0u);
  EXPECT_EQ(r.completions, kConns);
}

}  // namespace
}  // namespace braid
