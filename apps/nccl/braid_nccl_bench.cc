// braid_nccl_bench: loads an NCCL net plugin exactly as NCCL does (dlopen of
// libnccl-net-<name>.so, the newest ncclNetPlugin_vN it knows, falling back
// to older) and drives it as NCCL's proxy would, on host memory. One process
// per rank; ranks swap their listen handles through a directory.
//
//   braid_nccl_bench --rank R --size N --store DIR [--plugin braid] [--api 0|8|10]
//                    --mode check | bw | allreduce | die | incast [--min-bytes 1] [--max-bytes 64M]
//
// check (2 ranks): set-up from several threads at once, every size with
//   tags, a posted size larger than what is sent, grouped receives, 32
//   requests in flight, closing comms with requests in flight; each checked.
// bw (2 ranks): latency (ping-pong) and bandwidth (32 in flight) per size.
// allreduce (N ranks): ring allreduce of int32 (reduce-scatter, allgather)
//   over a send comm to the next rank and a receive comm from the previous;
//   every element checked; algorithm bandwidth per size.
// die (2 ranks): rank 1 exits while rank 0 waits on a send and a receive:
//   rank 0 must get an error, not hang.
// reload (2 ranks): comms closed, the plugin dlclosed and dlopened again
//   (NCCL 2.22-2.25 do so with the last communicator), three times.
// scripts/nccl-ranks.sh starts the ranks (memif or virtio pairs, or a
// software switch for more ranks). Exit 0 when every check passed.
#include <dlfcn.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nccl/nccl_net.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int rank = 0;
  int size = 2;
  std::string store;
  std::string plugin;
  int api = 0;
  std::string mode = "check";
  uint64_t min_bytes = 1;
  uint64_t max_bytes = 64ull << 20;
  int threads = 4;
  int max_iters = 200;
  double timeout_s = 60;
  int comms = 1;           // incast: rank 1's comms to rank 0
  double seconds = 4.0;    // incast: how long the senders send
  double expect_jain = 0;  // incast: fail below this Jain's index
  int expect_speed = 0;    // rank 0's getProperties speed, Mb/s (0: not checked)
};
Options g_opt;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& what) {
  throw Failure(what);
}

void logger(ncclDebugLogLevel level, unsigned long /*flags*/, const char* file, int line,
            const char* fmt, ...) {
  if (level > NCCL_LOG_INFO) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "rank %d %s %s:%d %s\n", g_opt.rank,
               level == NCCL_LOG_WARN ? "WARN" : "INFO", file, line, msg);
}

// The plugin, whichever interface version it was found with.
struct Net {
  int version = 0;
  ncclNet_v10_t* v10 = nullptr;
  ncclNet_v8_t* v8 = nullptr;
  ncclNet_v7_t* v7 = nullptr;  // the same calls as v8 but for regMr's int size
  template <typename F>
  decltype(auto) legacy(F f) const {
    return v8 ? f(*v8) : f(*v7);
  }

  void check(ncclResult_t r, const char* call) const {
    if (r != ncclSuccess) fail(fmt::format("{} returned {}", call, static_cast<int>(r)));
  }
  void init() const {
    check(v10 ? v10->init(logger, nullptr) : legacy([&](auto& t) { return t.init(logger); }),
          "init");
    int n = 0;
    check(v10 ? v10->devices(&n) : legacy([&](auto& t) { return t.devices(&n); }), "devices");
    if (n < 1) fail("the plugin has no device");
  }
  // Device 0's speed as getProperties gives it, Mb/s.
  int speed_mbps() const {
    if (v10) {
      ncclNetProperties_v10_t p{};
      check(v10->getProperties(0, &p), "getProperties");
      return p.speed;
    }
    if (v8) {
      ncclNetProperties_v8_t p{};
      check(v8->getProperties(0, &p), "getProperties");
      return p.speed;
    }
    ncclNetProperties_v7_t p{};
    check(v7->getProperties(0, &p), "getProperties");
    return p.speed;
  }
  void* listen(void* handle) const {
    void* l = nullptr;
    check(
        v10 ? v10->listen(0, handle, &l) : legacy([&](auto& t) { return t.listen(0, handle, &l); }),
        "listen");
    return l;
  }
  void* connect(void* handle) const {
    void* s = nullptr;
    ncclNetDeviceHandle_v8_t* dev = nullptr;
    check(v10 ? v10->connect(0, nullptr, handle, &s, &dev)
              : legacy([&](auto& t) { return t.connect(0, handle, &s, &dev); }),
          "connect");
    return s;
  }
  void* accept(void* listen) const {
    void* r = nullptr;
    ncclNetDeviceHandle_v8_t* dev = nullptr;
    check(v10 ? v10->accept(listen, &r, &dev)
              : legacy([&](auto& t) { return t.accept(listen, &r, &dev); }),
          "accept");
    return r;
  }
  void* reg(void* comm, void* data, size_t size) const {
    void* mh = nullptr;
    check(v10 ? v10->regMr(comm, data, size, NCCL_PTR_HOST, &mh)
              : legacy([&](auto& t) { return t.regMr(comm, data, size, NCCL_PTR_HOST, &mh); }),
          "regMr");
    return mh;
  }
  void dereg(void* comm, void* mh) const {
    check(v10 ? v10->deregMr(comm, mh) : legacy([&](auto& t) { return t.deregMr(comm, mh); }),
          "deregMr");
  }
  // nullptr: not now (NCCL calls again).
  void* isend(void* comm, void* data, size_t size, int tag, void* mh) const {
    void* req = nullptr;
    check(v10 ? v10->isend(comm, data, size, tag, mh, nullptr, &req) : legacy([&](auto& t) {
            return t.isend(comm, data, static_cast<int>(size), tag, mh, &req);
          }),
          "isend");
    return req;
  }
  void* irecv(void* comm, int n, void** data, const size_t* sizes, int* tags, void** mh) const {
    // NCCL 2.24+ presets this hint (the receive's completion is optional)
    // before some irecv calls: a plugin must answer with its own request
    // (or nullptr), never hand the hint back or read it as one.
    void* const hint = reinterpret_cast<void*>(0x1);
    void* req = hint;
    if (v10) {
      std::vector<size_t> s(sizes, sizes + n);
      std::vector<void*> ph(static_cast<size_t>(n), nullptr);
      check(v10->irecv(comm, n, data, s.data(), tags, mh, ph.data(), &req), "irecv");
    } else {
      std::vector<int> s(sizes, sizes + n);
      check(legacy([&](auto& t) { return t.irecv(comm, n, data, s.data(), tags, mh, &req); }),
            "irecv");
    }
    if (req == hint) fail("irecv handed back NCCL's hint as its request");
    return req;
  }
  ncclResult_t test(void* req, int* done, int* sizes) const {
    return v10 ? v10->test(req, done, sizes)
               : legacy([&](auto& t) { return t.test(req, done, sizes); });
  }
  void close_send(void* c) const {
    check(v10 ? v10->closeSend(c) : legacy([&](auto& t) { return t.closeSend(c); }), "closeSend");
  }
  void close_recv(void* c) const {
    check(v10 ? v10->closeRecv(c) : legacy([&](auto& t) { return t.closeRecv(c); }), "closeRecv");
  }
  void close_listen(void* c) const {
    check(v10 ? v10->closeListen(c) : legacy([&](auto& t) { return t.closeListen(c); }),
          "closeListen");
  }
};
Net g_net;

// As NCCL: NCCL_NET_PLUGIN=<name> loads libnccl-net-<name>.so from the
// library path (a name with a '/' is a path); the newest interface first.
void* load_plugin(const Options& o) {
  std::string name = o.plugin;
  if (name.empty())
    name = std::getenv("NCCL_NET_PLUGIN") ? std::getenv("NCCL_NET_PLUGIN") : "braid";
  const std::string file =
      name.find('/') != std::string::npos ? name : fmt::format("libnccl-net-{}.so", name);
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) fail(fmt::format("dlopen {}: {}", file, dlerror()));
  if (o.api == 0 || o.api == 10)
    g_net.v10 = static_cast<ncclNet_v10_t*>(dlsym(lib, "ncclNetPlugin_v10"));
  if (g_net.v10 == nullptr && (o.api == 0 || o.api == 8))
    g_net.v8 = static_cast<ncclNet_v8_t*>(dlsym(lib, "ncclNetPlugin_v8"));
  if (g_net.v10 == nullptr && g_net.v8 == nullptr && (o.api == 0 || o.api == 7))
    g_net.v7 = static_cast<ncclNet_v7_t*>(dlsym(lib, "ncclNetPlugin_v7"));
  if (g_net.v10 == nullptr && g_net.v8 == nullptr && g_net.v7 == nullptr)
    fail(fmt::format("{} exports no ncclNetPlugin_v{}", file,
                     o.api == 0 ? "10, v8 or v7" : std::to_string(o.api)));
  g_net.version = g_net.v10 ? 10 : g_net.v8 ? 8 : 7;
  return lib;
}

// ---- Ranks meet in a directory -----------------------------------------

void put(const std::string& key, const void* data, size_t len) {
  const std::string tmp = fmt::format("{}/.{}.{}", g_opt.store, key, g_opt.rank);
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(len));
  }
  std::filesystem::rename(tmp, g_opt.store + "/" + key);
}
void get(const std::string& key, void* data, size_t len) {
  const std::string path = g_opt.store + "/" + key;
  const auto deadline = Clock::now() + std::chrono::duration<double>(g_opt.timeout_s);
  while (!std::filesystem::exists(path)) {
    if (Clock::now() > deadline) fail("no peer published " + key);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::ifstream f(path, std::ios::binary);
  f.read(static_cast<char*>(data), static_cast<std::streamsize>(len));
  if (f.gcount() != static_cast<std::streamsize>(len)) fail("short entry " + key);
}
// Barrier entries live under "barrier." so that no barrier is met by a
// link's handle of the same name (link("die") and barrier("die") once were).
void barrier(const std::string& name) {
  const char one = 1;
  put(fmt::format("barrier.{}.{}", name, g_opt.rank), &one, 1);
  char c;
  for (int r = 0; r < g_opt.size; ++r) get(fmt::format("barrier.{}.{}", name, r), &c, 1);
}

// ---- Comms -------------------------------------------------------------

struct Link {
  void* send = nullptr;  // to `to`
  void* recv = nullptr;  // from `from`
};

// Listens, publishes the handle, connects to `to`'s and accepts `from`, all
// in one thread: connect and accept must not block for this to finish.
Link link(const std::string& key, int to, int from) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* l = g_net.listen(handle);
  put(fmt::format("{}.{}", key, g_opt.rank), handle, sizeof handle);
  char peer[NCCL_NET_HANDLE_MAXSIZE];
  get(fmt::format("{}.{}", key, to), peer, sizeof peer);
  Link k;
  const auto deadline = Clock::now() + std::chrono::duration<double>(g_opt.timeout_s);
  while (k.send == nullptr || k.recv == nullptr) {
    if (k.send == nullptr) k.send = g_net.connect(peer);
    if (k.recv == nullptr) k.recv = g_net.accept(l);
    if (Clock::now() > deadline) fail("connection set-up did not finish");
  }
  g_net.close_listen(l);
  (void)from;
  return k;
}
void unlink(Link& k) {
  g_net.close_send(k.send);
  g_net.close_recv(k.recv);
  k = Link{};
}

// Tests until done; the sizes it reports.
std::vector<int> wait(void* req, int n = 1) {
  std::vector<int> sizes(static_cast<size_t>(n), -1);
  int done = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(g_opt.timeout_s);
  while (!done) {
    const ncclResult_t r = g_net.test(req, &done, sizes.data());
    if (r != ncclSuccess) fail(fmt::format("test returned {}", static_cast<int>(r)));
    if (!done && Clock::now() > deadline) fail("a request never completed");
  }
  return sizes;
}
void* must_isend(void* comm, void* data, size_t size, int tag, void* mh) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(g_opt.timeout_s);
  for (;;) {
    if (void* r = g_net.isend(comm, data, size, tag, mh)) return r;
    if (Clock::now() > deadline) fail("isend never took the send (no receive posted?)");
  }
}
void* must_irecv(void* comm, int n, void** data, const size_t* sizes, int* tags, void** mh) {
  void* r = g_net.irecv(comm, n, data, sizes, tags, mh);
  if (r == nullptr) fail("irecv refused a receive with fewer than 32 in flight");
  return r;
}

uint8_t pattern(uint64_t seed, size_t i) {
  return static_cast<uint8_t>((seed * 2654435761u + i * 131) >> 3);
}
void fill(std::vector<uint8_t>& b, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) b[i] = pattern(seed, i);
}
void expect_bytes(const std::vector<uint8_t>& b, size_t n, uint64_t seed, const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != pattern(seed, i)) fail(fmt::format("{}: byte {} of {} is wrong", what, i, n));
  }
}

// Both ranks send `size` bytes to each other with `tag`, into receive
// buffers `extra` bytes larger, and check what arrived and that nothing
// beyond it was touched.
void swap_once(const Link& k, size_t size, int tag, size_t extra) {
  std::vector<uint8_t> out(std::max<size_t>(size, 1)), in(size + extra + 1, 0xee);
  const int peer = 1 - g_opt.rank;
  fill(out, size, size * 31 + static_cast<uint64_t>(tag) * 7 + static_cast<uint64_t>(g_opt.rank));
  void* smh = g_net.reg(k.send, out.data(), out.size());
  void* rmh = g_net.reg(k.recv, in.data(), in.size());
  void* rdata = in.data();
  const size_t posted = size + extra;
  int rtag = tag;
  void* rr = must_irecv(k.recv, 1, &rdata, &posted, &rtag, &rmh);
  void* sr = must_isend(k.send, out.data(), size, tag, smh);
  const std::vector<int> got = wait(rr);
  wait(sr);
  if (got[0] != static_cast<int>(size))
    fail(fmt::format("size {} tag {}: test says {}", size, tag, got[0]));
  expect_bytes(in, size, size * 31 + static_cast<uint64_t>(tag) * 7 + static_cast<uint64_t>(peer),
               fmt::format("size {}", size));
  for (size_t i = size; i < in.size(); ++i) {
    if (in[i] != 0xee)
      fail(fmt::format("size {}: byte {} beyond the message was written", size, i));
  }
  g_net.dereg(k.send, smh);
  g_net.dereg(k.recv, rmh);
}

std::vector<size_t> sizes_between(uint64_t lo, uint64_t hi) {
  std::vector<size_t> v;
  for (uint64_t s = std::max<uint64_t>(lo, 1); s <= hi; s *= 2) v.push_back(s);
  return v;
}

// ---- Modes ---------------------------------------------------------------

void check_mode() {
  if (g_opt.size != 2) fail("--mode check takes 2 ranks");
  const int peer = 1 - g_opt.rank;
  // 1. Set-up from several threads at once, each with its own comms.
  {
    std::vector<std::thread> ts;
    std::vector<std::string> errors(static_cast<size_t>(g_opt.threads));
    for (int t = 0; t < g_opt.threads; ++t) {
      ts.emplace_back([t, peer, &errors] {
        try {
          Link k = link(fmt::format("thread{}", t), peer, peer);
          swap_once(k, 4096 + static_cast<size_t>(t), t, 0);
          unlink(k);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(t)] = e.what();
        }
      });
    }
    for (auto& t : ts) t.join();
    for (const auto& e : errors) {
      if (!e.empty()) fail("threaded set-up: " + e);
    }
    std::printf("set-up from %d threads at once: ok\n", g_opt.threads);
  }
  Link k = link("main", peer, peer);
  // 2. Every size with a tag of its own; a posted buffer larger than sent.
  std::vector<size_t> sizes{0, 1, 3, 7, 100, 1000, 1416, 1417, 4095, 65537};
  for (size_t s : sizes_between(g_opt.min_bytes, g_opt.max_bytes)) sizes.push_back(s);
  for (size_t i = 0; i < sizes.size(); ++i)
    swap_once(k, sizes[i], static_cast<int>(i), i % 3 == 0 ? 0 : 64);
  std::printf("%zu sizes, 0 B to %zu B, tags and larger posted buffers: ok\n", sizes.size(),
              sizes.back());
  // 3. Grouped receive of 8 buffers; the sender sends them in another order.
  {
    constexpr int n = 8;
    std::vector<std::vector<uint8_t>> in(n), out(n);
    void* data[n];
    void* rmh[n];
    void* smh[n];
    size_t posted[n];
    int tags[n];
    for (int i = 0; i < n; ++i) {
      in[i].assign(1000 * (i + 1), 0xee);
      out[i].resize(997 * (i + 1));
      fill(out[i], out[i].size(),
           1000 + static_cast<uint64_t>(i) + 100 * static_cast<uint64_t>(g_opt.rank));
      data[i] = in[i].data();
      posted[i] = in[i].size();
      tags[i] = 100 + i;
      rmh[i] = g_net.reg(k.recv, in[i].data(), in[i].size());
      smh[i] = g_net.reg(k.send, out[i].data(), out[i].size());
    }
    void* rr = must_irecv(k.recv, n, data, posted, tags, rmh);
    const int order[n] = {5, 2, 7, 0, 3, 6, 1, 4};
    void* sr[n];
    for (int j = 0; j < n; ++j) {
      const int i = order[j];
      sr[j] = must_isend(k.send, out[i].data(), out[i].size(), tags[i], smh[i]);
    }
    const std::vector<int> got = wait(rr, n);
    for (void* r : sr) wait(r);
    for (int i = 0; i < n; ++i) {
      if (got[static_cast<size_t>(i)] != 997 * (i + 1))
        fail(fmt::format("grouped receive: buffer {} has size {}", i, got[static_cast<size_t>(i)]));
      expect_bytes(in[i], 997 * static_cast<size_t>(i + 1),
                   1000 + static_cast<uint64_t>(i) + 100 * static_cast<uint64_t>(peer),
                   fmt::format("grouped receive buffer {}", i));
      g_net.dereg(k.recv, rmh[i]);
      g_net.dereg(k.send, smh[i]);
    }
    std::printf("grouped receive of %d buffers, sent in another order: ok\n", n);
  }
  // 3b. A send a step ahead: its tag is for the receiver's next irecv, not
  // the one posted. No request (NCCL calls again), no error, until the
  // receiver's current receive is served and the next one posted.
  {
    std::vector<uint8_t> in1(300, 0), in2(300, 0), out1(100), out2(200);
    fill(out1, out1.size(), 501 + static_cast<uint64_t>(g_opt.rank));
    fill(out2, out2.size(), 601 + static_cast<uint64_t>(g_opt.rank));
    void* rmh1 = g_net.reg(k.recv, in1.data(), in1.size());
    void* rmh2 = g_net.reg(k.recv, in2.data(), in2.size());
    void* smh1 = g_net.reg(k.send, out1.data(), out1.size());
    void* smh2 = g_net.reg(k.send, out2.data(), out2.size());
    void* d1 = in1.data();
    size_t len1 = in1.size();
    int tag1 = 201;
    void* rr1 = must_irecv(k.recv, 1, &d1, &len1, &tag1, &rmh1);
    barrier("ahead.posted");
    // The peer's descriptor for tag 201 arrives meanwhile: tag 202 is not in it.
    const auto until = Clock::now() + std::chrono::milliseconds(100);
    while (Clock::now() < until) {
      if (g_net.isend(k.send, out2.data(), out2.size(), 202, smh2) != nullptr)
        fail("a send ahead of the receiver's irecv was taken");
    }
    void* sr1 = must_isend(k.send, out1.data(), out1.size(), 201, smh1);
    wait(rr1);
    wait(sr1);
    void* d2 = in2.data();
    size_t len2 = in2.size();
    int tag2 = 202;
    void* rr2 = must_irecv(k.recv, 1, &d2, &len2, &tag2, &rmh2);
    void* sr2 = must_isend(k.send, out2.data(), out2.size(), 202, smh2);
    wait(rr2);
    wait(sr2);
    expect_bytes(in1, out1.size(), 501 + static_cast<uint64_t>(peer), "step-ahead first");
    expect_bytes(in2, out2.size(), 601 + static_cast<uint64_t>(peer), "step-ahead second");
    for (auto [c, m] : {std::pair{k.recv, rmh1}, std::pair{k.recv, rmh2}, std::pair{k.send, smh1},
                        std::pair{k.send, smh2}}) {
      g_net.dereg(c, m);
    }
    std::printf("a send a step ahead of the receiver waits without an error: ok\n");
  }
  // 4. 32 requests in flight each way; a 33rd receive is refused for now.
  {
    constexpr int n = NCCL_NET_MAX_REQUESTS;
    constexpr size_t len = 65536;
    std::vector<uint8_t> in(n * len, 0), out(n * len);
    fill(out, out.size(), 77 + static_cast<uint64_t>(g_opt.rank));
    void* rmh = g_net.reg(k.recv, in.data(), in.size());
    void* smh = g_net.reg(k.send, out.data(), out.size());
    std::vector<void*> rr, sr;
    for (int i = 0; i < n; ++i) {
      void* d = in.data() + i * len;
      int tag = i;
      rr.push_back(must_irecv(k.recv, 1, &d, &len, &tag, &rmh));
    }
    {
      void* d = in.data();
      int tag = n;
      if (g_net.irecv(k.recv, 1, &d, &len, &tag, &rmh) != nullptr) fail("a 33rd receive was taken");
    }
    for (int i = 0; i < n; ++i) sr.push_back(must_isend(k.send, out.data() + i * len, len, i, smh));
    for (void* r : rr) wait(r);
    for (void* r : sr) wait(r);
    expect_bytes(in, in.size(), 77 + static_cast<uint64_t>(peer), "32 in flight");
    g_net.dereg(k.recv, rmh);
    g_net.dereg(k.send, smh);
    std::printf("%d requests in flight each way, a 33rd refused: ok\n", n);
  }
  // 5. Comms closed with requests in flight, then a new pair works.
  {
    std::vector<uint8_t> in(4 * 4096), out(4096, 1);
    void* rmh = g_net.reg(k.recv, in.data(), in.size());
    void* smh = g_net.reg(k.send, out.data(), out.size());
    for (int i = 0; i < 4; ++i) {
      void* d = in.data() + i * 4096;
      size_t len = 4096;
      int tag = i;
      must_irecv(k.recv, 1, &d, &len, &tag, &rmh);
    }
    must_isend(k.send, out.data(), out.size(), 0, smh);  // in flight (or done) at close
    barrier("inflight");
    g_net.dereg(k.recv, rmh);
    g_net.dereg(k.send, smh);
    unlink(k);
    barrier("closed");
    Link again = link("again", peer, peer);
    swap_once(again, 100000, 9, 0);
    unlink(again);
    std::printf("comms closed with requests in flight; a new pair works: ok\n");
  }
}

// NCCL 2.22-2.25 dlclose the plugin when the last communicator is freed
// and dlopen it again for the next: comms, then every one closed, the
// library closed and opened again, initialised again, and new comms work.
void reload_mode(const Options& o, void* lib) {
  if (g_opt.size != 2) fail("--mode reload takes 2 ranks");
  const int peer = 1 - g_opt.rank;
  for (int round = 0; round < 3; ++round) {
    Link k = link(fmt::format("reload{}", round), peer, peer);
    swap_once(k, 65536 + static_cast<size_t>(round), round, 0);
    unlink(k);
    barrier(fmt::format("reload{}.closed", round));
    if (dlclose(lib) != 0) fail(fmt::format("dlclose: {}", dlerror()));
    g_net = Net{};
    lib = load_plugin(o);
    g_net.init();
  }
  std::printf("comms, dlclose, dlopen and init again, three times, each pair working: ok\n");
}

// Incast: every rank but 0 streams 1 MiB messages to rank 0 for --seconds,
// rank 1 over --comms comms (several QPs from one host, as a collective
// library opens), the others over one. Rank 0 counts what each rank
// delivered between one second in and half a second before the end (its
// own clock) and prints Jain's index over the ranks: with its peers
// sharing fairly, rank 1's comms take one rank's share between them.
void incast_mode() {
  if (g_opt.size < 3) fail("--mode incast takes 3 ranks or more");
  const size_t msg = std::min<uint64_t>(g_opt.max_bytes, 1u << 20);
  constexpr int kInFlight = 8;  // requests per comm
  struct Stream {
    Link k;
    void* mh = nullptr;
    int rank = 0;
    std::vector<void*> reqs;
  };
  std::vector<Stream> streams;
  const auto comms_of = [](int r) { return r == 1 ? g_opt.comms : 1; };
  for (int r = 1; r < g_opt.size; ++r) {
    if (g_opt.rank != 0 && g_opt.rank != r) continue;
    for (int c = 0; c < comms_of(r); ++c) {
      Stream st;
      st.rank = r;
      st.k = link(fmt::format("inc{}.{}", r, c), g_opt.rank == 0 ? r : 0, 0);
      streams.push_back(std::move(st));
    }
  }
  std::vector<uint8_t> buf(msg * kInFlight);
  for (Stream& st : streams) {
    st.mh = g_net.reg(g_opt.rank == 0 ? st.k.recv : st.k.send, buf.data(), buf.size());
  }
  std::vector<uint64_t> bytes(static_cast<size_t>(g_opt.size), 0);
  barrier("incast");
  const auto t0 = Clock::now();
  const auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  const auto from = at(1.0), until = at(g_opt.seconds - 0.5), end = at(g_opt.seconds);
  for (auto now = Clock::now(); now < end; now = Clock::now()) {
    for (Stream& st : streams) {
      // Keep kInFlight requests posted; take the oldest when it is done.
      while (static_cast<int>(st.reqs.size()) < kInFlight) {
        void* data = buf.data() + msg * st.reqs.size();
        int tag = 0;
        size_t size = msg;
        void* r = g_opt.rank == 0 ? g_net.irecv(st.k.recv, 1, &data, &size, &tag, &st.mh)
                                  : g_net.isend(st.k.send, data, msg, 0, st.mh);
        if (r == nullptr) break;  // no descriptor yet (sender): later
        st.reqs.push_back(r);
      }
      if (st.reqs.empty()) continue;
      int done = 0, got = 0;
      if (g_net.test(st.reqs.front(), &done, &got) != ncclSuccess) fail("test failed in incast");
      if (!done) continue;
      st.reqs.erase(st.reqs.begin());
      if (g_opt.rank == 0 && now >= from && now < until) bytes[static_cast<size_t>(st.rank)] += got;
    }
  }
  if (g_opt.rank != 0) {
    for (Stream& st : streams) {
      for (void* r : st.reqs) wait(r);  // each has the receiver's descriptor
      st.reqs.clear();
    }
  }
  barrier("incast-end");
  if (g_opt.rank == 0) {
    double sum = 0, sq = 0;
    std::printf("incast into rank 0, rank 1 over %d comms, %.1f s; bytes in the window:",
                g_opt.comms, g_opt.seconds);
    for (int r = 1; r < g_opt.size; ++r) {
      const auto b = static_cast<double>(bytes[static_cast<size_t>(r)]);
      std::printf(" rank%d=%llu", r,
                  static_cast<unsigned long long>(bytes[static_cast<size_t>(r)]));
      sum += b;
      sq += b * b;
    }
    const double jain = sq > 0 ? sum * sum / ((g_opt.size - 1) * sq) : 0;
    std::printf("\nJain over the sending ranks: %.3f\n", jain);
    if (sum == 0) fail("nothing arrived in the window");
    if (jain < g_opt.expect_jain) {
      fail(fmt::format("Jain's index {:.3f} is below --expect-jain {:.3f}", jain,
                       g_opt.expect_jain));
    }
  }
  for (Stream& st : streams) {
    g_net.dereg(g_opt.rank == 0 ? st.k.recv : st.k.send, st.mh);
    unlink(st.k);
  }
}

void bw_mode() {
  if (g_opt.size != 2) fail("--mode bw takes 2 ranks");
  const int peer = 1 - g_opt.rank;
  Link k = link("bw", peer, peer);
  const size_t maxb = g_opt.max_bytes;
  std::vector<uint8_t> buf(std::max<size_t>(maxb, 1) * 2);
  void* smh = g_net.reg(k.send, buf.data(), maxb);
  void* rmh = g_net.reg(k.recv, buf.data() + maxb, maxb);
  void* rdata = buf.data() + maxb;
  if (g_opt.rank == 0) {
    std::printf("plugin API v%d\n%12s %8s %14s %10s %14s\n", g_net.version, "#bytes", "#iters",
                "lat typ[us]", "#iters", "BW [MiB/s]");
  }
  for (size_t size : sizes_between(g_opt.min_bytes, maxb)) {
    // Latency: ping-pong, half the round trip; the median. As NCCL does,
    // each rank has its next receive posted before it sends what the peer
    // answers, so a descriptor is never waited for.
    const int lat_iters = std::min(size <= 65536 ? 1000 : 100, g_opt.max_iters);
    std::vector<double> half;
    int tag = 0;
    size_t posted = size;
    barrier(fmt::format("lat{}", size));
    void* r = must_irecv(k.recv, 1, &rdata, &posted, &tag, &rmh);
    for (int i = 0; i < lat_iters; ++i) {
      const auto t0 = Clock::now();
      if (g_opt.rank == 0) {
        void* s = must_isend(k.send, buf.data(), size, 0, smh);
        wait(r);
        r = i + 1 < lat_iters ? must_irecv(k.recv, 1, &rdata, &posted, &tag, &rmh) : nullptr;
        wait(s);
      } else {
        wait(r);
        r = i + 1 < lat_iters ? must_irecv(k.recv, 1, &rdata, &posted, &tag, &rmh) : nullptr;
        wait(must_isend(k.send, buf.data(), size, 0, smh));
      }
      half.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
    }
    std::nth_element(half.begin(), half.begin() + lat_iters / 2, half.end());
    // Bandwidth: rank 0 sends, 32 in flight; rank 1 answers the last.
    const int iters = static_cast<int>(std::clamp<uint64_t>((512ull << 20) / size, 64, 20000));

    barrier(fmt::format("bw{}", size));
    const auto t0 = Clock::now();
    std::vector<void*> window;
    int posted_n = 0, done_n = 0;
    while (done_n < iters) {
      while (posted_n < iters && static_cast<int>(window.size()) < NCCL_NET_MAX_REQUESTS) {
        int tag = 0;
        size_t posted = size;
        void* r = g_opt.rank == 0 ? g_net.isend(k.send, buf.data(), size, 0, smh)
                                  : g_net.irecv(k.recv, 1, &rdata, &posted, &tag, &rmh);
        if (r == nullptr) break;
        window.push_back(r);
        ++posted_n;
      }
      int done = 0;
      if (!window.empty()) {
        if (g_net.test(window.front(), &done, nullptr) != ncclSuccess) fail("test failed in bw");
        if (done) {
          window.erase(window.begin());
          ++done_n;
        }
      }
    }
    tag = 1;
    size_t zero = 0;
    if (g_opt.rank == 0) {
      wait(must_irecv(k.recv, 1, &rdata, &zero, &tag, &rmh));
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("%12zu %8d %14.2f %10d %14.1f\n", size, lat_iters, half[lat_iters / 2], iters,
                  static_cast<double>(size) * iters / s / (1 << 20));
      std::fflush(stdout);
    } else {
      wait(must_isend(k.send, buf.data(), 0, 1, smh));
    }
  }
  g_net.dereg(k.send, smh);
  g_net.dereg(k.recv, rmh);
  barrier("bw-end");
  unlink(k);
}

void allreduce_mode() {
  const int n = g_opt.size, r = g_opt.rank;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Link k = link("ring", next, prev);
  const size_t max_count = std::max<size_t>(g_opt.max_bytes / 4, 1);
  std::vector<int32_t> data(max_count), tmp(max_count);
  void* dmh = g_net.reg(k.send, data.data(), data.size() * 4);
  void* tmh = g_net.reg(k.recv, tmp.data(), tmp.size() * 4);
  if (r == 0)
    std::printf("ring allreduce, %d ranks, plugin API v%d\n%12s %8s %12s %14s\n", n, g_net.version,
                "#bytes", "#iters", "time [us]", "algbw [MiB/s]");
  for (size_t bytes : sizes_between(std::max<uint64_t>(g_opt.min_bytes, 4), g_opt.max_bytes)) {
    const size_t count = bytes / 4;
    const int iters = static_cast<int>(
        std::clamp<uint64_t>((64ull << 20) / bytes, 1, static_cast<uint64_t>(g_opt.max_iters)));
    // Chunk c: elements [c * count / n, (c + 1) * count / n).
    auto lo = [&](int c) { return static_cast<size_t>(c) * count / static_cast<size_t>(n); };
    auto step = [&](int send_chunk, int recv_chunk, int tag, bool reduce) {
      const size_t rlen = lo(recv_chunk + 1) - lo(recv_chunk);
      const size_t slen = lo(send_chunk + 1) - lo(send_chunk);
      void* dst = reduce ? static_cast<void*>(tmp.data())
                         : static_cast<void*>(data.data() + lo(recv_chunk));
      void* dst_mh = reduce ? tmh : nullptr;
      // The allgather receives into `data` itself: register it on the
      // receive comm too (regIsGlobal: one registration serves both).
      if (!reduce) dst_mh = dmh;
      const size_t posted = rlen * 4;
      int t = tag;
      void* rr = must_irecv(k.recv, 1, &dst, &posted, &t, &dst_mh);
      void* sr = must_isend(k.send, data.data() + lo(send_chunk), slen * 4, tag, dmh);
      const std::vector<int> got = wait(rr);
      wait(sr);
      if (got[0] != static_cast<int>(rlen * 4)) fail("allreduce: a chunk of the wrong size");
      if (reduce) {
        for (size_t i = 0; i < rlen; ++i) data[lo(recv_chunk) + i] += tmp[i];
      }
    };
    double total = 0;
    for (int it = 0; it < iters; ++it) {
      for (size_t i = 0; i < count; ++i) data[i] = r * 7 + static_cast<int32_t>(i % 1000);
      barrier(fmt::format("ar{}.{}", bytes, it));
      const auto t0 = Clock::now();
      for (int s = 0; s < n - 1; ++s) step((r - s + n) % n, (r - s - 1 + n) % n, s, true);
      for (int s = 0; s < n - 1; ++s) step((r - s + 1 + n) % n, (r - s + n) % n, n + s, false);
      total += std::chrono::duration<double>(Clock::now() - t0).count();
      const int32_t base = 7 * n * (n - 1) / 2;
      for (size_t i = 0; i < count; ++i) {
        if (data[i] != base + n * static_cast<int32_t>(i % 1000))
          fail(fmt::format("allreduce {} B: element {} is {}, not {}", bytes, i, data[i],
                           base + n * static_cast<int32_t>(i % 1000)));
      }
    }
    if (r == 0) {
      std::printf("%12zu %8d %12.1f %14.1f\n", bytes, iters, total / iters * 1e6,
                  static_cast<double>(bytes) * iters / total / (1 << 20));
      std::fflush(stdout);
    }
  }
  g_net.dereg(k.send, dmh);
  g_net.dereg(k.recv, tmh);
  barrier("ring-end");
  unlink(k);
}

void die_mode() {
  if (g_opt.size != 2) fail("--mode die takes 2 ranks");
  const int peer = 1 - g_opt.rank;
  Link k = link("doomed", peer, peer);
  swap_once(k, 65536, 1, 0);
  std::vector<uint8_t> in(1 << 20), out(1 << 20, 3);
  void* rmh = g_net.reg(k.recv, in.data(), in.size());
  void* smh = g_net.reg(k.send, out.data(), out.size());
  barrier("die");
  if (g_opt.rank == 1) {
    std::printf("rank 1 exits without closing anything\n");
    std::fflush(stdout);
    std::_Exit(0);
  }
  void* d = in.data();
  size_t len = in.size();
  int tag = 2;
  void* rr = must_irecv(k.recv, 1, &d, &len, &tag, &rmh);
  const auto t0 = Clock::now();
  int done = 0;
  ncclResult_t res = ncclSuccess;
  while (!done && res == ncclSuccess) {
    res = g_net.test(rr, &done, nullptr);
    if (Clock::now() - t0 > std::chrono::duration<double>(g_opt.timeout_s))
      fail("the receive hung");
  }
  if (res == ncclSuccess) fail("a receive from a dead peer completed");
  // A send to it fails too (or is never taken: no receive will be posted).
  void* sr = nullptr;
  while (res != ncclSuccess && sr == nullptr) {
    void* req = nullptr;
    const ncclResult_t s = g_net.v10
                               ? g_net.v10->isend(k.send, out.data(), 4096, 2, smh, nullptr, &req)
                               : g_net.legacy([&](auto& t) {
                                   return t.isend(k.send, out.data(), 4096, 2, smh, &req);
                                 });
    if (s != ncclSuccess) break;
    if (req != nullptr) sr = req;
    if (Clock::now() - t0 > std::chrono::duration<double>(g_opt.timeout_s)) fail("the send hung");
  }
  std::printf("peer died: the receive failed with %d after %.0f ms, no hang: ok\n",
              static_cast<int>(res),
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  g_net.dereg(k.recv, rmh);
  g_net.dereg(k.send, smh);
  g_net.close_send(k.send);
  g_net.close_recv(k.recv);
}

uint64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  uint64_t v = std::stoull(s, &pos);
  const std::string unit = s.substr(pos);
  if (unit == "K" || unit == "k")
    v <<= 10;
  else if (unit == "M" || unit == "m")
    v <<= 20;
  else if (unit == "G" || unit == "g")
    v <<= 30;
  else if (!unit.empty())
    throw std::invalid_argument("unit " + unit);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"braid_nccl_bench: an NCCL net plugin driven as NCCL does"};
  Options& o = g_opt;
  std::string min_b = "1", max_b = "64M";
  app.add_option("--rank", o.rank)->required();
  app.add_option("--size", o.size)->required()->check(CLI::Range(2, 64));
  app.add_option("--store", o.store, "directory shared by the ranks")->required();
  app.add_option("--plugin", o.plugin,
                 "name (libnccl-net-NAME.so) or path; default $NCCL_NET_PLUGIN or braid");
  app.add_option("--api", o.api, "plugin interface version: 0 newest found, 7, 8 or 10")
      ->check(CLI::IsMember({0, 7, 8, 10}));
  app.add_option("--mode", o.mode)
      ->check(CLI::IsMember({"check", "bw", "allreduce", "die", "reload", "incast"}));
  app.add_option("--comms", o.comms, "incast: rank 1's comms to rank 0")->check(CLI::Range(1, 64));
  app.add_option("--seconds", o.seconds, "incast: how long the senders send")
      ->check(CLI::Range(2.0, 600.0));
  app.add_option("--expect-jain", o.expect_jain,
                 "incast: fail when Jain's index over the sending ranks is below this");
  app.add_option("--expect-speed-mbps", o.expect_speed,
                 "rank 0 fails unless its device's properties give this speed (the ranks' "
                 "ports may differ: a vhost server and a virtio-user client)");
  app.add_option("--min-bytes", min_b);
  app.add_option("--max-bytes", max_b);
  app.add_option("--threads", o.threads, "check: threads setting up comms at once")
      ->check(CLI::Range(1, 16));
  app.add_option("--timeout", o.timeout_s, "seconds any wait may take");
  app.add_option("--max-iters", o.max_iters, "allreduce and latency: iterations per size at most")
      ->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  try {
    o.min_bytes = parse_bytes(min_b);
    o.max_bytes = parse_bytes(max_b);
    if (o.max_bytes > (1ull << 30)) fail("--max-bytes: at most 1G");
    void* lib = load_plugin(o);
    g_net.init();
    const int speed = g_net.speed_mbps();
    if (o.rank == 0)
      std::printf("plugin %s, API v%d, device speed %d Mb/s\n",
                  g_net.v10 ? g_net.v10->name : g_net.legacy([](auto& t) { return t.name; }),
                  g_net.version, speed);
    if (o.rank == 0 && o.expect_speed != 0 && speed != o.expect_speed) {
      fail(fmt::format("the device's speed is {} Mb/s, not {}", speed, o.expect_speed));
    }
    if (o.mode == "check") check_mode();
    if (o.mode == "bw") bw_mode();
    if (o.mode == "allreduce") allreduce_mode();
    if (o.mode == "die") die_mode();
    if (o.mode == "incast") incast_mode();
    if (o.mode == "reload") reload_mode(o, lib);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", o.rank, e.what());
    return 1;
  }
  std::printf("rank %d: ok\n", o.rank);
  return 0;
}
