// A verbs program of our own, built against the system's
// <infiniband/verbs.h> and linked with the system's libibverbs, run over
// Braid's libibverbs.so.1 (scripts/ibverbs-loopback.sh puts it first). It
// checks what perftest does not: the bytes that land, error completions and
// memory outside a region left untouched, and the extended API (ibv_wr_*,
// ibv_create_qp_ex, ibv_create_cq_ex / ibv_start_poll).
//   verbs_check -p PORT            server
//   verbs_check -p PORT HOST       client
// The client drives; the server checks its memory when asked and answers.
// Both print "verbs_check: PASS" and exit 0, or say what failed and exit 1.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kWindow = 1 << 20;  // the server's remotely accessible region
constexpr size_t kGuard = 4096;      // bytes each side of it, never registered
constexpr uint8_t kGuardByte = 0xA5;
constexpr int kSlots = 16;  // receive buffers each side
constexpr size_t kSlotSize = 65536;
constexpr uint32_t kSendDepth = 64;
constexpr uint32_t kMaxInline = 64;
constexpr int kQps = 3;  // 0: data, 1: bad rkey, 2: out of bounds
constexpr uint32_t kGood = 0, kBad = 1;

enum Cmd : uint32_t { kCheckWindow = 1, kCheckPayload = 2, kDone = 3 };

int g_checks = 0;
bool g_server = true;

[[noreturn]] void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "verbs_check (%s): FAIL: ", g_server ? "server" : "client");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
  std::exit(1);
}

void expect(bool ok, const char* fmt, ...) {
  ++g_checks;
  if (ok) return;
  va_list ap;
  va_start(ap, fmt);
  char msg[512];
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  die("%s", msg);
}

// The byte a test writes at position i of a pattern: no short period.
uint8_t pattern(uint32_t seed, uint64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + i;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}
void fill(uint8_t* p, size_t n, uint32_t seed, uint64_t start = 0) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern(seed, start + i);
}
// Index of the first byte that differs, or n.
size_t mismatch(const uint8_t* p, size_t n, uint32_t seed, uint64_t start = 0) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != pattern(seed, start + i)) return i;
  }
  return n;
}

// What the client asks the server to check: window[off, off+len) holds
// pattern(seed) from index `start` on.
struct WindowCheck {
  uint64_t off;
  uint32_t len;
  uint32_t seed;
  uint64_t start;
};

struct Info {  // exchanged over TCP, one each way
  uint32_t qpn[kQps];
  uint32_t psn;
  uint8_t gid[16];
  uint64_t addr;
  uint32_t rkey;
  uint32_t mtu;
};

// ---- TCP: the side channel that swaps Info, and the final barrier ----

int tcp_connect(const char* host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host, std::to_string(port).c_str(), &hints, &res) != 0) {
    die("cannot resolve %s", host);
  }
  // The server listens once its device is up: keep trying for a minute.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      return fd;
    }
    close(fd);
    if (std::chrono::steady_clock::now() > until) die("cannot connect to %s:%d", host, port);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int tcp_accept(int port) {
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(ls, 1) != 0) {
    die("cannot listen on port %d: %s", port, std::strerror(errno));
  }
  const int fd = accept(ls, nullptr, nullptr);
  close(ls);
  if (fd < 0) die("accept: %s", std::strerror(errno));
  return fd;
}

void tcp_exact(int fd, void* buf, size_t n, bool out) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = out ? write(fd, p, n) : read(fd, p, n);
    if (r <= 0) die("the peer closed the side channel");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

// ---- Verbs plumbing ----

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_port_attr port{};
  ibv_gid gid{};
  std::vector<uint8_t> window;  // guard | window | guard
  uint8_t* win = nullptr;
  ibv_mr* win_mr = nullptr;
  std::vector<uint8_t> local;  // sources and destinations: kWindow * 2 + slots
  ibv_mr* local_mr = nullptr;
  uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  uint8_t* slots = nullptr;      // receive slots
  uint8_t* out = nullptr;        // outgoing message bodies
  ibv_cq_ex* send_cq = nullptr;  // extended: ibv_start_poll
  ibv_cq* recv_cq = nullptr;     // classic: ibv_poll_cq
  ibv_cq* err_cq = nullptr;      // QPs 1 and 2, both directions
  ibv_qp* qp[kQps] = {};
  ibv_qp_ex* qpx = nullptr;  // qp[0]'s extended view
  uint32_t psn = 0;
  uint32_t send_depth = 0;  // qp[0]'s max_send_wr as granted
};

void post_recv_slot(Side& s, int slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.slots + size_t(slot) * kSlotSize), kSlotSize,
              s.local_mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(s.qp[0], &wr, &bad) != 0) die("ibv_post_recv failed");
}

void open_side(Side& s) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n < 1) die("no RDMA device (is Braid's libibverbs first?)");
  s.ctx = ibv_open_device(list[0]);
  if (s.ctx == nullptr)
    die("ibv_open_device(%s): %s", ibv_get_device_name(list[0]), std::strerror(errno));
  ibv_free_device_list(list);
  expect(ibv_query_port(s.ctx, 1, &s.port) == 0, "ibv_query_port");
  expect(s.port.state == IBV_PORT_ACTIVE, "port not ACTIVE (%d)", s.port.state);
  expect(s.port.link_layer == IBV_LINK_LAYER_ETHERNET, "link layer not Ethernet");
  expect(ibv_query_gid(s.ctx, 1, 0, &s.gid) == 0, "ibv_query_gid");
  ibv_device_attr_ex dev{};
  expect(ibv_query_device_ex(s.ctx, nullptr, &dev) == 0, "ibv_query_device_ex");
  expect(dev.orig_attr.max_qp_wr >= int(kSendDepth), "max_qp_wr %d", dev.orig_attr.max_qp_wr);

  s.pd = ibv_alloc_pd(s.ctx);
  if (s.pd == nullptr) die("ibv_alloc_pd");
  s.window.assign(kWindow + 2 * kGuard, kGuardByte);
  s.win = s.window.data() + kGuard;
  s.win_mr = ibv_reg_mr(s.pd, s.win, kWindow,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (s.win_mr == nullptr) die("ibv_reg_mr(window)");
  std::memset(s.win, 0, kWindow);
  s.local.assign(2 * kWindow + (kSlots + 1) * kSlotSize, 0);
  s.src = s.local.data();
  s.dst = s.src + kWindow;
  s.slots = s.dst + kWindow;
  s.out = s.slots + kSlots * kSlotSize;
  s.local_mr = ibv_reg_mr(s.pd, s.local.data(), s.local.size(), IBV_ACCESS_LOCAL_WRITE);
  if (s.local_mr == nullptr) die("ibv_reg_mr(local)");

  // What the extended calls must refuse: Braid has no completion
  // timestamps and no memory windows.
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 256;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  errno = 0;
  expect(ibv_create_cq_ex(s.ctx, &ca) == nullptr && errno == EOPNOTSUPP,
         "ibv_create_cq_ex with completion timestamps: expected EOPNOTSUPP");
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
  s.send_cq = ibv_create_cq_ex(s.ctx, &ca);
  if (s.send_cq == nullptr) die("ibv_create_cq_ex: %s", std::strerror(errno));
  s.recv_cq = ibv_create_cq(s.ctx, 256, nullptr, nullptr, 0);
  s.err_cq = ibv_create_cq(s.ctx, 256, nullptr, nullptr, 0);
  if (s.recv_cq == nullptr || s.err_cq == nullptr) die("ibv_create_cq");

  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = ibv_cq_ex_to_cq(s.send_cq);
  qa.recv_cq = s.recv_cq;
  qa.cap = {kSendDepth, kSlots, 4, 1, kMaxInline};
  qa.pd = s.pd;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW;
  errno = 0;
  expect(ibv_create_qp_ex(s.ctx, &qa) == nullptr && errno == EOPNOTSUPP,
         "ibv_create_qp_ex with memory-window binds: expected EOPNOTSUPP");
  qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                      IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ;
  s.qp[0] = ibv_create_qp_ex(s.ctx, &qa);
  if (s.qp[0] == nullptr) die("ibv_create_qp_ex: %s", std::strerror(errno));
  expect(qa.cap.max_send_wr >= kSendDepth && qa.cap.max_inline_data >= kMaxInline,
         "ibv_create_qp_ex granted less than asked");
  s.send_depth = qa.cap.max_send_wr;
  s.qpx = ibv_qp_to_qp_ex(s.qp[0]);
  expect(s.qpx != nullptr, "ibv_qp_to_qp_ex on an extended QP gave NULL");
  for (int i = 1; i < kQps; ++i) {
    ibv_qp_init_attr a{};
    a.qp_type = IBV_QPT_RC;
    a.send_cq = s.err_cq;
    a.recv_cq = s.err_cq;
    a.cap = {8, 8, 1, 1, 0};
    s.qp[i] = ibv_create_qp(s.pd, &a);
    if (s.qp[i] == nullptr) die("ibv_create_qp: %s", std::strerror(errno));
    expect(s.qp[i]->qp_num < (1u << 24), "QP number beyond 24 bits");
  }
  expect(ibv_qp_to_qp_ex(s.qp[1]) == nullptr, "ibv_qp_to_qp_ex on a classic QP is not NULL");
  s.psn = static_cast<uint32_t>(getpid() * 7919) & 0xffffff;
}

void connect_qp(Side& s, int i, const Info& peer) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(s.qp[i], &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    die("modify_qp INIT");
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min<uint32_t>(peer.mtu, s.port.active_mtu));
  a.dest_qp_num = peer.qpn[i];
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(s.qp[i], &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    die("modify_qp RTR: %s", std::strerror(errno));
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = s.psn;
  a.max_rd_atomic = 16;
  if (ibv_modify_qp(s.qp[i], &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    die("modify_qp RTS");
  }
}

using Clock = std::chrono::steady_clock;
constexpr auto kPatience = std::chrono::seconds(30);  // a hang guard, not a measurement

struct Wc {
  uint64_t wr_id;
  ibv_wc_status status;
  ibv_wc_opcode opcode;
  uint32_t byte_len;
  uint32_t imm;  // host order
  uint32_t qp_num;
};

// One completion from the extended send CQ.
Wc next_send(Side& s) {
  const auto until = Clock::now() + kPatience;
  ibv_poll_cq_attr attr{};
  for (;;) {
    const int rc = ibv_start_poll(s.send_cq, &attr);
    if (rc == 0) {
      Wc w{s.send_cq->wr_id,
           s.send_cq->status,
           ibv_wc_read_opcode(s.send_cq),
           ibv_wc_read_byte_len(s.send_cq),
           0,
           ibv_wc_read_qp_num(s.send_cq)};
      ibv_end_poll(s.send_cq);
      return w;
    }
    if (rc != ENOENT) die("ibv_start_poll: %d", rc);
    if (Clock::now() > until) die("no send completion");
  }
}

// One completion from a classic CQ.
Wc next_classic(ibv_cq* cq) {
  const auto until = Clock::now() + kPatience;
  ibv_wc wc{};
  for (;;) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) die("ibv_poll_cq: %d", n);
    if (n == 1) {
      return Wc{wc.wr_id,
                wc.status,
                wc.opcode,
                wc.byte_len,
                (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0,
                wc.qp_num};
    }
    if (Clock::now() > until) die("no completion");
  }
}

void expect_send_ok(Side& s, ibv_wc_opcode op, const char* what) {
  const Wc w = next_send(s);
  expect(w.status == IBV_WC_SUCCESS, "%s: completion status %s", what, ibv_wc_status_str(w.status));
  expect(w.opcode == op, "%s: completion opcode %d, expected %d", what, w.opcode, op);
  expect(w.qp_num == s.qp[0]->qp_num, "%s: completion for QP %u", what, w.qp_num);
}

// ---- Client ----

// A signaled work request for the classic ibv_post_send.
ibv_send_wr signaled_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sges, int num_sge) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sges;
  wr.num_sge = num_sge;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  return wr;
}

// A reply from the server: kGood or kBad in the immediate.
uint32_t await_reply(Side& s) {
  const Wc w = next_classic(s.recv_cq);
  if (w.status != IBV_WC_SUCCESS) die("reply: %s", ibv_wc_status_str(w.status));
  expect(w.opcode == IBV_WC_RECV, "reply opcode %d", w.opcode);
  post_recv_slot(s, static_cast<int>(w.wr_id));
  return w.imm;
}

// Asks the server to check window[off, off+len) against pattern(seed) from
// `start`: appends the SEND to the open ibv_wr batch.
void wr_check(Side& s, uint64_t off, uint32_t len, uint32_t seed, uint64_t start) {
  auto* c = reinterpret_cast<WindowCheck*>(s.out);
  *c = WindowCheck{off, len, seed, start};
  s.qpx->wr_id = 0xC0;
  s.qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(s.qpx, htonl(kCheckWindow << 24));
  ibv_wr_set_sge(s.qpx, s.local_mr->lkey, reinterpret_cast<uintptr_t>(c), sizeof *c);
}

void check_window(Side& s, uint64_t off, uint32_t len, uint32_t seed, uint64_t start,
                  const char* what) {
  ibv_wr_start(s.qpx);
  wr_check(s, off, len, seed, start);
  expect(ibv_wr_complete(s.qpx) == 0, "%s: ibv_wr_complete", what);
  expect_send_ok(s, IBV_WC_SEND, what);
  expect(await_reply(s) == kGood, "%s: the server found other bytes in its window", what);
}

void run_client(Side& s, const Info& peer) {
  ibv_qp_ex* x = s.qpx;
  const uint32_t lkey = s.local_mr->lkey;
  auto at = [&](uint64_t off) { return peer.addr + off; };
  // 1. WRITEs of many sizes and offsets, each from three SGEs, then a SEND
  // asking the server to check: one batch, one signaled completion.
  struct Case {
    uint64_t off;
    uint32_t len;
  };
  const Case cases[] = {{0, 1},       {13, 7},       {4096, 4096},
                        {100, 65536}, {777, 300001}, {3, kWindow - 3}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    ++seed;
    fill(s.src, c.len, seed);
    const uint32_t a = c.len / 3, b = c.len / 3;
    const ibv_sge sges[3] = {{reinterpret_cast<uintptr_t>(s.src), a, lkey},
                             {reinterpret_cast<uintptr_t>(s.src + a), b, lkey},
                             {reinterpret_cast<uintptr_t>(s.src + a + b), c.len - a - b, lkey}};
    ibv_wr_start(x);
    x->wr_id = seed;
    x->wr_flags = 0;
    ibv_wr_rdma_write(x, peer.rkey, at(c.off));
    ibv_wr_set_sge_list(x, 3, sges);
    wr_check(s, c.off, c.len, seed, 0);
    expect(ibv_wr_complete(x) == 0, "ibv_wr_complete (write %u at %lu)", c.len, c.off);
    expect_send_ok(s, IBV_WC_SEND, "write + check");
    expect(await_reply(s) == kGood, "WRITE of %u bytes at offset %lu: the bytes differ", c.len,
           static_cast<unsigned long>(c.off));
  }
  const uint32_t whole = seed;  // window[3..] holds pattern(whole)

  // 2. READ it back into two SGEs.
  std::memset(s.dst, 0, kWindow);
  {
    const uint32_t len = kWindow - 3, a = 12345;
    const ibv_sge sges[2] = {{reinterpret_cast<uintptr_t>(s.dst), a, lkey},
                             {reinterpret_cast<uintptr_t>(s.dst + a), len - a, lkey}};
    ibv_wr_start(x);
    x->wr_id = 0xAEAD;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_read(x, peer.rkey, at(3));
    ibv_wr_set_sge_list(x, 2, sges);
    expect(ibv_wr_complete(x) == 0, "ibv_wr_complete (read)");
    expect_send_ok(s, IBV_WC_RDMA_READ, "read");
    const size_t bad = mismatch(s.dst, len, whole);
    expect(bad == len, "READ: byte %zu differs", bad);
  }

  // 3. Inline WRITE from three unregistered buffers (reused at once).
  {
    uint8_t parts[3][20];
    fill(&parts[0][0], sizeof parts, 77);
    const ibv_data_buf bufs[3] = {{parts[0], 20}, {parts[1], 17}, {parts[2], 13}};
    ibv_wr_start(x);
    x->wr_id = 0x1;
    x->wr_flags = 0;
    ibv_wr_rdma_write(x, peer.rkey, at(200));
    ibv_wr_set_inline_data_list(x, 3, bufs);
    std::memset(parts, 0, sizeof parts);  // copied already
    expect(ibv_wr_complete(x) == 0, "ibv_wr_complete (inline)");
  }
  // parts held pattern(77) from 0 on, 20 bytes each: the window has
  // [200, 237) = pattern from 0 (20 + 17 bytes), [237, 250) = from 40.
  {
    check_window(s, 200, 37, 77, 0, "inline write, first two buffers");
    check_window(s, 237, 13, 77, 40, "inline write, third buffer");
    check_window(s, 3, 197, whole, 0, "bytes before the inline write");
    check_window(s, 250, kWindow - 250, whole, 247, "bytes after the inline write");
  }

  // 4. Batches that must post nothing: aborted, a bad lkey, an inline
  // block beyond max_inline_data, a setter before any builder, more
  // requests than the send queue holds.
  std::memset(s.src, 0xEE, 4096);
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, peer.rkey, at(3));
  ibv_wr_set_sge(x, lkey, reinterpret_cast<uintptr_t>(s.src), 4096);
  ibv_wr_abort(x);

  ibv_wr_start(x);
  ibv_wr_rdma_write(x, peer.rkey, at(3));
  ibv_wr_set_sge(x, lkey, reinterpret_cast<uintptr_t>(s.src), 4096);
  ibv_wr_rdma_write(x, peer.rkey, at(3));
  ibv_wr_set_sge(x, lkey ^ 0x77, reinterpret_cast<uintptr_t>(s.src), 4096);
  expect(ibv_wr_complete(x) != 0, "a batch with a bad lkey was posted");

  std::vector<uint8_t> big(kMaxInline + 1, 0xEE);
  ibv_wr_start(x);
  ibv_wr_rdma_write(x, peer.rkey, at(3));
  ibv_wr_set_inline_data(x, big.data(), big.size());
  expect(ibv_wr_complete(x) == EINVAL, "inline data beyond max_inline_data: expected EINVAL");

  ibv_wr_start(x);
  ibv_wr_set_sge(x, lkey, reinterpret_cast<uintptr_t>(s.src), 4096);
  expect(ibv_wr_complete(x) == EINVAL, "a setter before any builder: expected EINVAL");

  ibv_wr_start(x);
  for (uint32_t i = 0; i <= s.send_depth; ++i) {
    ibv_wr_rdma_write(x, peer.rkey, at(3));
    ibv_wr_set_sge(x, lkey, reinterpret_cast<uintptr_t>(s.src), 4096);
  }
  expect(ibv_wr_complete(x) != 0, "more requests than the send queue holds were posted");
  check_window(s, 3, 197, whole, 0, "after batches that post nothing");

  // 5. A SEND through the classic ibv_post_send, two SGEs.
  {
    const uint32_t len = 3000, s1 = 1000;
    fill(s.src, len, 99);
    ibv_sge sges[2] = {{reinterpret_cast<uintptr_t>(s.src), s1, lkey},
                       {reinterpret_cast<uintptr_t>(s.src + s1), len - s1, lkey}};
    ibv_send_wr wr = signaled_wr(0x5E, IBV_WR_SEND_WITH_IMM, sges, 2);
    wr.imm_data = htonl((kCheckPayload << 24) | 99);
    ibv_send_wr* bad = nullptr;
    expect(ibv_post_send(s.qp[0], &wr, &bad) == 0, "ibv_post_send (send)");
    expect_send_ok(s, IBV_WC_SEND, "classic send");
    expect(await_reply(s) == kGood, "SEND of %u bytes arrived different", len);
  }

  // 6. Error completions. QP 1: READ with a wrong rkey.
  {
    ibv_sge sge{reinterpret_cast<uintptr_t>(s.dst), 64, lkey};
    std::memset(s.dst, 0x11, 64);
    ibv_send_wr wr = signaled_wr(0xBAD, IBV_WR_RDMA_READ, &sge, 1);
    wr.wr.rdma.remote_addr = at(0);
    wr.wr.rdma.rkey = peer.rkey ^ 0x5A5A00;
    ibv_send_wr* bad = nullptr;
    expect(ibv_post_send(s.qp[1], &wr, &bad) == 0, "ibv_post_send (bad rkey)");
    const Wc w = next_classic(s.err_cq);
    expect(w.wr_id == 0xBAD && w.status == IBV_WC_REM_ACCESS_ERR,
           "READ with a wrong rkey: status %s (wr_id %lx), expected REM_ACCESS_ERR",
           ibv_wc_status_str(w.status), static_cast<unsigned long>(w.wr_id));
    expect(s.dst[0] == 0x11 && s.dst[63] == 0x11, "a refused READ wrote local memory");
    // The QP is in error now: what follows is flushed (or refused).
    wr.wr_id = 0xF1;
    wr.wr.rdma.rkey = peer.rkey;
    if (ibv_post_send(s.qp[1], &wr, &bad) == 0) {
      const Wc f = next_classic(s.err_cq);
      expect(f.wr_id == 0xF1 && f.status == IBV_WC_WR_FLUSH_ERR,
             "a request after the error: status %s, expected WR_FLUSH_ERR",
             ibv_wc_status_str(f.status));
    }
  }
  // QP 2: WRITE with the right rkey, running 64 bytes past the window's end.
  {
    std::memset(s.src, 0xEE, 128);
    ibv_sge sge{reinterpret_cast<uintptr_t>(s.src), 128, lkey};
    ibv_send_wr wr = signaled_wr(0xB0B, IBV_WR_RDMA_WRITE, &sge, 1);
    wr.wr.rdma.remote_addr = at(kWindow - 64);
    wr.wr.rdma.rkey = peer.rkey;
    ibv_send_wr* bad = nullptr;
    expect(ibv_post_send(s.qp[2], &wr, &bad) == 0, "ibv_post_send (out of bounds)");
    const Wc w = next_classic(s.err_cq);
    expect(w.wr_id == 0xB0B && w.status == IBV_WC_REM_ACCESS_ERR,
           "WRITE past the region: status %s, expected REM_ACCESS_ERR",
           ibv_wc_status_str(w.status));
  }
  // Neither touched the window (nor, the server checks, its guards).
  check_window(s, 3, 197, whole, 0, "after refused accesses (head)");
  check_window(s, kWindow - 4096, 4096, whole, kWindow - 4096 - 3, "after refused accesses (tail)");

  // 7. Done: the server answers, then both close.
  ibv_send_wr wr = signaled_wr(0, IBV_WR_SEND_WITH_IMM, nullptr, 0);
  wr.imm_data = htonl(kDone << 24);
  ibv_send_wr* bad = nullptr;
  expect(ibv_post_send(s.qp[0], &wr, &bad) == 0, "ibv_post_send (done)");
  expect_send_ok(s, IBV_WC_SEND, "done");
  expect(await_reply(s) == kGood, "the server's final check failed");
}

// ---- Server ----

void reply(Side& s, uint32_t result) {
  ibv_wr_start(s.qpx);
  s.qpx->wr_id = 0xEE;
  s.qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(s.qpx, htonl(result));
  ibv_wr_set_sge_list(s.qpx, 0, nullptr);
  if (ibv_wr_complete(s.qpx) != 0) die("ibv_wr_complete (reply)");
  expect_send_ok(s, IBV_WC_SEND, "reply");
}

bool guards_intact(const Side& s) {
  for (size_t i = 0; i < kGuard; ++i) {
    if (s.window[i] != kGuardByte || s.window[kGuard + kWindow + i] != kGuardByte) return false;
  }
  return true;
}

void run_server(Side& s) {
  for (;;) {
    const Wc w = next_classic(s.recv_cq);
    if (w.status != IBV_WC_SUCCESS) die("receive: %s", ibv_wc_status_str(w.status));
    expect(w.opcode == IBV_WC_RECV, "receive opcode %d", w.opcode);
    const uint8_t* body = s.slots + w.wr_id * kSlotSize;
    const uint32_t cmd = w.imm >> 24, arg = w.imm & 0xffffff;
    uint32_t result = kGood;
    if (!guards_intact(s)) {
      std::fprintf(stderr, "verbs_check (server): bytes outside the region changed\n");
      result = kBad;
    }
    if (cmd == kCheckWindow) {
      WindowCheck c{};
      expect(w.byte_len == sizeof c, "check request of %u bytes", w.byte_len);
      std::memcpy(&c, body, sizeof c);
      if (c.off > kWindow || c.len > kWindow - c.off) die("check beyond the window");
      const size_t bad = mismatch(s.win + c.off, c.len, c.seed, c.start);
      if (bad != c.len) {
        std::fprintf(stderr, "verbs_check (server): window[%lu + %zu] = 0x%02x, expected 0x%02x\n",
                     static_cast<unsigned long>(c.off), bad, s.win[c.off + bad],
                     pattern(c.seed, c.start + bad));
        result = kBad;
      }
      ++g_checks;
    } else if (cmd == kCheckPayload) {
      const size_t bad = mismatch(body, w.byte_len, arg);
      if (w.byte_len != 3000 || bad != w.byte_len) {
        std::fprintf(stderr, "verbs_check (server): SEND of %u bytes, byte %zu differs\n",
                     w.byte_len, bad);
        result = kBad;
      }
      ++g_checks;
    } else if (cmd != kDone) {
      die("unknown request %u", cmd);
    }
    post_recv_slot(s, static_cast<int>(w.wr_id));
    reply(s, result);
    if (result != kGood) die("a check failed (see above)");
    if (cmd == kDone) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int port = 18515;
  const char* host = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-p") == 0 && i + 1 < argc) {
      port = std::atoi(argv[++i]);
    } else if (argv[i][0] != '-') {
      host = argv[i];
    } else {
      std::fprintf(stderr, "usage: %s [-p port] [server-host]\n", argv[0]);
      return 2;
    }
  }
  g_server = host == nullptr;
  Side s;
  open_side(s);
  const int fd = g_server ? tcp_accept(port) : tcp_connect(host, port);
  Info mine{};
  for (int i = 0; i < kQps; ++i) mine.qpn[i] = s.qp[i]->qp_num;
  mine.psn = s.psn;
  std::memcpy(mine.gid, s.gid.raw, 16);
  mine.addr = reinterpret_cast<uintptr_t>(s.win);
  mine.rkey = s.win_mr->rkey;
  mine.mtu = s.port.active_mtu;
  Info peer{};
  tcp_exact(fd, &mine, sizeof mine, true);
  tcp_exact(fd, &peer, sizeof peer, false);
  for (int i = 0; i < kQps; ++i) connect_qp(s, i, peer);
  for (int i = 0; i < kSlots; ++i) post_recv_slot(s, i);
  char sync = 'r';  // both QPs ready before the client sends
  tcp_exact(fd, &sync, 1, true);
  tcp_exact(fd, &sync, 1, false);

  if (g_server) {
    run_server(s);
  } else {
    run_client(s, peer);
  }
  sync = 'd';  // neither side tears down while the other still waits
  tcp_exact(fd, &sync, 1, true);
  tcp_exact(fd, &sync, 1, false);
  close(fd);

  for (ibv_qp* qp : s.qp) expect(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
  expect(ibv_destroy_cq(ibv_cq_ex_to_cq(s.send_cq)) == 0, "ibv_destroy_cq (extended)");
  expect(ibv_destroy_cq(s.recv_cq) == 0 && ibv_destroy_cq(s.err_cq) == 0, "ibv_destroy_cq");
  expect(ibv_dereg_mr(s.win_mr) == 0 && ibv_dereg_mr(s.local_mr) == 0, "ibv_dereg_mr");
  expect(ibv_dealloc_pd(s.pd) == 0, "ibv_dealloc_pd");
  expect(ibv_close_device(s.ctx) == 0, "ibv_close_device");
  std::printf("verbs_check (%s): PASS (%d checks)\n", g_server ? "server" : "client", g_checks);
  return 0;
}
