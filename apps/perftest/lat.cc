// Latency reports and the latency tests' main.
#include "perftest_common.h"
#include "perftest_internal.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

namespace braid::perftest {
namespace {

// --- Latency reports -------------------------------------------------------

std::string format_lat_row(const Options& o, uint64_t size, const LatencySamples& smp) {
  // WRITE and SEND report half the round trip, READ the whole.
  const double rtt_factor = o.verb == Verb::kRead ? 1.0 : 2.0;
  char line[512];
  if (o.is_duration()) {
    const double ns = static_cast<double>(smp.sample_ns);
    const double iters = static_cast<double>(smp.sample_iters);
    const double latency = iters > 0 ? ns / 1e3 / rtt_factor / iters : 0;
    const double tps = ns > 0 ? iters / (ns / 1e9) : 0;
    std::snprintf(line, sizeof line, " %-7lu       %" PRIu64 "            %-7.2f        %-7.2f\n",
                  static_cast<unsigned long>(size), smp.sample_iters, latency, tps);
    return line;
  }
  // perftest: deltas between consecutive posts, sorted, the top 2 dropped.
  // As perftest's report, t_max is delta[measured]: the smaller dropped one.
  const size_t n = smp.tposted.size();
  std::vector<double> delta;
  delta.reserve(n);
  for (size_t i = 0; i + 1 < n; ++i) {
    delta.push_back(static_cast<double>(smp.tposted[i + 1] - smp.tposted[i]) / 1e3 / rtt_factor);
  }
  std::sort(delta.begin(), delta.end());
  const size_t measured = delta.size() - 2;
  const double median = (measured - 1) % 2 ? (delta[measured / 2] + delta[measured / 2 - 1]) / 2
                                           : delta[measured / 2];
  double sum = 0;
  for (size_t i = 0; i < measured; ++i) sum += delta[i];
  const double avg = sum / double(measured);
  double var = 0;
  for (size_t i = 0; i < measured; ++i) var += (delta[i] - avg) * (delta[i] - avg);
  const double stdev = std::sqrt(var / double(measured));
  const size_t i99 = static_cast<size_t>(std::ceil(double(measured) * 0.99));
  const size_t i999 = static_cast<size_t>(std::ceil(double(measured) * 0.999));
  std::snprintf(
      line, sizeof line,
      " %-7lu %" PRIu64
      "          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f "
      "\t\t%-7.2f\n",
      static_cast<unsigned long>(size), static_cast<uint64_t>(n), delta[0], delta[measured], median,
      avg, stdev, delta[i99], delta[i999]);
  return line;
}

}  // namespace

int run_lat_main(Verb verb, int argc, char** argv, const LatencyOps& ops) {
  Options o;
  if (const int rc = parse_options(verb, TestKind::kLatency, argc, argv, &o); rc >= 0) return rc;
  Session s(o);
  if (s.setup()) return 1;
  o = s.opts();

  print_result_line();
  std::printf("%s\n", o.is_duration() ? kLatDurationHeader : kLatHeader);
  std::fflush(stdout);

  // READ: the client measures; the server's engine serves the reads while it
  // waits for the client's row.
  const bool passive = verb == Verb::kRead && o.is_server();
  const std::vector<uint64_t> sizes = message_sizes(o);
  for (const uint64_t size : sizes) {
    if (!passive && ops.prepare && ops.prepare(s, size)) return 1;
    if (s.barrier()) return 1;
    if (passive) {
      std::string row;
      if (s.exchange_text("", &row)) return 1;
      std::fputs(row.c_str(), stdout);
      std::fflush(stdout);
      continue;
    }
    LatencySamples samples;
    if (ops.run(s, size, &samples)) return 1;
    const std::string row = format_lat_row(o, size, samples);
    std::fputs(row.c_str(), stdout);
    std::fflush(stdout);
    std::string ignored;
    if (verb == Verb::kRead ? s.exchange_text(row, &ignored) : s.barrier()) return 1;
    // Both sides are past their run: every message of this size has landed.
    if (o.verify && ops.verify && ops.verify(s, size)) return 1;
  }
  print_result_line();
  if (s.final_barrier()) return 1;
  if (o.verify && !passive) std::printf(" Data verification: OK\n");
  if (o.stats) s.print_stats();
  return 0;
}

}  // namespace braid::perftest
