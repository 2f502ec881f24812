// The whole verbs path of a small WRITE on one thread, without a NIC: two
// devices joined by an in-memory cable whose buffers come from a fixed pool
// (no allocation, no copy beyond the frame itself), so what is measured is
// Braid's own cost per message: braid_post_send, the engine, the core at
// both ends, the completion and braid_poll_cq, as perftest's write_bw
// drives them; and, at 64 KiB, the same per packet of bulk WRITE data or
// READ responses. bench/verbs_instructions.sh counts its instructions per
// data packet by function group under callgrind.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "braid/verbs.h"
#include "engine/packet_io.h"
#include "verbs/device_io.h"

namespace braid {
namespace {

// Frame buffers shared by every end of the cables (a frame handed from
// one engine to another is released through the other's end).
struct Pool {
  explicit Pool(uint32_t n, uint32_t size) : bytes(size_t{n} * size), frame(size) {
    for (uint32_t i = 0; i < n; ++i) free.push_back(i);
  }
  uint8_t* at(uint32_t i) { return bytes.data() + size_t{i} * frame; }
  std::vector<uint8_t> bytes;
  uint32_t frame;
  std::vector<uint32_t> free;
};

struct Wire {
  std::vector<std::pair<uint32_t, uint32_t>> frames;  // buffer, length
  size_t head = 0;
};

class MemIo final : public PacketIo {
 public:
  MemIo(std::shared_ptr<Pool> pool, std::shared_ptr<Wire> in, std::shared_ptr<Wire> out,
        const wire::MacAddr& mac)
      : pool_(std::move(pool)), in_(std::move(in)), out_(std::move(out)), mac_(mac) {}
  uint16_t rx_burst(RxFrame* f, uint16_t n) override {
    uint16_t k = 0;
    while (k < n && in_->head < in_->frames.size()) {
      const auto [i, len] = in_->frames[in_->head++];
      f[k++] = RxFrame{pool_->at(i), len, reinterpret_cast<void*>(uintptr_t{i})};
    }
    if (in_->head == in_->frames.size()) {
      in_->frames.clear();
      in_->head = 0;
    }
    stats_.rx_frames += k;
    return k;
  }
  void rx_release(RxFrame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      pool_->free.push_back(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(f[i].handle)));
    }
  }
  uint16_t tx_alloc(TxFrame* f, uint16_t n) override {
    uint16_t k = 0;
    while (k < n && !pool_->free.empty()) {
      const uint32_t i = pool_->free.back();
      pool_->free.pop_back();
      f[k++] = TxFrame{pool_->at(i), pool_->frame, 0, reinterpret_cast<void*>(uintptr_t{i})};
    }
    return k;
  }
  uint16_t tx_burst(TxFrame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      out_->frames.emplace_back(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(f[i].handle)),
                                f[i].len);
    }
    stats_.tx_frames += n;
    return n;
  }
  void tx_free(TxFrame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      pool_->free.push_back(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(f[i].handle)));
    }
  }
  wire::MacAddr mac() const override { return mac_; }
  uint32_t max_frame() const override { return 1514; }
  bool link_up() const override { return true; }
  PacketIoStats stats() const override { return stats_; }
  std::string describe() const override { return "memory"; }
  bool host_local() const override { return true; }

 private:
  std::shared_ptr<Pool> pool_;
  std::shared_ptr<Wire> in_, out_;
  wire::MacAddr mac_;
  PacketIoStats stats_;
};

struct Side {
  braid_context* ctx = nullptr;
  braid_pd* pd = nullptr;
  braid_cq* cq = nullptr;
  braid_mr* mr = nullptr;
  braid_qp* qp = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 20);
};

// Two devices of `engines` engines each, one QP each, connected.
class Pair {
 public:
  explicit Pair(int engines) {
    auto pool = std::make_shared<Pool>(8192, 2048);
    std::vector<std::unique_ptr<PacketIo>> ia, ib;
    const wire::MacAddr ma{2, 0, 0, 0, 0, 1}, mb{2, 0, 0, 0, 0, 2};
    for (int q = 0; q < engines; ++q) {
      auto ab = std::make_shared<Wire>(), ba = std::make_shared<Wire>();
      ia.push_back(std::make_unique<MemIo>(pool, ba, ab, ma));
      ib.push_back(std::make_unique<MemIo>(pool, ab, ba, mb));
    }
    braid_device_config c{};
    c.stats = -1;
    c.engines = engines;
    c.ipv4 = "198.18.0.1";
    c.neighbors = "198.18.0.2=02:00:00:00:00:02";
    a.ctx = open_device(&c, std::move(ia));
    c.ipv4 = "198.18.0.2";
    c.neighbors = "198.18.0.1=02:00:00:00:00:01";
    b.ctx = open_device(&c, std::move(ib));
    for (Side* s : {&a, &b}) {
      s->pd = braid_alloc_pd(s->ctx);
      s->cq = braid_create_cq(s->ctx, 4096, nullptr, nullptr, 0);
      s->mr = braid_reg_mr(
          s->pd, s->buf.data(), s->buf.size(),
          BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ);
      braid_qp_init_attr ia_attr{};
      ia_attr.send_cq = ia_attr.recv_cq = s->cq;
      ia_attr.cap = {1024, 16, 1, 1, 0};
      ia_attr.qp_type = BRAID_QPT_RC;
      s->qp = braid_create_qp(s->pd, &ia_attr);
      braid_qp_attr at{};
      at.qp_state = BRAID_QPS_INIT;
      at.qp_access_flags = BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ;
      braid_modify_qp(s->qp, &at, BRAID_QP_STATE | BRAID_QP_ACCESS_FLAGS);
    }
    for (auto [me, peer] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
      braid_qp_attr at{};
      at.qp_state = BRAID_QPS_RTR;
      at.path_mtu = BRAID_MTU_1024;
      at.max_dest_rd_atomic = 16;
      at.dest_qp_num = braid_qp_num(peer->qp);
      braid_query_gid(peer->ctx, 1, 0, &at.ah_attr.dgid);
      braid_modify_qp(me->qp, &at,
                      BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
                          BRAID_QP_RQ_PSN | BRAID_QP_MAX_DEST_RD_ATOMIC);
    }
    for (Side* s : {&a, &b}) {
      braid_qp_attr at{};
      at.qp_state = BRAID_QPS_RTS;
      at.max_rd_atomic = 16;
      braid_modify_qp(s->qp, &at, BRAID_QP_STATE | BRAID_QP_SQ_PSN | BRAID_QP_MAX_QP_RD_ATOMIC);
    }
  }
  ~Pair() {
    for (Side* s : {&a, &b}) {
      braid_destroy_qp(s->qp);
      braid_dereg_mr(s->mr);
      braid_destroy_cq(s->cq);
      braid_dealloc_pd(s->pd);
      braid_close_device(s->ctx);
    }
  }
  Side a, b;
};

// perftest's write_bw loop, one turn: keep up to 128 WRITEs outstanding,
// every 64th signaled, posted one at a time; poll the CQ; drive the target
// (whose process would poll on its own core). Not inlined: callgrind
// counts this function alone (bench/verbs_instructions.sh), not the set-up.
struct Writer {
  static constexpr uint32_t kDepth = 128, kSignal = 64;
  braid_sge sge{};
  braid_send_wr wr{};
  uint64_t posted = 0, completed = 0;
  bool failed = false;
};

[[gnu::noinline]] void write_step(Pair& p, Writer& w) {
  while (w.posted - w.completed < Writer::kDepth) {
    w.wr.wr_id = w.posted;
    w.wr.send_flags = (w.posted % Writer::kSignal == Writer::kSignal - 1) ? BRAID_SEND_SIGNALED : 0;
    if (braid_post_send(p.a.qp, &w.wr, nullptr) != 0) break;
    ++w.posted;
  }
  braid_wc wc[16];
  const int n = braid_poll_cq(p.a.cq, 16, wc);
  for (int i = 0; i < n; ++i) {
    w.failed |= wc[i].status != BRAID_WC_SUCCESS;
    w.completed = wc[i].wr_id + 1;
  }
  braid_progress(p.b.ctx);
}

// WRITEs of `size` bytes (64 B: the per-message cost; 64 KiB: the
// per-packet cost of bulk data) or, with read = 1, READs of it (the data
// comes back as READ responses: the requester's receive path).
void BM_VerbsWrite(benchmark::State& state) {
  const auto size = static_cast<uint32_t>(state.range(0));
  Pair p(static_cast<int>(state.range(1)));
  Writer w;
  w.sge = braid_sge{reinterpret_cast<uintptr_t>(p.a.buf.data()), size, p.a.mr->lkey};
  w.wr.sg_list = &w.sge;
  w.wr.num_sge = 1;
  w.wr.opcode = state.range(2) != 0 ? BRAID_WR_RDMA_READ : BRAID_WR_RDMA_WRITE;
  w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(p.b.buf.data());
  w.wr.rdma.rkey = p.b.mr->rkey;
  for (auto _ : state) write_step(p, w);
  if (w.failed) state.SkipWithError("a WRITE failed");
  state.counters["msgs"] = benchmark::Counter(static_cast<double>(w.completed));
  state.counters["ns/msg"] = benchmark::Counter(
      static_cast<double>(w.completed), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_VerbsWrite)
    ->ArgNames({"size", "engines", "read"})
    ->Args({64, 1, 0})
    ->Args({64, 2, 0})
    ->Args({65536, 1, 0})
    ->Args({65536, 1, 1});

// write_lat's ping-pong on one thread: a WRITEs a counter into the last
// byte of b's buffer, b sees it and WRITEs it back, each WRITE signaled and
// its completion polled. The cable delivers at once and each side looks
// after every poll, so half an iteration is Braid's own share of the
// one-way latency (post, build, receive, placement, the ACK and the
// completion), without a NIC's or a second core's.
struct PingPong {
  braid_sge sa{}, sb{};
  braid_send_wr wa{}, wb{};
  uint8_t n = 0;
  uint64_t iters = 0, completions = 0;
  bool failed = false;
};

bool seen(const Side& s, uint8_t n) {
  return s.buf[63] == n;
}

[[gnu::noinline]] void pingpong_step(Pair& p, PingPong& g) {
  const uint8_t n = ++g.n;
  p.a.buf[63] = n;
  g.failed |= braid_post_send(p.a.qp, &g.wa, nullptr) != 0;
  braid_wc wc[4];
  // b: polls its CQ (its WRITE of the previous round completes with a's
  // ACK, which left with a's WRITE) until the byte lands.
  for (int spins = 0; !seen(p.b, n); ++spins) {
    const int k = braid_poll_cq(p.b.cq, 4, wc);
    for (int i = 0; i < k; ++i) g.failed |= wc[i].status != BRAID_WC_SUCCESS;
    g.completions += k > 0 ? static_cast<uint64_t>(k) : 0;
    if (spins > 1000) {
      g.failed = true;
      return;
    }
  }
  p.b.buf[63 + 4096] = n;
  g.failed |= braid_post_send(p.b.qp, &g.wb, nullptr) != 0;
  // a: its WRITE completes (b's ACK left with b's WRITE), then b's byte.
  for (int spins = 0; !seen(p.a, n) || g.completions < 2 * g.iters + 1; ++spins) {
    const int k = braid_poll_cq(p.a.cq, 4, wc);
    for (int i = 0; i < k; ++i) g.failed |= wc[i].status != BRAID_WC_SUCCESS;
    g.completions += k > 0 ? static_cast<uint64_t>(k) : 0;
    if (spins > 1000) {
      g.failed = true;
      return;
    }
  }
  ++g.iters;
}

void BM_VerbsPingPong(benchmark::State& state) {
  Pair p(1);
  PingPong g;
  // a writes from byte 0..63 of its buffer into b's bytes 0..63; b from its
  // bytes 4096.. into a's 0..63. Both poll byte 63 of their buffer.
  g.sa = braid_sge{reinterpret_cast<uintptr_t>(p.a.buf.data()), 64, p.a.mr->lkey};
  g.sb = braid_sge{reinterpret_cast<uintptr_t>(p.b.buf.data() + 4096), 64, p.b.mr->lkey};
  for (auto [wr, sge, peer] : {std::tuple{&g.wa, &g.sa, &p.b}, std::tuple{&g.wb, &g.sb, &p.a}}) {
    wr->sg_list = sge;
    wr->num_sge = 1;
    wr->opcode = BRAID_WR_RDMA_WRITE;
    wr->send_flags = BRAID_SEND_SIGNALED;
    wr->rdma.remote_addr = reinterpret_cast<uintptr_t>(peer->buf.data());
    wr->rdma.rkey = peer->mr->rkey;
  }
  for (auto _ : state) {
    pingpong_step(p, g);
    if (g.failed) break;
  }
  if (g.failed) state.SkipWithError("a WRITE failed or never landed");
  state.counters["one-way ns"] =
      benchmark::Counter(2.0 * static_cast<double>(g.iters),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_VerbsPingPong);

}  // namespace
}  // namespace braid

BENCHMARK_MAIN();
