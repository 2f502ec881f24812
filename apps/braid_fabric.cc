// braid_fabric: Braid's protocol core on a simulated datacenter fabric (fat
// tree or leaf-spine, switches with queues, ECN and trimming, ECMP), running
// the scenarios of docs/fabric-results.md side by side for several
// transport profiles. Times are virtual; the wall-clock event rate is
// reported too.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/registry.h"
#include "fabric/scenario.h"
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
  double fabric_gbps = 0;                                            // 0: --gbps
  uint32_t mtu = 0;                                                  // 0: the profile's
  uint32_t queue_bytes = 0, ecn_kmin_bytes = 0, ecn_kmax_bytes = 0;  // 0: from the BDP
  double ecn_pmax = 1.0;
  int watch_core = 0;  // the top-tier link --timeseries watches
  double link_delay_us = 1.0;
  double switch_latency_us = 0.0;
  std::string size = "2M";
  int incast_senders = 8;
  int incast_from = -1;  // -1: spread over the other hosts; else hosts from this one on
  std::vector<std::string> profiles{"braid", "single-path", "pfc"};
  bool trim = true;
  double queue_bdp = 0;  // 0: 1 BDP with trimming, 5 without
  double ecn_kmin = 0.2, ecn_kmax = 0.8;
  bool ecn = true;
  uint64_t seed = 42;
  double time_limit_ms = 1000;
  uint32_t credit_speculative = 0;  // 0: one BDP
  std::string cc_scope = "peer";
  std::string pdc_scope = "qp";
  std::string cc;     // the profile's algorithm unless named
  std::string paths;  // the profile's path policy unless named
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
  std::vector<std::string> flow_specs;   // --flow, added to the scenario's flows
  std::vector<std::string> event_specs;  // --event
  // Background load.
  double load = 0.5;
  double duration_us = 1000;
  double victim_at_us = -1;  // -1: half the duration
  std::string json;
  // Time series.
  std::string timeseries;
  std::string flow_series;
  double sample_us = 10;
  std::string entropy_series;
  std::vector<size_t> entropy_flows{0};
};

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
  if (o.fabric_gbps > 0) t.fabric_link.gbps = o.fabric_gbps;
  t.sw.latency_ns = static_cast<TimeNs>(o.switch_latency_us * 1000);
  return t;
}

void finish_switch_config(TopologyConfig& t, const Options& o, const Profile& p) {
  const double bdp = static_cast<double>(base_rtt_ns(t, p)) * o.gbps / 8.0;
  const double queue = o.queue_bdp > 0 ? o.queue_bdp : (o.trim ? 1.0 : 5.0);
  t.sw.buffer_bytes = o.queue_bytes > 0 ? o.queue_bytes : static_cast<uint32_t>(queue * bdp);
  t.sw.trim = o.trim;
  if (p.name == "pfc" || p.name == "rocev2-like") {
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
    t.sw.ecn_kmin_bytes =
        o.ecn_kmin_bytes > 0 ? o.ecn_kmin_bytes : static_cast<uint32_t>(o.ecn_kmin * bdp);
    t.sw.ecn_kmax_bytes =
        o.ecn_kmax_bytes > 0 ? o.ecn_kmax_bytes : static_cast<uint32_t>(o.ecn_kmax * bdp);
    t.sw.ecn_pmax = o.ecn_pmax;
  }
}

// The victim scenarios: a flow from the far end of the fabric into host 1,
// under the same edge switch as host 0, beside a --incast incast into host
// 0 (victim) or a --load background load (background). The victim is the
// scenario's last flow.
constexpr int kVictimDst = 1;

bool has_victim(const std::string& scenario) {
  return scenario == "victim" || scenario == "victim-alone" || scenario == "background";
}

// The scenario's flows, then the --flow ones; `victim` becomes the victim
// flow's index, or -1.
std::vector<FlowSpec> flows_of(const Options& o, int hosts, uint64_t bytes, int& victim) {
  victim = -1;
  std::vector<FlowSpec> f;
  if (o.scenario == "permutation") {
    f = permutation(hosts, bytes, o.seed);
  } else if (o.scenario == "incast") {
    if (o.incast_from >= 0) {
      // htsim's placement: consecutive hosts from one on (64 at k=8: the
      // other pods).
      if (o.incast_from < 1 || o.incast_from + o.incast_senders > hosts) {
        throw std::invalid_argument("--incast-from: senders must be hosts 1.." +
                                    std::to_string(hosts - 1));
      }
      for (int i = 0; i < o.incast_senders; ++i)
        f.push_back(FlowSpec{o.incast_from + i, 0, bytes, 0});
    } else {
      f = incast(hosts, o.incast_senders, 0, bytes);
    }
  } else if (o.scenario == "single") {
    f = {FlowSpec{0, hosts - 1, bytes, 0}};
  } else if (o.scenario == "all-to-all") {
    f = all_to_all(hosts, bytes);
  } else if (o.scenario == "flows" || o.scenario == "file") {
    if (!o.flows_file.empty()) f = read_flows(o.flows_file);
  } else if (o.scenario == "allreduce") {
    f = ring_allreduce(hosts, bytes);
  } else if (o.scenario == "halving-doubling") {
    f = halving_doubling_allreduce(hosts, bytes);
  } else if (has_victim(o.scenario)) {
    if (o.scenario == "victim") {
      for (FlowSpec s : incast(hosts, o.incast_senders, 0, bytes)) {
        if (s.src == kVictimDst || s.src == hosts - 1) s.src = (s.src + 2) % hosts;
        f.push_back(s);
      }
    }
    const auto duration = static_cast<TimeNs>(o.duration_us * 1000);
    TimeNs victim_start = 0;
    if (o.scenario == "background") {
      f = poisson_load(hosts, o.load, o.gbps * o.planes, bytes, duration, o.seed);
      victim_start =
          o.victim_at_us >= 0 ? static_cast<TimeNs>(o.victim_at_us * 1000) : duration / 2;
    }
    victim = static_cast<int>(f.size());
    f.push_back(FlowSpec{hosts - 1, kVictimDst, bytes, victim_start});
  } else {
    throw CLI::ValidationError("--scenario",
                               "permutation, incast, single, all-to-all, allreduce, "
                               "halving-doubling, victim, victim-alone, background or flows");
  }
  int n = 0;
  for (const std::string& spec : o.flow_specs) {
    FlowSpec x;
    if (parse_flow(spec, x, "--flow #" + std::to_string(++n))) f.push_back(x);
  }
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i].src < 0 || f[i].src >= hosts || f[i].dst < 0 || f[i].dst >= hosts ||
        f[i].src == f[i].dst) {
      throw CLI::ValidationError(
          "--flow", fmt::format("flow {}: {} -> {} is not two hosts of 0..{}", i, f[i].src,
                                f[i].dst, hosts - 1));
    }
    if (f[i].after != kNone && (f[i].after < 0 || static_cast<size_t>(f[i].after) >= f.size())) {
      throw CLI::ValidationError("--flow", fmt::format("flow {} waits for flow {}, which is not "
                                                       "one of the {} flows",
                                                       i, f[i].after, f.size()));
    }
  }
  return f;
}

// The link events of the options: the scenario flags (--loss-pct,
// --degrade, --link-down-at-us, --gray-at-us) as events, then --event ones.
std::vector<LinkEvent> events_of(const Options& o, const Topology& t, int hosts) {
  std::vector<LinkEvent> ev;
  if (o.loss_pct > 0) {
    const double p = o.loss_pct / 100.0;
    if (o.loss_where == "last-hop") {
      for (int h = 0; h < hosts; ++h) ev.push_back({0, "loss", fmt::format("host:{}:in", h), p});
    } else {  // core: both directions of every top-tier link
      for (size_t i = 0; i < t.core_links.size(); ++i) {
        ev.push_back({0, "loss", fmt::format("core:{}", i), p});
      }
    }
  }
  // Spread over the top tier: every 7th link.
  for (int i = 0; i < o.degrade && i < static_cast<int>(t.core_links.size()); ++i) {
    ev.push_back(
        {0, "rate", fmt::format("core:{}", (i * 7) % t.core_links.size()), o.degrade_fraction});
  }
  if (o.link_down_at_us >= 0) ev.push_back({o.link_down_at_us, "down", "core:0", 1});
  if (o.gray_at_us >= 0) ev.push_back({o.gray_at_us, "loss", "core:0", o.gray_fraction});
  for (const std::string& spec : o.event_specs) ev.push_back(parse_event(spec));
  return ev;
}

// Schedules the events on the experiment's fabric (those at time 0 apply
// at once). Throws on a link the topology does not have.
// An option whose value must name an alternative of a registry.
template <class Registry>
CLI::Validator registered(const char* kind, const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) {
        return braid::registry_index<Registry>(s) ? std::string{} : "no " + what + " is named " + s;
      },
      kind);
}

// Scenario files in JSON: one object whose keys are the long options'
// names and whose values are what the command line would give them
// (numbers, strings, booleans for flags, arrays for repeated options).
// "flow" and "event" entries may also be objects:
//   {"src": 0, "dst": 5, "bytes": "2M", "start_us": 10, "after": 3}
//   {"at_us": 500, "kind": "down", "link": "core:0", "value": 0.25}
// Options on the command line win over the file's.
class JsonConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App*, bool, bool, std::string) const override {
    throw CLI::ConfigError("braid_fabric writes no scenario files");
  }

  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in, nullptr, true, /*ignore_comments=*/true);
    } catch (const nlohmann::json::exception& e) {
      throw CLI::ConfigError(std::string("scenario file: ") + e.what());
    }
    if (!j.is_object()) throw CLI::ConfigError("scenario file: want one JSON object");
    std::vector<CLI::ConfigItem> items;
    for (const auto& [key, value] : j.items()) {
      CLI::ConfigItem item;
      item.name = key;
      if (value.is_array()) {
        for (const auto& v : value) item.inputs.push_back(text_of(key, v));
      } else if (!value.is_null()) {
        item.inputs.push_back(text_of(key, value));
      }
      items.push_back(std::move(item));
    }
    return items;
  }

 private:
  static std::string scalar(const std::string& key, const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
    if (v.is_number()) return fmt::format("{}", v.get<double>());
    throw CLI::ConfigError("scenario file: '" + key + "' wants a number, string or boolean");
  }
  static std::string field(const std::string& key, const nlohmann::json& o, const char* name,
                           const std::string& otherwise) {
    if (!o.contains(name)) {
      if (otherwise.empty()) {
        throw CLI::ConfigError("scenario file: a '" + key + "' entry wants '" + name + "'");
      }
      return otherwise;
    }
    return scalar(key, o.at(name));
  }
  static std::string text_of(const std::string& key, const nlohmann::json& v) {
    if (!v.is_object()) return scalar(key, v);
    if (key == "flow") {
      return field(key, v, "src", "") + " " + field(key, v, "dst", "") + " " +
             field(key, v, "bytes", "") + " " + field(key, v, "start_us", "0") + " " +
             field(key, v, "after", "-1") + " " + field(key, v, "qp", "0");
    }
    if (key == "event") {
      return field(key, v, "at_us", "") + " " + field(key, v, "kind", "") + " " +
             field(key, v, "link", "") + " " + field(key, v, "value", "1");
    }
    throw CLI::ConfigError("scenario file: '" + key + "' takes no objects");
  }
};

// The command line (and --config's JSON keys).
void add_options(CLI::App& app, Options& o) {
  app.add_option("--scenario", o.scenario,
                 "permutation, incast, single (one flow alone), all-to-all, allreduce (ring), "
                 "halving-doubling (allreduce), victim (a flow into a host under the same edge as "
                 "a --incast incast), victim-alone, background (the victim flow in a --load "
                 "background load), flows (only --flows and --flow)")
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
  app.add_option("--incast-from", o.incast_from,
                 "incast: the senders are the hosts from this one on (htsim's placement: 64 at "
                 "k=8); default: spread evenly over the other hosts");
  app.add_option("--profile", o.profiles,
                 "transport profiles run side by side: braid (64 entropies round robin, fixed "
                 "window), nscc (with NSCC), nscc-reps (NSCC and REPS path selection), nscc-bitmap "
                 "(NSCC and bitmap-penalty path selection), credit (REPS and receiver-driven "
                 "credit), nscc-credit (NSCC, REPS and receiver-driven credit), "
                 "single-path (one entropy), pfc (one entropy, lossless fabric), rocev2-like (one "
                 "entropy, DCQCN, lossless fabric)")
      ->capture_default_str();
  app.add_option("--credit-speculative", o.credit_speculative,
                 "receiver-driven credit: bytes a sender may send from idle before credit comes "
                 "(0: one BDP)")
      ->capture_default_str();
  app.add_option("--cc", o.cc,
                 "congestion control instead of the profile's: fixed, nscc, dcqcn, or any other "
                 "algorithm the build registers (lib/core/cc/registry.h)")
      ->check(registered<braid::CcAlgorithms>("ALGORITHM", "congestion control"));
  app.add_option("--paths", o.paths,
                 "path policy instead of the profile's: round-robin, reps, bitmap, or any other "
                 "policy the build registers (lib/core/paths/registry.h)")
      ->check(registered<braid::PathPolicies>("POLICY", "path policy"));
  app.add_option("--cc-scope", o.cc_scope,
                 "peer: a host's QPs to one peer share a congestion state; connection: one each")
      ->check(CLI::IsMember({"peer", "connection"}))
      ->capture_default_str();
  app.add_option("--pdc-scope", o.pdc_scope,
                 "peer: a host's QPs to one peer (flows' qp) are queue pairs of one connection "
                 "(one PDC per peer and direction); qp: a connection each")
      ->check(CLI::IsMember({"peer", "qp"}))
      ->capture_default_str();
  app.add_flag("!--no-trim", o.trim, "drop at full queues instead of trimming (5 BDP queues)");
  app.add_option("--fabric-gbps", o.fabric_gbps,
                 "switch-to-switch link rate, Gb/s (default --gbps)");
  app.add_option("--mtu", o.mtu, "payload bytes per packet (default the profile's, 4096)")
      ->check(CLI::Range(256, 9000));
  app.add_option("--queue-bytes", o.queue_bytes, "egress queue in bytes (instead of --queue-bdp)");
  app.add_option("--ecn-kmin-bytes", o.ecn_kmin_bytes,
                 "WRED Kmin in bytes (instead of --ecn-kmin)");
  app.add_option("--ecn-kmax-bytes", o.ecn_kmax_bytes,
                 "WRED Kmax in bytes (instead of --ecn-kmax)");
  app.add_option("--ecn-pmax", o.ecn_pmax, "WRED's marking probability at Kmax")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--watch-core", o.watch_core,
                 "the top-tier link whose queues --timeseries writes (its index; leaf-spine: "
                 "leaf-major, a link per spine)")
      ->check(CLI::NonNegativeNumber);
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
  app.add_option(
      "--flows", o.flows_file,
      "--scenario flows: a file of one flow per line, 'src dst bytes [start_us [after [qp]]]' "
      "(after: the index of a flow it waits for, -1 none; qp: flows of one host pair with "
      "different qps run on their own connections; # comments)");
  app.add_option(
      "--flow", o.flow_specs,
      "a flow added to the scenario's: 'src dst bytes [start_us [after [qp]]]' (repeatable)");
  app.add_option("--event", o.event_specs,
                 "a link event, 'at_us kind link [value]' (repeatable): kind down, up, rate "
                 "(value: fraction of the rate) or loss (value: fraction dropped silently, default "
                 "1); link core:I or host:H, both ways, or core:I:up|down, host:H:in|out");
  app.add_option("--load", o.load, "background: offered load, fraction of every host's links")
      ->capture_default_str();
  app.add_option("--duration-us", o.duration_us, "background: flows arrive during this time")
      ->capture_default_str();
  app.add_option("--victim-at-us", o.victim_at_us,
                 "background: the victim flow's start (default: half the duration)");
  app.config_formatter(std::make_shared<JsonConfig>());
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_config("--config", "",
                 "a scenario file: a JSON object of these options' long names and values "
                 "(flow and event entries may be objects; see docs/fabric-results.md)");
  app.add_option("--json", o.json, "write one JSON line per profile's summary to this file");
  app.add_option("--timeseries", o.timeseries,
                 "write delivered bytes and watched queues every --sample-us to this file");
  app.add_option("--sample-us", o.sample_us, "time series period")->capture_default_str();
  app.add_option("--entropy-series", o.entropy_series,
                 "write every entropy of the --entropy-flows' senders every --sample-us to this "
                 "file: counters, state, and the top-tier link it crosses");
  app.add_option("--flow-series", o.flow_series,
                 "write every flow's bytes placed at its receiver every --sample-us to this CSV "
                 "file (profile,time_us,flow,bytes)");
  app.add_option("--entropy-flows", o.entropy_flows,
                 "flows whose entropies --entropy-series writes")
      ->capture_default_str();
}

// The files the options ask for, each with its header line.
struct Outputs {
  explicit Outputs(const Options& o) {
    if (!o.csv.empty()) {
      csv = std::make_unique<std::ofstream>(o.csv);
      *csv << "profile,flow,src,dst,bytes,start_ns,end_ns,fct_us,goodput_pct,ok,retransmits,"
              "timeouts,lost_inferred,lost_nacked,trimmed_received,ecn_acked,status\n";
    }
    if (!o.json.empty()) json = std::make_unique<std::ofstream>(o.json);
    if (!o.timeseries.empty()) {
      timeseries = std::make_unique<std::ofstream>(o.timeseries);
      *timeseries << "profile,time_us,delivered_bytes,queue_host0,queue_core_up,queue_core_down"
                  << (has_victim(o.scenario) ? ",victim_bytes" : "") << "\n";
    }
    if (!o.flow_series.empty()) {
      flow_series = std::make_unique<std::ofstream>(o.flow_series);
      *flow_series << "profile,time_us,flow,bytes\n";
    }
    if (!o.entropy_series.empty()) {
      entropy_series = std::make_unique<std::ofstream>(o.entropy_series);
      *entropy_series
          << "profile,time_us,flow,entropy,udp_src_port,state,sent,acked,ecn_marked,lost,"
             "srtt_us,core_link\n";
    }
  }
  std::unique_ptr<std::ofstream> csv, json, timeseries, flow_series, entropy_series;
};

// Runs one profile's experiment until its flows end or the time limit, in
// slices of virtual time, with a progress line on stderr every few seconds
// of wall time for long runs. True when every flow ended; *wall: seconds.
bool run_experiment(Experiment& x, const Options& o, const std::string& name, double* wall) {
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
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  *wall = wall_s;
  return all;
}

// One profile's line of the table, its notes, and its lines in the files.
// Returns 1 if a flow failed or did not end, else 0.
int report(const std::string& name, Experiment& x, const Summary& s, double wall, bool all,
           const Options& o, uint64_t bytes, int victim, Outputs& out) {
  int status = 0;
  auto& csv = out.csv;
  auto& json = out.json;
  auto& timeseries = out.timeseries;
  auto& flow_series = out.flow_series;
  auto& entropy_series = out.entropy_series;
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
  if (victim >= 0) {
    const FlowResult& v = x.results()[victim];
    fmt::print("  {}: victim flow {} -> {}: FCT {:.1f} us\n", name, v.spec.src, v.spec.dst,
               v.fct() / 1000.0);
  }
  if (timeseries) {
    for (const Experiment::Sample& smp : x.samples()) {
      uint64_t total = 0;
      for (uint64_t b : smp.flow_bytes) total += b;
      *timeseries << fmt::format("{},{:.3f},{}", name, smp.at / 1000.0, total);
      for (uint64_t q : smp.queue_bytes) *timeseries << "," << q;
      if (victim >= 0) *timeseries << "," << smp.flow_bytes[victim];
      *timeseries << "\n";
    }
  }
  if (flow_series) {
    for (const Experiment::Sample& smp : x.samples()) {
      for (size_t i = 0; i < smp.flow_bytes.size(); ++i) {
        *flow_series << fmt::format("{},{:.3f},{},{}\n", name, smp.at / 1000.0, i,
                                    smp.flow_bytes[i]);
      }
    }
  }
  if (entropy_series) {
    // A top-tier link is two ports, one per direction: core_links[i] and
    // the next.
    const std::vector<int>& core = x.topology().core_links;
    for (const Experiment::Sample& smp : x.samples()) {
      for (const Experiment::EntropySample& e : smp.entropies) {
        int link = -1;
        for (int p : e.ports) {
          for (size_t i = 0; i < core.size() && link < 0; ++i) {
            if (p == core[i] || p == core[i] + 1) link = static_cast<int>(i);
          }
        }
        *entropy_series << fmt::format("{},{:.3f},{},{},{},{},{},{},{},{},{:.3f},{}\n", name,
                                       smp.at / 1000.0, e.flow, e.index, e.udp_src_port,
                                       static_cast<int>(e.state), e.sent, e.acked, e.ecn_marked,
                                       e.lost, e.srtt_ns / 1000.0, link);
      }
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
      *csv << fmt::format("{},{},{},{},{},{},{},{:.3f},{:.2f},{},{},{},{},{},{},{},{}\n", name, i,
                          r.spec.src, r.spec.dst, r.spec.bytes, r.spec.start,
                          r.end == braid::kNever ? -1 : static_cast<int64_t>(r.end), fct_us, gput,
                          r.ok ? 1 : 0, r.sender.retransmits, r.sender.timeouts,
                          r.sender.lost_inferred, r.sender.lost_nacked, r.receiver.trimmed_received,
                          r.ecn_acked,
                          r.end == braid::kNever ? "unfinished" : braid::wc_status_name(r.status));
    }
  }
  fmt::print("  {}: {} events in {:.2f} s of wall time ({:.2f} M/s), {:.3f} ms of virtual time\n",
             name, s.events, wall, s.events / wall / 1e6, x.fabric().now() / 1e6);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Braid's protocol core on a simulated datacenter fabric: scenarios side by side for "
      "transport profiles (docs/fabric-results.md)"};
  add_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 names an unknown key as if the file were INI.
    fmt::print(stderr,
               "braid_fabric: scenario file {}: {}\n(keys are the long options' names, as --help "
               "lists them)\n",
               app.get_config_ptr()->as<std::string>(), e.what());
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  uint64_t bytes = 0;
  try {
    bytes = parse_size(o.size);
  } catch (const std::exception& e) {
    fmt::print(stderr, "braid_fabric: bad --size '{}': {}\n", o.size, e.what());
    return 2;
  }
  Outputs out(o);
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
  int victim = -1;  // the victim flow's index
  for (const std::string& name : o.profiles) {
    ExperimentConfig ec;
    try {
      ec.profile = profile_named(name);
      ec.profile.credit_speculative_bytes = o.credit_speculative;
      ec.profile.cc_per_peer = o.cc_scope == "peer";
      ec.profile.pdc_per_peer = o.pdc_scope == "peer";
      if (!o.cc.empty()) ec.profile.cc = *braid::cc_algorithm_named(o.cc);
      if (!o.paths.empty()) ec.profile.paths = *braid::path_policy_named(o.paths);
      if (o.mtu != 0) ec.profile.mtu = o.mtu;
    } catch (const std::exception& e) {
      fmt::print(stderr, "braid_fabric: {}\n", e.what());
      return 2;
    }
    ec.topo = topo;
    finish_switch_config(ec.topo, o, ec.profile);
    ec.seed = o.seed;
    Experiment x(ec);
    try {
      std::vector<FlowSpec> flows = flows_of(o, x.hosts(), bytes, victim);
      if (flows.empty()) throw CLI::ValidationError("--flow", "the scenario has no flows");
      for (const FlowSpec& f : flows) x.add_flow(f);
      schedule_events(events_of(o, x.topology(), x.hosts()), o.gbps, x);
    } catch (const std::exception& e) {
      fmt::print(stderr, "braid_fabric: {}\n", e.what());
      return 2;
    }
    if (out.entropy_series) x.watch_entropies(o.entropy_flows);
    if (!o.timeseries.empty() || out.entropy_series || out.flow_series) {
      // Watched: the port into host 0 (the incast's receiver) and a
      // top-tier link (--watch-core, the first by default), both ways.
      const Fabric& f = x.fabric();
      std::vector<int> ports{f.port_between(x.topology().host_edge[0], f.node_of_host(0))};
      const auto& core = x.topology().core_links;
      if (!core.empty()) {
        const size_t w = static_cast<size_t>(o.watch_core) < core.size() ? o.watch_core : 0;
        ports.push_back(core[w]);
        ports.push_back(core[w] + 1);
      }
      x.sample_every(static_cast<TimeNs>(o.sample_us * 1000), ports);
    }
    double wall = 0;
    const bool all = run_experiment(x, o, name, &wall);
    const Summary s = x.summarize(wall);
    status |= report(name, x, s, wall, all, o, bytes, victim, out);
  }
  return status;
}
