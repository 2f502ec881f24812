// braid_switch: a software switch on the DPDK datapath, for testing Braid
// (or any UDP traffic) over a multipath fabric on one host. Each --port is a
// DPDK port (a memif server or vhost-user socket a host attaches to); between
// every two ports run --links parallel full-duplex core links chosen by an
// ECMP hash of the 5-tuple, so each UDP source port (entropy) keeps to one of
// them. Core links (each direction) and ports have a rate, a buffer, WRED
// ECN marking, trimming and loss (sim/switch/soft_switch.h); core links
// can be taken down or made to drop everything silently, mid-run, by
// commands on a control FIFO:
//   link K up|down|blackhole      link K rate MBPS     link K loss P
//   link K ecn KMIN KMAX PMAX     port P rate MBPS     port P ecn KMIN KMAX PMAX
//   stats     stats clear (counters start again)     quit
// (--set runs them at start, or as '@N command' once N frames have come in.)
// It prints every queue's counters when it stops (SIGINT, SIGTERM, quit,
// --duration). --series FILE writes a CSV row every --series-us: each core
// link direction's queued bytes and bytes sent so far, and per host port the
// data bytes that came in there and have been delivered (scripts/
// plot-switch-series.py draws them).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dpdk/eal.h"
#include "dpdk/ethdev_port.h"
#include "engine/idle_yield.h"
#include "switch/soft_switch.h"

namespace {

// A memif host's exit against the switch's bursts. DPDK 22.11's memif PMD
// handles a peer's disconnect on the EAL's interrupt thread: it clears the
// port's connected flag, then unmaps the shared regions (rings and
// buffers) and frees their records, with nothing to wait for a burst that
// checked the flag just before (it checks once, on entry) and is reading
// them: SIGSEGV, about 1 run in 20 with 16 hosts exiting. Parking the
// interrupt thread while bursts run and giving it turns between passes
// works, but each turn waits for that thread to be scheduled (13-50% of
// the switch's time, or ranks reconnecting mid-run kept waiting).
// Instead, the switch's munmap (this executable's definition takes
// precedence over libc's for DPDK's libraries) waits, when another thread
// calls it while the main loop is inside a pass of bursts, for that pass
// to end. A pass that starts after the flag was cleared sees it cleared
// (the fence below, and the locked add that starts a pass, order the two
// threads' accesses), returns at once from that port, and touches no
// region. The region records are freed only after the first region is
// unmapped, so after this wait too.
std::atomic<uint64_t> g_pass{0};           // odd while the main loop bursts
std::atomic<pid_t> g_bursting_tid{0};      // that loop's thread (0: none)
std::atomic<uint64_t> g_unmaps_waited{0};  // munmaps that waited for a pass

}  // namespace

extern "C" int munmap(void* addr, size_t len) noexcept {
  const pid_t bursting = g_bursting_tid.load(std::memory_order_relaxed);
  if (bursting != 0 && static_cast<pid_t>(syscall(SYS_gettid)) != bursting) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint64_t pass = g_pass.load();
    if (pass & 1) {
      while (g_pass.load() == pass) std::this_thread::yield();
      g_unmaps_waited.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return static_cast<int>(syscall(SYS_munmap, addr, len));
}

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop = true;
}

braid::TimeNs now_ns() {
  return static_cast<braid::TimeNs>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// "KMIN,KMAX,PMAX" (bytes, bytes, probability).
bool parse_ecn(const std::string& s, braid::sw::QueueConfig* q) {
  unsigned kmin = 0, kmax = 0;
  double pmax = 0;
  if (std::sscanf(s.c_str(), "%u,%u,%lf", &kmin, &kmax, &pmax) != 3 || kmin == 0 || kmax < kmin ||
      pmax <= 0 || pmax > 1) {
    return false;
  }
  q->ecn_kmin_bytes = kmin;
  q->ecn_kmax_bytes = kmax;
  q->ecn_pmax = pmax;
  return true;
}

// One command line from the control FIFO; an answer on stdout.
bool run_command(const std::string& line, braid::sw::SoftSwitch& sw) {
  std::istringstream in(line);
  std::string what, verb;
  unsigned index = 0;
  in >> what;
  if (what.empty()) return true;
  if (what == "quit") return false;
  if (what == "stats") {
    std::string sub;
    if (in >> sub && sub == "clear") {
      sw.clear_queue_stats();
      std::printf("braid_switch: done '%s'\n", line.c_str());
      std::fflush(stdout);
      return true;
    }
    std::fputs(sw.describe().c_str(), stdout);
    std::fflush(stdout);
    return true;
  }
  const bool link = what == "link";
  if ((!link && what != "port") || !(in >> index >> verb) ||
      index >= (link ? sw.core_links() : sw.ports())) {
    std::printf("braid_switch: bad command '%s'\n", line.c_str());
    std::fflush(stdout);
    return true;
  }
  // A link's command applies to both its directions.
  std::vector<braid::sw::QueueConfig*> qs;
  if (link) {
    for (braid::sw::Dir d : {braid::sw::Dir::kToHigher, braid::sw::Dir::kToLower}) {
      qs.push_back(&sw.core_config(static_cast<uint16_t>(index), d));
    }
  } else {
    qs.push_back(&sw.egress_config(static_cast<uint16_t>(index)));
  }
  braid::sw::QueueConfig q = *qs[0];
  bool ok = true;
  if (link && (verb == "up" || verb == "down" || verb == "blackhole")) {
    sw.set_link_state(static_cast<uint16_t>(index), verb == "up" ? braid::sw::LinkState::kUp
                                                    : verb == "down"
                                                        ? braid::sw::LinkState::kDown
                                                        : braid::sw::LinkState::kBlackhole);
  } else if (verb == "rate") {
    ok = static_cast<bool>(in >> q.rate_mbps);
  } else if (verb == "loss" && link) {
    ok = static_cast<bool>(in >> q.loss) && q.loss >= 0 && q.loss <= 1;
  } else if (verb == "ecn") {
    unsigned kmin = 0, kmax = 0;
    double pmax = 0;
    ok = static_cast<bool>(in >> kmin >> kmax >> pmax) &&
         parse_ecn(fmt::format("{},{},{}", kmin, kmax, pmax), &q);
  } else {
    ok = false;
  }
  if (ok) {
    for (braid::sw::QueueConfig* c : qs) *c = q;
  }
  std::printf("braid_switch: %s '%s'\n", ok ? "done" : "bad command", line.c_str());
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"braid_switch: a software switch with ECMP core links over DPDK ports"};
  std::vector<std::string> ports;
  braid::sw::SoftSwitchConfig cfg;
  std::string ecn, core_ecn, control;
  std::vector<std::string> set;
  int lcore = 0;
  uint32_t mtu = 1500;
  uint32_t idle_yield = 0;
  double duration = 0;
  std::string series;
  std::vector<std::string> host_links;
  uint32_t series_us = 1000;
  app.add_option("--port", ports,
                 "a DPDK port a host attaches to, e.g. "
                 "net_memif0,role=server,id=0,socket=/tmp/p0.sock,socket-abstract=no (repeat)")
      ->required();
  app.add_option("--links", cfg.core_links, "parallel core links between every two ports")
      ->check(CLI::Range(1, 64));
  app.add_option("--seed", cfg.seed, "the ECMP hash's seed");
  app.add_option("--rate-mbps", cfg.egress.rate_mbps, "each port's egress rate (0: no limit)");
  app.add_option("--core-rate-mbps", cfg.core.rate_mbps, "each core link's rate (0: no limit)");
  app.add_option("--uplink-rate-mbps", cfg.uplink_rate_mbps,
                 "pace what each host sends at this rate, as its NIC would (memif and vhost "
                 "peers send at memory speed; 0: not paced)");
  app.add_option("--buffer", cfg.egress.buffer_bytes, "bytes per queue and class");
  app.add_option("--ecn", ecn, "WRED on the ports' egress: KMIN,KMAX,PMAX (bytes, bytes, 0..1]");
  app.add_option("--core-ecn", core_ecn, "WRED on the core links");
  app.add_flag("--trim", cfg.egress.trim, "trim instead of dropping when a queue is full");
  app.add_option("--loss", cfg.core.loss, "drop this share of data frames on every core link")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--mtu", mtu, "the largest IP packet carried")->check(CLI::Range(576, 9000));
  app.add_option("--set", set,
                 "a control command to run at start, e.g. 'link 1 ecn 3000 12000 1', or once N "
                 "frames have come in: '@N link 1 blackhole' (repeat)");
  app.add_option("--control", control, "a FIFO to read commands from (made if missing)");
  app.add_option("--lcore", lcore, "the core to run on");
  app.add_option("--idle-yield", idle_yield,
                 "yield the core after this many passes in a row that moved no frame, for more "
                 "busy processes than cores (0: never)");
  app.add_option("--duration", duration, "stop after this many seconds (0: on a signal)");
  app.add_option("--host-link", host_links,
                 "host ports behind one link of --rate-mbps, --buffer and --ecn, e.g. 0,2,4,6 "
                 "(a host with a port per process; an incast's receiver) (repeat)");
  app.add_option("--series", series,
                 "a CSV file to write queue depths and delivered bytes to, every --series-us");
  app.add_option("--series-us", series_us, "microseconds between --series rows")
      ->check(CLI::Range(10, 10'000'000));
  CLI11_PARSE(app, argc, argv);
  if (ports.size() > 64) {
    std::fprintf(stderr, "braid_switch: at most 64 ports\n");
    return 2;
  }
  cfg.ports = static_cast<uint16_t>(ports.size());
  for (const std::string& h : host_links) {
    std::vector<uint16_t> members;
    std::istringstream in(h);
    std::string item;
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      const unsigned long p = std::strtoul(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || p >= ports.size()) {
        std::fprintf(stderr, "braid_switch: --host-link %s: ports are 0..%zu, comma-separated\n",
                     h.c_str(), ports.size() - 1);
        return 2;
      }
      members.push_back(static_cast<uint16_t>(p));
    }
    cfg.host_links.push_back(members);
  }
  cfg.core.buffer_bytes = cfg.egress.buffer_bytes;
  cfg.core.trim = cfg.egress.trim;
  cfg.max_frame = mtu + 18;
  if ((!ecn.empty() && !parse_ecn(ecn, &cfg.egress)) ||
      (!core_ecn.empty() && !parse_ecn(core_ecn, &cfg.core))) {
    std::fprintf(stderr,
                 "braid_switch: --ecn wants KMIN,KMAX,PMAX with 0 < KMIN <= KMAX, 0 < PMAX <= 1\n");
    return 2;
  }

  braid::dpdk::EalConfig eal;
  eal.lcore = lcore;
  // Each port's mbuf pool takes about 17 MB at MTU 1500 (more for jumbo
  // frames): the EAL's default 512 MB ran out at 16 ports.
  eal.memory_mb = std::max<uint32_t>(
      512, 128 + static_cast<uint32_t>(ports.size()) * (mtu > 1500 ? 120u : 40u));
  for (const std::string& p : ports) eal.vdevs.push_back(p);
  if (const braid::dpdk::Status s = braid::dpdk::Eal::init(eal); !s.ok()) {
    std::fprintf(stderr, "braid_switch: %s\n", s.error.c_str());
    return 1;
  }
  std::vector<std::unique_ptr<braid::dpdk::EthdevPort>> io;
  for (const std::string& p : ports) {
    braid::dpdk::EthdevPortConfig pc;
    pc.name = p.substr(0, p.find(','));
    pc.mtu = mtu;
    pc.promiscuous = true;
    pc.require_link_up = false;  // hosts attach when they start
    std::string error;
    io.push_back(braid::dpdk::EthdevPort::open(pc, &error));
    if (!io.back()) {
      std::fprintf(stderr, "braid_switch: %s: %s\n", pc.name.c_str(), error.c_str());
      io.clear();
      braid::dpdk::Eal::shutdown();
      return 1;
    }
  }
  int control_fd = -1;
  if (!control.empty()) {
    if (access(control.c_str(), F_OK) != 0 && mkfifo(control.c_str(), 0600) != 0) {
      std::fprintf(stderr, "braid_switch: cannot make the FIFO %s\n", control.c_str());
      return 1;
    }
    // Read-write: the FIFO never reports end-of-file between writers.
    control_fd = open(control.c_str(), O_RDWR | O_NONBLOCK);
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  braid::sw::SoftSwitch sw(cfg);
  // "@N command": once N frames have come in (mid-run, whatever the timing).
  std::vector<std::pair<uint64_t, std::string>> later;
  for (const std::string& c : set) {
    if (!c.empty() && c[0] == '@') {
      const size_t sp = c.find(' ');
      later.emplace_back(std::strtoull(c.c_str() + 1, nullptr, 10),
                         sp == std::string::npos ? "" : c.substr(sp + 1));
    } else {
      run_command(c, sw);
    }
  }
  FILE* series_file = nullptr;
  if (!series.empty()) {
    series_file = std::fopen(series.c_str(), "w");
    if (series_file == nullptr) {
      std::fprintf(stderr, "braid_switch: cannot write %s\n", series.c_str());
      return 1;
    }
    std::fputs("t_s", series_file);
    for (uint16_t k = 0; k < sw.core_links(); ++k) {
      for (const char* d : {"to_higher", "to_lower"}) {
        std::fprintf(series_file, ",link%u_%s_queued,link%u_%s_sent", k, d, k, d);
      }
    }
    for (size_t h = 0; h < sw.host_links(); ++h) {
      std::fprintf(series_file, ",hostlink%zu_queued,hostlink%zu_sent", h, h);
    }
    for (uint16_t p = 0; p < sw.ports(); ++p) std::fprintf(series_file, ",port%u_delivered", p);
    std::fputc('\n', series_file);
  }
  std::printf("braid_switch: %zu ports, %u core links, ready\n", ports.size(), cfg.core_links);
  std::fflush(stdout);
  constexpr uint16_t kBurst = 32;
  braid::RxFrame rx[kBurst];
  braid::TxFrame tx[kBurst];
  // Frames taken from the switch that a full TX ring handed back.
  std::vector<std::vector<braid::TxFrame>> held(ports.size());
  std::string pending_line;
  const braid::TimeNs start = now_ns();
  const auto end =
      duration > 0 ? start + static_cast<braid::TimeNs>(duration * 1e9) : braid::kNever;
  bool running = true;
  braid::IdleYield idle(idle_yield);  // passes that moved no frame
  braid::TimeNs next_row = start;
  g_bursting_tid = static_cast<pid_t>(syscall(SYS_gettid));
  for (uint64_t iter = 0; running && !g_stop; ++iter) {
    const braid::TimeNs now = now_ns();
    if (now >= end) break;
    uint32_t frames_moved = 0;
    g_pass.fetch_add(1);  // a pass of bursts begins (see munmap above)
    // A port whose peer went away is not polled.
    for (uint16_t p = 0; p < io.size(); ++p) {
      if (!io[p]->link_up()) continue;
      const uint16_t n = io[p]->rx_burst(rx, kBurst);
      for (uint16_t i = 0; i < n; ++i) sw.receive(p, rx[i].data, rx[i].len, now);
      if (n > 0) io[p]->rx_release(rx, n);
      frames_moved += n;
    }
    sw.advance(now);
    for (uint16_t p = 0; p < io.size(); ++p) {
      if (!io[p]->link_up()) continue;
      std::vector<braid::TxFrame>& h = held[p];
      if (!h.empty()) {
        const uint16_t sent = io[p]->tx_burst(h.data(), static_cast<uint16_t>(h.size()));
        frames_moved += sent;
        h.erase(h.begin(), h.begin() + sent);
        if (!h.empty()) continue;
      }
      for (;;) {
        const uint16_t got = io[p]->tx_alloc(tx, kBurst);
        uint16_t filled = 0;
        while (filled < got) {
          const uint32_t len = sw.transmit(p, tx[filled].data, tx[filled].cap, now);
          if (len == 0) break;
          tx[filled++].len = len;
        }
        if (got > filled) io[p]->tx_free(tx + filled, static_cast<uint16_t>(got - filled));
        if (filled == 0) break;
        const uint16_t sent = io[p]->tx_burst(tx, filled);
        frames_moved += sent;
        if (sent < filled) {
          h.assign(tx + sent, tx + filled);
          break;
        }
        if (filled < got) break;
      }
    }
    g_pass.fetch_add(1);  // ... and ends
    idle.pass(frames_moved > 0);
    if (series_file != nullptr && now >= next_row) {
      std::fprintf(series_file, "%.6f", static_cast<double>(now - start) / 1e9);
      for (uint16_t k = 0; k < sw.core_links(); ++k) {
        for (braid::sw::Dir d : {braid::sw::Dir::kToHigher, braid::sw::Dir::kToLower}) {
          const braid::sw::QueueStats& q = sw.core_stats(k, d);
          std::fprintf(series_file, ",%lu,%lu", static_cast<unsigned long>(q.queued_bytes),
                       static_cast<unsigned long>(q.bytes));
        }
      }
      for (size_t h = 0; h < sw.host_links(); ++h) {
        const braid::sw::QueueStats& q = sw.host_link_stats(h);
        std::fprintf(series_file, ",%lu,%lu", static_cast<unsigned long>(q.queued_bytes),
                     static_cast<unsigned long>(q.bytes));
      }
      for (uint16_t p = 0; p < sw.ports(); ++p) {
        std::fprintf(series_file, ",%lu", static_cast<unsigned long>(sw.delivered_from(p)));
      }
      std::fputc('\n', series_file);
      next_row = std::max(next_row + static_cast<braid::TimeNs>(series_us) * 1000, now);
    }
    for (size_t i = 0; i < later.size();) {
      if (sw.stats().received >= later[i].first) {
        running = run_command(later[i].second, sw) && running;
        later.erase(later.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    if (control_fd >= 0 && iter % 1024 == 0) {
      char buf[512];
      const ssize_t r = read(control_fd, buf, sizeof(buf));
      if (r > 0) {
        pending_line.append(buf, static_cast<size_t>(r));
        size_t nl;
        while (running && (nl = pending_line.find('\n')) != std::string::npos) {
          running = run_command(pending_line.substr(0, nl), sw);
          pending_line.erase(0, nl + 1);
        }
      }
    }
  }
  g_bursting_tid = 0;
  std::printf(
      "braid_switch: stopped after %.1f s; %lu unmaps of a port's memory waited for a "
      "pass of bursts\n",
      static_cast<double>(now_ns() - start) / 1e9,
      static_cast<unsigned long>(g_unmaps_waited.load()));
  std::fputs(sw.describe().c_str(), stdout);
  std::fflush(stdout);
  for (uint16_t p = 0; p < io.size(); ++p) {
    if (!held[p].empty()) io[p]->tx_free(held[p].data(), static_cast<uint16_t>(held[p].size()));
  }
  io.clear();
  if (series_file != nullptr) std::fclose(series_file);
  if (control_fd >= 0) close(control_fd);
  braid::dpdk::Eal::shutdown();
  return 0;
}
