// braid_fabric: Braid's protocol core on a simulated datacenter fabric (fat
// tree or leaf-spine, switches with queues, ECN and trimming, ECMP), running
// the scenarios of docs/fabric-results.md side by side for several
// transport profiles. Times are virtual; the wall-clock event rate is
// reported too.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fabric/workload.h"

namespace {

using braid::TimeNs;
using namespace braid::fabric;

struct Options {
  std::string scenario = "permutation";
  std::string topology = "fat-tree";
  int k = 8;
  int leaves = 4, spines = 4, hosts_per_leaf = 8;
  double oversubscription = 1.0;
  int planes = 1;
  double gbps = 100.0;
  double link_delay_us = 1.0;
  double switch_latency_us = 0.0;
  std::string size = "2M";
  int incast_senders = 8;
  std::vector<std::string> profiles{"braid", "single-path", "pfc"};
  bool trim = true;
  double queue_bdp = 0;  // 0: 1 BDP with trimming, 5 without
  double ecn_kmin = 0.2, ecn_kmax = 0.8;
  bool ecn = true;
  uint64_t seed = 42;
  double time_limit_ms = 1000;
  std::string csv;
  // Events.
  double loss_pct = 0;
  std::string loss_where = "last-hop";
  int degrade = 0;
  double degrade_fraction = 0.25;
  double link_down_at_us = -1;
  double gray_at_us = -1;
  double gray_fraction = 1.0;
  bool ecn_dequeue = false;
  bool adaptive_routing = false;
  std::string flows_file;
  std::string json;
  // Time series.
  std::string timeseries;
  double sample_us = 10;
};

uint64_t parse_size(const std::string& s) {
  size_t used = 0;
  const double v = std::stod(s, &used);
  uint64_t mult = 1;
  if (used < s.size()) {
    switch (s[used]) {
      case 'k':
      case 'K':
        mult = 1024;
        break;
      case 'm':
      case 'M':
        mult = 1024 * 1024;
        break;
      case 'g':
      case 'G':
        mult = 1024ull * 1024 * 1024;
        break;
      default:
        throw CLI::ValidationError("--size", "use a number with K, M or G: " + s);
    }
  }
  return static_cast<uint64_t>(v * static_cast<double>(mult));
}

TopologyConfig topology_of(const Options& o) {
  TopologyConfig t;
  t.kind = o.topology == "leaf-spine" ? TopologyConfig::Kind::kLeafSpine
                                      : TopologyConfig::Kind::kFatTree;
  t.k = o.k;
  t.leaves = o.leaves;
  t.spines = o.spines;
  t.hosts_per_leaf = o.hosts_per_leaf;
  t.oversubscription = o.oversubscription;
  t.planes = o.planes;
  t.host_link = LinkSpec{o.gbps, static_cast<TimeNs>(o.link_delay_us * 1000)};
  t.fabric_link = t.host_link;
  t.sw.latency_ns = static_cast<TimeNs>(o.switch_latency_us * 1000);
  return t;
}

void finish_switch_config(TopologyConfig& t, const Options& o, const Profile& p) {
  const double bdp = static_cast<double>(base_rtt_ns(t, p)) * o.gbps / 8.0;
  const double queue = o.queue_bdp > 0 ? o.queue_bdp : (o.trim ? 1.0 : 5.0);
  t.sw.buffer_bytes = static_cast<uint32_t>(queue * bdp);
  t.sw.trim = o.trim;
  if (p.name == "pfc") {
    // Lossless: a quarter BDP per ingress link before pausing it (the
    // headroom above covers a link's round trip), resumed two frames lower.
    t.sw.trim = false;
    t.sw.pfc = true;
    t.sw.pfc_xoff_bytes = static_cast<uint32_t>(0.25 * bdp);
    const uint32_t two_frames = 2 * (p.mtu + 128);
    t.sw.pfc_xon_bytes = t.sw.pfc_xoff_bytes > 2 * two_frames ? t.sw.pfc_xoff_bytes - two_frames
                                                              : t.sw.pfc_xoff_bytes / 2;
  }
  t.sw.ecn_at_dequeue = o.ecn_dequeue;
  t.sw.adaptive_routing = o.adaptive_routing;
  if (o.ecn) {
    t.sw.ecn_kmin_bytes = static_cast<uint32_t>(o.ecn_kmin * bdp);
    t.sw.ecn_kmax_bytes = static_cast<uint32_t>(o.ecn_kmax * bdp);
  }
}

// Flows from a file: "src dst bytes [start_us [after]]" per line.
std::vector<FlowSpec> read_flows(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw CLI::ValidationError("--flows", "cannot read " + path);
  std::vector<FlowSpec> flows;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    line = line.substr(0, line.find('#'));
    std::istringstream ss(line);
    FlowSpec f;
    std::string size;
    if (!(ss >> f.src)) continue;  // blank or comment
    double start_us = 0;
    if (!(ss >> f.dst >> size)) {
      throw CLI::ValidationError("--flows",
                                 path + ":" + std::to_string(n) + ": want src dst bytes");
    }
    f.bytes = parse_size(size);
    if (ss >> start_us) {
      f.start = static_cast<TimeNs>(start_us * 1000);
      ss >> f.after;
    }
    flows.push_back(f);
  }
  return flows;
}

// The victim scenario: a 7:1 (--incast) incast into host 0 and one flow
// from the far end of the fabric into host 1, under the same edge switch.
constexpr int kVictimDst = 1;

std::vector<FlowSpec> flows_of(const Options& o, int hosts, uint64_t bytes) {
  if (o.scenario == "permutation") return permutation(hosts, bytes, o.seed);
  if (o.scenario == "incast") return incast(hosts, o.incast_senders, 0, bytes);
  if (o.scenario == "single") return {FlowSpec{0, hosts - 1, bytes, 0}};
  if (o.scenario == "all-to-all") return all_to_all(hosts, bytes);
  if (o.scenario == "file") return read_flows(o.flows_file);
  if (o.scenario == "allreduce") return ring_allreduce(hosts, bytes);
  if (o.scenario == "halving-doubling") return halving_doubling_allreduce(hosts, bytes);
  if (o.scenario == "victim" || o.scenario == "victim-alone") {
    std::vector<FlowSpec> f;
    if (o.scenario == "victim") {
      for (FlowSpec s : incast(hosts, o.incast_senders, 0, bytes)) {
        if (s.src == kVictimDst || s.src == hosts - 1) s.src = (s.src + 2) % hosts;
        f.push_back(s);
      }
    }
    f.push_back(FlowSpec{hosts - 1, kVictimDst, bytes, 0});
    return f;
  }
  throw CLI::ValidationError("--scenario",
                             "permutation, incast, single, all-to-all, allreduce or victim");
}

// Schedules the link events of the options on the experiment's fabric.
void schedule_events(const Options& o, Experiment& x) {
  Fabric& f = x.fabric();
  const Topology& t = x.topology();
  if (o.loss_pct > 0) {
    const double p = o.loss_pct / 100.0;
    if (o.loss_where == "last-hop") {
      for (int h = 0; h < x.hosts(); ++h) {
        f.set_port_loss(f.port_between(t.host_edge[h], f.node_of_host(h)), p);
      }
    } else {  // core: both directions of every top-tier link
      for (int port : t.core_links) {
        f.set_port_loss(port, p);
        f.set_port_loss(port + 1, p);
      }
    }
  }
  for (int i = 0; i < o.degrade && i < static_cast<int>(t.core_links.size()); ++i) {
    // Spread over the top tier: every k-th link.
    const int port = t.core_links[(i * 7) % t.core_links.size()];
    f.set_port_rate(port, o.gbps * o.degrade_fraction);
    f.set_port_rate(port + 1, o.gbps * o.degrade_fraction);
  }
  if (o.link_down_at_us >= 0 && !t.core_links.empty()) {
    const int port = t.core_links[0];
    f.at(static_cast<TimeNs>(o.link_down_at_us * 1000), [&f, port] {
      f.set_port_up(port, false);
      f.set_port_up(port + 1, false);
    });
  }
  if (o.gray_at_us >= 0 && !t.core_links.empty()) {
    const int port = t.core_links[0];
    const double fraction = o.gray_fraction;
    f.at(static_cast<TimeNs>(o.gray_at_us * 1000), [&f, port, fraction] {
      f.set_port_loss(port, fraction);
      f.set_port_loss(port + 1, fraction);
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Braid's protocol core on a simulated datacenter fabric: scenarios side by side for "
      "transport profiles (docs/fabric-results.md)"};
  app.add_option("--scenario", o.scenario,
                 "permutation, incast, single (one flow alone), all-to-all, allreduce (ring), "
                 "halving-doubling (allreduce), victim (a flow into a host under the same edge as "
                 "a --incast incast), victim-alone, file (--flows)")
      ->capture_default_str();
  app.add_option("--topology", o.topology, "fat-tree or leaf-spine")->capture_default_str();
  app.add_option("-k", o.k, "fat tree arity (128 hosts at 8, 1024 at 16)")->capture_default_str();
  app.add_option("--leaves", o.leaves, "leaf-spine: leaves")->capture_default_str();
  app.add_option("--spines", o.spines, "leaf-spine: spines")->capture_default_str();
  app.add_option("--hosts-per-leaf", o.hosts_per_leaf, "leaf-spine: hosts per leaf")
      ->capture_default_str();
  app.add_option("--oversubscription", o.oversubscription,
                 "hosts per edge switch relative to a full-bisection fabric")
      ->capture_default_str();
  app.add_option("--planes", o.planes,
                 "parallel planes, a NIC port per plane on every host (entropies spread over them)")
      ->capture_default_str();
  app.add_option("--gbps", o.gbps, "link rate, Gb/s (100, 200, 400, 800)")->capture_default_str();
  app.add_option("--link-delay-us", o.link_delay_us, "propagation delay per link")
      ->capture_default_str();
  app.add_option("--switch-latency-us", o.switch_latency_us, "forwarding latency per switch")
      ->capture_default_str();
  app.add_option("-s,--size", o.size, "bytes per flow (K, M, G suffixes)")->capture_default_str();
  app.add_option("--incast", o.incast_senders, "incast: senders to host 0")->capture_default_str();
  app.add_option("--profile", o.profiles,
                 "transport profiles run side by side: braid, single-path, pfc (one entropy, "
                 "lossless fabric)")
      ->capture_default_str();
  app.add_flag("!--no-trim", o.trim, "drop at full queues instead of trimming (5 BDP queues)");
  app.add_option("--queue-bdp", o.queue_bdp,
                 "egress queue in BDPs (default 1 with trim, 5 without)");
  app.add_flag("!--no-ecn", o.ecn, "no ECN marking");
  app.add_option("--ecn-kmin", o.ecn_kmin, "WRED Kmin as a fraction of the BDP")
      ->capture_default_str();
  app.add_option("--ecn-kmax", o.ecn_kmax, "WRED Kmax as a fraction of the BDP")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed (ECMP, WRED, the permutation)")->capture_default_str();
  app.add_option("--time-limit-ms", o.time_limit_ms, "virtual time limit")->capture_default_str();
  app.add_option("--csv", o.csv, "write one line per flow and profile to this file");
  app.add_option("--loss-pct", o.loss_pct, "random loss on links, percent");
  app.add_option("--loss-where", o.loss_where, "last-hop (edge to host) or core")
      ->capture_default_str();
  app.add_option("--degrade", o.degrade, "top-tier links degraded (both directions)");
  app.add_option("--degrade-fraction", o.degrade_fraction, "their rate as a fraction")
      ->capture_default_str();
  app.add_option("--link-down-at-us", o.link_down_at_us,
                 "one top-tier link goes down (both directions) at this virtual time");
  app.add_option("--gray-at-us", o.gray_at_us,
                 "one top-tier link silently drops everything from this virtual time");
  app.add_option("--gray-fraction", o.gray_fraction,
                 "what the silently failing link drops (1: everything)")
      ->capture_default_str();
  app.add_flag("--ecn-dequeue", o.ecn_dequeue, "mark ECN on the queue a packet leaves");
  app.add_flag("--adaptive-routing", o.adaptive_routing,
               "switches send each packet to the shortest queue of its group instead of ECMP");
  app.add_option("--flows", o.flows_file,
                 "--scenario file: one flow per line, 'src dst bytes [start_us [after]]' "
                 "(after: the index of a flow it waits for; # comments)");
  app.add_option("--json", o.json, "write one JSON line per profile's summary to this file");
  app.add_option("--timeseries", o.timeseries,
                 "write delivered bytes and watched queues every --sample-us to this file");
  app.add_option("--sample-us", o.sample_us, "time series period")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  uint64_t bytes = 0;
  try {
    bytes = parse_size(o.size);
  } catch (const std::exception& e) {
    fmt::print(stderr, "braid_fabric: bad --size '{}': {}\n", o.size, e.what());
    return 2;
  }
  std::unique_ptr<std::ofstream> csv;
  if (!o.csv.empty()) {
    csv = std::make_unique<std::ofstream>(o.csv);
    *csv << "profile,flow,src,dst,bytes,start_ns,end_ns,fct_us,goodput_pct,ok,retransmits,"
            "timeouts,lost_inferred,lost_nacked,trimmed_received,ecn_acked,status\n";
  }
  std::unique_ptr<std::ofstream> json;
  if (!o.json.empty()) json = std::make_unique<std::ofstream>(o.json);
  std::unique_ptr<std::ofstream> timeseries;
  if (!o.timeseries.empty()) {
    timeseries = std::make_unique<std::ofstream>(o.timeseries);
    *timeseries << "profile,time_us,delivered_bytes,queue_host0,queue_core_up,queue_core_down"
                << (o.scenario.rfind("victim", 0) == 0 ? ",victim_bytes" : "") << "\n";
  }
  TopologyConfig topo = topology_of(o);
  fmt::print("braid_fabric: {} ({}), {} of {} B per flow, seed {}\n", o.scenario, topo.describe(),
             o.scenario == "incast" ? fmt::format("{} senders", o.incast_senders) : "flows", bytes,
             o.seed);
  fmt::print(
      "{:<12} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>6} {:>8} {:>8} {:>8} {:>9} "
      "{:>10}\n",
      "profile", "flows", "FCT mean", "p50", "p99", "max", "gput%", "min%", "Jain", "retrans",
      "timeouts", "trimmed", "peak q KB", "wall s");
  int status = 0;
  for (const std::string& name : o.profiles) {
    ExperimentConfig ec;
    try {
      ec.profile = profile_named(name);
    } catch (const std::exception& e) {
      fmt::print(stderr, "braid_fabric: {}\n", e.what());
      return 2;
    }
    ec.topo = topo;
    finish_switch_config(ec.topo, o, ec.profile);
    ec.seed = o.seed;
    Experiment x(ec);
    try {
      for (const FlowSpec& f : flows_of(o, x.hosts(), bytes)) x.add_flow(f);
    } catch (const std::exception& e) {
      fmt::print(stderr, "braid_fabric: {}\n", e.what());
      return 2;
    }
    schedule_events(o, x);
    if (!o.timeseries.empty()) {
      // Watched: the port into host 0 (the incast's receiver) and the first
      // top-tier link, both ways.
      const Fabric& f = x.fabric();
      std::vector<int> ports{f.port_between(x.topology().host_edge[0], f.node_of_host(0))};
      if (!x.topology().core_links.empty()) {
        ports.push_back(x.topology().core_links[0]);
        ports.push_back(x.topology().core_links[0] + 1);
      }
      x.sample_every(static_cast<TimeNs>(o.sample_us * 1000), ports);
    }
    const auto wall0 = std::chrono::steady_clock::now();
    // In slices of virtual time, with a progress line on stderr every few
    // seconds of wall time for long runs.
    const auto limit = static_cast<TimeNs>(o.time_limit_ms * 1e6);
    constexpr TimeNs kSlice = 200'000;
    auto last_report = wall0;
    bool all = false;
    for (TimeNs t = kSlice;; t += kSlice) {
      all = x.run(std::min(t, limit));
      if (all || t >= limit) break;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_report > std::chrono::seconds(5)) {
        last_report = now;
        size_t ended = 0;
        for (const FlowResult& r : x.results()) ended += r.end != braid::kNever ? 1 : 0;
        fmt::print(stderr, "  {}: {:.2f} ms of virtual time, {} of {} flows done, {:.1f} s\n", name,
                   x.fabric().now() / 1e6, ended, x.results().size(),
                   std::chrono::duration<double>(now - wall0).count());
      }
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    const Summary s = x.summarize(wall);
    fmt::print(
        "{:<12} {:>6} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>7.1f} {:>7.1f} {:>6.3f} {:>8} "
        "{:>8} {:>8} {:>9.1f} {:>10.2f}\n",
        name, s.completed, s.fct_mean_us, s.fct_p50_us, s.fct_p99_us, s.fct_max_us,
        s.goodput_mean_pct, s.goodput_min_pct, s.jain, s.retransmits, s.timeouts, s.fabric_trimmed,
        s.peak_queue_bytes / 1000.0, wall);
    if (json) {
      *json << fmt::format(
          "{{\"scenario\":\"{}\",\"profile\":\"{}\",\"hosts\":{},\"bytes\":{},\"flows\":{},"
          "\"completed\":{},\"failed\":{},\"fct_mean_us\":{:.3f},\"fct_p50_us\":{:.3f},"
          "\"fct_p99_us\":{:.3f},\"fct_max_us\":{:.3f},\"goodput_mean_pct\":{:.3f},"
          "\"goodput_min_pct\":{:.3f},\"jain\":{:.4f},\"retransmits\":{},\"timeouts\":{},"
          "\"trimmed\":{},\"ecn_marked\":{},\"dropped\":{},\"bytes_lost\":{},"
          "\"peak_queue_bytes\":{},\"pauses\":{},\"paused_us\":{:.3f},\"last_end_us\":{:.3f},"
          "\"events\":{},\"wall_s\":{:.3f}}}\n",
          o.scenario, name, x.hosts(), bytes, s.flows, s.completed, s.failed, s.fct_mean_us,
          s.fct_p50_us, s.fct_p99_us, s.fct_max_us, s.goodput_mean_pct, s.goodput_min_pct, s.jain,
          s.retransmits, s.timeouts, s.fabric_trimmed, s.fabric_ecn, s.fabric_dropped, s.bytes_lost,
          s.peak_queue_bytes, s.pauses, s.paused_ns / 1000.0, s.last_end / 1000.0, s.events, wall);
    }
    if (o.scenario == "allreduce" || o.scenario == "halving-doubling") {
      // The collective ends with its last step; algorithm bandwidth as
      // collective libraries report it (the buffer's size over that time).
      fmt::print(
          "  {}: allreduce of {} B over {} ranks in {:.1f} us: {:.2f} GB/s algorithm "
          "bandwidth ({} steps)\n",
          name, bytes, x.hosts(), s.last_end / 1000.0,
          s.last_end > 0 ? static_cast<double>(bytes) / static_cast<double>(s.last_end) : 0,
          x.results().empty() ? 0 : x.results().size() / x.hosts());
    }
    if (s.pauses > 0) {
      fmt::print("  {}: {} PFC pauses, {:.1f} us paused (summed over ports), {} bytes lost\n", name,
                 s.pauses, s.paused_ns / 1000.0, s.bytes_lost);
    }
    if (o.scenario == "victim" || o.scenario == "victim-alone") {
      const FlowResult& v = x.results().back();
      fmt::print("  {}: victim flow {} -> {}: FCT {:.1f} us\n", name, v.spec.src, v.spec.dst,
                 v.fct() / 1000.0);
    }
    if (timeseries) {
      for (const Experiment::Sample& smp : x.samples()) {
        uint64_t total = 0;
        for (uint64_t b : smp.flow_bytes) total += b;
        *timeseries << fmt::format("{},{:.3f},{}", name, smp.at / 1000.0, total);
        for (uint64_t q : smp.queue_bytes) *timeseries << "," << q;
        if (o.scenario == "victim" || o.scenario == "victim-alone") {
          *timeseries << "," << smp.flow_bytes.back();
        }
        *timeseries << "\n";
      }
    }
    if (!all || s.failed > 0) {
      fmt::print("  {}: {} of {} flows completed, {} failed within {} ms of virtual time\n", name,
                 s.completed, s.flows, s.failed, o.time_limit_ms);
      std::map<std::string, int> why;
      for (const FlowResult& r : x.results()) {
        if (r.end != braid::kNever && !r.ok) ++why[braid::wc_status_name(r.status)];
      }
      for (const auto& [status, n] : why) fmt::print("    {} x {}\n", n, status);
      status = 1;
    }
    if (csv) {
      const auto& rs = x.results();
      for (size_t i = 0; i < rs.size(); ++i) {
        const FlowResult& r = rs[i];
        const double fct_us = r.end == braid::kNever ? 0 : r.fct() / 1000.0;
        const double gput =
            fct_us > 0 ? r.spec.bytes * 8 / (fct_us * 1000) / (o.gbps * o.planes) * 100 : 0;
        *csv << fmt::format(
            "{},{},{},{},{},{},{},{:.3f},{:.2f},{},{},{},{},{},{},{},{}\n", name, i, r.spec.src,
            r.spec.dst, r.spec.bytes, r.spec.start,
            r.end == braid::kNever ? -1 : static_cast<int64_t>(r.end), fct_us, gput, r.ok ? 1 : 0,
            r.sender.retransmits, r.sender.timeouts, r.sender.lost_inferred, r.sender.lost_nacked,
            r.receiver.trimmed_received, r.ecn_acked,
            r.end == braid::kNever ? "unfinished" : braid::wc_status_name(r.status));
      }
    }
    fmt::print("  {}: {} events in {:.2f} s of wall time ({:.2f} M/s), {:.3f} ms of virtual time\n",
               name, s.events, wall, s.events / wall / 1e6, x.fabric().now() / 1e6);
  }
  return status;
}
