// A verbs device with several engines (braid_device_config.engines), one per
// queue pair of its port. QPs on every engine of both ends, connected
// engine to same engine, across engines (every packet handed over by the
// engine that received it) and to a QP of the same device on the other
// engine; all of a device's QPs complete into one CQ, as perftest's do.
// Over a software cable (a pipe per queue pair) and over DPDK (a memif
// server and client with two queue pairs each).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "braid/verbs.h"
#include "loopback/pipe_io.h"
#include "net/arp.h"
#include "verbs/device_io.h"
#include "verbs/verbs_internal.h"

namespace {

using braid::wire::MacAddr;

constexpr int kEngines = 2;
// Each QP's part of its device's buffer.
constexpr size_t kSlice = 64 * 1024;
constexpr size_t kSrc = 0;       // 16 KiB this QP writes, sends, and its peer reads
constexpr size_t kWdst = 16384;  // 16 KiB the peer writes
constexpr size_t kRdst = 32768;  // 16 KiB this QP reads from the peer
constexpr size_t kRecv = 49152;  // 4 KiB the peer's SEND lands in
constexpr uint32_t kSend = 4096;

struct Device {
  braid_context* ctx = nullptr;
  braid_pd* pd = nullptr;
  braid_cq* cq = nullptr;
  braid_mr* mr = nullptr;
  std::vector<uint8_t> buf;
  std::vector<braid_qp*> qps;
  uint8_t* slice(size_t qp_index) { return buf.data() + qp_index * kSlice; }
};

// One end of a connection: a device's QP and its index there.
struct End {
  Device* dev;
  size_t index;
  braid_qp* qp() const { return dev->qps[index]; }
  uint8_t* at(size_t off) const { return dev->slice(index) + off; }
};

enum class Backend { kPipe, kMemif };

class DeviceEngines : public ::testing::TestWithParam<Backend> {
 protected:
  void open(Device& a, Device& b, int progress_thread) {
    braid_device_config ca{};
    ca.ipv4 = "198.18.0.1";
    ca.engines = kEngines;
    ca.progress_thread = progress_thread;
    ca.pdc_per_peer = pdc_per_peer_;
    ca.stats = -1;
    braid_device_config cb = ca;
    cb.ipv4 = "198.18.0.2";
    if (GetParam() == Backend::kPipe) {
      // Queue pair q of one port is joined to queue pair q of the other.
      std::vector<std::unique_ptr<braid::PacketIo>> ia, ib;
      const MacAddr ma{2, 0, 0, 0, 0, 1}, mb{2, 0, 0, 0, 0, 2};
      for (int q = 0; q < kEngines; ++q) {
        auto [x, y] = braid::PipeIo::make_pair(ma, mb, 1514);
        ia.push_back(std::move(x));
        ib.push_back(std::move(y));
      }
      a.ctx = braid::open_device(&ca, std::move(ia));
      b.ctx = braid::open_device(&cb, std::move(ib));
    } else {
      static int n = 0;
      const int id = 100 + n++;
      const std::string sock =
          "/tmp/braid-engines-" + std::to_string(getpid()) + "-" + std::to_string(id) + ".sock";
      port_a_ = "net_memif" + std::to_string(2 * id) + ",role=server,id=" + std::to_string(id) +
                ",socket=" + sock;
      port_b_ = "net_memif" + std::to_string(2 * id + 1) + ",role=client,id=" + std::to_string(id) +
                ",socket=" + sock;
      ca.port = port_a_.c_str();
      cb.port = port_b_.c_str();
      a.ctx = braid_open_device(&ca);
      ASSERT_NE(a.ctx, nullptr) << braid_last_error();
      b.ctx = braid_open_device(&cb);
    }
    // QP numbers from 1 on both (a device starts at random): the tests
    // choose which engine each QP is on, and whether a pair crosses engines.
    for (braid_context* ctx : {a.ctx, b.ctx}) {
      if (ctx == nullptr) continue;
      ctx->next_qpn = 1;
      ctx->qpn_key = 0;  // numbers in order
    }
    ASSERT_NE(a.ctx, nullptr) << braid_last_error();
    ASSERT_NE(b.ctx, nullptr) << braid_last_error();
  }

  static void setup(Device& d, size_t qps, std::mt19937& rng) {
    d.pd = braid_alloc_pd(d.ctx);
    ASSERT_NE(d.pd, nullptr);
    d.cq = braid_create_cq(d.ctx, 1024, nullptr, nullptr, 0);
    ASSERT_NE(d.cq, nullptr);
    d.buf.assign(qps * kSlice, 0);
    for (auto& x : d.buf) x = static_cast<uint8_t>(rng());
    for (size_t i = 0; i < qps; ++i) std::memset(d.slice(i) + kWdst, 0, kSlice - kWdst);
    d.mr = braid_reg_mr(
        d.pd, d.buf.data(), d.buf.size(),
        BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ);
    ASSERT_NE(d.mr, nullptr) << braid_last_error();
  }

  // n QPs in INIT; QP i completes into cqs[i % cqs.size()] (none: d.cq).
  static void add_qps(Device& d, size_t n, std::vector<braid_cq*> cqs = {}) {
    if (cqs.empty()) cqs.push_back(d.cq);
    for (size_t i = 0; i < n; ++i) {
      braid_qp_init_attr ia{};
      ia.send_cq = cqs[i % cqs.size()];
      ia.recv_cq = cqs[i % cqs.size()];
      ia.cap = {64, 16, 1, 1, 0};
      ia.qp_type = BRAID_QPT_RC;
      braid_qp* qp = braid_create_qp(d.pd, &ia);
      ASSERT_NE(qp, nullptr) << braid_last_error();
      d.qps.push_back(qp);
      braid_qp_attr at{};
      at.qp_state = BRAID_QPS_INIT;
      at.qp_access_flags = BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ;
      ASSERT_EQ(braid_modify_qp(qp, &at, BRAID_QP_STATE | BRAID_QP_ACCESS_FLAGS), 0);
    }
  }

  static void teardown(Device& d) {
    if (d.ctx == nullptr) return;
    for (braid_qp* qp : d.qps) EXPECT_EQ(braid_destroy_qp(qp), 0);
    EXPECT_EQ(braid_dereg_mr(d.mr), 0);
    EXPECT_EQ(braid_destroy_cq(d.cq), 0);
    EXPECT_EQ(braid_dealloc_pd(d.pd), 0);
    EXPECT_EQ(braid_close_device(d.ctx), 0) << braid_last_error();
  }

  // RTR and RTS for x towards y (y's RTR follows in its own call).
  static void to_rts(const End& x, const End& y, Device& other) {
    braid_qp_attr at{};
    at.qp_state = BRAID_QPS_RTR;
    at.path_mtu = BRAID_MTU_1024;
    at.dest_qp_num = braid_qp_num(y.qp());
    at.rq_psn = 7;
    braid_query_gid(y.dev->ctx, 1, 0, &at.ah_attr.dgid);
    braid_progress(other.ctx);  // its ARP replies
    ASSERT_EQ(braid_modify_qp(x.qp(), &at,
                              BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
                                  BRAID_QP_RQ_PSN),
              0)
        << braid_last_error();
    at = {};
    at.qp_state = BRAID_QPS_RTS;
    at.sq_psn = 7;
    at.retry_cnt = 7;
    at.timeout = 14;
    ASSERT_EQ(
        braid_modify_qp(x.qp(), &at,
                        BRAID_QP_STATE | BRAID_QP_SQ_PSN | BRAID_QP_RETRY_CNT | BRAID_QP_TIMEOUT),
        0);
  }

  // A receive for the peer's SEND (before anyone sends: no RNR).
  static void post_receive(const End& x) {
    braid_sge rs{reinterpret_cast<uintptr_t>(x.at(kRecv)), kSend, x.dev->mr->lkey};
    braid_recv_wr rw{};
    rw.wr_id = uint64_t{braid_qp_num(x.qp())} << 32 | 99;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ASSERT_EQ(braid_post_recv(x.qp(), &rw, nullptr), 0) << braid_last_error();
  }

  // x's work towards y: two WRITEs, a SEND with immediate data, a READ.
  // wr_id = qp number << 32 | sequence.
  static void post_work(const End& x, const End& y) {
    const uint64_t base = uint64_t{braid_qp_num(x.qp())} << 32;
    braid_sge s[4] = {
        {reinterpret_cast<uintptr_t>(x.at(kSrc)), 8192, x.dev->mr->lkey},
        {reinterpret_cast<uintptr_t>(x.at(kSrc + 8192)), 8192, x.dev->mr->lkey},
        {reinterpret_cast<uintptr_t>(x.at(kSrc)), kSend, x.dev->mr->lkey},
        {reinterpret_cast<uintptr_t>(x.at(kRdst)), 16384, x.dev->mr->lkey},
    };
    braid_send_wr w[4] = {};
    const braid_wr_opcode ops[4] = {BRAID_WR_RDMA_WRITE, BRAID_WR_RDMA_WRITE,
                                    BRAID_WR_SEND_WITH_IMM, BRAID_WR_RDMA_READ};
    const size_t remote[4] = {kWdst, kWdst + 8192, 0, kSrc};
    for (int i = 0; i < 4; ++i) {
      w[i].wr_id = base | static_cast<uint64_t>(i);
      w[i].sg_list = &s[i];
      w[i].num_sge = 1;
      w[i].opcode = ops[i];
      w[i].send_flags = BRAID_SEND_SIGNALED;
      w[i].imm_data = htonl(braid_qp_num(x.qp()));
      w[i].rdma.remote_addr = reinterpret_cast<uintptr_t>(y.at(remote[i]));
      w[i].rdma.rkey = y.dev->mr->rkey;
      if (i < 3) w[i].next = &w[i + 1];
    }
    ASSERT_EQ(braid_post_send(x.qp(), w, nullptr), 0) << braid_last_error();
  }

  // What x's completions and y's memory must show once both are done.
  static void check(const End& x, const End& y, const std::vector<braid_wc>& x_wcs) {
    const uint32_t qpn = braid_qp_num(x.qp());
    std::vector<uint64_t> sends;
    int recvs = 0;
    for (const braid_wc& wc : x_wcs) {
      if (wc.qp_num != qpn) continue;
      EXPECT_EQ(wc.status, BRAID_WC_SUCCESS) << "QP " << qpn;
      EXPECT_EQ(wc.wr_id >> 32, qpn);
      if (wc.opcode == BRAID_WC_RECV) {
        ++recvs;
        EXPECT_EQ(wc.byte_len, kSend);
        EXPECT_EQ(ntohl(wc.imm_data), braid_qp_num(y.qp()));
      } else {
        sends.push_back(wc.wr_id & 0xffffffff);
      }
    }
    EXPECT_EQ(recvs, 1) << "QP " << qpn;
    // A QP's send completions come in the order it posted them.
    EXPECT_EQ(sends, (std::vector<uint64_t>{0, 1, 2, 3})) << "QP " << qpn;
    EXPECT_EQ(std::memcmp(y.at(kWdst), x.at(kSrc), 16384), 0) << "WRITE from QP " << qpn;
    EXPECT_EQ(std::memcmp(y.at(kRecv), x.at(kSrc), kSend), 0) << "SEND from QP " << qpn;
    EXPECT_EQ(std::memcmp(x.at(kRdst), y.at(kSrc), 16384), 0) << "READ by QP " << qpn;
  }

  // Every link's receives, then its work both ways; polls a's and b's CQs
  // until they hold na and nb completions, and checks each end's.
  static void work_both_ways(const std::vector<std::pair<End, End>>& links, Device& a, Device& b,
                             size_t na, size_t nb) {
    for (const auto& [x, y] : links) {
      post_receive(x);
      post_receive(y);
    }
    for (const auto& [x, y] : links) {
      post_work(x, y);
      post_work(y, x);
    }
    std::vector<braid_wc> wa, wb;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((wa.size() < na || wb.size() < nb) && std::chrono::steady_clock::now() < end) {
      braid_wc wc[16];
      for (auto [d, out] : {std::pair{&a, &wa}, std::pair{&b, &wb}}) {
        const int k = braid_poll_cq(d->cq, 16, wc);
        ASSERT_GE(k, 0);
        out->insert(out->end(), wc, wc + k);
      }
    }
    ASSERT_EQ(wa.size(), na);
    ASSERT_EQ(wb.size(), nb);
    for (const auto& [x, y] : links) {
      check(x, y, x.dev == &a ? wa : wb);
      check(y, x, y.dev == &a ? wa : wb);
    }
  }

  static uint64_t steered(braid_context* c) {
    braid_port_stats st{};
    EXPECT_EQ(braid_query_port_stats(c, &st), 0);
    EXPECT_EQ(st.steer_dropped, 0u);
    return st.steered;
  }

  // Two application threads per device, each with QPs on both engines and
  // a CQ of its own (progress_thread: braid_device_config's).
  void threads(int progress_thread);

  std::string port_a_, port_b_;
  int pdc_per_peer_ = 0;  // both devices' braid_device_config.pdc_per_peer
};

// QP numbers go 1, 2, 3... on each device, so engine = number % 2.
//   a[0] <-> b[0]  engine 1 to engine 1
//   a[1] <-> b[1]  engine 0 to engine 0
//   a[2] <-> b[3]  engine 1 to engine 0: every packet handed over
//   a[3] <-> b[2]  engine 0 to engine 1
//   a[4] <-> a[5]  engine 1 to engine 0 of the same device
TEST_P(DeviceEngines, QpsOnEveryEngineShareOneCqByteExact) {
  Device a, b;
  std::mt19937 rng(1);
  ASSERT_NO_FATAL_FAILURE(open(a, b, 0));
  ASSERT_NO_FATAL_FAILURE(setup(a, 6, rng));
  ASSERT_NO_FATAL_FAILURE(setup(b, 4, rng));
  ASSERT_NO_FATAL_FAILURE(add_qps(a, 6));
  ASSERT_NO_FATAL_FAILURE(add_qps(b, 4));
  std::vector<std::pair<End, End>> links = {
      {{&a, 0}, {&b, 0}}, {{&a, 1}, {&b, 1}}, {{&a, 2}, {&b, 3}},
      {{&a, 3}, {&b, 2}}, {{&a, 4}, {&a, 5}},
  };
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(a.qps[i]->engine, braid_qp_num(a.qps[i]) % kEngines);
  for (auto& [x, y] : links) {
    ASSERT_NO_FATAL_FAILURE(to_rts(x, y, y.dev == &a ? b : a));
    ASSERT_NO_FATAL_FAILURE(to_rts(y, x, x.dev == &a ? b : a));
  }
  // 5 completions per QP: a's 6, b's 4. Driven by polling only.
  ASSERT_NO_FATAL_FAILURE(work_both_ways(links, a, b, 30, 20));
  // Both devices handed frames between their engines.
  EXPECT_GT(steered(a.ctx), 0u);
  EXPECT_GT(steered(b.ctx), 0u);
  teardown(a);
  teardown(b);
}

// A PDC per peer with two engines: a PDC lives on one engine at each end,
// so the QPs it carries share their engine (number % 2) and their peers'.
// Two pairs of each kind (engine 1 to 1, 0 to 0, 1 to 0, 0 to 1): each
// kind's pairs share a PDC, the kinds do not, and every QP's work is
// byte-exact.
//   a[0] <-> b[0], a[2] <-> b[2]  1 to 1
//   a[1] <-> b[1], a[3] <-> b[3]  0 to 0
//   a[4] <-> b[5], a[6] <-> b[7]  1 to 0
//   a[5] <-> b[4], a[7] <-> b[6]  0 to 1
TEST_P(DeviceEngines, APdcPerPeerCarriesTheQpsOfOneEngineToOneEngineOfThePeer) {
  Device a, b;
  std::mt19937 rng(3);
  pdc_per_peer_ = 1;
  ASSERT_NO_FATAL_FAILURE(open(a, b, 0));
  ASSERT_NO_FATAL_FAILURE(setup(a, 8, rng));
  ASSERT_NO_FATAL_FAILURE(setup(b, 8, rng));
  ASSERT_NO_FATAL_FAILURE(add_qps(a, 8));
  ASSERT_NO_FATAL_FAILURE(add_qps(b, 8));
  const size_t peer_of[8] = {0, 1, 2, 3, 5, 4, 7, 6};
  std::vector<std::pair<End, End>> links;
  for (size_t i = 0; i < 8; ++i) links.push_back({{&a, i}, {&b, peer_of[i]}});
  for (auto& [x, y] : links) {
    ASSERT_NO_FATAL_FAILURE(to_rts(x, y, b));
    ASSERT_NO_FATAL_FAILURE(to_rts(y, x, a));
  }
  for (Device* d : {&a, &b}) {
    std::set<braid::Connection*> pdcs;
    for (size_t i = 0; i < 8; ++i) pdcs.insert(d->qps[i]->conn);
    EXPECT_EQ(pdcs.size(), 4u);
  }
  for (size_t i : {0, 1, 4, 5}) {
    EXPECT_EQ(a.qps[i]->conn, a.qps[i + 2]->conn) << i;
    EXPECT_EQ(b.qps[peer_of[i]]->conn, b.qps[peer_of[i + 2]]->conn) << i;
    EXPECT_EQ(a.qps[i]->conn->live_queue_pairs(), 2u);
  }
  ASSERT_NO_FATAL_FAILURE(work_both_ways(links, a, b, 40, 40));
  EXPECT_GT(steered(a.ctx), 0u);
  teardown(a);
  teardown(b);
}

// The same work from two application threads at once on each device, each
// with its own CQ and QPs on both engines: the locks of the engines
// (ThreadSanitizer runs this).
void DeviceEngines::threads(int progress_thread) {
  Device a, b;
  std::mt19937 rng(2);
  ASSERT_NO_FATAL_FAILURE(open(a, b, progress_thread));
  ASSERT_NO_FATAL_FAILURE(setup(a, 6, rng));  // slices for 4 QPs, and 2 for the events below
  ASSERT_NO_FATAL_FAILURE(setup(b, 6, rng));
  // QPs 2t and 2t + 1 (engines 1 and 0) belong to thread t and complete
  // into its own CQ.
  braid_cq* own[2][2];
  for (Device* d : {&a, &b}) {
    const int side = d == &a ? 0 : 1;
    for (int t = 0; t < 2; ++t) {
      own[side][t] = braid_create_cq(d->ctx, 64, nullptr, nullptr, 0);
      ASSERT_NE(own[side][t], nullptr);
    }
    ASSERT_NO_FATAL_FAILURE(
        add_qps(*d, 4, {own[side][0], own[side][0], own[side][1], own[side][1]}));
  }
  // The QPs, then the threads' CQs, then the rest.
  auto finish = [&] {
    for (Device* d : {&a, &b}) {
      for (braid_qp* qp : d->qps) EXPECT_EQ(braid_destroy_qp(qp), 0);
      d->qps.clear();
      for (int t = 0; t < 2; ++t) EXPECT_EQ(braid_destroy_cq(own[d == &a ? 0 : 1][t]), 0);
    }
    teardown(a);
    teardown(b);
  };
  // Thread t's QPs have numbers of both parities on each device.
  std::set<uint16_t> engines_of_thread0 = {a.qps[0]->engine, a.qps[1]->engine};
  EXPECT_EQ(engines_of_thread0.size(), 2u);
  // a[i] <-> b[(i + 1) % 4]: across engines for every pair, and thread t
  // of a talks to both threads of b.
  std::vector<std::pair<End, End>> links;
  for (size_t i = 0; i < 4; ++i) links.push_back({{&a, i}, {&b, (i + 1) % 4}});
  for (auto& [x, y] : links) {
    ASSERT_NO_FATAL_FAILURE(to_rts(x, y, b));
    ASSERT_NO_FATAL_FAILURE(to_rts(y, x, a));
  }
  for (auto& [x, y] : links) {
    post_receive(x);
    post_receive(y);
  }
  std::vector<braid_wc> results[2][2];
  std::atomic<int> done{0};  // threads that have all their completions
  auto worker = [&](Device* d, int side, int t) {
    for (size_t i = 2 * static_cast<size_t>(t); i < 2 * static_cast<size_t>(t) + 2; ++i) {
      const auto& [x, y] = links[side == 0 ? i : (i + 3) % 4];
      const End& me = side == 0 ? x : y;
      const End& peer = side == 0 ? y : x;
      post_work(me, peer);
    }
    // Every thread polls until all have their completions: without a
    // progress thread, a thread's polls also drive what its peers wait for
    // (their ACKs and READ responses leave from its engines).
    auto& out = results[side][t];
    bool counted = false;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while ((out.size() < 10 || done.load() < 4) && std::chrono::steady_clock::now() < end) {
      braid_wc wc[8];
      const int k = braid_poll_cq(own[side][t], 8, wc);
      ASSERT_GE(k, 0);
      out.insert(out.end(), wc, wc + k);
      if (out.size() >= 10 && !counted) {
        counted = true;
        ++done;
      }
    }
    (void)d;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back(worker, &a, 0, t);
    threads.emplace_back(worker, &b, 1, t);
  }
  for (auto& th : threads) th.join();
  for (int side = 0; side < 2; ++side) {
    for (int t = 0; t < 2; ++t) ASSERT_EQ(results[side][t].size(), 10u) << side << " " << t;
  }
  for (size_t i = 0; i < 4; ++i) {
    const auto& [x, y] = links[i];
    check(x, y, results[0][i / 2]);
    check(y, x, results[1][((i + 1) % 4) / 2]);
  }
  EXPECT_GT(steered(a.ctx), 0u);
  EXPECT_GT(steered(b.ctx), 0u);
  if (progress_thread == 0) {
    // Two threads create a completion channel each at once: each starts
    // the progress threads if none runs; they start once.
    braid_comp_channel* chs[2] = {};
    std::thread t0([&] { chs[0] = braid_create_comp_channel(a.ctx); });
    std::thread t1([&] { chs[1] = braid_create_comp_channel(a.ctx); });
    t0.join();
    t1.join();
    for (braid_comp_channel* ch : chs) {
      ASSERT_NE(ch, nullptr);
      EXPECT_EQ(braid_destroy_comp_channel(ch), 0);
    }
    EXPECT_TRUE(a.ctx->threaded.load());
    finish();
    return;
  }
  // Completion events: a CQ of a with a channel, armed, and a QP on it
  // connected to a new QP of b; on each engine in turn (new QPs' numbers
  // alternate), the second time armed again after the first event.
  braid_comp_channel* ch = braid_create_comp_channel(a.ctx);
  ASSERT_NE(ch, nullptr);
  braid_cq* evcq = braid_create_cq(a.ctx, 4, nullptr, ch, 0);
  ASSERT_NE(evcq, nullptr);
  std::set<uint16_t> event_engines;
  for (int round = 0; round < 2; ++round) {
    ASSERT_NO_FATAL_FAILURE(add_qps(a, 1, {evcq}));
    ASSERT_NO_FATAL_FAILURE(add_qps(b, 1, {own[1][0]}));
    const End x{&a, a.qps.size() - 1}, y{&b, b.qps.size() - 1};
    event_engines.insert(x.qp()->engine);
    ASSERT_NO_FATAL_FAILURE(to_rts(x, y, b));
    ASSERT_NO_FATAL_FAILURE(to_rts(y, x, a));
    ASSERT_EQ(braid_req_notify_cq(evcq, 0), 0);
    braid_sge s{reinterpret_cast<uintptr_t>(x.at(kSrc)), 64, a.mr->lkey};
    braid_send_wr w{};
    w.wr_id = 7;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = BRAID_WR_RDMA_WRITE;
    w.send_flags = BRAID_SEND_SIGNALED;
    w.rdma.remote_addr = reinterpret_cast<uintptr_t>(y.at(kWdst));
    w.rdma.rkey = b.mr->rkey;
    ASSERT_EQ(braid_post_send(x.qp(), &w, nullptr), 0);
    // Only the progress threads drive the devices now.
    pollfd p{braid_comp_channel_fd(ch), POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 20000), 1) << "no completion event (round " << round << ")";
    braid_cq* got = nullptr;
    void* ctx = nullptr;
    ASSERT_EQ(braid_get_cq_event(ch, &got, &ctx), 0);
    EXPECT_EQ(got, evcq);
    braid_ack_cq_events(evcq, 1);
    braid_wc wc{};
    ASSERT_EQ(braid_poll_cq(evcq, 1, &wc), 1);
    EXPECT_EQ(wc.status, BRAID_WC_SUCCESS);
    EXPECT_EQ(wc.qp_num, braid_qp_num(x.qp()));
  }
  EXPECT_EQ(event_engines.size(), 2u);
  for (braid_qp* qp : a.qps) EXPECT_EQ(braid_destroy_qp(qp), 0);
  a.qps.clear();
  EXPECT_EQ(braid_destroy_cq(evcq), 0);
  EXPECT_EQ(braid_destroy_comp_channel(ch), 0);
  finish();
}

// With no progress thread: the application threads alone drive both
// engines (each poll drives every engine it can lock), then two threads
// create completion channels at once.
TEST_P(DeviceEngines, ApplicationThreadsWithoutProgressThreads) {
  threads(0);
}

// With a progress thread per engine; then completion events from each
// engine.
TEST_P(DeviceEngines, ApplicationThreadsAndProgressThreads) {
  threads(1);
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceEngines,
                         ::testing::Values(Backend::kPipe, Backend::kMemif), [](const auto& info) {
                           return info.param == Backend::kPipe ? std::string("Pipe")
                                                               : std::string("Memif");
                         });

// An ARP reply arrives on another engine's queue (a NIC's RSS puts non-IP
// frames on one queue): the engine whose QP asked still learns it. Device a
// has two engines over pipes; the peer is the test, at the pipes' far ends.
// a's QP 1 (engine 1) goes to RTR without waiting for ARP and posts a
// WRITE; the peer answers the ARP request on queue 0 only; the WRITE must
// then leave on queue 1, to the peer's MAC.
TEST(DeviceEnginesArp, AReplyOnAnotherEnginesQueueReachesTheEngineThatAsked) {
  const MacAddr ma{2, 0, 0, 0, 0, 1}, mb{2, 0, 0, 0, 0, 2};
  const uint32_t ip_a = 0xc6120001, ip_b = 0xc6120002;
  std::vector<std::unique_ptr<braid::PacketIo>> ios;
  std::vector<std::unique_ptr<braid::PipeIo>> peer;
  for (int q = 0; q < kEngines; ++q) {
    auto [x, y] = braid::PipeIo::make_pair(ma, mb, 1514);
    ios.push_back(std::move(x));
    peer.push_back(std::move(y));
  }
  braid_device_config c{};
  c.ipv4 = "198.18.0.1";
  c.engines = kEngines;
  c.stats = -1;
  c.rtr_arp_wait_us = -1;
  braid_context* ctx = braid::open_device(&c, std::move(ios));
  ASSERT_NE(ctx, nullptr) << braid_last_error();
  ctx->next_qpn = 3;  // QP 3: engine 1 (QP 1 is held for the CM, BRAID_QPT_CM)
  ctx->qpn_key = 0;
  braid_pd* pd = braid_alloc_pd(ctx);
  braid_cq* cq = braid_create_cq(ctx, 16, nullptr, nullptr, 0);
  std::vector<uint8_t> buf(4096, 0x5a);
  braid_mr* mr = braid_reg_mr(pd, buf.data(), buf.size(), BRAID_ACCESS_LOCAL_WRITE);
  braid_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.cap = {4, 4, 1, 1, 0};
  ia.qp_type = BRAID_QPT_RC;
  braid_qp* qp = braid_create_qp(pd, &ia);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(qp->engine, 1);
  braid_qp_attr at{};
  at.qp_state = BRAID_QPS_INIT;
  ASSERT_EQ(braid_modify_qp(qp, &at, BRAID_QP_STATE), 0);
  at = {};
  at.qp_state = BRAID_QPS_RTR;
  at.path_mtu = BRAID_MTU_1024;
  at.dest_qp_num = 9;
  braid_gid_from_ipv4(ip_b, &at.ah_attr.dgid);
  ASSERT_EQ(braid_modify_qp(qp, &at,
                            BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
                                BRAID_QP_RQ_PSN),
            0)
      << braid_last_error();
  at = {};
  at.qp_state = BRAID_QPS_RTS;
  ASSERT_EQ(braid_modify_qp(qp, &at, BRAID_QP_STATE | BRAID_QP_SQ_PSN), 0);
  braid_sge s{reinterpret_cast<uintptr_t>(buf.data()), 64, mr->lkey};
  braid_send_wr w{};
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = BRAID_WR_RDMA_WRITE;
  w.rdma.remote_addr = 0x1000;
  w.rdma.rkey = 1;
  ASSERT_EQ(braid_post_send(qp, &w, nullptr), 0);
  // What a sent on queue q: counts of ARP requests, and data frames to mb.
  int arp_requests[kEngines] = {}, data_to_b[kEngines] = {};
  auto drain = [&] {
    braid_progress(ctx);
    for (int q = 0; q < kEngines; ++q) {
      braid::RxFrame f[8];
      while (const uint16_t n = peer[q]->rx_burst(f, 8)) {
        for (uint16_t i = 0; i < n; ++i) {
          const uint16_t type = static_cast<uint16_t>(f[i].data[12] << 8 | f[i].data[13]);
          if (type == 0x0806 && f[i].data[21] == 1) ++arp_requests[q];
          if (type == 0x0800 && std::memcmp(f[i].data, mb.data(), 6) == 0) ++data_to_b[q];
        }
        peer[q]->rx_release(f, n);
      }
    }
  };
  for (int i = 0; i < 100 && arp_requests[1] == 0; ++i) drain();
  ASSERT_GT(arp_requests[1], 0) << "engine 1 did not ask";
  EXPECT_EQ(data_to_b[1], 0);
  uint8_t reply[braid::net::kArpFrameSize];
  const size_t n = braid::net::build_arp_reply(reply, sizeof(reply), mb, ip_b, ma, ip_a);
  ASSERT_GT(n, 0u);
  peer[0]->inject(reply, n);  // to a's queue 0: engine 0's
  for (int i = 0; i < 100 && data_to_b[1] == 0; ++i) drain();
  EXPECT_GT(data_to_b[1], 0) << "the WRITE did not leave on engine 1's queue";
  EXPECT_EQ(data_to_b[0], 0);
  EXPECT_EQ(braid_destroy_qp(qp), 0);
  EXPECT_EQ(braid_dereg_mr(mr), 0);
  EXPECT_EQ(braid_destroy_cq(cq), 0);
  EXPECT_EQ(braid_dealloc_pd(pd), 0);
  EXPECT_EQ(braid_close_device(ctx), 0);
}

TEST(DeviceEnginesConfig, RefusesACountOutOfRangeOrBackendsThatDoNotMatch) {
  braid_device_config c{};
  c.ipv4 = "198.18.0.1";
  c.engines = 17;
  const MacAddr ma{2, 0, 0, 0, 0, 1}, mb{2, 0, 0, 0, 0, 2};
  auto [x, y] = braid::PipeIo::make_pair(ma, mb, 1514);
  EXPECT_EQ(braid::open_device(&c, std::move(x)), nullptr);
  EXPECT_NE(std::string(braid_last_error()).find("engines must be 1..16"), std::string::npos)
      << braid_last_error();
  c.engines = -1;
  auto [x2, y2] = braid::PipeIo::make_pair(ma, mb, 1514);
  EXPECT_EQ(braid::open_device(&c, std::move(x2)), nullptr);
  c.engines = 2;
  auto [x3, y3] = braid::PipeIo::make_pair(ma, mb, 1514);
  EXPECT_EQ(braid::open_device(&c, std::move(x3)), nullptr);
  EXPECT_NE(std::string(braid_last_error()).find("1 backends for 2 engines"), std::string::npos)
      << braid_last_error();
}

}  // namespace
