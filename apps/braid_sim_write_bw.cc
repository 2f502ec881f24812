// braid_sim_write_bw: ib_write_bw over Braid's simulated fabric. Two Braid
// endpoints run the real protocol core; a deterministic virtual network joins
// them through several ECMP paths with loss. Bandwidth is in virtual time
// (what the protocol achieves on the modelled fabric); the wall-clock packet
// rate of the core is reported after the table.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "core/completion_queue.h"
#include "core/endpoint.h"
#include "network/sim_network.h"

namespace {

using braid::TimeNs;

struct Options {
  uint64_t size = 65536;
  uint64_t iters = 5000;
  bool all_sizes = false;
  uint32_t tx_depth = 128;
  bool report_gbits = false;
  double loss_pct = 0.1;
  uint32_t paths = 4;
  double path_gbps = 25.0;
  double host_gbps = 100.0;
  TimeNs path_delay_ns = 2000;
  uint32_t entropies = 64;
  uint32_t mtu = 4096;
  uint32_t window_kb = 256;
  uint64_t seed = 1;
  bool verify = false;
};

struct Result {
  uint64_t bytes = 0, iters = 0;
  double peak_bps = 0, avg_bps = 0, msg_rate = 0;
  double wall_s = 0;
  uint64_t packets = 0;
};

braid::wire::MacAddr mac(uint8_t b) {
  return {0x02, 0, 0, 0, 0, b};
}

Result run_size(const Options& o, uint64_t size, uint64_t iters, braid::ConnectionStats* stats_out,
                std::vector<braid::EntropyStats>* paths_out, braid::sim::LinkStats* link_out) {
  using namespace braid;
  Endpoint a(EndpointConfig{mac(1), 0xc6120001, wire::kUetUdpPort, false, 0xff, 1000, {}});
  Endpoint b(EndpointConfig{mac(2), 0xc6120002, wire::kUetUdpPort, false, 0xff, 1000, {}});
  sim::SimNetwork net(o.seed);
  const int ha = net.add_host(&a), hb = net.add_host(&b);
  sim::LinkConfig link;
  link.paths.clear();
  for (uint32_t i = 0; i < o.paths; ++i) {
    sim::PathConfig p;
    p.gbps = o.path_gbps;
    p.delay_ns = o.path_delay_ns + i * 500;  // unequal paths: packets arrive out of order
    link.paths.push_back(p);
  }
  link.host_gbps = o.host_gbps;
  link.impair.loss = o.loss_pct / 100.0;
  net.connect(ha, hb, link);

  ConnectionConfig c;
  c.mtu = o.mtu;
  c.entropy.count = static_cast<uint16_t>(o.entropies);
  c.cc.window_bytes = o.window_kb * 1024;
  c.sq_depth = std::max<uint32_t>(o.tx_depth, 1);
  c.window_packets = 4096;
  c.rto_min_ns = 100'000;
  c.rto_initial_ns = 200'000;
  ConnectionConfig ca = c, cb = c;
  ca.local_id = 1;
  ca.remote_id = 2;
  ca.remote_mac = mac(2);
  ca.remote_ip = 0xc6120002;
  cb.local_id = 2;
  cb.remote_id = 1;
  cb.remote_mac = mac(1);
  cb.remote_ip = 0xc6120001;
  CompletionQueue scq(o.tx_depth * 2), rcq(16), bscq(16), brcq(16);
  Connection* qa = a.create_connection(ca, &scq, &rcq);
  b.create_connection(cb, &bscq, &brcq);

  std::vector<uint8_t> src(size), dst(size);
  for (size_t i = 0; i < size; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  const uint32_t rkey =
      b.memory().register_region(dst.data(), dst.size(), kAccessLocalWrite | kAccessRemoteWrite, 0);
  SendRequest wr;
  wr.opcode = Opcode::kWrite;
  wr.local.sge[0] = Sge{src.data(), static_cast<uint32_t>(size)};
  wr.local.num = 1;
  wr.remote_addr = reinterpret_cast<uintptr_t>(dst.data());
  wr.rkey = rkey;

  uint64_t posted = 0, completed = 0;
  std::vector<TimeNs> done_at;
  done_at.reserve(iters);
  const TimeNs start = net.now();
  const auto wall0 = std::chrono::steady_clock::now();
  auto post_more = [&] {
    while (posted < iters && posted - completed < o.tx_depth) {
      wr.wr_id = posted;
      if (qa->post_send(wr) != PostError::kOk) break;
      ++posted;
    }
  };
  post_more();
  WorkCompletion wc[64];
  bool failed = false;
  while (completed < iters && !failed) {
    if (!net.run([&] { return scq.size() > 0; }, net.now() + 10'000'000'000ull)) break;
    uint32_t n;
    while ((n = scq.poll(wc, 64)) > 0) {
      for (uint32_t i = 0; i < n; ++i) {
        if (wc[i].status != WcStatus::kSuccess) {
          fmt::print(stderr, " Completion with error: {} (wr_id {})\n",
                     wc_status_name(wc[i].status), wc[i].wr_id);
          failed = true;
        }
        done_at.push_back(net.now());
      }
      completed += n;
    }
    post_more();
  }
  Result r;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  if (failed || completed < iters) {
    fmt::print(stderr, " Braid: transfer did not complete ({} of {} messages)\n", completed, iters);
    std::exit(1);
  }
  if (o.verify && src != dst) {
    fmt::print(stderr, " Braid: data verification failed\n");
    std::exit(1);
  }
  r.bytes = size;
  r.iters = iters;
  const double secs = static_cast<double>(done_at.back() - start) / 1e9;
  r.avg_bps = secs > 0 ? static_cast<double>(size) * iters / secs : 0;
  r.msg_rate = secs > 0 ? iters / secs / 1e6 : 0;
  // Peak over windows of tx_depth completions, as perftest measures per burst.
  const size_t w = std::min<size_t>(o.tx_depth, done_at.size() - 1);
  r.peak_bps = r.avg_bps;
  for (size_t i = w; w > 0 && i < done_at.size(); ++i) {
    const double dt = static_cast<double>(done_at[i] - done_at[i - w]) / 1e9;
    if (dt > 0) r.peak_bps = std::max(r.peak_bps, static_cast<double>(size) * w / dt);
  }
  r.packets = qa->stats().data_sent + qa->stats().retransmits + qa->stats().acks_received;
  if (stats_out) *stats_out = qa->stats();
  if (paths_out) {
    paths_out->clear();
    for (uint32_t i = 0; i < qa->paths().count(); ++i) {
      paths_out->push_back(qa->paths().stats(static_cast<uint8_t>(i)));
    }
  }
  if (link_out) *link_out = net.link_stats(ha, hb);
  return r;
}

void print_dashes() {
  std::puts(
      "---------------------------------------------------------------------------------------");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"RDMA_Write bandwidth over Braid's simulated multipath fabric (perftest-style)"};
  app.add_option("-s,--size", o.size, "Size of message to exchange (default 65536)");
  app.add_option("-n,--iters", o.iters, "Number of exchanges (default 5000)");
  app.add_flag("-a,--all", o.all_sizes, "Run sizes from 2 till 2^23");
  app.add_option("-t,--tx-depth", o.tx_depth, "Size of tx queue (default 128)");
  app.add_flag("--report_gbits", o.report_gbits, "Report Max/Average BW of test in Gbit/sec");
  app.add_option("--loss", o.loss_pct, "Random loss on the fabric, percent (default 0.1)");
  app.add_option("--paths", o.paths, "Parallel ECMP paths (default 4)")->check(CLI::Range(1, 64));
  app.add_option("--path-gbps", o.path_gbps, "Rate of each path, Gb/s (default 25)");
  app.add_option("--host-gbps", o.host_gbps, "NIC rate of each host, Gb/s (default 100)");
  app.add_option(
         "--entropies", o.entropies,
         "Entropies (UDP source ports) sprayed per connection; 1 = single path (default 64)")
      ->check(CLI::Range(1, 256));
  app.add_option("--mtu", o.mtu, "Payload bytes per packet (default 4096)")
      ->check(CLI::Range(256, 9000));
  app.add_option("--window-kb", o.window_kb, "Fixed congestion window, KiB (default 256)");
  app.add_option("--seed", o.seed, "Seed of the simulated fabric (default 1)");
  app.add_flag("--verify", o.verify, "Check the written data byte for byte");
  CLI11_PARSE(app, argc, argv);

  print_dashes();
  std::puts("                    RDMA_Write BW Test (Braid, simulated fabric)");
  fmt::print(" Dual-port       : OFF\t\tDevice         : braid-sim0\n");
  fmt::print(" Number of qps   : 1\t\tTransport type : Braid (UET RUD)\n");
  fmt::print(" Connection type : RC\t\tUsing SRQ      : OFF\n");
  fmt::print(" TX depth        : {}\n", o.tx_depth);
  fmt::print(" Mtu             : {}[B]\n", o.mtu);
  fmt::print(" Fabric          : {} paths x {} Gb/s, host {} Gb/s, loss {}%\n", o.paths,
             o.path_gbps, o.host_gbps, o.loss_pct);
  fmt::print(" Entropies       : {}{}\n", o.entropies,
             o.entropies == 1 ? " (single path)" : " (per-packet spraying)");
  print_dashes();
  if (o.report_gbits) {
    std::puts(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]");
  } else {
    std::puts(" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]");
  }
  std::vector<uint64_t> sizes;
  if (o.all_sizes) {
    for (uint64_t s = 2; s <= (1u << 23); s *= 2) sizes.push_back(s);
  } else {
    sizes.push_back(o.size);
  }
  braid::ConnectionStats st{};
  std::vector<braid::EntropyStats> paths;
  braid::sim::LinkStats link;
  double wall = 0;
  uint64_t packets = 0;
  for (uint64_t s : sizes) {
    const Result r = run_size(o, s, o.iters, &st, &paths, &link);
    const double unit = o.report_gbits ? 1e9 / 8 : 1048576.0;
    fmt::print(" {:<10} {:<10}       {:.2f}            {:.2f}\t\t   {:.6f}\n", r.bytes, r.iters,
               r.peak_bps / unit, r.avg_bps / unit, r.msg_rate);
    wall += r.wall_s;
    packets += r.packets;
  }
  print_dashes();
  // Braid's own summary of the last size: what the transport did.
  fmt::print(" Braid transport (last size): data packets {}, retransmitted {}, fabric lost {}\n",
             st.data_sent, st.retransmits, link.lost());
  fmt::print("   loss detected: {} by per-entropy gaps, {} by timeout ({} RTOs)\n",
             st.lost_inferred, st.lost_timeout, st.timeouts);
  std::string per_path;
  for (size_t i = 0; i < link.per_path.size(); ++i) {
    per_path += fmt::format("{}{}", i ? " / " : "", link.per_path[i]);
  }
  fmt::print("   frames per fabric path: {}\n", per_path);
  uint64_t samples = 0, srtt = 0;
  for (const auto& p : paths) {
    samples += p.rtt_samples;
    srtt += uint64_t{p.srtt_ns} * p.rtt_samples;
  }
  if (samples > 0)
    fmt::print("   mean RTT: {:.2f} us over {} samples\n", srtt / 1e3 / samples, samples);
  fmt::print("   simulator + core wall time {:.3f} s ({:.2f} M packets/s on one core)\n", wall,
             wall > 0 ? packets / wall / 1e6 : 0);
  print_dashes();
  return 0;
}
