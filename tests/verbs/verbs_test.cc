// The verbs API end to end between two devices in one process, each with
// its own engine, driven run-to-completion by the test: over a software cable
// (pipe) and over DPDK (a memif server and client: real PMD, real mbufs).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "braid/verbs.h"
#include "engine/stats_shm.h"
#include "loopback/pipe_io.h"
#include "verbs/device_io.h"
#include "verbs/verbs_internal.h"

namespace {

using braid::wire::MacAddr;

struct Side {
  braid_context* ctx = nullptr;
  braid_pd* pd = nullptr;
  braid_cq* cq = nullptr;
  braid_qp* qp = nullptr;
  std::vector<uint8_t> buf;
  braid_mr* mr = nullptr;
};

enum class Backend { kPipe, kMemif };

class VerbsPair : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    braid_device_config ca{};
    ca.ipv4 = "198.18.0.1";
    braid_device_config cb{};
    cb.ipv4 = "198.18.0.2";
    ca.crc = crc_;
    cb.crc = crc_b_ != 0 ? crc_b_ : crc_;
    ca.stats = stats_;
    cb.stats = stats_;
    ca.auth = cb.auth = auth_;
    ca.pdc_per_peer = cb.pdc_per_peer = pdc_per_peer_;
    ca.auth_key = key_a_;
    cb.auth_key = key_b_;
    if (GetParam() == Backend::kPipe) {
      const MacAddr ma{2, 0, 0, 0, 0, 1}, mb{2, 0, 0, 0, 0, 2};
      auto [ia, ib] = braid::PipeIo::make_pair(ma, mb, 1514);
      pipe_a = ia.get();
      pipe_b = ib.get();
      a.ctx = braid::open_device(&ca, std::move(ia));
      b.ctx = braid::open_device(&cb, std::move(ib));
    } else {
      // One memif link per test: fresh ids and socket names.
      static int n = 0;
      const int id = n++;
      const std::string sock =
          "/tmp/braid-verbs-" + std::to_string(getpid()) + "-" + std::to_string(id) + ".sock";
      port_a = "net_memif" + std::to_string(2 * id) + ",role=server,id=" + std::to_string(id) +
               ",socket=" + sock;
      port_b = "net_memif" + std::to_string(2 * id + 1) + ",role=client,id=" + std::to_string(id) +
               ",socket=" + sock;
      ca.port = port_a.c_str();
      cb.port = port_b.c_str();
      a.ctx = braid_open_device(&ca);
      ASSERT_NE(a.ctx, nullptr) << braid_last_error();
      b.ctx = braid_open_device(&cb);
    }
    ASSERT_NE(a.ctx, nullptr) << braid_last_error();
    ASSERT_NE(b.ctx, nullptr) << braid_last_error();
    for (Side* s : {&a, &b}) setup(*s, 1 << 20);
    connect();
  }
  void TearDown() override {
    for (Side* s : {&a, &b}) {
      EXPECT_EQ(s->qp ? braid_destroy_qp(s->qp) : 0, 0);
      EXPECT_EQ(s->mr ? braid_dereg_mr(s->mr) : 0, 0);
      EXPECT_EQ(s->cq ? braid_destroy_cq(s->cq) : 0, 0);
      EXPECT_EQ(s->pd ? braid_dealloc_pd(s->pd) : 0, 0);
      EXPECT_EQ(s->ctx ? braid_close_device(s->ctx) : 0, 0);
    }
  }
  void setup(Side& s, size_t size) {
    s.pd = braid_alloc_pd(s.ctx);
    ASSERT_NE(s.pd, nullptr);
    s.cq = braid_create_cq(s.ctx, 256, nullptr, nullptr, 0);
    ASSERT_NE(s.cq, nullptr);
    s.buf.assign(size, 0);
    s.mr = braid_reg_mr(
        s.pd, s.buf.data(), s.buf.size(),
        BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ);
    ASSERT_NE(s.mr, nullptr) << braid_last_error();
    braid_qp_init_attr ia{};
    ia.send_cq = s.cq;
    ia.recv_cq = s.cq;
    ia.cap = {128, 128, 1, 1, 64};
    ia.qp_type = BRAID_QPT_RC;
    s.qp = braid_create_qp(s.pd, &ia);
    ASSERT_NE(s.qp, nullptr) << braid_last_error();
  }
  // INIT -> RTR -> RTS on both sides, as an application does after the
  // out-of-band exchange (here: direct); b_to_rts false leaves b in RTR.
  void connect(bool b_to_rts = true) {
    for (Side* s : {&a, &b}) {
      braid_qp_attr at{};
      at.qp_state = BRAID_QPS_INIT;
      at.qp_access_flags =
          s == &b ? b_access_ : BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ;
      ASSERT_EQ(braid_modify_qp(s->qp, &at, BRAID_QP_STATE | BRAID_QP_ACCESS_FLAGS), 0);
    }
    // Each side's RTR resolves the other's MAC by ARP: drive both engines.
    for (auto [me, peer] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
      braid_qp_attr at{};
      at.qp_state = BRAID_QPS_RTR;
      at.path_mtu = BRAID_MTU_1024;
      at.dest_qp_num = braid_qp_num(peer->qp);
      at.rq_psn = 100;
      braid_query_gid(peer->ctx, 1, 0, &at.ah_attr.dgid);
      braid_progress(peer->ctx);  // its gratuitous ARP and replies
      at.max_dest_rd_atomic = rd_atomic_;
      int rc = braid_modify_qp(me->qp, &at,
                               BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU |
                                   BRAID_QP_DEST_QPN | BRAID_QP_RQ_PSN |
                                   (rd_atomic_ != 0 ? BRAID_QP_MAX_DEST_RD_ATOMIC : 0));
      ASSERT_EQ(rc, 0) << braid_last_error();
    }
    to_rts(a);
    if (b_to_rts) to_rts(b);
  }
  void to_rts(Side& s) {
    braid_qp_attr at{};
    at.qp_state = BRAID_QPS_RTS;
    at.sq_psn = 100;
    at.retry_cnt = 7;
    at.timeout = 10;
    at.max_rd_atomic = rd_atomic_;
    ASSERT_EQ(
        braid_modify_qp(s.qp, &at,
                        BRAID_QP_STATE | BRAID_QP_SQ_PSN | BRAID_QP_RETRY_CNT | BRAID_QP_TIMEOUT |
                            (rd_atomic_ != 0 ? BRAID_QP_MAX_QP_RD_ATOMIC : 0)),
        0);
  }
  // Drives the other side's engine once, then polls `s`'s CQ (which drives
  // its own) and appends what it found to `out`.
  void poll_once(Side& s, std::vector<braid_wc>& out) {
    braid_progress(s.ctx == a.ctx ? b.ctx : a.ctx);
    braid_wc wc[16];
    const int k = braid_poll_cq(s.cq, 16, wc);
    EXPECT_GE(k, 0);
    out.insert(out.end(), wc, wc + std::max(k, 0));
  }
  // Polls `s` (driving both engines) until n completions or a bound.
  std::vector<braid_wc> wait(Side& s, size_t n) {
    std::vector<braid_wc> out;
    for (int i = 0; i < 200000 && out.size() < n; ++i) poll_once(s, out);
    return out;
  }
  // As wait, but for up to `seconds` of the clock rather than a count of
  // polls: for what only a timer ends (a retry budget of half a second
  // spans more polls than wait makes in an optimised build).
  std::vector<braid_wc> wait_for(Side& s, size_t n, int seconds) {
    std::vector<braid_wc> out;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (out.size() < n && std::chrono::steady_clock::now() < end) poll_once(s, out);
    return out;
  }
  // A request of one SGE, `flags` as given (no remote address).
  static braid_send_wr one_sge(braid_sge* s, uint64_t wr_id, braid_wr_opcode op, unsigned flags) {
    braid_send_wr w{};
    w.wr_id = wr_id;
    w.sg_list = s;
    w.num_sge = 1;
    w.opcode = op;
    w.send_flags = flags;
    return w;
  }
  // A signaled WRITE of *s to `to`'s buffer at `offset`.
  static braid_send_wr rdma_write(braid_sge* s, uint64_t wr_id, Side& to, size_t offset) {
    braid_send_wr w = one_sge(s, wr_id, BRAID_WR_RDMA_WRITE, BRAID_SEND_SIGNALED);
    w.rdma.remote_addr = reinterpret_cast<uintptr_t>(to.buf.data() + offset);
    w.rdma.rkey = to.mr->rkey;
    return w;
  }
  // ... to the start of b's buffer.
  braid_send_wr write_to_b(braid_sge* s, uint64_t wr_id) { return rdma_write(s, wr_id, b, 0); }
  // n receives of `len` bytes each into s's buffer from `at`, wr_ids 100 up.
  void post_recvs(Side& s, size_t n, size_t at, uint32_t len) {
    for (size_t i = 0; i < n; ++i) {
      braid_sge rs = sge(s, at + i * len, len);
      braid_recv_wr r{};
      r.wr_id = 100 + i;
      r.sg_list = &rs;
      r.num_sge = 1;
      ASSERT_EQ(braid_post_recv(s.qp, &r, nullptr), 0) << braid_last_error();
    }
  }
  braid_sge sge(Side& s, size_t off, uint32_t len) {
    return braid_sge{reinterpret_cast<uintptr_t>(s.buf.data() + off), len, s.mr->lkey};
  }

  // b's QP access flags at INIT (a's allow remote WRITE and READ).
  unsigned int b_access_ = BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ;
  uint8_t rd_atomic_ = 0;      // max_dest_rd_atomic and max_rd_atomic connect() sets (0: unset)
  int crc_ = 0;                // both devices' integrity trailer (braid_device_config.crc)
  int crc_b_ = 0;              // b's, when it differs
  int stats_ = -1;             // braid_device_config.stats: none unless a test asks
  int pdc_per_peer_ = 0;       // both devices' braid_device_config.pdc_per_peer
  int auth_ = BRAID_AUTH_OFF;  // both devices' authenticated mode, and their keys
  const char* key_a_ = nullptr;
  const char* key_b_ = nullptr;
  Side a, b;
  std::string port_a, port_b;
  braid::PipeIo* pipe_a = nullptr;  // pipe backend only
  braid::PipeIo* pipe_b = nullptr;
};

// Tests that need to reach into the cable: the software backend only.
class VerbsPipe : public VerbsPair {
 protected:
  static uint64_t tx_frames(Side& s) {
    braid_port_stats st{};
    EXPECT_EQ(braid_query_port_stats(s.ctx, &st), 0);
    return st.tx_frames;
  }
  // b answers a's ping with a WRITE: the one ACK b owes leaves with it, two
  // frames after `before`.
  void b_answers_with_the_ack(uint64_t before) {
    braid_sge sb = sge(b, 4096, 64);
    braid_send_wr back = rdma_write(&sb, 2, a, 4096);
    ASSERT_EQ(braid_post_send(b.qp, &back, nullptr), 0);
    EXPECT_EQ(tx_frames(b), before + 2);
    braid_qp_stats qs{};
    ASSERT_EQ(braid_query_qp_stats(b.qp, &qs), 0);
    EXPECT_EQ(qs.acks_sent, 1u);
  }
  // A new RC QP of `s` with these capabilities, on its CQ, in RESET.
  static braid_qp* new_qp(Side& s, braid_qp_cap cap) {
    braid_qp_init_attr ia{};
    ia.send_cq = s.cq;
    ia.recv_cq = s.cq;
    ia.cap = cap;
    ia.qp_type = BRAID_QPT_RC;
    return braid_create_qp(s.pd, &ia);
  }
  // Both QPs replaced by ones with these capabilities, connected again.
  void replace_qps(braid_qp_cap cap) {
    for (Side* x : {&a, &b}) {
      ASSERT_EQ(braid_destroy_qp(x->qp), 0);
      x->qp = new_qp(*x, cap);
      ASSERT_NE(x->qp, nullptr) << braid_last_error();
    }
    connect();
  }
  // Each side learns the other's MAC (ARP) first.
  void learn_macs() {
    for (int i = 0; i < 4; ++i) {
      braid_progress(a.ctx);
      braid_progress(b.ctx);
    }
  }
};

TEST_P(VerbsPair, QueriesDescribeAnEthernetRoceLikePort) {
  braid_port_attr pa{};
  ASSERT_EQ(braid_query_port(a.ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, BRAID_PORT_ACTIVE);
  EXPECT_EQ(pa.link_layer, 2);
  EXPECT_EQ(pa.link_mtu, 1500u);
  EXPECT_EQ(pa.active_mtu, BRAID_MTU_1024);
  union braid_gid g;
  ASSERT_EQ(braid_query_gid(a.ctx, 1, 0, &g), 0);
  const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1};
  EXPECT_EQ(std::memcmp(g.raw, want, 16), 0);
  EXPECT_EQ(braid_query_port(a.ctx, 2, &pa), EINVAL);
}

TEST_P(VerbsPair, WriteWithImmAndSendArriveByteExact) {
  std::mt19937 g(1);
  for (size_t i = 0; i < 300000; ++i) a.buf[i] = static_cast<uint8_t>(g());
  braid_recv_wr rwr{};
  braid_sge rs = sge(b, 500000, 70000);
  rwr.wr_id = 11;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ASSERT_EQ(braid_post_recv(b.qp, &rwr, nullptr), 0);
  braid_recv_wr rwr2 = rwr;
  rwr2.wr_id = 12;
  ASSERT_EQ(braid_post_recv(b.qp, &rwr2, nullptr), 0);

  braid_sge s1 = sge(a, 0, 200000);
  braid_send_wr w1{};
  w1.wr_id = 1;
  w1.sg_list = &s1;
  w1.num_sge = 1;
  w1.opcode = BRAID_WR_RDMA_WRITE_WITH_IMM;
  w1.send_flags = BRAID_SEND_SIGNALED;
  w1.imm_data = htonl(0xabcdef01);
  w1.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf.data() + 100);
  w1.rdma.rkey = b.mr->rkey;
  braid_sge s2 = sge(a, 200000, 70000);
  braid_send_wr w2{};
  w2.wr_id = 2;
  w2.sg_list = &s2;
  w2.num_sge = 1;
  w2.opcode = BRAID_WR_SEND;
  w2.send_flags = BRAID_SEND_SIGNALED;
  w1.next = &w2;
  ASSERT_EQ(braid_post_send(a.qp, &w1, nullptr), 0) << braid_last_error();
  auto wa = wait(a, 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].wr_id, 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(wa[0].opcode, BRAID_WC_RDMA_WRITE);
  EXPECT_EQ(wa[1].wr_id, 2u);
  EXPECT_EQ(wa[1].opcode, BRAID_WC_SEND);
  auto wb = wait(b, 2);
  ASSERT_EQ(wb.size(), 2u);
  EXPECT_EQ(wb[0].wr_id, 11u);
  EXPECT_EQ(wb[0].opcode, BRAID_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wb[0].wc_flags & BRAID_WC_WITH_IMM, unsigned{BRAID_WC_WITH_IMM});
  EXPECT_EQ(ntohl(wb[0].imm_data), 0xabcdef01u);
  EXPECT_EQ(wb[0].byte_len, 200000u);
  EXPECT_EQ(wb[1].wr_id, 12u);
  EXPECT_EQ(wb[1].opcode, BRAID_WC_RECV);
  EXPECT_EQ(wb[1].byte_len, 70000u);
  EXPECT_EQ(wb[1].qp_num, braid_qp_num(b.qp));
  EXPECT_EQ(0, std::memcmp(a.buf.data(), b.buf.data() + 100, 200000));
  EXPECT_EQ(0, std::memcmp(a.buf.data() + 200000, b.buf.data() + 500000, 70000));
}

TEST_P(VerbsPair, ReadAndInlineSend) {
  for (size_t i = 0; i < 5000; ++i) b.buf[i] = static_cast<uint8_t>(i * 7);
  braid_sge s = sge(a, 10000, 5000);
  braid_send_wr w{};
  w.wr_id = 3;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = BRAID_WR_RDMA_READ;
  w.send_flags = BRAID_SEND_SIGNALED;
  w.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf.data());
  w.rdma.rkey = b.mr->rkey;
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(wa[0].opcode, BRAID_WC_RDMA_READ);
  EXPECT_EQ(0, std::memcmp(a.buf.data() + 10000, b.buf.data(), 5000));

  // Inline: the source is copied at post time (it may change right after).
  braid_recv_wr r{};
  braid_sge rs = sge(b, 9000, 64);
  r.wr_id = 5;
  r.sg_list = &rs;
  r.num_sge = 1;
  ASSERT_EQ(braid_post_recv(b.qp, &r, nullptr), 0);
  char msg[32] = "inline payload";
  braid_sge is{reinterpret_cast<uintptr_t>(msg), 15, 0};
  braid_send_wr iw = one_sge(&is, 4, BRAID_WR_SEND, BRAID_SEND_SIGNALED | BRAID_SEND_INLINE);
  ASSERT_EQ(braid_post_send(a.qp, &iw, nullptr), 0);
  std::memset(msg, 'x', sizeof(msg));
  auto wb = wait(b, 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(0, std::memcmp(b.buf.data() + 9000, "inline payload", 15));
}

// Each post builds its request over the previous one's (the QP keeps one):
// nothing of an inline SEND with immediate data, or of a WRITE with three
// SGEs, reaches the requests after it.
TEST_P(VerbsPair, ARequestCarriesNothingOfThePreviousOne) {
  post_recvs(b, 2, 20000, 256);
  for (size_t i = 0; i < 3000; ++i) a.buf[i] = static_cast<uint8_t>(i * 7 + 1);
  const std::vector<uint8_t> before = b.buf;
  char msg[16] = "inline, imm 77";
  braid_sge is{reinterpret_cast<uintptr_t>(msg), 15, 0};
  braid_send_wr w = one_sge(&is, 1, BRAID_WR_SEND_WITH_IMM,
                            BRAID_SEND_SIGNALED | BRAID_SEND_INLINE | BRAID_SEND_FENCE);
  w.imm_data = htonl(77);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0) << braid_last_error();
  // Three SGEs to b's buffer at 1000: 100 bytes from 0, 200 from 500, 300 from 2000.
  braid_sge three[3] = {sge(a, 0, 100), sge(a, 500, 200), sge(a, 2000, 300)};
  braid_send_wr w3 = rdma_write(three, 2, b, 1000);
  w3.num_sge = 3;
  ASSERT_EQ(braid_post_send(a.qp, &w3, nullptr), 0) << braid_last_error();
  // One SGE with immediate data 5: 40 bytes from 2500 to b at 4000.
  braid_sge one = sge(a, 2500, 40);
  braid_send_wr wi = rdma_write(&one, 3, b, 4000);
  wi.opcode = BRAID_WR_RDMA_WRITE_WITH_IMM;
  wi.imm_data = htonl(5);
  ASSERT_EQ(braid_post_send(a.qp, &wi, nullptr), 0) << braid_last_error();
  const auto wa = wait(a, 3);
  ASSERT_EQ(wa.size(), 3u);
  for (const braid_wc& c : wa) EXPECT_EQ(c.status, BRAID_WC_SUCCESS) << c.wr_id;
  const auto wb = wait(b, 2);
  ASSERT_EQ(wb.size(), 2u);
  EXPECT_EQ(wb[0].opcode, BRAID_WC_RECV);
  EXPECT_EQ(wb[0].byte_len, 15u);
  EXPECT_EQ(ntohl(wb[0].imm_data), 77u);
  EXPECT_EQ(0, std::memcmp(b.buf.data() + 20000, "inline, imm 77", 15));
  EXPECT_EQ(wb[1].opcode, BRAID_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wb[1].byte_len, 40u);
  EXPECT_EQ(ntohl(wb[1].imm_data), 5u);
  std::vector<uint8_t> want = before;
  std::memcpy(want.data() + 20000, "inline, imm 77", 15);
  std::memcpy(want.data() + 1000, a.buf.data(), 100);
  std::memcpy(want.data() + 1100, a.buf.data() + 500, 200);
  std::memcpy(want.data() + 1300, a.buf.data() + 2000, 300);
  std::memcpy(want.data() + 4000, a.buf.data() + 2500, 40);
  EXPECT_TRUE(b.buf == want)
      << "bytes outside the three requests' ranges changed, or theirs differ";
}

TEST_P(VerbsPair, BadRkeyGivesRemoteAccessErrorAndLeavesTargetUntouched) {
  const std::vector<uint8_t> before = b.buf;
  braid_sge s = sge(a, 0, 4096);
  braid_send_wr w{};
  w.wr_id = 9;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = BRAID_WR_RDMA_WRITE;
  w.send_flags = BRAID_SEND_SIGNALED;
  w.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf.data());
  w.rdma.rkey = b.mr->rkey ^ 0x1000;
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_REM_ACCESS_ERR);
  EXPECT_EQ(b.buf, before);
  braid_qp_attr at{};
  braid_qp_init_attr ia{};
  ASSERT_EQ(braid_query_qp(a.qp, &at, BRAID_QP_STATE, &ia), 0);
  EXPECT_EQ(at.qp_state, BRAID_QPS_ERR);
}

TEST_P(VerbsPair, LocalKeyAndStateChecksRejectBadWorkRequests) {
  braid_sge s = sge(a, 0, 64);
  s.lkey ^= 0x1000;
  braid_send_wr w{};
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = BRAID_WR_SEND;
  braid_send_wr* bad = nullptr;
  EXPECT_EQ(braid_post_send(a.qp, &w, &bad), EINVAL);
  EXPECT_EQ(bad, &w);
  s = sge(a, (1 << 20) - 10, 64);  // runs past the MR
  EXPECT_EQ(braid_post_send(a.qp, &w, &bad), EINVAL);
  w.opcode = static_cast<braid_wr_opcode>(42);
  s = sge(a, 0, 64);
  EXPECT_EQ(braid_post_send(a.qp, &w, &bad), EINVAL);
  EXPECT_EQ(braid_close_device(a.ctx), EBUSY);  // objects still open
}

// braid_post_send_all (behind libibverbs' ibv_wr_complete): every request of
// the list, or none when any would be refused.
TEST_P(VerbsPair, PostSendAllPostsEveryRequestOrNone) {
  for (size_t i = 0; i < 8192; ++i) a.buf[i] = static_cast<uint8_t>(i * 7 + 1);
  braid_sge good = sge(a, 0, 64);
  braid_sge bad_key = sge(a, 0, 64);
  bad_key.lkey ^= 0x1000;
  std::vector<braid_send_wr> chain(3);
  for (size_t i = 0; i < chain.size(); ++i) {
    chain[i] = rdma_write(&good, 10 + i, b, 4096 * i);
    if (i + 1 < chain.size()) chain[i].next = &chain[i + 1];
  }
  chain[2].sg_list = &bad_key;  // the last is refused: nothing goes
  EXPECT_EQ(braid_post_send_all(a.qp, chain.data()), EINVAL);
  // More than the send queue holds (128): nothing goes either.
  std::vector<braid_send_wr> many(129, rdma_write(&good, 50, b, 8192));
  for (size_t i = 0; i + 1 < many.size(); ++i) many[i].next = &many[i + 1];
  EXPECT_EQ(braid_post_send_all(a.qp, many.data()), ENOMEM);
  // A marker WRITE: the first completion must be its own.
  braid_send_wr marker = rdma_write(&good, 99, b, 12288);
  ASSERT_EQ(braid_post_send(a.qp, &marker, nullptr), 0);
  auto wc = wait(a, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 99u);
  for (size_t off : {size_t{0}, size_t{4096}, size_t{8192}}) {
    EXPECT_EQ(b.buf[off], 0) << "a refused list wrote at " << off;
  }
  // The same list with its last request mended: all three complete.
  chain[2].sg_list = &good;
  ASSERT_EQ(braid_post_send_all(a.qp, chain.data()), 0) << braid_last_error();
  wc = wait(a, 3);
  ASSERT_EQ(wc.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wc[i].wr_id, 10 + i);
    EXPECT_EQ(wc[i].status, BRAID_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(b.buf.data() + 4096 * i, a.buf.data(), 64), 0);
  }
}

// The sender's state and its paths are readable: every first transmission
// is counted on exactly one entropy, and the entropies are the QP's UDP
// source ports. Out-of-range queries and QPs not yet connected are refused.
TEST_P(VerbsPipe, QpAndPathStatsAccountForEveryPacketSent) {
  braid_sge s = sge(a, 0, 300000);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  ASSERT_EQ(wait(a, 1).size(), 1u);
  braid_qp_stats q{};
  ASSERT_EQ(braid_query_qp_stats(a.qp, &q), 0);
  EXPECT_EQ(q.entropies, 16u);
  EXPECT_EQ(q.paths_bad, 0u);
  EXPECT_GT(q.srtt_ns, 0u);
  EXPECT_GT(q.min_rtt_ns, 0u);
  EXPECT_LE(q.min_rtt_ns, q.srtt_ns * 8);
  // NSCC, the default, scaled by the default network base RTT (no
  // trimming on the verbs path: the delay target is one base RTT).
  EXPECT_EQ(q.target_delay_ns, BRAID_DEFAULT_BASE_RTT_US * 1000u);
  EXPECT_GT(q.cwnd_bytes, 0u);
  EXPECT_LE(q.cwnd_bytes, q.max_cwnd_bytes);
  EXPECT_EQ(q.inflight_bytes, 0u);
  uint64_t sent = 0, acked = 0;
  std::set<uint16_t> ports;
  for (unsigned i = 0; i < q.entropies; ++i) {
    braid_path_stats p{};
    ASSERT_EQ(braid_query_path_stats(a.qp, i, &p), 0);
    sent += p.sent;
    acked += p.acked;
    ports.insert(p.udp_src_port);
    EXPECT_GE(p.udp_src_port, 49152u);
    EXPECT_EQ(p.state, 0u);
  }
  EXPECT_EQ(ports.size(), 16u);
  // Every transmission is counted on its path, and every packet acked once
  // (on the path of its last copy). A retransmission (a spurious timeout on
  // a loaded CI host resent 32 of 212) is a second transmission of a packet
  // acked once, so acked equals the packets, not the transmissions.
  EXPECT_EQ(sent, q.data_packets_sent + q.retransmits);
  EXPECT_EQ(acked, q.data_packets_sent);
  braid_path_stats p{};
  EXPECT_EQ(braid_query_path_stats(a.qp, 16, &p), EINVAL);
  EXPECT_EQ(braid_query_path_stats(nullptr, 0, &p), EINVAL);
  braid_qp* fresh = new_qp(a, {16, 16, 1, 1, 0});
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(braid_query_path_stats(fresh, 0, &p), EINVAL);  // no connection before RTR
  EXPECT_EQ(braid_destroy_qp(fresh), 0);
}

TEST(VerbsConfig, PathPolicyAndCongestionControlOutsideTheirEnumsAreRefused) {
  const MacAddr ma{2, 0, 0, 0, 0, 1}, mb{2, 0, 0, 0, 0, 2};
  for (const auto& [paths, cc] :
       {std::pair{4, 0}, std::pair{-1, 0}, std::pair{0, 4}, std::pair{0, -2}}) {
    braid_device_config c{};
    c.ipv4 = "198.18.0.1";
    c.paths = paths;
    c.cc = cc;
    auto [ia, ib] = braid::PipeIo::make_pair(ma, mb, 1514);
    EXPECT_EQ(braid::open_device(&c, std::move(ia)), nullptr) << paths << " " << cc;
    EXPECT_EQ(errno, EINVAL);
  }
  // Named values open; unset ones take the defaults.
  for (const auto& [paths, cc] :
       {std::pair<int, int>{BRAID_PATHS_ROUND_ROBIN, BRAID_CC_NSCC},
        std::pair<int, int>{BRAID_PATHS_REPS, BRAID_CC_FIXED_WINDOW},
        std::pair<int, int>{BRAID_PATHS_REPS, BRAID_CC_DCQCN},
        std::pair<int, int>{BRAID_PATHS_BITMAP, BRAID_CC_NSCC}, std::pair<int, int>{0, 0}}) {
    braid_device_config c{};
    c.ipv4 = "198.18.0.1";
    c.paths = paths;
    c.cc = cc;
    auto [ia, ib] = braid::PipeIo::make_pair(ma, mb, 1514);
    braid_context* ctx = braid::open_device(&c, std::move(ia));
    ASSERT_NE(ctx, nullptr) << braid_last_error();
    EXPECT_EQ(braid_close_device(ctx), 0);
  }
}

// Congestion-control algorithms by name: the registry's, numbered as
// braid_cc (the registry's place plus one); other names and numbers none.
TEST(VerbsConfig, CongestionControlIsFoundByItsName) {
  EXPECT_EQ(braid_cc_from_name("fixed"), BRAID_CC_FIXED_WINDOW);
  EXPECT_EQ(braid_cc_from_name("nscc"), BRAID_CC_NSCC);
  EXPECT_EQ(braid_cc_from_name("dcqcn"), BRAID_CC_DCQCN);
  EXPECT_EQ(braid_cc_from_name("cubic"), 0);
  EXPECT_EQ(braid_cc_from_name(""), 0);
  EXPECT_EQ(braid_cc_from_name(nullptr), 0);
  EXPECT_STREQ(braid_cc_name(BRAID_CC_NSCC), "nscc");
  EXPECT_EQ(braid_cc_name(0), nullptr);
  EXPECT_EQ(braid_cc_name(-1), nullptr);
  const int count = static_cast<int>(braid::kCcAlgorithmCount);
  for (int cc = 1; cc <= count; ++cc) {
    ASSERT_NE(braid_cc_name(cc), nullptr) << cc;
    EXPECT_EQ(braid_cc_from_name(braid_cc_name(cc)), cc);
  }
  EXPECT_EQ(braid_cc_name(count + 1), nullptr);
}

// Path policies by name, as congestion control.
TEST(VerbsConfig, PathPolicyIsFoundByItsName) {
  EXPECT_EQ(braid_paths_from_name("round-robin"), BRAID_PATHS_ROUND_ROBIN);
  EXPECT_EQ(braid_paths_from_name("reps"), BRAID_PATHS_REPS);
  EXPECT_EQ(braid_paths_from_name("bitmap"), BRAID_PATHS_BITMAP);
  EXPECT_EQ(braid_paths_from_name("rr"), 0);
  EXPECT_EQ(braid_paths_from_name(nullptr), 0);
  EXPECT_EQ(braid_paths_name(0), nullptr);
  const int count = static_cast<int>(braid::kPathPolicyCount);
  for (int p = 1; p <= count; ++p) {
    ASSERT_NE(braid_paths_name(p), nullptr) << p;
    EXPECT_EQ(braid_paths_from_name(braid_paths_name(p)), p);
  }
  EXPECT_EQ(braid_paths_name(count + 1), nullptr);
}

// A device's first QP number is not the last device's: a program run again
// does not give its QPs the ids the last run's peers may still send to.
// A device's QP numbers go through a keyed permutation of 1..65535: every
// number once per round, none 0, and one QP's number says nothing of the
// next one's (issue 32: ids a stranger cannot guess from one it saw).
TEST(VerbsConfig, QpNumbersArePermutedByAKeyOfTheDevice) {
  for (const uint64_t key : {uint64_t{1}, uint64_t{0x9d2c5680a1b2c3d5}, ~uint64_t{0}}) {
    std::vector<bool> seen(65536, false);
    uint32_t next_is_previous_plus_one = 0;
    for (uint32_t n = 1; n <= 65535; ++n) {
      const uint32_t q = braid::qpn_of(n, key);
      ASSERT_GE(q, 1u);
      ASSERT_LE(q, 65535u);
      ASSERT_FALSE(seen[q]) << n;
      seen[q] = true;
      if (n > 1 && q == braid::qpn_of(n - 1, key) + 1) ++next_is_previous_plus_one;
    }
    EXPECT_LT(next_is_previous_plus_one, 100u) << key;  // about 1 in 65535 by chance
  }
  EXPECT_EQ(braid::qpn_of(77, 0), 77u);
}

TEST(VerbsConfig, DevicesStartTheirQpNumbersAtRandom) {
  std::set<uint32_t> first;
  for (int i = 0; i < 8; ++i) {
    braid_device_config c{};
    c.ipv4 = "198.18.0.1";
    const MacAddr ma{2, 0, 0, 0, 0, 1}, mb{2, 0, 0, 0, 0, 2};
    auto [ia, ib] = braid::PipeIo::make_pair(ma, mb, 1514);
    braid_context* ctx = braid::open_device(&c, std::move(ia));
    ASSERT_NE(ctx, nullptr) << braid_last_error();
    braid_pd* pd = braid_alloc_pd(ctx);
    braid_cq* cq = braid_create_cq(ctx, 16, nullptr, nullptr, 0);
    braid_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = BRAID_QPT_RC;
    qa.cap = {8, 8, 1, 1, 0};
    braid_qp* qp = braid_create_qp(pd, &qa);
    ASSERT_NE(qp, nullptr) << braid_last_error();
    first.insert(braid_qp_num(qp));
    EXPECT_EQ(braid_destroy_qp(qp), 0);
    EXPECT_EQ(braid_destroy_cq(cq), 0);
    EXPECT_EQ(braid_dealloc_pd(pd), 0);
    EXPECT_EQ(braid_close_device(ctx), 0);
  }
  // Eight draws from 65535 all alike: about 1 in 10^38.
  EXPECT_GT(first.size(), 1u);
}

TEST_P(VerbsPipe, MalformedAndForeignFramesAreDroppedAndCountedWhileTrafficFlows) {
  std::mt19937_64 g(7);
  for (size_t i = 0; i < 600000; ++i) a.buf[i] = static_cast<uint8_t>(g());
  braid_sge s = sge(a, 0, 600000);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  // A flood of junk towards B: random bytes, truncations and bit flips of a
  // real Braid frame header, other EtherTypes, foreign UDP ports.
  std::vector<uint8_t> frame(1514);
  for (int i = 0; i < 3000; ++i) {
    const size_t len = 1 + g() % 1514;
    for (size_t k = 0; k < len; ++k) frame[k] = static_cast<uint8_t>(g());
    if (i % 3 == 0 && len > 14) {  // our MAC and IPv4: reaches the decoder
      const uint8_t hdr[14] = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00};
      std::memcpy(frame.data(), hdr, 14);
    }
    pipe_a->inject(frame.data(), len);
    if (i % 100 == 0) braid_progress(b.ctx);
  }
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(a.buf.data(), b.buf.data(), 600000));
  const auto& st = b.ctx->engine->endpoint().stats();
  EXPECT_GE(st.dropped() + b.ctx->engine->stats().arp_frames, 2900u);
  EXPECT_GT(st.drops_for(braid::wire::DropReason::kNotIpv4), 0u);
}

TEST_P(VerbsPipe, DeadPeerEndsInRetryExceededAndANewQpWorksAfterwards) {
  pipe_b->set_cut(true);  // the peer falls silent
  braid_sge s = sge(a, 0, 100000);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  std::vector<braid_wc> wa;
  braid_wc wc[4];
  // Retry budget: 8 RTOs, each at most 4.096 us * 2^10 = 4.2 ms.
  for (int i = 0; i < 20'000'000 && wa.empty(); ++i) {
    const int k = braid_poll_cq(a.cq, 4, wc);
    wa.insert(wa.end(), wc, wc + std::max(k, 0));
  }
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_RETRY_EXC_ERR);
  // The survivor replaces its QP; the peer comes back and does the same.
  pipe_b->set_cut(false);
  while (braid_poll_cq(b.cq, 4, wc) > 0) {
  }
  replace_qps({128, 128, 1, 1, 64});
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(a.buf.data(), b.buf.data(), 100000));
}

TEST_P(VerbsPipe, StalledTxRingIsReportedAndTheQpGivesUpWithinItsRetryBudget) {
  a.ctx->engine->tx_stall_ns = 1'000'000;  // 1 ms instead of 1 s: the test waits less
  a.ctx->engine->port_watch_ns = 0;        // and the port is looked at on every poll
  braid_port_attr port{};
  ASSERT_EQ(braid_query_port(a.ctx, 1, &port), 0);
  EXPECT_EQ(port.state, BRAID_PORT_ACTIVE);

  pipe_a->set_tx_stuck(true);  // the link stays up, the ring stops draining
  braid_sge s = sge(a, 0, 100000);
  braid_send_wr w = write_to_b(&s, 7);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  std::vector<braid_wc> wa;
  braid_wc wc[4];
  bool seen_down = false;
  // Retry budget: 8 RTOs, each at most 4.2 ms (timeout 10).
  for (int i = 0; i < 20'000'000 && wa.empty(); ++i) {
    const int k = braid_poll_cq(a.cq, 4, wc);
    wa.insert(wa.end(), wc, wc + std::max(k, 0));
    if (!seen_down && (i & 1023) == 0) {
      ASSERT_EQ(braid_query_port(a.ctx, 1, &port), 0);
      seen_down = port.state == BRAID_PORT_DOWN;
    }
  }
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_RETRY_EXC_ERR) << wa[0].wr_id << " op " << wa[0].opcode;
  EXPECT_TRUE(seen_down);
  braid_port_stats st{};
  ASSERT_EQ(braid_query_port_stats(a.ctx, &st), 0);
  EXPECT_GT(st.tx_stalled_ms, 0u);
  EXPECT_GT(st.tx_ring_full, 0u);
  EXPECT_EQ(st.tx_dropped, 0u);  // held, not lost
  // Nothing reached the peer while the ring was stuck.
  braid_qp_stats qs{};
  ASSERT_EQ(braid_query_qp_stats(b.qp, &qs), 0);
  EXPECT_EQ(qs.data_packets_received, 0u);

  // The stall was a port error (the link stayed up).
  braid_async_event ev{};
  ASSERT_EQ(braid_get_async_event(a.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, BRAID_EVENT_PORT_ERR);
  EXPECT_EQ(braid_get_async_event(a.ctx, &ev), EAGAIN);

  // The ring drains again: the frames it held leave, the port is ACTIVE.
  pipe_a->set_tx_stuck(false);
  braid_progress(a.ctx);
  ASSERT_EQ(braid_query_port_stats(a.ctx, &st), 0);
  EXPECT_EQ(st.tx_stalled_ms, 0u);
  ASSERT_EQ(braid_query_port(a.ctx, 1, &port), 0);
  EXPECT_EQ(port.state, BRAID_PORT_ACTIVE);
  braid_progress(a.ctx);
  ASSERT_EQ(braid_get_async_event(a.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, BRAID_EVENT_PORT_ACTIVE);
}

// IBV_EVENT_COMM_EST as InfiniBand raises it: once, for a QP in RTR that
// receives its first request; not for one already in RTS.
TEST_P(VerbsPipe, CommEstIsRaisedOnceWhenAQpInRtrReceivesItsFirstRequest) {
  for (Side* x : {&a, &b}) {
    ASSERT_EQ(braid_destroy_qp(x->qp), 0);
    x->qp = new_qp(*x, {128, 128, 1, 1, 64});
    ASSERT_NE(x->qp, nullptr) << braid_last_error();
  }
  connect(false);  // b stays in RTR
  braid_async_event ev{};
  braid_progress(b.ctx);
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);  // nothing received yet
  for (uint64_t id = 1; id <= 2; ++id) {
    braid_sge s = sge(a, 0, 3000);
    braid_send_wr w = write_to_b(&s, id);
    ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
    const auto wa = wait(a, 1);
    ASSERT_EQ(wa.size(), 1u);
    EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
    braid_progress(b.ctx);
  }
  ASSERT_EQ(braid_get_async_event(b.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, BRAID_EVENT_COMM_EST);
  EXPECT_EQ(ev.qp, b.qp);
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);  // once, not per message
  to_rts(b);
  braid_sge s = sge(a, 0, 100);
  braid_send_wr w = write_to_b(&s, 3);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  ASSERT_EQ(wait(a, 1).size(), 1u);
  braid_progress(b.ctx);
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);
  EXPECT_EQ(braid_get_async_event(a.ctx, &ev), EAGAIN);  // a was in RTS: none
}

// A QP that goes from RTR to RTS before anything arrives raises nothing,
// and one destroyed in RTR is forgotten (its engine polls on safely).
TEST_P(VerbsPipe, NoCommEstForAQpThatLeftRtrBeforeItsFirstPacket) {
  for (Side* x : {&a, &b}) {
    ASSERT_EQ(braid_destroy_qp(x->qp), 0);
    x->qp = new_qp(*x, {128, 128, 1, 1, 64});
    ASSERT_NE(x->qp, nullptr) << braid_last_error();
  }
  connect();
  braid_sge s = sge(a, 0, 100);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  ASSERT_EQ(wait(a, 1).size(), 1u);
  braid_async_event ev{};
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);
  // Again, with b's QP destroyed while in RTR.
  for (Side* x : {&a, &b}) {
    ASSERT_EQ(braid_destroy_qp(x->qp), 0);
    x->qp = new_qp(*x, {128, 128, 1, 1, 64});
    ASSERT_NE(x->qp, nullptr) << braid_last_error();
  }
  connect(false);
  ASSERT_EQ(braid_destroy_qp(b.qp), 0);
  b.qp = nullptr;
  braid_sge s2 = sge(a, 0, 100);
  braid_send_wr w2 = write_to_b(&s2, 2);
  ASSERT_EQ(braid_post_send(a.qp, &w2, nullptr), 0);
  for (int i = 0; i < 100; ++i) {
    braid_progress(a.ctx);
    braid_progress(b.ctx);
  }
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);
}

// PORT_ERR when the link goes down, PORT_ACTIVE when it comes back: once
// each, on the device whose port it is, and as braid_query_port says.
TEST_P(VerbsPipe, PortErrAndPortActiveFollowTheLink) {
  a.ctx->engine->port_watch_ns = 0;  // look at the port on every poll
  b.ctx->engine->port_watch_ns = 0;
  braid_async_event ev{};
  braid_progress(a.ctx);
  EXPECT_EQ(braid_get_async_event(a.ctx, &ev), EAGAIN);
  pipe_a->set_link_up(false);
  braid_port_attr port{};
  for (int i = 0; i < 3; ++i) braid_progress(a.ctx);
  ASSERT_EQ(braid_query_port(a.ctx, 1, &port), 0);
  EXPECT_EQ(port.state, BRAID_PORT_DOWN);
  ASSERT_EQ(braid_get_async_event(a.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, BRAID_EVENT_PORT_ERR);
  EXPECT_EQ(ev.qp, nullptr);
  EXPECT_EQ(ev.cq, nullptr);
  EXPECT_EQ(ev.srq, nullptr);
  EXPECT_EQ(braid_get_async_event(a.ctx, &ev), EAGAIN);  // once
  pipe_a->set_link_up(true);
  for (int i = 0; i < 3; ++i) braid_progress(a.ctx);
  ASSERT_EQ(braid_query_port(a.ctx, 1, &port), 0);
  EXPECT_EQ(port.state, BRAID_PORT_ACTIVE);
  ASSERT_EQ(braid_get_async_event(a.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, BRAID_EVENT_PORT_ACTIVE);
  EXPECT_EQ(braid_get_async_event(a.ctx, &ev), EAGAIN);
  braid_progress(b.ctx);
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);  // b's port never changed
  // The QPs carry on.
  braid_sge s = sge(a, 0, 5000);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  const auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
}

TEST_P(VerbsPair, TransportCountersFollowTheTraffic) {
  braid_qp_stats before{};
  ASSERT_EQ(braid_query_qp_stats(b.qp, &before), 0);
  braid_sge s = sge(a, 0, 50000);
  braid_send_wr w = write_to_b(&s, 3);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  const auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  ASSERT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  braid_qp_stats sa{}, sb{};
  ASSERT_EQ(braid_query_qp_stats(a.qp, &sa), 0);
  ASSERT_EQ(braid_query_qp_stats(b.qp, &sb), 0);
  EXPECT_GT(sa.data_packets_sent, 0u);
  EXPECT_EQ(sb.data_packets_received - before.data_packets_received,
            sa.data_packets_sent);  // a clean cable: every packet once
  EXPECT_EQ(sb.bytes_placed - before.bytes_placed, 50000u);
  EXPECT_GT(sa.acks_received, 0u);
  braid_port_stats pa{}, pb{};
  ASSERT_EQ(braid_query_port_stats(a.ctx, &pa), 0);
  ASSERT_EQ(braid_query_port_stats(b.ctx, &pb), 0);
  EXPECT_GE(pa.tx_frames, sa.data_packets_sent);
  EXPECT_GE(pb.rx_frames, sb.data_packets_received);
  EXPECT_EQ(braid_query_qp_stats(nullptr, &sa), EINVAL);
  EXPECT_EQ(braid_query_port_stats(a.ctx, nullptr), EINVAL);
}

// A packet that asks for an ACK at once (the last one queued) is often
// answered by the application right away: its ACK waits one poll and then
// leaves with the answer, or alone at the next poll.
TEST_P(VerbsPipe, ImmediateAckWaitsOnePollToLeaveWithTheAnswer) {
  learn_macs();
  braid_sge sa = sge(a, 0, 64);
  braid_send_wr w = write_to_b(&sa, 1);
  // Ping: b receives it; nothing leaves b in that poll.
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  uint64_t before = tx_frames(b);
  braid_progress(b.ctx);
  braid_qp_stats qs{};
  ASSERT_EQ(braid_query_qp_stats(b.qp, &qs), 0);
  ASSERT_EQ(qs.data_packets_received, 1u);
  EXPECT_EQ(tx_frames(b), before);
  // The application answers: its WRITE and the ACK leave together.
  b_answers_with_the_ack(before);

  // No answer: the ACK leaves alone at the next poll.
  const auto wa = wait(a, 1);  // a's completion of WRITE 1, and b's answer lands
  ASSERT_EQ(wa.size(), 1u);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  before = tx_frames(b);
  braid_progress(b.ctx);  // receives the second ping (and a's ACK of the answer)
  EXPECT_EQ(tx_frames(b), before);
  braid_progress(b.ctx);
  EXPECT_EQ(tx_frames(b), before + 1);
  ASSERT_EQ(braid_query_qp_stats(b.qp, &qs), 0);
  EXPECT_EQ(qs.acks_sent, 2u);
}

// The progress thread polls with a hold: an ACK asked for at once waits for
// the application's answer (any number of polls), and leaves with it.
TEST_P(VerbsPipe, HeldImmediateAckWaitsForTheAnswerAcrossPolls) {
  learn_macs();
  braid_sge sa = sge(a, 0, 64);
  braid_send_wr w = write_to_b(&sa, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  const uint64_t before = tx_frames(b);
  constexpr braid::TimeNs kLong = 3'600'000'000'000;  // never expires in a test
  for (int i = 0; i < 5; ++i) b.ctx->engine->poll(kLong);
  braid_qp_stats qs{};
  ASSERT_EQ(braid_query_qp_stats(b.qp, &qs), 0);
  ASSERT_EQ(qs.data_packets_received, 1u);
  EXPECT_EQ(qs.acks_sent, 0u);
  EXPECT_EQ(tx_frames(b), before);
  b_answers_with_the_ack(before);
  // A hold that has run out lets the ACK go at the next poll.
  const auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  const uint64_t again = tx_frames(b);
  b.ctx->engine->poll(1);  // receives; holds for 1 ns
  b.ctx->engine->poll(1);
  EXPECT_EQ(tx_frames(b), again + 1);
}

// A post to an idle QP sends at once; on a busy QP requests wait for the
// next poll, until half a burst waits: then the post sends them. (A program
// that posts its whole queue before it polls keeps the peer busy meanwhile.)
TEST_P(VerbsPipe, ABusyQpSendsOnceHalfABurstWaits) {
  learn_macs();
  const uint32_t half = std::bit_floor(a.ctx->engine->config().burst / 2u);  // (a power of two)
  ASSERT_GE(half, 2u);
  braid_sge sa = sge(a, 0, 64);
  braid_send_wr w = write_to_b(&sa, 1);
  const uint64_t before = tx_frames(a);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  EXPECT_EQ(tx_frames(a), before + 1);  // idle: at once
  for (uint32_t i = 1; i < half; ++i) {
    ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
    EXPECT_EQ(tx_frames(a), before + 1) << "post " << i + 1;
  }
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  EXPECT_EQ(tx_frames(a), before + 1 + half);
  // A list that brings the queue past the next half burst sends too.
  std::vector<braid_send_wr> list(half + 1, w);
  for (size_t i = 0; i + 1 < list.size(); ++i) list[i].next = &list[i + 1];
  ASSERT_EQ(braid_post_send(a.qp, list.data(), nullptr), 0);
  EXPECT_EQ(tx_frames(a), before + 2 + 2 * half);
  // Everything arrives and completes.
  braid_progress(a.ctx);
  for (int i = 0; i < 8; ++i) {
    braid_progress(b.ctx);
    braid_progress(a.ctx);
  }
  braid_qp_stats qs{};
  ASSERT_EQ(braid_query_qp_stats(b.qp, &qs), 0);
  EXPECT_EQ(qs.data_packets_received, 2u + 2 * half);
}

// A list refused part-way: the requests before the refused one stay posted
// and go at once, as the first post to an idle QP does; a list posted all
// or none (braid_post_send_all) sends once half a burst waits, as one
// request at a time does.
TEST_P(VerbsPipe, TheRequestsBeforeARefusedOneLeaveAtOnce) {
  learn_macs();
  braid_sge sa = sge(a, 0, 64);
  braid_sge bad_key = sa;
  bad_key.lkey ^= 0x1000;
  braid_send_wr list[2] = {write_to_b(&sa, 1), write_to_b(&bad_key, 2)};
  list[0].next = &list[1];
  const uint64_t before = tx_frames(a);
  braid_send_wr* bad = nullptr;
  EXPECT_EQ(braid_post_send(a.qp, list, &bad), EINVAL);
  EXPECT_EQ(bad, &list[1]);
  EXPECT_EQ(tx_frames(a), before + 1);

  const uint32_t half = std::bit_floor(a.ctx->engine->config().burst / 2u);
  std::vector<braid_send_wr> all(half, write_to_b(&sa, 3));
  for (size_t i = 0; i + 1 < all.size(); ++i) all[i].next = &all[i + 1];
  ASSERT_EQ(braid_post_send_all(a.qp, all.data()), 0) << braid_last_error();
  EXPECT_EQ(tx_frames(a), before + 1 + half);
}

// The device lets a QP have 128 READs outstanding (max_qp_init_rd_atom) and
// accept as many (max_qp_rd_atom), beyond a NIC's usual 16: a requester
// that asks for them sends that many READs before the first response.
TEST_P(VerbsPipe, AQpMayHaveMoreThanSixteenReadsOutstanding) {
  braid_device_attr da{};
  ASSERT_EQ(braid_query_device(a.ctx, &da), 0);
  EXPECT_EQ(da.max_qp_rd_atom, 128);
  EXPECT_EQ(da.max_qp_init_rd_atom, 128);
  rd_atomic_ = 128;
  replace_qps({128, 128, 1, 1, 0});
  learn_macs();
  for (size_t i = 0; i < 800; ++i) b.buf[i] = static_cast<uint8_t>(i * 13 + 5);
  constexpr int kReads = 100;
  std::vector<braid_sge> local(kReads);
  const uint64_t before = tx_frames(a);
  for (int i = 0; i < kReads; ++i) {
    local[i] = sge(a, 50000 + 8 * i, 8);
    braid_send_wr w = rdma_write(&local[i], i, b, 8 * i);
    w.opcode = BRAID_WR_RDMA_READ;
    ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0) << braid_last_error();
  }
  braid_progress(a.ctx);  // sends what the posts left
  const uint64_t sent = tx_frames(a) - before;
  EXPECT_GT(sent, 16u) << "READs sent before any response";
  EXPECT_LE(sent, static_cast<uint64_t>(kReads));
  const auto wa = wait(a, kReads);
  ASSERT_EQ(wa.size(), static_cast<size_t>(kReads));
  for (const braid_wc& c : wa) ASSERT_EQ(c.status, BRAID_WC_SUCCESS) << c.wr_id;
  EXPECT_EQ(0, std::memcmp(a.buf.data() + 50000, b.buf.data(), 8 * kReads));
}

// Send queue drain (SQD), as InfiniBand's: the request under way when the
// QP moves to SQD completes, those not started wait (posting goes on), the
// QP cannot go back to RTS (nor SQD to SQD) until drained, SQ_DRAINED (asked for) comes
// once, and back in RTS what waited goes, in order.
TEST_P(VerbsPipe, SqdFinishesWhatStartedThenRaisesSqDrainedAndRtsResumes) {
  learn_macs();
  const uint64_t before = tx_frames(a);
  for (size_t i = 0; i < 70000; ++i) a.buf[i] = static_cast<uint8_t>(i * 7 + 1);
  braid_sge big = sge(a, 0, 65536), s2 = sge(a, 65536, 64), s3 = sge(a, 65600, 64),
            s4 = sge(a, 65664, 64);
  braid_send_wr w1 = rdma_write(&big, 1, b, 0), w2 = rdma_write(&s2, 2, b, 100000),
                w3 = rdma_write(&s3, 3, b, 100064), w4 = rdma_write(&s4, 4, b, 100128);
  ASSERT_EQ(braid_post_send(a.qp, &w1, nullptr), 0);  // idle QP: its first packets go
  ASSERT_EQ(braid_post_send(a.qp, &w2, nullptr), 0);
  ASSERT_EQ(braid_post_send(a.qp, &w3, nullptr), 0);
  // The big WRITE has started and not finished (64 packets of 1 KiB; a
  // burst is 32), the others have not started.
  ASSERT_GT(tx_frames(a), before);
  ASSERT_LT(tx_frames(a), before + 64);
  braid_qp_attr at{};
  at.qp_state = BRAID_QPS_SQD;
  at.en_sqd_async_notify = 1;
  ASSERT_EQ(braid_modify_qp(a.qp, &at, BRAID_QP_STATE | BRAID_QP_EN_SQD_ASYNC_NOTIFY), 0)
      << braid_last_error();
  braid_qp_attr q{};
  braid_qp_init_attr qi{};
  ASSERT_EQ(braid_query_qp(a.qp, &q, BRAID_QP_STATE, &qi), 0);
  EXPECT_EQ(q.qp_state, BRAID_QPS_SQD);
  EXPECT_EQ(q.sq_draining, 1);
  braid_async_event ev{};
  EXPECT_EQ(braid_get_async_event(a.ctx, &ev), EAGAIN);  // not drained yet
  at = braid_qp_attr{};
  at.qp_state = BRAID_QPS_RTS;
  EXPECT_EQ(braid_modify_qp(a.qp, &at, BRAID_QP_STATE), EINVAL) << "RTS while draining";
  braid_qp_attr sqd{};
  sqd.qp_state = BRAID_QPS_SQD;
  EXPECT_EQ(braid_modify_qp(a.qp, &sqd, BRAID_QP_STATE), EINVAL) << "SQD to SQD while draining";
  ASSERT_EQ(braid_post_send(a.qp, &w4, nullptr), 0) << braid_last_error();  // posted in SQD
  // The WRITE under way completes; nothing after it starts.
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].wr_id, 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(a.buf.data(), b.buf.data(), 65536));
  for (int i = 0; i < 2000; ++i) poll_once(a, wa);
  EXPECT_EQ(wa.size(), 1u) << "a request started in SQD";
  EXPECT_TRUE(std::all_of(b.buf.begin() + 100000, b.buf.begin() + 100192,
                          [](uint8_t v) { return v == 0; }));
  ASSERT_EQ(braid_get_async_event(a.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, BRAID_EVENT_SQ_DRAINED);
  EXPECT_EQ(ev.qp, a.qp);
  EXPECT_EQ(braid_get_async_event(a.ctx, &ev), EAGAIN);  // once
  ASSERT_EQ(braid_query_qp(a.qp, &q, BRAID_QP_STATE, &qi), 0);
  EXPECT_EQ(q.qp_state, BRAID_QPS_SQD);
  EXPECT_EQ(q.sq_draining, 0);
  // Back to RTS: the three that waited go, in order.
  ASSERT_EQ(braid_modify_qp(a.qp, &at, BRAID_QP_STATE), 0) << braid_last_error();
  const auto rest = wait(a, 3);
  ASSERT_EQ(rest.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rest[i].wr_id, i + 2);
    EXPECT_EQ(rest[i].status, BRAID_WC_SUCCESS);
  }
  EXPECT_EQ(0, std::memcmp(a.buf.data() + 65536, b.buf.data() + 100000, 192));
  // A QP with nothing under way is drained at once; without
  // EN_SQD_ASYNC_NOTIFY it raises nothing.
  at = braid_qp_attr{};
  at.qp_state = BRAID_QPS_SQD;
  ASSERT_EQ(braid_modify_qp(a.qp, &at, BRAID_QP_STATE), 0);
  ASSERT_EQ(braid_query_qp(a.qp, &q, BRAID_QP_STATE, &qi), 0);
  EXPECT_EQ(q.sq_draining, 0);
  for (int i = 0; i < 100; ++i) poll_once(a, wa);
  EXPECT_EQ(braid_get_async_event(a.ctx, &ev), EAGAIN);
  at.qp_state = BRAID_QPS_RTS;
  EXPECT_EQ(braid_modify_qp(a.qp, &at, BRAID_QP_STATE), 0);
}

// A chain longer than the send queue's room is refused from the first
// request that does not fit, and nothing of a refused inline request reaches
// the peer or changes an accepted one's bytes.
TEST_P(VerbsPipe, InlineChainBeyondMaxSendWrIsRefusedWithoutTouchingAcceptedData) {
  for (uint32_t depth : {4u, 3u}) {
    replace_qps({depth, 16, 1, 1, 64});
    post_recvs(b, depth + 1, 0, 64);
    char msgs[5][16];
    braid_sge is[5];
    braid_send_wr w[5]{};
    for (uint32_t i = 0; i <= depth; ++i) {
      std::snprintf(msgs[i], sizeof(msgs[i]), "inline %u/%u", i, depth);
      is[i] = braid_sge{reinterpret_cast<uintptr_t>(msgs[i]), 16, 0};
      w[i].wr_id = i;
      w[i].sg_list = &is[i];
      w[i].num_sge = 1;
      w[i].opcode = BRAID_WR_SEND;
      w[i].send_flags = BRAID_SEND_SIGNALED | BRAID_SEND_INLINE;
      if (i > 0) w[i - 1].next = &w[i];
    }
    braid_send_wr* bad = nullptr;
    EXPECT_EQ(braid_post_send(a.qp, &w[0], &bad), ENOMEM) << "depth " << depth;
    EXPECT_EQ(bad, &w[depth]);
    auto wa = wait(a, depth + 1);
    ASSERT_EQ(wa.size(), depth);
    auto wb = wait(b, depth + 1);
    ASSERT_EQ(wb.size(), depth);
    for (uint32_t i = 0; i < depth; ++i) {
      EXPECT_EQ(wb[i].status, BRAID_WC_SUCCESS);
      EXPECT_EQ(std::memcmp(b.buf.data() + i * 64, msgs[i], 16), 0)
          << "receive " << i << " holds \"" << reinterpret_cast<char*>(b.buf.data() + i * 64)
          << "\"";
    }
    // The queue has room again: the refused request goes now.
    ASSERT_EQ(braid_post_send(a.qp, &w[depth], nullptr), 0) << braid_last_error();
    wb = wait(b, 1);
    ASSERT_EQ(wb.size(), 1u);
    EXPECT_EQ(std::memcmp(b.buf.data() + depth * 64, msgs[depth], 16), 0);
    wait(a, 1);
  }
}

// Posts to a QP in the error state complete with WR_FLUSH_ERR (the drain
// pattern), and receives posted in INIT are flushed when it moves to ERR.
TEST_P(VerbsPipe, PostsToAQpInErrorCompleteWithFlush) {
  braid_qp_attr at{};
  at.qp_state = BRAID_QPS_ERR;
  ASSERT_EQ(braid_modify_qp(a.qp, &at, BRAID_QP_STATE), 0);
  braid_sge s = sge(a, 0, 64);
  braid_send_wr marker = write_to_b(&s, 77);
  marker.send_flags = 0;  // unsignaled: a flush completes anyway
  ASSERT_EQ(braid_post_send(a.qp, &marker, nullptr), 0) << braid_last_error();
  braid_sge rs = sge(a, 4096, 64);
  braid_recv_wr r{};
  r.wr_id = 78;
  r.sg_list = &rs;
  r.num_sge = 1;
  ASSERT_EQ(braid_post_recv(a.qp, &r, nullptr), 0) << braid_last_error();
  auto wa = wait(a, 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].wr_id, 77u);
  EXPECT_EQ(wa[0].status, BRAID_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wa[1].wr_id, 78u);
  EXPECT_EQ(wa[1].status, BRAID_WC_WR_FLUSH_ERR);

  // A QP in INIT with receives posted, moved to ERR.
  braid_qp* q = new_qp(a, {8, 8, 1, 1, 0});
  ASSERT_NE(q, nullptr);
  at.qp_state = BRAID_QPS_INIT;
  ASSERT_EQ(braid_modify_qp(q, &at, BRAID_QP_STATE), 0);
  r.wr_id = 79;
  ASSERT_EQ(braid_post_recv(q, &r, nullptr), 0);
  at.qp_state = BRAID_QPS_ERR;
  ASSERT_EQ(braid_modify_qp(q, &at, BRAID_QP_STATE), 0);
  wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].wr_id, 79u);
  EXPECT_EQ(wa[0].status, BRAID_WC_WR_FLUSH_ERR);
  EXPECT_EQ(braid_destroy_qp(q), 0);
}

// Deregistering a region that outstanding work requests use: they complete
// with LOC_PROT_ERR (their QP goes to error) and the region is never touched
// afterwards, neither by a SEND arriving for a receive nor by READ response
// data.
TEST_P(VerbsPipe, DeregisteredRegionIsNotWrittenByASendForItsReceive) {
  learn_macs();
  post_recvs(b, 1, 0, 4096);
  const std::vector<uint8_t> b_before = b.buf;
  ASSERT_EQ(braid_dereg_mr(b.mr), 0);
  b.mr = nullptr;
  for (size_t i = 0; i < 4096; ++i) a.buf[i] = static_cast<uint8_t>(i + 1);
  braid_sge s = sge(a, 0, 4096);
  braid_send_wr w{};
  w.wr_id = 6;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = BRAID_WR_SEND;
  w.send_flags = BRAID_SEND_SIGNALED;
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  auto wb = wait(b, 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, BRAID_WC_LOC_PROT_ERR);
  // b is in error: the SEND is never acknowledged, and a gives up when its
  // retry budget is spent.
  auto wa = wait_for(a, 1, 10);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_NE(wa[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(b.buf, b_before);
}

TEST_P(VerbsPipe, DeregisteredReadDestinationIsNotWrittenByTheResponse) {
  learn_macs();
  std::vector<uint8_t> src(8192, 0x5a);
  braid_mr* smr = braid_reg_mr(b.pd, src.data(), src.size(),
                               BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_READ);
  ASSERT_NE(smr, nullptr);
  braid_sge s = sge(a, 0, 8192);
  braid_send_wr rd = rdma_write(&s, 5, b, 0);
  rd.opcode = BRAID_WR_RDMA_READ;
  rd.rdma.remote_addr = reinterpret_cast<uintptr_t>(src.data());
  rd.rdma.rkey = smr->rkey;
  ASSERT_EQ(braid_post_send(a.qp, &rd, nullptr), 0);  // the request leaves now
  const std::vector<uint8_t> a_before = a.buf;
  ASSERT_EQ(braid_dereg_mr(a.mr), 0);
  a.mr = nullptr;
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].wr_id, 5u);
  EXPECT_EQ(wa[0].status, BRAID_WC_LOC_PROT_ERR);
  for (int i = 0; i < 1000; ++i) {  // b's responses arrive at a QP in error
    braid_progress(b.ctx);
    braid_progress(a.ctx);
  }
  EXPECT_EQ(a.buf, a_before);
  EXPECT_EQ(braid_dereg_mr(smr), 0);
}

// A QP destroyed while its peer's MAC is being resolved leaves nothing
// behind: a new QP under the same number (forced here; numbers are not
// reused soon) is not failed when the old resolution gives up.
TEST_P(VerbsPipe, DestroyedQpsPendingArpDoesNotFailANewQpWithItsNumber) {
  learn_macs();
  braid_qp* lost = new_qp(a, {8, 8, 1, 1, 0});
  ASSERT_NE(lost, nullptr);
  const uint32_t qpn = braid_qp_num(lost);
  braid_qp_attr at{};
  at.qp_state = BRAID_QPS_INIT;
  ASSERT_EQ(braid_modify_qp(lost, &at, BRAID_QP_STATE), 0);
  at.qp_state = BRAID_QPS_RTR;
  at.path_mtu = BRAID_MTU_1024;
  at.dest_qp_num = 5;
  at.rq_psn = 1;
  braid_gid_from_ipv4(0xc6120063, &at.ah_attr.dgid);  // 198.18.0.99: nobody
  ASSERT_EQ(braid_modify_qp(lost, &at,
                            BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
                                BRAID_QP_RQ_PSN),
            0);
  ASSERT_EQ(braid_destroy_qp(lost), 0);
  // The next QP would get another number: make it take the old one.
  a.ctx->next_qpn = qpn;
  a.ctx->qpn_key = 0;
  replace_qps({128, 128, 1, 1, 64});
  ASSERT_EQ(braid_qp_num(a.qp), qpn);
  // Until the old resolution has given up (3 requests, 1 s apart).
  while (a.ctx->engine->neighbor_state(0xc6120063) != braid::net::NeighborState::kFailed) {
    braid_progress(a.ctx);
    braid_progress(b.ctx);
  }
  for (int i = 0; i < 100; ++i) braid_progress(a.ctx);
  braid_sge s = sge(a, 0, 4096);
  braid_send_wr w = write_to_b(&s, 3);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0) << braid_last_error();
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
}

// A WRITE target whose application only queries while it waits (no poll,
// no post): its progress thread must still drive the device.
TEST_P(VerbsPipe, ProgressThreadIsNotStarvedByAnApplicationThatOnlyQueries) {
  learn_macs();
  braid::start_progress_thread(a.ctx);
  for (size_t i = 0; i < 100000; ++i) b.buf[i] = static_cast<uint8_t>(i * 13 + 1);
  braid_sge s = sge(b, 0, 100000);
  braid_send_wr w = rdma_write(&s, 1, a, 0);
  ASSERT_EQ(braid_post_send(b.qp, &w, nullptr), 0);
  bool landed = false, completed = false;
  braid_qp_attr at{};
  braid_qp_init_attr ia{};
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(landed && completed) && std::chrono::steady_clock::now() < give_up) {
    ASSERT_EQ(braid_query_qp(a.qp, &at, BRAID_QP_STATE, &ia), 0);  // a's only calls
    braid_wc wc;
    if (braid_poll_cq(b.cq, 1, &wc) == 1) completed = wc.status == BRAID_WC_SUCCESS;
    braid_qp_stats st{};
    ASSERT_EQ(braid_query_qp_stats(a.qp, &st), 0);
    landed = st.bytes_placed >= 100000;
  }
  EXPECT_TRUE(landed) << "the target's progress thread never ran";
  EXPECT_TRUE(completed);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), 100000), 0);
}

TEST_P(VerbsPipe, QpNumbersAreNotReusedAtOnce) {
  const uint32_t old = braid_qp_num(a.qp);
  replace_qps({128, 128, 1, 1, 64});
  EXPECT_NE(braid_qp_num(a.qp), old);
}

// Devices with the CRC-32C trailer on, over a cable that flips a bit in
// every 40th data frame and every 3rd ACK: corrupted frames are dropped and counted, what they
// carried is sent again, and the data arrives intact.
class VerbsPipeCrc : public VerbsPipe {
 protected:
  VerbsPipeCrc() { crc_ = 1; }
};

TEST_P(VerbsPipeCrc, CorruptedFramesAreDroppedCountedAndResent) {
  learn_macs();
  pipe_a->set_corrupt_every(40);  // data
  pipe_b->set_corrupt_every(3);   // ACKs
  std::mt19937 g(5);
  for (size_t i = 0; i < 500000; ++i) a.buf[i] = static_cast<uint8_t>(g());
  braid_sge s = sge(a, 0, 500000);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), 500000), 0);
  braid_port_stats pa{}, pb{};
  ASSERT_EQ(braid_query_port_stats(a.ctx, &pa), 0);
  ASSERT_EQ(braid_query_port_stats(b.ctx, &pb), 0);
  EXPECT_GT(pb.rx_bad_crc, 0u);  // data frames
  EXPECT_GT(pa.rx_bad_crc, 0u);  // ACKs
  braid_qp_stats qs{};
  ASSERT_EQ(braid_query_qp_stats(a.qp, &qs), 0);
  EXPECT_GT(qs.retransmits, 0u);
}

// Only a sends trailers (b's port is host-local, so its default is none):
// each packet says whether it carries one, so both directions work, and
// b checks what a sends.
class VerbsPipeCrcOneSide : public VerbsPipe {
 protected:
  VerbsPipeCrcOneSide() {
    crc_ = 1;
    crc_b_ = 0;  // auto: off on a pipe
  }
};

TEST_P(VerbsPipeCrcOneSide, PeersThatDifferInIntegrityStillTalk) {
  learn_macs();
  pipe_a->set_corrupt_every(25);  // a's frames carry trailers: caught at b
  for (size_t i = 0; i < 300000; ++i) a.buf[i] = static_cast<uint8_t>(i * 5 + 1);
  for (size_t i = 0; i < 300000; ++i) b.buf[i + 400000] = static_cast<uint8_t>(i * 3 + 2);
  braid_sge sa = sge(a, 0, 300000);
  braid_send_wr wa_wr = write_to_b(&sa, 1);
  ASSERT_EQ(braid_post_send(a.qp, &wa_wr, nullptr), 0);
  braid_sge sb = sge(b, 400000, 300000);
  braid_send_wr wb_wr = rdma_write(&sb, 2, a, 400000);
  ASSERT_EQ(braid_post_send(b.qp, &wb_wr, nullptr), 0);
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  auto wb = wait(b, 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), 300000), 0);
  EXPECT_EQ(std::memcmp(a.buf.data() + 400000, b.buf.data() + 400000, 300000), 0);
  braid_port_stats pb{};
  ASSERT_EQ(braid_query_port_stats(b.ctx, &pb), 0);
  EXPECT_GT(pb.rx_bad_crc, 0u);
}

// Live statistics: what another process reads from /dev/shm is what the
// device's own queries say, entropy by entropy, and the object goes with the
// device.
class VerbsPipeStats : public VerbsPipe {
 protected:
  VerbsPipeStats() { stats_ = 1; }
};

TEST_P(VerbsPipeStats, ASnapshotInSharedMemoryMatchesTheQueries) {
  learn_macs();
  const std::string name_a = braid_stats_name(a.ctx), name_b = braid_stats_name(b.ctx);
  ASSERT_FALSE(name_a.empty());
  ASSERT_NE(name_a, name_b);
  for (size_t i = 0; i < 400000; ++i) a.buf[i] = static_cast<uint8_t>(i * 7 + 3);
  // A burst of each transfer is lost: retransmissions and losses to count.
  braid::PipeIo* pa = pipe_a;
  for (int round = 0; round < 4; ++round) {
    braid_sge s = sge(a, round * 100000, 100000);
    braid_send_wr w = rdma_write(&s, round, b, round * 100000);
    ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
    for (int i = 0; i < 200000; ++i) {
      pa->set_cut(i == 1);
      braid_progress(b.ctx);
      braid_wc wc[4];
      const int k = braid_poll_cq(a.cq, 4, wc);
      ASSERT_GE(k, 0);
      if (k == 1) {
        ASSERT_EQ(wc[0].status, BRAID_WC_SUCCESS);
        break;
      }
    }
  }
  pa->set_cut(false);
  ASSERT_EQ(std::memcmp(a.buf.data(), b.buf.data(), 400000), 0);
  a.ctx->engine->publish_stats();
  braid::stats::Snapshot snap;
  std::string err;
  ASSERT_TRUE(braid::stats::read_snapshot(name_a, &snap, &err)) << err;
  EXPECT_EQ(snap.pid, getpid());
  EXPECT_EQ(snap.info.ip, 0xc6120001u);  // 198.18.0.1
  ASSERT_EQ(snap.conns.size(), 1u);
  EXPECT_EQ(snap.info.conns_total, 1u);
  const braid::stats::Conn& c = snap.conns[0];
  EXPECT_EQ(c.qp_num, braid_qp_num(a.qp));
  EXPECT_EQ(c.remote_ip, 0xc6120002u);
  braid_qp_stats q{};
  ASSERT_EQ(braid_query_qp_stats(a.qp, &q), 0);
  EXPECT_GT(q.retransmits, 0u);
  EXPECT_EQ(c.counters.data_sent, q.data_packets_sent);
  EXPECT_EQ(c.counters.retransmits, q.retransmits);
  EXPECT_EQ(c.counters.acks_received, q.acks_received);
  EXPECT_EQ(c.counters.lost_inferred + c.counters.lost_timeout, q.lost_inferred + q.lost_timeout);
  EXPECT_EQ(c.srtt_ns, q.srtt_ns);
  EXPECT_EQ(c.cwnd_bytes, q.cwnd_bytes);
  ASSERT_EQ(c.entropies, q.entropies);
  ASSERT_EQ(snap.paths[0].size(), c.entropies);
  uint64_t on_paths = 0, lost_on_paths = 0;
  for (unsigned i = 0; i < c.entropies; ++i) {
    braid_path_stats ps{};
    ASSERT_EQ(braid_query_path_stats(a.qp, i, &ps), 0);
    const braid::stats::Path& p = snap.paths[0][i];
    EXPECT_EQ(p.udp_src_port, ps.udp_src_port);
    EXPECT_EQ(p.sent, ps.sent);
    EXPECT_EQ(p.acked, ps.acked);
    EXPECT_EQ(p.lost, ps.lost);
    EXPECT_EQ(p.srtt_ns, ps.srtt_ns);
    on_paths += p.sent;
    lost_on_paths += p.lost;
  }
  // Every data packet went out on some entropy, and the losses were seen.
  EXPECT_EQ(on_paths, q.data_packets_sent + q.retransmits);
  EXPECT_GT(lost_on_paths, 0u);
  // b's object shows the receiving side.
  b.ctx->engine->publish_stats();
  ASSERT_TRUE(braid::stats::read_snapshot(name_b, &snap, &err)) << err;
  ASSERT_EQ(snap.conns.size(), 1u);
  braid_qp_stats qb{};
  ASSERT_EQ(braid_query_qp_stats(b.qp, &qb), 0);
  EXPECT_EQ(snap.conns[0].counters.data_received, qb.data_packets_received);
  EXPECT_EQ(snap.conns[0].counters.bytes_placed, 400000u);
  // Listed while the device is open; gone with it.
  bool listed = false;
  for (const auto& l : braid::stats::list_publishers()) {
    listed |= l.name == name_a && l.alive && l.pid == getpid();
  }
  EXPECT_TRUE(listed);
  ASSERT_EQ(braid_destroy_qp(a.qp), 0);
  a.qp = nullptr;
  ASSERT_EQ(braid_dereg_mr(a.mr), 0);
  a.mr = nullptr;
  ASSERT_EQ(braid_destroy_cq(a.cq), 0);
  a.cq = nullptr;
  ASSERT_EQ(braid_dealloc_pd(a.pd), 0);
  a.pd = nullptr;
  ASSERT_EQ(braid_close_device(a.ctx), 0);
  a.ctx = nullptr;
  EXPECT_FALSE(braid::stats::read_snapshot(name_a, &snap, &err));
}

TEST(VerbsConfig, StatsOutsideItsValuesIsRefused) {
  braid_device_config c{};
  c.ipv4 = "198.18.0.1";
  c.stats = 2;
  const braid::wire::MacAddr m{2, 0, 0, 0, 0, 1}, n{2, 0, 0, 0, 0, 2};
  auto [ia, ib] = braid::PipeIo::make_pair(m, n, 1514);
  EXPECT_EQ(braid::open_device(&c, std::move(ia)), nullptr);
  EXPECT_NE(std::string(braid_last_error()).find("stats"), std::string::npos);
}

// b's QP allows remote WRITE only, though its region allows READ as well:
// the QP's access flags are checked too (InfiniBand's responder checks
// both). WRITEs land; a READ is refused with a remote access error, b's
// QP goes to error, and nothing of b's is read.
class VerbsPipeWriteOnly : public VerbsPipe {
 protected:
  VerbsPipeWriteOnly() { b_access_ = BRAID_ACCESS_REMOTE_WRITE; }
};

TEST_P(VerbsPipeWriteOnly, AReadThroughAQpWithoutRemoteReadIsRefused) {
  std::fill(a.buf.begin(), a.buf.begin() + 8192, 0x11);
  braid_sge s = sge(a, 0, 4096);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(b.buf[4095], 0x11);
  std::fill(b.buf.begin() + 65536, b.buf.begin() + 69632, 0x77);
  braid_sge d = sge(a, 4096, 4096);
  braid_send_wr r{};
  r.wr_id = 2;
  r.sg_list = &d;
  r.num_sge = 1;
  r.opcode = BRAID_WR_RDMA_READ;
  r.send_flags = BRAID_SEND_SIGNALED;
  r.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf.data() + 65536);
  r.rdma.rkey = b.mr->rkey;
  ASSERT_EQ(braid_post_send(a.qp, &r, nullptr), 0);
  wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_REM_ACCESS_ERR);
  for (size_t i = 4096; i < 8192; ++i) ASSERT_EQ(a.buf[i], 0x11) << i;  // nothing read
  braid_qp_attr at{};
  braid_qp_init_attr ia{};
  ASSERT_EQ(braid_query_qp(b.qp, &at, BRAID_QP_STATE, &ia), 0);
  EXPECT_EQ(at.qp_state, BRAID_QPS_ERR);
  braid_qp_stats qs{};
  ASSERT_EQ(braid_query_qp_stats(b.qp, &qs), 0);
  EXPECT_EQ(qs.access_errors, 1u);
}

// Access flags changed in RTS take effect: b's QP stops accepting WRITEs
// its region still allows, and a WRITE through it lands nowhere.
TEST_P(VerbsPipe, AccessFlagsChangedInRtsTakeEffect) {
  braid_qp_attr at{};
  at.qp_state = BRAID_QPS_RTS;
  at.qp_access_flags = 0;
  ASSERT_EQ(braid_modify_qp(b.qp, &at, BRAID_QP_STATE | BRAID_QP_ACCESS_FLAGS), 0)
      << braid_last_error();
  braid_qp_init_attr ia{};
  ASSERT_EQ(braid_query_qp(b.qp, &at, BRAID_QP_ACCESS_FLAGS, &ia), 0);
  EXPECT_EQ(at.qp_access_flags, 0u);
  const std::vector<uint8_t> before = b.buf;
  std::fill(a.buf.begin(), a.buf.begin() + 4096, 0x22);
  braid_sge s = sge(a, 0, 4096);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  auto wa = wait(a, 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_REM_ACCESS_ERR);
  EXPECT_EQ(b.buf, before);
  ASSERT_EQ(braid_query_qp(b.qp, &at, BRAID_QP_STATE, &ia), 0);
  EXPECT_EQ(at.qp_state, BRAID_QPS_ERR);
}

// RTS->RTS changes what InfiniBand's state table allows for RC: the RNR
// timer (applied, and read back) and the access flags; timeout, retry
// counts and READ limits are refused there, as the kernel refuses them.
// Given at RTR->RTS, they apply: timeout 0 waits for the peer forever.
TEST_P(VerbsPipe, RtsToRtsChangesWhatInfinibandAllowsAndRefusesTheRest) {
  braid_qp_attr at{};
  at.qp_state = BRAID_QPS_RTS;
  at.min_rnr_timer = 1;
  ASSERT_EQ(braid_modify_qp(a.qp, &at, BRAID_QP_STATE | BRAID_QP_MIN_RNR_TIMER), 0)
      << braid_last_error();
  EXPECT_EQ(a.qp->conn->config().rnr_delay_ns, 10'000u);  // 0.01 ms, what peers are told
  braid_qp_attr q{};
  braid_qp_init_attr ia{};
  ASSERT_EQ(braid_query_qp(a.qp, &q, 0, &ia), 0);
  EXPECT_EQ(q.min_rnr_timer, 1);
  const braid::TimeNs rto_max = a.qp->conn->config().rto_max_ns;
  at.timeout = 0;
  at.retry_cnt = 2;
  EXPECT_EQ(braid_modify_qp(a.qp, &at, BRAID_QP_STATE | BRAID_QP_TIMEOUT | BRAID_QP_RETRY_CNT),
            EINVAL);
  EXPECT_EQ(a.qp->conn->config().rto_max_ns, rto_max);
  EXPECT_FALSE(a.qp->conn->config().retry_forever);
  ASSERT_EQ(braid_query_qp(a.qp, &q, 0, &ia), 0);
  EXPECT_EQ(q.timeout, 10);
  EXPECT_EQ(q.retry_cnt, 7);

  // A new QP, taken to RTS with timeout 0 and two READs at most.
  braid_qp* n = new_qp(a, {16, 16, 1, 1, 0});
  ASSERT_NE(n, nullptr) << braid_last_error();
  braid_qp_attr s{};
  s.qp_state = BRAID_QPS_INIT;
  ASSERT_EQ(braid_modify_qp(n, &s, BRAID_QP_STATE), 0);
  s = {};
  s.qp_state = BRAID_QPS_RTR;
  s.path_mtu = BRAID_MTU_1024;
  s.dest_qp_num = braid_qp_num(b.qp);
  braid_query_gid(b.ctx, 1, 0, &s.ah_attr.dgid);
  braid_device_attr da{};
  ASSERT_EQ(braid_query_device(a.ctx, &da), 0);
  ASSERT_LT(da.max_qp_rd_atom, 255);
  s.max_dest_rd_atomic = static_cast<uint8_t>(da.max_qp_rd_atom + 1);  // above the device's
  EXPECT_EQ(braid_modify_qp(n, &s,
                            BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
                                BRAID_QP_RQ_PSN | BRAID_QP_MAX_DEST_RD_ATOMIC),
            EINVAL);
  s.max_dest_rd_atomic = 3;
  ASSERT_EQ(braid_modify_qp(n, &s,
                            BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
                                BRAID_QP_RQ_PSN | BRAID_QP_MAX_DEST_RD_ATOMIC),
            0)
      << braid_last_error();
  EXPECT_EQ(n->conn->config().max_dest_rd_atomic, 3u);
  s = {};
  s.qp_state = BRAID_QPS_RTS;
  s.timeout = 32;
  EXPECT_EQ(braid_modify_qp(n, &s, BRAID_QP_STATE | BRAID_QP_SQ_PSN | BRAID_QP_TIMEOUT), EINVAL);
  s.timeout = 0;
  ASSERT_LT(da.max_qp_init_rd_atom, 255);
  s.max_rd_atomic = static_cast<uint8_t>(da.max_qp_init_rd_atom + 1);  // above the device's
  EXPECT_EQ(
      braid_modify_qp(
          n, &s, BRAID_QP_STATE | BRAID_QP_SQ_PSN | BRAID_QP_TIMEOUT | BRAID_QP_MAX_QP_RD_ATOMIC),
      EINVAL);
  s.max_rd_atomic = 2;
  ASSERT_EQ(
      braid_modify_qp(
          n, &s, BRAID_QP_STATE | BRAID_QP_SQ_PSN | BRAID_QP_TIMEOUT | BRAID_QP_MAX_QP_RD_ATOMIC),
      0)
      << braid_last_error();
  EXPECT_TRUE(n->conn->config().retry_forever);
  EXPECT_EQ(n->conn->config().max_rd_atomic, 2u);
  ASSERT_EQ(braid_query_qp(n, &q, 0, &ia), 0);
  EXPECT_EQ(q.timeout, 0);
  EXPECT_EQ(q.max_rd_atomic, 2);
  EXPECT_EQ(q.max_dest_rd_atomic, 3);
  EXPECT_EQ(braid_destroy_qp(n), 0);
}

// Every engine of a port has its own credit pacer, at the port's rate, and
// they share one next-grant time (tests/unit/credit_test.cc: together they
// grant the port's rate, not engines times it).
TEST(VerbsConfig, TheCreditPacersOfAPortShareItsRate) {
  braid_device_config c{};
  c.ipv4 = "198.18.0.1";
  c.credit = 1;
  c.link_mbps = 10'000;
  c.engines = 4;
  std::vector<std::unique_ptr<braid::PacketIo>> ios, peers;
  for (int k = 0; k < 4; ++k) {
    auto [ia, ib] =
        braid::PipeIo::make_pair(MacAddr{2, 0, 0, 0, 0, 1}, MacAddr{2, 0, 0, 0, 0, 2}, 1514);
    ios.push_back(std::move(ia));
    peers.push_back(std::move(ib));
  }
  braid_context* ctx = braid::open_device(&c, std::move(ios));
  ASSERT_NE(ctx, nullptr) << braid_last_error();
  for (auto& slot : ctx->slots) {
    EXPECT_EQ(slot->engine->endpoint().credit_pacer().rate_bps(), 10'000'000'000u);
    EXPECT_EQ(slot->engine->endpoint().config().credit.shared_next_at, &ctx->credit_next_at);
  }
  EXPECT_EQ(braid_close_device(ctx), 0);
}

// NSCC's largest window is 1.5 x the BDP of link_mbps and base_rtt_us; one
// it cannot keep (it would wrap at 4 GiB) is refused, naming the limit.
TEST(VerbsConfig, ALinkRateAndBaseRttBeyondNsccsLargestWindowAreRefused) {
  const MacAddr ma{2, 0, 0, 0, 0, 1}, mb{2, 0, 0, 0, 0, 2};
  braid_device_config c{};
  c.ipv4 = "198.18.0.1";
  c.cc = BRAID_CC_NSCC;
  c.link_mbps = 400'000;
  c.base_rtt_us = 114'500;  // 8.59 GB
  auto [ia, ib] = braid::PipeIo::make_pair(ma, mb, 1514);
  EXPECT_EQ(braid::open_device(&c, std::move(ia)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(braid_last_error()).find("base_rtt_us"), std::string::npos);
  c.base_rtt_us = 10'000;  // 750 MB: kept
  auto [ja, jb] = braid::PipeIo::make_pair(ma, mb, 1514);
  braid_context* ctx = braid::open_device(&c, std::move(ja));
  ASSERT_NE(ctx, nullptr) << braid_last_error();
  EXPECT_EQ(braid_close_device(ctx), 0);
}

// The authenticated mode on both devices, one key: over a cable that flips
// a bit in every 40th data frame and every 3rd ACK, what was changed does
// not authenticate (dropped, counted, resent) and the data arrives intact;
// nothing on the wire is in clear.
constexpr const char* kKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr const char* kOtherKey =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1e";

class VerbsAuth : public VerbsPipe {
 protected:
  VerbsAuth() {
    auth_ = BRAID_AUTH_ON;
    key_a_ = key_b_ = kKey;
  }
};

TEST_P(VerbsAuth, ChangedFramesDoNotAuthenticateAndTheDataArrivesIntact) {
  if (GetParam() == Backend::kPipe) {
    learn_macs();
    pipe_a->set_corrupt_every(40);  // data
    pipe_b->set_corrupt_every(3);   // ACKs
  }
  std::mt19937 g(7);
  for (size_t i = 0; i < 400000; ++i) a.buf[i] = static_cast<uint8_t>(g());
  braid_sge s = sge(a, 0, 400000);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  // And a READ back from b, the other direction's keys.
  for (size_t i = 0; i < 100000; ++i) b.buf[600000 + i] = static_cast<uint8_t>(g());
  braid_sge rs = sge(a, 600000, 100000);
  braid_send_wr r = rdma_write(&rs, 2, b, 600000);
  r.opcode = BRAID_WR_RDMA_READ;
  ASSERT_EQ(braid_post_send(a.qp, &r, nullptr), 0);
  auto wa = wait(a, 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(wa[1].status, BRAID_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), 400000), 0);
  EXPECT_EQ(std::memcmp(a.buf.data() + 600000, b.buf.data() + 600000, 100000), 0);
  braid_qp_stats qa{}, qb{};
  ASSERT_EQ(braid_query_qp_stats(a.qp, &qa), 0);
  ASSERT_EQ(braid_query_qp_stats(b.qp, &qb), 0);
  EXPECT_EQ(qa.unsealed + qb.unsealed, 0u);
  if (GetParam() == Backend::kPipe) {
    braid_port_stats pa{}, pb{};
    ASSERT_EQ(braid_query_port_stats(a.ctx, &pa), 0);
    ASSERT_EQ(braid_query_port_stats(b.ctx, &pb), 0);
    // A flipped bit in the headers up to UDP is dropped before (rx_dropped);
    // from the security header on, by the key.
    EXPECT_GT(qb.auth_failed + pb.rx_dropped, 0u);
    EXPECT_GT(qb.auth_failed, 0u);
    EXPECT_GT(qa.retransmits, 0u);
  }
}

// b's key differs by one bit: nothing a sends is taken, and its WRITE ends
// in RETRY_EXC_ERR with b's memory untouched.
class VerbsAuthWrongKey : public VerbsPipe {
 protected:
  VerbsAuthWrongKey() {
    auth_ = BRAID_AUTH_REQUIRED;
    key_a_ = kKey;
    key_b_ = kOtherKey;
  }
};

TEST_P(VerbsAuthWrongKey, APeerWithAnotherKeyTakesNothing) {
  learn_macs();
  for (size_t i = 0; i < 10000; ++i) a.buf[i] = 0xab;
  braid_sge s = sge(a, 0, 10000);
  braid_send_wr w = write_to_b(&s, 1);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  auto wa = wait_for(a, 1, 30);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, BRAID_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(std::all_of(b.buf.begin(), b.buf.begin() + 10000, [](uint8_t v) { return v == 0; }));
  braid_qp_stats qb{};
  ASSERT_EQ(braid_query_qp_stats(b.qp, &qb), 0);
  EXPECT_GT(qb.auth_failed, 0u);
  EXPECT_EQ(qb.data_packets_received, 0u);
}

TEST(VerbsConfig, AuthNeedsAKeyOf64HexDigitsOrAFileOfThem) {
  const MacAddr m{2, 0, 0, 0, 0, 1}, n{2, 0, 0, 0, 0, 2};
  braid_device_config c{};
  c.ipv4 = "198.18.0.1";
  c.auth = BRAID_AUTH_ON;
  const std::string file = "/tmp/braid-auth-key-" + std::to_string(getpid());
  const std::string at_file = "@" + file;
  for (const char* bad :
       {static_cast<const char*>(nullptr), "", "00",
        "zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", at_file.c_str()}) {
    c.auth_key = bad;
    auto [ia, ib] = braid::PipeIo::make_pair(m, n, 1514);
    EXPECT_EQ(braid::open_device(&c, std::move(ia)), nullptr) << (bad ? bad : "(null)");
    EXPECT_EQ(errno, EINVAL);
    EXPECT_NE(std::string(braid_last_error()).find("auth_key"), std::string::npos);
  }
  c.auth = 3;
  c.auth_key = kKey;
  {
    auto [ia, ib] = braid::PipeIo::make_pair(m, n, 1514);
    EXPECT_EQ(braid::open_device(&c, std::move(ia)), nullptr);
  }
  c.auth = BRAID_AUTH_ON;
  {
    std::ofstream out(file);
    out << "  " << kKey << "\n";
  }
  c.auth_key = at_file.c_str();
  auto [ia, ib] = braid::PipeIo::make_pair(m, n, 1514);
  braid_context* ctx = braid::open_device(&c, std::move(ia));
  ASSERT_NE(ctx, nullptr) << braid_last_error();
  EXPECT_EQ(braid_close_device(ctx), 0);
  std::remove(file.c_str());
}

// Devices with a PDC per peer: a's QPs to b share one connection (and b's
// to a), whatever order each side connects them in; each QP keeps its own
// PSNs out of band (only the first's are used) and its own completions.
class VerbsSharedPdc : public VerbsPipe {
 protected:
  VerbsSharedPdc() { pdc_per_peer_ = 1; }
  // INIT -> RTR -> RTS for the pair (qa, qb), with PSNs of their own
  // (to_rts false: RTR only).
  void connect_pair(braid_qp* qa, braid_qp* qb, uint32_t psn_a, uint32_t psn_b, bool a_side,
                    bool to_rts = true) {
    braid_qp* me = a_side ? qa : qb;
    braid_qp* peer = a_side ? qb : qa;
    Side& ms = a_side ? a : b;
    Side& ps = a_side ? b : a;
    braid_qp_attr at{};
    at.qp_state = BRAID_QPS_INIT;
    at.qp_access_flags = BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ;
    ASSERT_EQ(braid_modify_qp(me, &at, BRAID_QP_STATE | BRAID_QP_ACCESS_FLAGS), 0);
    at = {};
    at.qp_state = BRAID_QPS_RTR;
    at.path_mtu = BRAID_MTU_1024;
    at.dest_qp_num = braid_qp_num(peer);
    at.rq_psn = a_side ? psn_b : psn_a;
    braid_query_gid(ps.ctx, 1, 0, &at.ah_attr.dgid);
    braid_progress(ps.ctx);
    ASSERT_EQ(braid_modify_qp(me, &at,
                              BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
                                  BRAID_QP_RQ_PSN),
              0)
        << braid_last_error();
    if (!to_rts) return;
    at = {};
    at.qp_state = BRAID_QPS_RTS;
    at.sq_psn = a_side ? psn_a : psn_b;
    at.retry_cnt = 7;
    at.timeout = 10;
    ASSERT_EQ(
        braid_modify_qp(me, &at,
                        BRAID_QP_STATE | BRAID_QP_SQ_PSN | BRAID_QP_RETRY_CNT | BRAID_QP_TIMEOUT),
        0);
    (void)ms;
  }
};

// COMM_EST on a PDC shared with other QPs: the requests of the others,
// before and after the PDC's first QP goes, are not this QP's first.
TEST_P(VerbsSharedPdc, CommEstCountsOnlyTheQpsOwnRequests) {
  braid_qp* qa1 = new_qp(a, {128, 128, 1, 1, 64});
  braid_qp* qb1 = new_qp(b, {128, 128, 1, 1, 64});
  ASSERT_NE(qa1, nullptr);
  ASSERT_NE(qb1, nullptr);
  connect_pair(qa1, qb1, 7000, 9000, true);
  connect_pair(qa1, qb1, 7000, 9000, false, false);  // qb1 stays in RTR
  ASSERT_EQ(qb1->conn, b.qp->conn);
  auto write = [&](braid_qp* from, uint64_t id) {
    braid_sge s = sge(a, 0, 3000);
    braid_send_wr w = rdma_write(&s, id, b, 8192);
    ASSERT_EQ(braid_post_send(from, &w, nullptr), 0) << braid_last_error();
    const auto wa = wait(a, 1);
    ASSERT_EQ(wa.size(), 1u);
    EXPECT_EQ(wa[0].status, BRAID_WC_SUCCESS);
    braid_progress(b.ctx);
  };
  braid_async_event ev{};
  write(a.qp, 1);  // to b.qp, on the PDC qb1 is on
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);
  // The PDC's first QPs go: qb1 is the one left on b's PDC.
  ASSERT_EQ(braid_destroy_qp(b.qp), 0);
  ASSERT_EQ(braid_destroy_qp(a.qp), 0);
  a.qp = b.qp = nullptr;
  ASSERT_EQ(qb1->conn->live_queue_pairs(), 1u);
  braid_progress(b.ctx);
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);
  write(qa1, 2);  // qb1's first request
  ASSERT_EQ(braid_get_async_event(b.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, BRAID_EVENT_COMM_EST);
  EXPECT_EQ(ev.qp, qb1);
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);
  ASSERT_EQ(braid_destroy_qp(qb1), 0);
  ASSERT_EQ(braid_destroy_qp(qa1), 0);
}

TEST_P(VerbsSharedPdc, QpsToOnePeerShareAConnectionAndLeaveItOneByOne) {
  // The fixture's pair (a.qp, b.qp) is connected; three more pairs, a's
  // side in one order and b's in the reverse.
  std::vector<braid_qp*> qa{a.qp}, qb{b.qp};
  for (int i = 0; i < 3; ++i) {
    qa.push_back(new_qp(a, {128, 128, 1, 1, 64}));
    qb.push_back(new_qp(b, {128, 128, 1, 1, 64}));
    ASSERT_NE(qa.back(), nullptr);
    ASSERT_NE(qb.back(), nullptr);
  }
  for (int i = 1; i < 4; ++i) connect_pair(qa[i], qb[i], 1000 * i, 50000 + 333 * i, true);
  for (int i = 3; i >= 1; --i) connect_pair(qa[i], qb[i], 1000 * i, 50000 + 333 * i, false);
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(qa[i]->conn, a.qp->conn);
    EXPECT_EQ(qb[i]->conn, b.qp->conn);
  }
  // Each pair WRITEs both ways into its own 4 KiB, 3 KiB at a time.
  auto write_all = [&](uint8_t seed, size_t live_from) {
    for (size_t i = live_from; i < 4; ++i) {
      for (int side = 0; side < 2; ++side) {
        Side& from = side == 0 ? a : b;
        Side& to = side == 0 ? b : a;
        braid_qp* q = side == 0 ? qa[i] : qb[i];
        for (size_t k = 0; k < 3000; ++k) {
          from.buf[i * 4096 + k] = static_cast<uint8_t>(seed + 31 * i + k * 7 + side);
        }
        braid_sge s = sge(from, i * 4096, 3000);
        braid_send_wr w = rdma_write(&s, 10 * i + side, to, 65536 + i * 4096);
        ASSERT_EQ(braid_post_send(q, &w, nullptr), 0) << braid_last_error();
      }
    }
    const size_t n = 4 - live_from;
    const auto wa = wait(a, n), wb = wait(b, n);
    ASSERT_EQ(wa.size(), n);
    ASSERT_EQ(wb.size(), n);
    for (const auto& wc : wa) EXPECT_EQ(wc.status, BRAID_WC_SUCCESS);
    for (const auto& wc : wb) EXPECT_EQ(wc.status, BRAID_WC_SUCCESS);
    for (size_t i = live_from; i < 4; ++i) {
      EXPECT_EQ(std::memcmp(a.buf.data() + i * 4096, b.buf.data() + 65536 + i * 4096, 3000), 0);
      EXPECT_EQ(std::memcmp(b.buf.data() + i * 4096, a.buf.data() + 65536 + i * 4096, 3000), 0);
    }
  };
  write_all(1, 0);
  EXPECT_EQ(a.qp->conn->live_queue_pairs(), 4u);
  // The PDC's first QPs go (each side's is another pair); the rest go on.
  std::vector<uint32_t> numbers;
  for (braid_qp* q : qa) numbers.push_back(braid_qp_num(q));
  ASSERT_EQ(braid_destroy_qp(qa[0]), 0);
  EXPECT_EQ(a.ctx->qpn_holds[numbers[0]], 1);  // the PDC is kept under it
  ASSERT_EQ(braid_destroy_qp(qb[0]), 0);
  a.qp = b.qp = nullptr;
  ASSERT_EQ(qa[1]->conn->live_queue_pairs(), 3u);
  write_all(2, 1);
  // A QP moved to RESET keeps its number (and the PDC goes on).
  braid_qp_attr reset{};
  reset.qp_state = BRAID_QPS_RESET;
  ASSERT_EQ(braid_modify_qp(qa[2], &reset, BRAID_QP_STATE), 0);
  EXPECT_GE(a.ctx->qpn_holds[numbers[2]], 1);
  ASSERT_EQ(braid_destroy_qp(qa[3]), 0);
  ASSERT_EQ(braid_destroy_qp(qb[3]), 0);
  for (int i = 1; i < 3; ++i) {
    ASSERT_EQ(braid_destroy_qp(qa[i]), 0);
    ASSERT_EQ(braid_destroy_qp(qb[i]), 0);
  }
  // All gone: so is the PDC, and a new pair sets one up again.
  for (uint32_t n : numbers) EXPECT_EQ(a.ctx->qpn_holds[n], 0) << n;  // all free again
  size_t live = 0;
  for (size_t id = 0; id < a.ctx->engine->endpoint().connection_slots(); ++id) {
    live += a.ctx->engine->endpoint().connection(static_cast<uint16_t>(id)) != nullptr;
  }
  EXPECT_EQ(live, 0u);
  a.qp = new_qp(a, {128, 128, 1, 1, 64});
  b.qp = new_qp(b, {128, 128, 1, 1, 64});
  connect();
  braid_sge s = sge(a, 0, 100);
  braid_send_wr w = write_to_b(&s, 99);
  ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0);
  const auto wc = wait(a, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, BRAID_WC_SUCCESS);
}

TEST(VerbsConfig, APdcPerPeerNeedsAKnownSettingAndAuthOff) {
  for (const int auth : {BRAID_AUTH_OFF, BRAID_AUTH_REQUIRED}) {
    braid_device_config c{};
    c.ipv4 = "198.18.0.1";
    c.pdc_per_peer = auth == BRAID_AUTH_OFF ? 2 : 1;
    c.auth = auth;
    c.auth_key = kKey;
    const MacAddr m{2, 0, 0, 0, 0, 1}, n{2, 0, 0, 0, 0, 2};
    auto [ia, ib] = braid::PipeIo::make_pair(m, n, 1514);
    EXPECT_EQ(braid::open_device(&c, std::move(ia)), nullptr);
    EXPECT_NE(std::string(braid_last_error()).find("pdc_per_peer"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Pipe, VerbsSharedPdc, ::testing::Values(Backend::kPipe),
                         [](const auto&) { return std::string("pipe"); });

INSTANTIATE_TEST_SUITE_P(Backends, VerbsAuth, ::testing::Values(Backend::kPipe, Backend::kMemif),
                         [](const auto& info) {
                           return info.param == Backend::kPipe ? std::string("pipe")
                                                               : std::string("memif");
                         });

INSTANTIATE_TEST_SUITE_P(Pipe, VerbsAuthWrongKey, ::testing::Values(Backend::kPipe),
                         [](const auto&) { return std::string("pipe"); });

INSTANTIATE_TEST_SUITE_P(Pipe, VerbsPipeStats, ::testing::Values(Backend::kPipe),
                         [](const auto&) { return std::string("pipe"); });

// b's QP takes its receives from a shared receive queue: a's SENDs land in
// the SRQ's buffers in message order, the limit event fires once as the
// queue drains below its limit (queued, the event fd readable), and what
// an SRQ QP may not do is refused.
TEST_P(VerbsPipe, SendsTakeTheirReceivesFromASharedReceiveQueue) {
  braid_srq_init_attr sa{};
  sa.srq_context = &sa;
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  braid_srq* srq = braid_create_srq(b.pd, &sa);
  ASSERT_NE(srq, nullptr) << braid_last_error();
  for (Side* x : {&a, &b}) ASSERT_EQ(braid_destroy_qp(x->qp), 0);
  a.qp = new_qp(a, {16, 16, 1, 1, 0});
  ASSERT_NE(a.qp, nullptr) << braid_last_error();
  braid_qp_init_attr ia{};
  ia.send_cq = b.cq;
  ia.recv_cq = b.cq;
  ia.cap = {16, 0, 1, 0, 0};
  ia.qp_type = BRAID_QPT_RC;
  ia.srq = srq;
  b.qp = braid_create_qp(b.pd, &ia);
  ASSERT_NE(b.qp, nullptr) << braid_last_error();
  connect();
  learn_macs();
  for (uint64_t i = 0; i < 8; ++i) {
    braid_sge rs = sge(b, i * 256, 256);
    braid_recv_wr r{};
    r.wr_id = 100 + i;
    r.sg_list = &rs;
    r.num_sge = 1;
    ASSERT_EQ(braid_post_srq_recv(srq, &r, nullptr), 0) << braid_last_error();
  }
  braid_sge extra = sge(b, 0, 8);
  braid_recv_wr r{};
  r.sg_list = &extra;
  r.num_sge = 1;
  braid_recv_wr* bad = nullptr;
  EXPECT_EQ(braid_post_srq_recv(srq, &r, &bad), ENOMEM);  // max_wr wait
  EXPECT_EQ(bad, &r);
  EXPECT_EQ(braid_post_recv(b.qp, &r, nullptr), EINVAL);  // receives come from the SRQ
  braid_srq_attr lim{};
  lim.srq_limit = 9;
  EXPECT_EQ(braid_modify_srq(srq, &lim, BRAID_SRQ_LIMIT), EINVAL);  // above max_wr
  lim.srq_limit = 3;
  ASSERT_EQ(braid_modify_srq(srq, &lim, BRAID_SRQ_LIMIT), 0);
  braid_srq_attr q{};
  ASSERT_EQ(braid_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 8u);
  EXPECT_EQ(q.srq_limit, 3u);
  const int efd = braid_async_event_fd(b.ctx);
  ASSERT_GE(efd, 0);
  braid_async_event ev{};
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);

  for (uint64_t i = 0; i < 6; ++i) {
    for (size_t k = 0; k < 100; ++k) a.buf[i * 100 + k] = static_cast<uint8_t>(i + 1);
    braid_sge s = sge(a, i * 100, 100);
    braid_send_wr w{};
    w.wr_id = i;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = BRAID_WR_SEND;
    w.send_flags = BRAID_SEND_SIGNALED;
    ASSERT_EQ(braid_post_send(a.qp, &w, nullptr), 0) << braid_last_error();
  }
  auto wa = wait(a, 6);
  ASSERT_EQ(wa.size(), 6u);
  auto wb = wait(b, 6);
  ASSERT_EQ(wb.size(), 6u);
  for (uint64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(wb[i].status, BRAID_WC_SUCCESS);
    EXPECT_EQ(wb[i].wr_id, 100 + i);
    EXPECT_EQ(wb[i].opcode, BRAID_WC_RECV);
    EXPECT_EQ(wb[i].byte_len, 100u);
    EXPECT_EQ(wb[i].qp_num, braid_qp_num(b.qp));
    EXPECT_EQ(std::count(b.buf.begin() + i * 256, b.buf.begin() + i * 256 + 100, i + 1), 100);
  }
  // 2 receives left, below the limit of 3: one event, and the limit disarmed.
  pollfd pfd{efd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 1);
  ASSERT_EQ(braid_get_async_event(b.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, BRAID_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(ev.srq, srq);
  EXPECT_EQ(ev.context, &sa);
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
  ASSERT_EQ(braid_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);
  EXPECT_EQ(braid_destroy_srq(srq), EBUSY);  // b.qp uses it
  // To ERR: LAST_WQE_REACHED names the QP and its context; destroying the
  // QP drops it if it still waits, and the descriptor goes quiet.
  braid_qp_attr err{};
  err.qp_state = BRAID_QPS_ERR;
  ASSERT_EQ(braid_modify_qp(b.qp, &err, BRAID_QP_STATE), 0);
  ASSERT_EQ(braid_get_async_event(b.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, BRAID_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(ev.qp, b.qp);
  braid_qp_attr reset{};
  reset.qp_state = BRAID_QPS_RESET;
  ASSERT_EQ(braid_modify_qp(b.qp, &reset, BRAID_QP_STATE), 0);
  ASSERT_EQ(braid_modify_qp(b.qp, &err, BRAID_QP_STATE), 0);
  EXPECT_EQ(poll(&pfd, 1, 0), 1);
  ASSERT_EQ(braid_destroy_qp(b.qp), 0);
  b.qp = nullptr;
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
  EXPECT_EQ(braid_get_async_event(b.ctx, &ev), EAGAIN);
  EXPECT_EQ(braid_destroy_srq(srq), 0);
}

INSTANTIATE_TEST_SUITE_P(Pipe, VerbsPipeCrcOneSide, ::testing::Values(Backend::kPipe),
                         [](const auto&) { return std::string("pipe"); });

INSTANTIATE_TEST_SUITE_P(Pipe, VerbsPipeCrc, ::testing::Values(Backend::kPipe),
                         [](const auto&) { return std::string("pipe"); });

INSTANTIATE_TEST_SUITE_P(Pipe, VerbsPipeWriteOnly, ::testing::Values(Backend::kPipe),
                         [](const auto&) { return std::string("pipe"); });

INSTANTIATE_TEST_SUITE_P(Pipe, VerbsPipe, ::testing::Values(Backend::kPipe),
                         [](const auto&) { return std::string("pipe"); });

INSTANTIATE_TEST_SUITE_P(Backends, VerbsPair, ::testing::Values(Backend::kPipe, Backend::kMemif),
                         [](const auto& info) {
                           return info.param == Backend::kPipe ? std::string("pipe")
                                                               : std::string("memif");
                         });

}  // namespace
