// braid_stat: live statistics of running Braid programs. Every Braid device
// opened with braid_device_config.stats = 1, or with BRAID_STATS=1 in its
// environment (perftest tools, programs on Braid's libibverbs), publishes its
// port's, QPs' and entropies' counters in /dev/shm/braid-stats.<pid>.<n>
// (lib/engine/stats_shm.h); this tool reads them without disturbing the
// program and prints rates per interval, or totals.
//
//   braid_stat                   list the objects and whether their process runs
//   braid_stat -w               watch every live one, once a second
//   braid_stat -w --paths       ... with a line per entropy of each QP
//   braid_stat --totals -c 1    counters since the start, once
//   braid_stat --clean          remove the objects of processes that exited
// A device with several engines (braid_device_config.engines) publishes an
// object per engine; a "device" line after them sums their port counters.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/congestion_control.h"
#include "engine/stats_shm.h"

namespace {

using braid::stats::Conn;
using braid::stats::Path;
using braid::stats::Snapshot;

struct Options {
  std::vector<std::string> names;
  int pid = 0;
  double interval_s = 1.0;
  int count = 0;  // 0: until interrupted
  bool watch = false;
  bool paths = false;
  bool totals = false;
  int64_t qp = -1;
  double wait_s = 0;
};

std::string ipv4(uint32_t host_order) {
  return fmt::format("{}.{}.{}.{}", host_order >> 24, (host_order >> 16) & 255,
                     (host_order >> 8) & 255, host_order & 255);
}

std::string cc_name(const Conn& c) {
  const std::string_view n = braid::cc_algorithm_name(static_cast<braid::CcAlgorithm>(c.cc));
  return n.empty() ? "?" : std::string(n);
}
std::string policy_name(const Conn& c) {
  const std::string_view n = braid::path_policy_name(static_cast<braid::PathPolicy>(c.policy));
  return n.empty() ? "?" : std::string(n);
}
const char* path_state(uint8_t s) {
  static const char* const kNames[] = {"good", "skip", "bad"};
  return s < 3 ? kNames[s] : "?";
}

// Rates over `secs` when a previous snapshot is given; totals otherwise.
struct Delta {
  const Snapshot& now;
  const Snapshot* before;
  double secs;
  double per(uint64_t a, uint64_t b) const {
    return before ? static_cast<double>(a - b) / secs : a;
  }
  double per32(uint32_t a, uint32_t b) const {
    return before ? static_cast<double>(static_cast<uint32_t>(a - b)) / secs : a;
  }
};

std::string count(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

const Conn* find_conn(const Snapshot& s, const Conn& c, size_t* index) {
  for (size_t i = 0; i < s.conns.size(); ++i) {
    if (s.conns[i].local_id == c.local_id && s.conns[i].qp_num == c.qp_num) {
      *index = i;
      return &s.conns[i];
    }
  }
  return nullptr;
}

void print(const std::string& name, const Delta& d, const Options& o) {
  const Snapshot& s = d.now;
  const Snapshot* b = d.before;
  const auto& in = s.info;
  const auto& ib = b ? b->info : in;
  const char* unit = b ? "/s" : "";
  fmt::print("{}  pid {}  {}:{}  {}  {} QP{}{}  {}\n", name, s.pid, ipv4(in.ip), in.udp_port,
             in.port, in.conns_total, in.conns_total == 1 ? "" : "s",
             in.conns < in.conns_total ? fmt::format(" ({} shown)", in.conns) : "",
             b ? fmt::format("rates over {:.2f} s", d.secs) : "totals since start");
  fmt::print(
      "  port  rx {}{}  tx {}{}  dropped {}  missed {}  tx-dropped {}  ring-full {}  "
      "no-buffer {}\n",
      count(d.per(in.rx_frames, ib.rx_frames)), unit, count(d.per(in.tx_frames, ib.tx_frames)),
      unit, in.rx_dropped - (b ? ib.rx_dropped : 0), in.rx_missed - (b ? ib.rx_missed : 0),
      in.tx_dropped - (b ? ib.tx_dropped : 0), in.tx_ring_full - (b ? ib.tx_ring_full : 0),
      in.tx_no_buffer - (b ? ib.tx_no_buffer : 0));
  if (s.conns.empty()) return;
  fmt::print(
      "  {:>6} {:>15} {:>5} {:>12}  {:>8} {:>7} {:>8} {:>8} {:>8}  {:>14} {:>6} {:>6} "
      "{:>8} {:>8} {:>8} {:>9} {:>5}\n",
      "qpn", "peer", "state", "cc/paths", "tx", "retx", "rx", "placed", "acks", "lost i/n/t", "ecn",
      "cnp", "srtt us", "cwnd KB", "infl KB", "rate Gb/s", "bad");
  for (size_t i = 0; i < s.conns.size(); ++i) {
    const Conn& c = s.conns[i];
    if (o.qp >= 0 && c.qp_num != static_cast<uint64_t>(o.qp)) continue;
    size_t bi = 0;
    const Conn* cb = b ? find_conn(*b, c, &bi) : nullptr;
    if (b != nullptr && cb == nullptr) {
      fmt::print(
          "  {:>6} {:>15} {:>5} {:>12}  (new since the last print: rates from the next)\n",
          c.qp_num, ipv4(c.remote_ip), c.state == 0 ? "ok" : "ERROR",
          fmt::format("{}{}/{}{}", cc_name(c), c.credit ? "+cr" : "", policy_name(c), c.entropies));
      continue;
    }
    const Delta cd{s, b, d.secs};
    const auto& k = c.counters;
    const braid::ConnectionStats zero{};
    const auto& kb = cb ? cb->counters : zero;
    // Bits per second over an interval, bytes in totals.
    const double placed = cd.per(k.bytes_placed, kb.bytes_placed) * (b ? 8 : 1);
    fmt::print(
        "  {:>6} {:>15} {:>5} {:>12}  {:>8} {:>7} {:>8} {:>8} {:>8}  {:>14} {:>6} {:>6} {:>8.1f} "
        "{:>8.1f} {:>8.1f} {:>9} {:>5}\n",
        c.qp_num, ipv4(c.remote_ip), c.state == 0 ? "ok" : "ERROR",
        fmt::format("{}{}/{}{}", cc_name(c), c.credit ? "+cr" : "", policy_name(c), c.entropies),
        count(cd.per(k.data_sent, kb.data_sent)), count(cd.per(k.retransmits, kb.retransmits)),
        count(cd.per(k.data_received, kb.data_received)), count(placed) + (b ? "b" : "B"),
        count(cd.per(k.acks_received, kb.acks_received)),
        fmt::format("{}/{}/{}", count(cd.per(k.lost_inferred, kb.lost_inferred)),
                    count(cd.per(k.lost_nacked, kb.lost_nacked)),
                    count(cd.per(k.lost_timeout, kb.lost_timeout))),
        count(cd.per(k.ecn_received, kb.ecn_received)),
        count(cd.per(k.cnps_received, kb.cnps_received)), static_cast<double>(c.srtt_ns) / 1e3,
        c.cwnd_bytes / 1024.0, c.inflight_bytes / 1024.0,
        c.rate_bps ? fmt::format("{:.2f}", static_cast<double>(c.rate_bps) / 1e9) : "-",
        c.paths_bad);
    if (!o.paths) continue;
    fmt::print("         {:>7} {:>5} {:>8} {:>8} {:>6} {:>6} {:>8} {:>8} {:>8}\n", "entropy",
               "state", "sent", "acked", "ecn%", "lost", "srtt us", "min us", "late us");
    const auto& ps = s.paths[i];
    for (size_t j = 0; j < ps.size(); ++j) {
      const Path& p = ps[j];
      const Path* pb = b && j < b->paths[bi].size() ? &b->paths[bi][j] : nullptr;
      const Delta pd{s, pb ? b : nullptr, d.secs};
      const Path zp{};
      const Path& q = pb ? *pb : zp;
      fmt::print("         {:>7} {:>5} {:>8} {:>8} {:>6.1f} {:>6} {:>8.1f} {:>8.1f} {:>8.1f}\n",
                 p.udp_src_port, path_state(p.state), count(pd.per32(p.sent, q.sent)),
                 count(pd.per32(p.acked, q.acked)), p.mark_rate * 100.0 / 32768,
                 count(pd.per32(p.lost, q.lost)), p.srtt_ns / 1e3, p.min_rtt_ns / 1e3,
                 p.late_ns / 1e3);
    }
  }
}

// A verbs device with several engines publishes an object per engine, all
// with its process, address and UDP port: the device's sums over them.
struct DeviceKey {
  int32_t pid;
  uint32_t ip;
  uint16_t udp_port;
  auto operator<=>(const DeviceKey&) const = default;
};
struct DeviceSum {
  int engines = 0;
  uint64_t qps = 0;
  double rx = 0, tx = 0;  // frames: per second over the interval, or totals
  uint64_t dropped = 0, missed = 0, tx_dropped = 0, ring_full = 0, no_buffer = 0;
  void add(const Delta& d) {
    const auto& in = d.now.info;
    const auto& ib = d.before ? d.before->info : in;
    const bool b = d.before != nullptr;
    ++engines;
    qps += in.conns_total;
    rx += d.per(in.rx_frames, ib.rx_frames);
    tx += d.per(in.tx_frames, ib.tx_frames);
    dropped += in.rx_dropped - (b ? ib.rx_dropped : 0);
    missed += in.rx_missed - (b ? ib.rx_missed : 0);
    tx_dropped += in.tx_dropped - (b ? ib.tx_dropped : 0);
    ring_full += in.tx_ring_full - (b ? ib.tx_ring_full : 0);
    no_buffer += in.tx_no_buffer - (b ? ib.tx_no_buffer : 0);
  }
};

void print_devices(const std::map<DeviceKey, DeviceSum>& devices, bool rates) {
  const char* unit = rates ? "/s" : "";
  for (const auto& [k, d] : devices) {
    if (d.engines < 2) continue;
    fmt::print(
        "device  pid {}  {}:{}  {} engines  {} QP{}  rx {}{}  tx {}{}  dropped {}  missed {}  "
        "tx-dropped {}  ring-full {}  no-buffer {}\n",
        k.pid, ipv4(k.ip), k.udp_port, d.engines, d.qps, d.qps == 1 ? "" : "s", count(d.rx), unit,
        count(d.tx), unit, d.dropped, d.missed, d.tx_dropped, d.ring_full, d.no_buffer);
  }
}

std::vector<std::string> targets(const Options& o) {
  if (!o.names.empty()) return o.names;
  std::vector<std::string> out;
  for (const auto& l : braid::stats::list_publishers()) {
    if (l.alive && (o.pid == 0 || l.pid == o.pid)) out.push_back(l.name);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"braid_stat: live statistics of running Braid programs (BRAID_STATS=1)"};
  Options o;
  bool clean = false;
  app.add_option("-n,--name", o.names, "statistics objects (braid-stats.PID.N); default: all live");
  app.add_option("-p,--pid", o.pid, "only the objects of this process");
  app.add_flag("-w,--watch", o.watch, "print every interval (default when -c is given)");
  app.add_option("-i,--interval", o.interval_s, "seconds between prints")
      ->check(CLI::Range(0.01, 3600.0));
  app.add_option("-c,--count", o.count, "prints, then stop (0: until interrupted)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--paths", o.paths, "a line per entropy of each QP");
  app.add_flag("--totals", o.totals, "counters since the start instead of rates");
  app.add_option("--qp", o.qp, "only this QP number");
  app.add_option("--wait", o.wait_s,
                 "wait up to this many seconds for an object to appear (exit 1 if none does)");
  app.add_flag("--clean", clean, "remove the objects of processes that exited");
  CLI11_PARSE(app, argc, argv);

  if (clean) {
    for (const auto& l : braid::stats::list_publishers()) {
      if (l.alive) continue;
      if (shm_unlink(("/" + l.name).c_str()) == 0) fmt::print("removed {}\n", l.name);
    }
    return 0;
  }
  const bool watching = o.watch || o.count > 0 || o.totals || !o.names.empty() || o.pid != 0;
  std::vector<std::string> names = targets(o);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.wait_s);
  while (names.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    names = targets(o);
  }
  if (!watching) {
    const auto all = braid::stats::list_publishers();
    if (all.empty()) {
      fmt::print("no Braid statistics in /dev/shm (open devices with BRAID_STATS=1)\n");
      return o.wait_s > 0 ? 1 : 0;
    }
    for (const auto& l : all) {
      Snapshot s;
      std::string err;
      if (l.alive && braid::stats::read_snapshot(l.name, &s, &err)) {
        fmt::print("{}  pid {}  {}:{}  {}  {} QPs\n", l.name, l.pid, ipv4(s.info.ip),
                   s.info.udp_port, s.info.port, s.info.conns_total);
      } else {
        fmt::print("{}  pid {}  {}\n", l.name, l.pid,
                   l.alive ? err : "exited (--clean removes it)");
      }
    }
    return 0;
  }
  if (names.empty()) {
    fmt::print(stderr, "braid_stat: no live Braid statistics object{}\n",
               o.pid ? fmt::format(" of pid {}", o.pid) : "");
    return 1;
  }
  // Without names, programs that start later are picked up as they appear.
  const bool follow = o.names.empty();
  std::map<std::string, Snapshot> before;
  const auto period = std::chrono::duration<double>(o.interval_s);
  auto sample = [&](const std::string& n) {
    Snapshot s;
    std::string err;
    if (braid::stats::read_snapshot(n, &s, &err)) before[n] = std::move(s);
  };
  if (!o.totals) {
    for (const auto& n : names) sample(n);
  }
  int failures = 0;
  for (int printed = 0; o.count == 0 || printed < o.count; ++printed) {
    if (!o.totals || printed > 0) std::this_thread::sleep_for(period);
    if (follow) {
      names = targets(o);
      if (names.empty()) {
        fmt::print("braid_stat: every program has exited\n");
        return 0;
      }
    }
    failures = 0;
    std::map<DeviceKey, DeviceSum> devices;
    bool any_rates = false;
    for (const auto& n : names) {
      auto it = before.find(n);
      if (!o.totals && it == before.end()) {
        sample(n);  // new: its rates start with the next print
        continue;
      }
      Snapshot s;
      std::string err;
      if (!braid::stats::read_snapshot(n, &s, &err)) {
        fmt::print(stderr, "braid_stat: {}\n", err);
        ++failures;
        continue;
      }
      const bool rates = !o.totals && s.info.time_ns > it->second.info.time_ns;
      const double secs =
          rates ? static_cast<double>(s.info.time_ns - it->second.info.time_ns) / 1e9 : 0;
      const Delta d{s, rates ? &it->second : nullptr, secs};
      print(n, d, o);
      devices[DeviceKey{s.pid, s.info.ip, s.info.udp_port}].add(d);
      any_rates |= rates;
      before[n] = std::move(s);
    }
    print_devices(devices, any_rates);
    std::fflush(stdout);
    if (!follow && failures == static_cast<int>(names.size())) return 1;  // every one has gone
  }
  return failures == 0 ? 0 : 1;
}
