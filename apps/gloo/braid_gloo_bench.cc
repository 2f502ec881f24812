// braid_gloo_bench: Gloo's collective algorithms, unmodified, over Gloo's
// ibverbs transport (so over Braid when Braid's libibverbs.so.1 is the one
// loaded: LD_LIBRARY_PATH and BRAID_IBV_*) or over Gloo's TCP transport,
// with the same arguments. One process per rank; ranks meet through a
// FileStore directory. Every result is checked; rank 0 prints latency and
// algorithm bandwidth per algorithm and size.
//
//   braid_gloo_bench --rank R --size N --store DIR --transport ibverbs|tcp
//                    [--device braid0] [--host 127.0.0.1]
//                    [--min-bytes 4] [--max-bytes 64M] [--algorithms a,b,...]
//
// scripts/gloo-ranks.sh starts the ranks (memif or virtio pairs, or a
// software switch for more ranks).
#include <fmt/format.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/ibverbs/device.h>
#include <gloo/transport/ibverbs/pair.h>
#include <gloo/transport/tcp/device.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int rank = 0;
  int size = 2;
  std::string store;
  std::string transport = "ibverbs";
  std::string device = "braid0";
  std::string host = "127.0.0.1";
  std::string prefix = "braid-gloo";
  std::string mode = "sync";
  uint64_t min_bytes = 4;
  uint64_t max_bytes = 64ull << 20;
  uint64_t budget_bytes = 256ull << 20;  // per algorithm and size: iterations x size
  int min_iters = 5;
  int max_iters = 200;
  std::vector<std::string> algorithms{
      "allreduce_ring",       "allreduce_ring_chunked", "allreduce_halving_doubling",
      "broadcast_one_to_all", "barrier_all_to_all",     "allgather_ring"};
};

// Small integers, exact in float whatever the order of the sums.
float value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 97 + 1));
}

struct Row {
  std::string algorithm;
  uint64_t bytes;
  int iters;
  double mean_us, p50_us, min_us;
};

// What a run of one algorithm at one size needs: a fresh algorithm object
// over fresh inputs, run() timed, the outputs checked.
struct Case {
  // Fills the inputs (untimed). Only allreduce's need it before every run
  // (the result replaces them). Outputs that peers write into (a broadcast's
  // or an allgather's) are set before the algorithm exists: a peer may
  // write into them as soon as it does, before this rank runs it, and every
  // run writes the same values.
  bool prepare_each_run = false;
  std::function<void()> prepare;
  std::function<void()> run;    // the collective (timed)
  std::function<bool()> check;  // the outputs (untimed)
};

Case make_case(const std::string& name, const std::shared_ptr<gloo::Context>& ctx, size_t count,
               std::vector<float>& buf, std::vector<float>& out) {
  const int rank = ctx->rank, size = ctx->size;
  buf.assign(std::max<size_t>(count, 1), 0);
  Case c;
  if (name.rfind("allreduce", 0) == 0) {
    std::vector<float*> ptrs{buf.data()};
    std::shared_ptr<gloo::Algorithm> a;
    if (name == "allreduce_ring") {
      a = std::make_shared<gloo::AllreduceRing<float>>(ctx, ptrs, static_cast<int>(count));
    } else if (name == "allreduce_ring_chunked") {
      a = std::make_shared<gloo::AllreduceRingChunked<float>>(ctx, ptrs, static_cast<int>(count));
    } else {
      a = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs,
                                                                  static_cast<int>(count));
    }
    c.prepare_each_run = true;
    c.prepare = [&buf, rank, count] {
      for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
    };
    c.run = [a] { a->run(); };
    c.check = [&buf, size, count] {
      const int ranks_sum = size * (size + 1) / 2;
      for (size_t i = 0; i < count; ++i) {
        if (buf[i] != static_cast<float>(ranks_sum * static_cast<int>(i % 97 + 1))) return false;
      }
      return true;
    };
  } else if (name == "broadcast_one_to_all") {
    for (size_t i = 0; i < count; ++i) buf[i] = rank == 0 ? value(0, i) : -1.0f;
    std::vector<float*> ptrs{buf.data()};
    auto a = std::make_shared<gloo::BroadcastOneToAll<float>>(ctx, ptrs, count, 0);
    c.prepare = [] {};
    c.run = [a] { a->run(); };
    c.check = [&buf, count] {
      for (size_t i = 0; i < count; ++i) {
        if (buf[i] != value(0, i)) return false;
      }
      return true;
    };
  } else if (name == "barrier_all_to_all") {
    auto a = std::make_shared<gloo::BarrierAllToAll>(ctx);
    c.prepare = [] {};
    c.run = [a] { a->run(); };
    c.check = [] { return true; };
  } else if (name == "allgather_ring") {
    out.assign(count * size, -1.0f);
    std::vector<const float*> in{buf.data()};
    auto a =
        std::make_shared<gloo::AllgatherRing<float>>(ctx, in, out.data(), static_cast<int>(count));
    c.prepare = [&buf, rank, count] {
      for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
    };
    c.run = [a] { a->run(); };
    c.check = [&out, size, count] {
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < count; ++i) {
          if (out[r * count + i] != value(r, i)) return false;
        }
      }
      return true;
    };
  } else {
    throw std::invalid_argument("unknown algorithm " + name);
  }
  return c;
}

// Gloo 0.0~git20220518 (Debian 12) enforces, when an algorithm is
// destroyed, that each of its sends has completed, although nothing waits
// for the last ones: a ring's or a barrier's final notification crosses the
// peer's, and its ACK may still be on the way (later Gloo only warns). A
// kernel driver's slow ibv_dereg_mr of the buffers destroyed first usually
// gives the ACK time; Braid's is a few instructions. So before an algorithm
// goes, a fence: a message to every peer on the same QPs, each waited for
// until it is acknowledged. Completions follow RC order on a QP, so the
// algorithm's earlier sends have completed by then too. The fence's own
// sends are waited for, so it can go at any time.
class Fence {
 public:
  explicit Fence(const std::shared_ptr<gloo::Context>& ctx) : ctx_(ctx) {
    const int slot = ctx->nextSlot();
    for (int i = 0; i < ctx->size; ++i) {
      if (i == ctx->rank) continue;
      auto& pair = ctx->getPair(i);
      send_.push_back(pair->createSendBuffer(slot, &out_, sizeof(out_)));
      recv_.push_back(pair->createRecvBuffer(slot, &in_[recv_.size()], sizeof(int)));
    }
  }
  void run() {
    for (auto& b : send_) b->send();
    for (auto& b : recv_) b->waitRecv();
    for (auto& b : send_) b->waitSend();
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  int out_ = 0;
  int in_[1024] = {};
  std::vector<std::unique_ptr<gloo::transport::Buffer>> send_, recv_;
};

// In sync mode Gloo still has the event its pair constructor armed for:
// the device thread takes it at the pair's first completion, and never
// re-arms. An event the thread has not taken when the pair goes is dropped
// with the CQ (as rdma-core drops it); if the thread had already seen the
// channel's fd readable, ibv_get_cq_event then finds no event and Gloo
// aborts (device.cc:205). Under load the thread may not run for the whole
// of a short run: 7 two-rank runs in 100 aborted there. So the program
// makes that first completion (a fence) and waits until each pair's device
// thread has handled its event; after that no CQ is armed. Gloo counts the
// events in a protected member, which a derived class can name.
struct PairEvents : gloo::transport::ibverbs::Pair {
  static int handled(gloo::transport::ibverbs::Pair& p) {
    return std::atomic_ref<int>(p.*(&PairEvents::completionEventsHandled_))
        .load(std::memory_order_acquire);
  }
};

bool wait_first_events(const std::shared_ptr<gloo::Context>& ctx) {
  const auto until = Clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < ctx->size; ++i) {
    if (i == ctx->rank) continue;
    auto* p = dynamic_cast<gloo::transport::ibverbs::Pair*>(ctx->getPair(i).get());
    if (p == nullptr) continue;
    while (PairEvents::handled(*p) == 0) {
      if (Clock::now() > until) return false;
      std::this_thread::yield();
    }
  }
  return true;
}

std::string size_str(uint64_t b) {
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"braid_gloo_bench: Gloo's collectives over ibverbs (Braid) or TCP"};
  app.add_option("--rank", o.rank, "this process's rank")->required();
  app.add_option("--size", o.size, "ranks")->required()->check(CLI::Range(1, 1024));
  app.add_option("--store", o.store, "FileStore directory, shared by the ranks")->required();
  app.add_option("--prefix", o.prefix, "key prefix in the store (one per run)")
      ->capture_default_str();
  app.add_option("--transport", o.transport, "ibverbs or tcp")
      ->check(CLI::IsMember({"ibverbs", "tcp"}))
      ->capture_default_str();
  app.add_option("--device", o.device, "ibverbs device")->capture_default_str();
  app.add_option("--host", o.host, "TCP: the address to listen on")->capture_default_str();
  app.add_option("--mode", o.mode,
                 "ibverbs: sync (the calling thread polls its pairs' completions, Gloo's "
                 "busy-poll mode) or async (Gloo's device thread handles them)")
      ->check(CLI::IsMember({"sync", "async"}))
      ->capture_default_str();
  app.add_option("--min-bytes", o.min_bytes, "smallest size (bytes, a multiple of 4; K, M)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--max-bytes", o.max_bytes, "largest size; sizes go up 4x")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--budget-bytes", o.budget_bytes,
                 "bytes per algorithm and size: iterations = budget / size, within the bounds")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--min-iters", o.min_iters)->capture_default_str();
  app.add_option("--max-iters", o.max_iters)->capture_default_str();
  app.add_option("--algorithms", o.algorithms, "which, in order")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (o.rank < 0 || o.rank >= o.size) {
    fmt::print(stderr, "braid_gloo_bench: --rank must be 0..{}\n", o.size - 1);
    return 2;
  }
  if (o.min_bytes < 4 || o.min_bytes % 4 != 0 || o.max_bytes < o.min_bytes) {
    fmt::print(stderr, "braid_gloo_bench: sizes must be multiples of 4, min <= max\n");
    return 2;
  }

  std::shared_ptr<gloo::transport::Device> dev;
  try {
    if (o.transport == "ibverbs") {
      gloo::transport::ibverbs::attr a;
      a.name = o.device;
      a.port = 1;
      a.index = 0;
      dev = gloo::transport::ibverbs::CreateDevice(a);
    } else {
      gloo::transport::tcp::attr a;
      a.hostname = o.host;
      dev = gloo::transport::tcp::CreateDevice(a);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "braid_gloo_bench: rank {}: device: {}\n", o.rank, e.what());
    return 1;
  }
  int failures = 0;
  std::vector<Row> rows;
  {
    gloo::rendezvous::FileStore files(o.store);
    gloo::rendezvous::PrefixStore store(o.prefix, files);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    try {
      ctx->connectFullMesh(store, dev);
      if (o.transport == "ibverbs" && o.mode == "sync") {
        for (int i = 0; i < o.size; ++i) {
          if (i != o.rank) ctx->getPair(i)->setSync(true, true);
        }
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "braid_gloo_bench: rank {}: connect: {}\n", o.rank, e.what());
      return 1;
    }
    if (o.rank == 0) {
      fmt::print("braid_gloo_bench: {} ranks, transport {}{} ({})\n", o.size, o.transport,
                 o.transport == "ibverbs" ? ", " + o.mode : "", dev->str());
      fmt::print("{:<28} {:>10} {:>6} {:>11} {:>11} {:>11} {:>12}\n", "algorithm", "size", "iters",
                 "mean us", "p50 us", "min us", "algbw GB/s");
    }
    std::vector<float> buf, out;
    Fence fence(ctx);
    if (o.transport == "ibverbs" && o.mode == "sync") {
      fence.run();
      if (!wait_first_events(ctx)) {
        fmt::print(stderr,
                   "braid_gloo_bench: rank {}: Gloo's device thread did not take its "
                   "pairs' first completion events in 60 s\n",
                   o.rank);
        return 1;
      }
    }
    for (const std::string& name : o.algorithms) {
      const bool sized = name != "barrier_all_to_all";
      for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
        const size_t count = bytes / 4;
        Case c;
        try {
          c = make_case(name, ctx, count, buf, out);
        } catch (const std::exception& e) {
          fmt::print(stderr, "braid_gloo_bench: {}\n", e.what());
          return 2;
        }
        const int iters = static_cast<int>(
            std::clamp<uint64_t>(o.budget_bytes / bytes, static_cast<uint64_t>(o.min_iters),
                                 static_cast<uint64_t>(o.max_iters)));
        std::vector<double> us;
        bool ok = true;
        try {
          for (int it = -1; it < iters; ++it) {  // iteration -1 warms up
            if (it == -1 || c.prepare_each_run) c.prepare();
            const auto t0 = Clock::now();
            c.run();
            const auto t1 = Clock::now();
            if (!c.check()) ok = false;
            if (it >= 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
          }
        } catch (const std::exception& e) {
          fmt::print(stderr, "braid_gloo_bench: rank {}: {} {}: {}\n", o.rank, name,
                     size_str(bytes), e.what());
          return 1;
        }
        if (!ok) {
          fmt::print(stderr, "braid_gloo_bench: rank {}: {} {}: WRONG RESULT\n", o.rank, name,
                     size_str(bytes));
          ++failures;
        }
        std::sort(us.begin(), us.end());
        double sum = 0;
        for (double u : us) sum += u;
        const Row r{name, sized ? bytes : 0, iters, sum / us.size(), us[us.size() / 2], us[0]};
        rows.push_back(r);
        if (o.rank == 0) {
          fmt::print("{:<28} {:>10} {:>6} {:>11.1f} {:>11.1f} {:>11.1f} {:>12}\n", r.algorithm,
                     sized ? size_str(bytes) : "-", r.iters, r.mean_us, r.p50_us, r.min_us,
                     sized ? fmt::format("{:.3f}", bytes / (r.p50_us * 1e3)) : "-");
          std::fflush(stdout);
        }
        fence.run();  // before the algorithm goes (Fence)
        if (!sized) break;
      }
    }
    // Everyone is done before anyone tears down.
    fence.run();
  }
  if (o.rank == 0)
    fmt::print("braid_gloo_bench: {}\n", failures ? "FAILED" : "all results checked");
  return failures ? 1 : 0;
}
