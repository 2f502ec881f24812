// perftest's conventions over Braid's verbs: options, banner, resources,
// reports and the bandwidth test. Output formats follow linux-rdma/perftest
// (perftest_parameters.h) so existing result parsers keep working.
#include "perftest_common.h"

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

constexpr uint64_t kMaxSize = uint64_t{1} << 23;  // -a runs 2 .. 2^23, as perftest
constexpr uint64_t kCqModSizeLimit = 8192;        // larger messages: CQ moderation off
constexpr uint64_t kPeakItersLimit = 20000;       // more iterations: no peak
constexpr int kInlineWriteLat = 220;              // perftest's inline defaults (RC)
constexpr int kInlineSendLat = 236;
constexpr int kMaxOutReads = 16;
constexpr uint8_t kIbPort = 1;
constexpr uint8_t kMinRnrTimer = 12;
constexpr int kPollBatch = 16;
constexpr int kWrIdQpShift = 48;  // wr_id: QP index above, sequence number below
constexpr uint64_t kWrIdSeqMask = (uint64_t{1} << kWrIdQpShift) - 1;
constexpr size_t kTextSize = 256;  // fixed-size text messages between the tools

const char* verb_name(Verb v) {
  switch (v) {
    case Verb::kSend:
      return "Send";
    case Verb::kWrite:
      return "RDMA_Write";
    case Verb::kRead:
      return "RDMA_Read";
  }
  return "?";
}

uint64_t mtu_bytes(enum braid_mtu m) {
  return uint64_t{1} << (7 + static_cast<int>(m));
}

enum braid_mtu mtu_from_bytes(int bytes) {
  switch (bytes) {
    case 256:
      return BRAID_MTU_256;
    case 512:
      return BRAID_MTU_512;
    case 2048:
      return BRAID_MTU_2048;
    case 4096:
      return BRAID_MTU_4096;
    default:
      return BRAID_MTU_1024;
  }
}

void progress_hook(void* arg) {
  braid_progress(static_cast<braid_context*>(arg));
}

const char* wc_status_str(enum braid_wc_status s) {
  switch (s) {
    case BRAID_WC_SUCCESS:
      return "success";
    case BRAID_WC_LOC_LEN_ERR:
      return "local length error";
    case BRAID_WC_LOC_QP_OP_ERR:
      return "local QP operation error";
    case BRAID_WC_LOC_PROT_ERR:
      return "local protection error";
    case BRAID_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case BRAID_WC_BAD_RESP_ERR:
      return "bad response error";
    case BRAID_WC_REM_INV_REQ_ERR:
      return "remote invalid request error";
    case BRAID_WC_REM_ACCESS_ERR:
      return "remote access error";
    case BRAID_WC_REM_OP_ERR:
      return "remote operation error";
    case BRAID_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    case BRAID_WC_RNR_RETRY_EXC_ERR:
      return "RNR retry counter exceeded";
    case BRAID_WC_GENERAL_ERR:
      return "general error";
  }
  return "unknown";
}

// --- Reports ---------------------------------------------------------------

constexpr char kBwHeaderMiB[] =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
constexpr char kBwHeaderGb[] =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
constexpr char kLatHeader[] =
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
    "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
constexpr char kLatDurationHeader[] = " #bytes        #iterations       t_avg[usec]    tps average";

// One side's bandwidth result, in bytes per second and Mpps.
struct BwReport {
  uint64_t size = 0;
  uint64_t iters = 0;
  double peak_bps = 0;
  double avg_bps = 0;
  double msg_rate_mpps = 0;
};

std::string encode_report(const BwReport& r) {
  return fmt::format("{} {} {:.17g} {:.17g} {:.17g}", r.size, r.iters, r.peak_bps, r.avg_bps,
                     r.msg_rate_mpps);
}

bool decode_report(const std::string& text, BwReport* r) {
  unsigned long long size, iters;
  if (std::sscanf(text.c_str(), "%llu %llu %lg %lg %lg", &size, &iters, &r->peak_bps, &r->avg_bps,
                  &r->msg_rate_mpps) != 5) {
    std::fprintf(stderr, " Couldn't parse the peer's report <%s>\n", text.c_str());
    return false;
  }
  r->size = size;
  r->iters = iters;
  return true;
}

void print_bw_row(const Options& o, const BwReport& r) {
  // MiB = 2^20 bytes; Gb = 10^9 bits.
  const double unit = o.report_gbits ? 125000000.0 : 1048576.0;
  const double peak = r.peak_bps / unit, avg = r.avg_bps / unit;
  if (o.report_gbits && avg < 0.1) {
    std::printf(" %-7lu    %" PRIu64 "           %-7.6lf            %-7.6lf            %-7.6lf\n",
                static_cast<unsigned long>(r.size), r.iters, peak, avg, r.msg_rate_mpps);
  } else {
    std::printf(" %-7lu    %-10" PRIu64 "       %-7.2lf            %-7.2lf\t\t     %-7.6lf\n",
                static_cast<unsigned long>(r.size), r.iters, peak, avg, r.msg_rate_mpps);
  }
  std::fflush(stdout);
}

// perftest's peak: the best rate over any stretch from a post to a later
// completion, completions being sampled every cq_mod messages.
double peak_ns_per_msg(const std::vector<uint64_t>& tposted,
                       const std::vector<uint64_t>& tcompleted, uint64_t n, uint64_t cq_mod) {
  double best = static_cast<double>(tcompleted[0] - tposted[0]);
  for (uint64_t i = 0; i < n; ++i) {
    for (uint64_t j = (i + 1 + cq_mod - 1) / cq_mod * cq_mod - 1; j < n; j += cq_mod) {
      best = std::min(best, static_cast<double>(tcompleted[j] - tposted[i]) / double(j - i + 1));
    }
    if (n % cq_mod) {
      const uint64_t j = n - 1;
      best = std::min(best, static_cast<double>(tcompleted[j] - tposted[i]) / double(j - i + 1));
    }
  }
  return best;
}

// --- The bandwidth loop ------------------------------------------------------

// Posts up to tx_depth messages per QP, one signaled every cq_mod, and/or
// counts and re-posts receives (SEND). Measures as perftest's run_iter_bw
// (sender) and run_iter_bw_server (receiver).
int run_bw(Session& s, uint64_t size, bool sending, bool receiving, uint64_t pre_posted,
           BwReport* report) {
  const Options& o = s.opts();
  const int q = o.num_qps;
  const bool dur = o.is_duration();
  const uint64_t iters = dur ? 0 : o.iters;
  const uint64_t total = iters * static_cast<uint64_t>(q);
  const bool peak = sending && !dur && !o.no_peak;
  const uint64_t cq_mod = static_cast<uint64_t>(o.cq_mod);
  const char* side = o.is_server() ? "server" : "client";

  std::vector<braid_sge> sge(static_cast<size_t>(q));
  std::vector<braid_send_wr> wr(static_cast<size_t>(q));
  const unsigned inline_flag =
      (o.verb != Verb::kRead && size <= static_cast<uint64_t>(o.inline_size)) ? kInline : 0u;
  for (int i = 0; i < q; ++i) {
    sge[i] = {reinterpret_cast<uintptr_t>(s.local(i)), static_cast<uint32_t>(size), s.lkey()};
    wr[i] = braid_send_wr{};
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].opcode = o.verb == Verb::kWrite  ? BRAID_WR_RDMA_WRITE
                   : o.verb == Verb::kRead ? BRAID_WR_RDMA_READ
                                           : BRAID_WR_SEND;
    wr[i].rdma.remote_addr = s.remote(i).vaddr;
    wr[i].rdma.rkey = s.remote(i).rkey;
  }
  braid_recv_wr rwr_template{};
  std::vector<braid_sge> rsge(static_cast<size_t>(q));
  std::vector<braid_recv_wr> rwr(static_cast<size_t>(q), rwr_template);
  for (int i = 0; i < q; ++i) {
    rsge[i] = {reinterpret_cast<uintptr_t>(s.target(i)), static_cast<uint32_t>(size), s.lkey()};
    rwr[i].wr_id = static_cast<uint64_t>(i) << kWrIdQpShift;
    rwr[i].sg_list = &rsge[i];
    rwr[i].num_sge = 1;
  }

  // --buffer-span: message k of a QP uses slot k mod `slots` of its regions
  // (both sides' regions are as large); otherwise every message the first.
  const uint64_t slots = o.buffer_span > 0 ? std::max<uint64_t>(s.region() / size, 1) : 1;
  std::vector<uint64_t> sslot(static_cast<size_t>(q)), rslot(static_cast<size_t>(q));
  const auto next_slot = [slots, size](uint64_t& slot) {
    slot = slot + 1 == slots ? 0 : slot + 1;
    return slot * size;
  };
  std::vector<uint64_t> scnt(static_cast<size_t>(q)), ccnt(static_cast<size_t>(q));
  std::vector<uint64_t> signaled_to(static_cast<size_t>(q));  // messages up to the last signaled
  std::vector<uint64_t> rposted(static_cast<size_t>(q), pre_posted);
  std::vector<uint64_t> tposted, tcompleted;
  if (peak) {
    tposted.assign(total, 0);
    tcompleted.assign(total, 0);
  }
  // The QPs with room for another message, in the order they got it.
  // perftest scans every QP on each pass, and at 1024 QPs that scan took a
  // quarter of the sender's core (docs/benchmarks.md); visiting only these
  // posts the same messages. A QP leaves when it is full or has posted all
  // its iterations, and comes back with the completion that makes room.
  std::vector<int> ready(static_cast<size_t>(q));
  for (int i = 0; i < q; ++i) ready[static_cast<size_t>(i)] = i;
  std::vector<uint8_t> is_ready(static_cast<size_t>(q), 1);
  uint64_t totscnt = 0, totccnt = 0, rcnt = 0, sampled = 0;
  uint64_t t_start = 0, t_end = 0, t_first_rx = 0, t_last_rx = 0;
  DurationClock clock(o.duration_s, o.margin_s);
  StallGuard guard(o.timeout_s);
  braid_wc wc[kPollBatch];

  // Polls the send CQ once. RC completes in order: a signaled completion
  // covers every unsignaled message before it on its QP; `covered(qi, n)`
  // hears of each before the total counts them. False after reporting a
  // failed poll or completion.
  const auto poll_sends = [&](auto&& covered) {
    const int n = braid_poll_cq(s.send_cq(), kPollBatch, wc);
    if (n < 0) {
      std::fprintf(stderr, "poll CQ failed %d\n", n);
      return false;
    }
    for (int k = 0; k < n; ++k) {
      if (wc[k].status != BRAID_WC_SUCCESS) {
        print_completion_error(s.context(), wc[k], side, totscnt, totccnt);
        return false;
      }
      const size_t qi = static_cast<size_t>(wc[k].wr_id >> kWrIdQpShift);
      const uint64_t n_covered = (wc[k].wr_id & kWrIdSeqMask) + 1 - ccnt[qi];
      ccnt[qi] += n_covered;
      covered(qi, n_covered);
      totccnt += n_covered;
    }
    return true;
  };

  if (sending && !peak && !dur) t_start = now_ns();
  for (;;) {
    const DurationClock::Phase phase = dur ? clock.update() : DurationClock::Phase::kWarmup;
    if (dur && phase == DurationClock::Phase::kEnd) break;
    const bool sends_done = !sending || (!dur && totccnt >= total);
    const bool recvs_done = !receiving || (!dur && rcnt >= total);
    if (sends_done && recvs_done) break;

    if (sending) {
      for (const int i : ready) {
        is_ready[static_cast<size_t>(i)] = 0;
        while ((dur || scnt[i] < iters) && scnt[i] < ccnt[i] + static_cast<uint64_t>(o.tx_depth)) {
          const bool last = !dur && scnt[i] == iters - 1;
          const bool signaled = scnt[i] % cq_mod == cq_mod - 1 || last;
          wr[i].send_flags = (signaled ? kSignaled : 0u) | inline_flag;
          wr[i].wr_id = (static_cast<uint64_t>(i) << kWrIdQpShift) | scnt[i];
          if (peak) tposted[totscnt] = now_ns();
          braid_send_wr* bad = nullptr;
          if (const int err = braid_post_send(s.qp(i), &wr[i], &bad)) {
            std::fprintf(stderr, "Couldn't post send: qp %d scnt=%" PRIu64 " || err=%d (%s)\n", i,
                         scnt[i], err, std::strerror(err));
            return 1;
          }
          ++scnt[i];
          ++totscnt;
          if (signaled) signaled_to[i] = scnt[i];
          if (slots > 1) {
            const uint64_t off = next_slot(sslot[i]);
            sge[i].addr = reinterpret_cast<uintptr_t>(s.local(i)) + off;
            wr[i].rdma.remote_addr = s.remote(i).vaddr + off;
          }
        }
      }
      ready.clear();
      const bool ok = poll_sends([&](size_t qi, uint64_t covered) {
        if (!is_ready[qi] && (dur || scnt[qi] < iters)) {
          is_ready[qi] = 1;
          ready.push_back(static_cast<int>(qi));
        }
        if (peak) {
          const uint64_t t = now_ns();
          for (uint64_t m = totccnt; m < totccnt + covered && m < total; ++m) tcompleted[m] = t;
        }
        if (dur && phase == DurationClock::Phase::kSample) sampled += covered;
      });
      if (!ok) return 1;
    }

    if (receiving) {
      const int n = braid_poll_cq(s.recv_cq(), kPollBatch, wc);
      if (n < 0) {
        std::fprintf(stderr, "Poll Receive CQ failed %d\n", n);
        return 1;
      }
      for (int k = 0; k < n; ++k) {
        if (wc[k].status != BRAID_WC_SUCCESS) {
          print_completion_error(s.context(), wc[k], side, 0, rcnt);
          return 1;
        }
        if (rcnt == 0) t_first_rx = now_ns();
        ++rcnt;
        if (dur && phase == DurationClock::Phase::kSample && !sending) ++sampled;
        const size_t qi = static_cast<size_t>(wc[k].wr_id >> kWrIdQpShift);
        if (dur || rposted[qi] < iters) {
          braid_recv_wr* bad = nullptr;
          if (const int err = braid_post_recv(s.qp(static_cast<int>(qi)), &rwr[qi], &bad)) {
            std::fprintf(stderr, "Couldn't post recv Qp=%zu rcnt=%" PRIu64 ": %s\n", qi, rcnt,
                         std::strerror(err));
            return 1;
          }
          ++rposted[qi];
          if (slots > 1) {
            rsge[qi].addr =
                reinterpret_cast<uintptr_t>(s.target(static_cast<int>(qi))) + next_slot(rslot[qi]);
          }
        }
      }
      if (!dur && rcnt == total && t_last_rx == 0) t_last_rx = now_ns();
    }

    if (guard.stalled(totccnt + rcnt)) {
      std::fprintf(stderr,
                   " No completion for %d s (sent %" PRIu64 ", completed %" PRIu64
                   ", received %" PRIu64 "): the peer or the transport stopped\n",
                   o.timeout_s, totscnt, totccnt, rcnt);
      return 1;
    }
  }
  if (sending && !peak && !dur) t_end = now_ns();
  // A timed run ends with messages still on their way. The sample is
  // taken, but they are waited for: a NIC would deliver them without the
  // CPU, while Braid's engines run only when driven, and a sender that
  // left at once would time them out and resend them while both sides
  // pass the final barriers (hundreds of retransmissions in --stats on a
  // clean link). Unsignaled messages after the last signaled one (fewer
  // than --cq-mod) are not waited for. What is waited for is what was
  // posted: up to tx depth x QPs messages (1024 QPs x 128 x 64 KiB, 8 GiB,
  // took 3 s here).
  if (dur && sending) {
    for (int i = 0; i < q; ++i) {
      while (ccnt[i] < signaled_to[i]) {
        if (!poll_sends([](size_t, uint64_t) {})) return 1;
        if (guard.stalled(totccnt)) {
          std::fprintf(stderr,
                       " No completion for %d s after the run: the peer or the transport "
                       "stopped\n",
                       o.timeout_s);
          return 1;
        }
      }
    }
  }

  report->size = size;
  double seconds = 0;
  uint64_t messages = 0;
  if (dur) {
    messages = sampled;
    seconds = static_cast<double>(clock.sample_ns()) / 1e9;
  } else if (sending) {
    messages = total;
    const uint64_t ns = peak ? tcompleted[total - 1] - tposted[0] : t_end - t_start;
    seconds = static_cast<double>(ns) / 1e9;
    if (peak) {
      const double best = peak_ns_per_msg(tposted, tcompleted, total, cq_mod);
      report->peak_bps = best > 0 ? static_cast<double>(size) * 1e9 / best : 0;
    }
  } else {
    messages = total;
    seconds = static_cast<double>(t_last_rx - t_first_rx) / 1e9;
  }
  report->iters = dur ? sampled : total;
  report->avg_bps = seconds > 0 ? static_cast<double>(size) * double(messages) / seconds : 0;
  report->msg_rate_mpps = seconds > 0 ? double(messages) / seconds / 1e6 : 0;
  return 0;
}

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

// --- Options -----------------------------------------------------------------

int parse_options(Verb verb, TestKind kind, int argc, char** argv, Options* out) {
  Options o;
  o.verb = verb;
  o.kind = kind;
  const bool bw = kind == TestKind::kBandwidth;
  o.size = bw ? 65536 : 2;
  o.iters = (bw && verb == Verb::kWrite) ? 5000 : 1000;
  o.tx_depth = bw ? 128 : 1;

  CLI::App app{fmt::format("{} {} test over Braid (perftest-compatible flags and output)",
                           verb_name(verb), bw ? "bandwidth" : "latency")};
  app.add_option("host", o.host, "Server to connect to; without it, run as the server");
  app.add_option("-s,--size", o.size,
                 fmt::format("Size of message to exchange (default {})", o.size))
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 31));
  app.add_option("-n,--iters", o.iters,
                 fmt::format("Number of exchanges (at least 5, default {})", o.iters))
      ->check(CLI::Range(uint64_t{5}, uint64_t{1} << 40));
  app.add_option("-D,--duration", o.duration_s, "Run test for a customized period of seconds")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("-f,--margin", o.margin_s, "Measure results within margins (default duration/4)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("-a,--all", o.all_sizes, "Run sizes from 2 till 2^23");
  if (bw)
    app.add_option("-q,--qp", o.num_qps, "Num of qp's (default 1)")->check(CLI::Range(1, 4096));
  app.add_option("-t,--tx-depth", o.tx_depth,
                 fmt::format("Size of tx queue (default {})", o.tx_depth))
      ->check(CLI::Range(1, 1 << 16));
  if (verb == Verb::kSend) {
    app.add_option("-r,--rx-depth", o.rx_depth, "Rx queue size (default 512)")
        ->check(CLI::Range(1, 1 << 16));
  }
  CLI::Option* cq_mod =
      app.add_option("-Q,--cq-mod", o.cq_mod, "Generate Cqe only after <--cq-mod> completion")
          ->check(CLI::Range(1, 1 << 16));
  if (bw) {
    app.add_flag("-b,--bidirectional", o.bidirectional,
                 "Measure bidirectional bandwidth (default unidirectional)");
  }
  app.add_option("-p,--port", o.port, "Listen on/connect to port <port> (default 18515)");
  app.add_option("-d,--ib-dev", o.ib_dev, "Device name, shown in the banner (informational)");
  if (bw)
    app.add_flag("--report_gbits", o.report_gbits, "Report Max/Average BW of test in Gbit/sec");
  app.add_flag("-F,--CPU-freq", o.cpu_freq_f,
               "Accepted for compatibility: Braid times with a monotonic clock");
  app.add_option("-u,--qp-timeout", o.qp_timeout,
                 "QP timeout, timeout value is 4 usec * 2 ^(timeout)")
      ->check(CLI::Range(0, 31));
  app.add_option("-m,--mtu", o.mtu, "QP Mtu size (default: the port's active MTU)")
      ->check(CLI::IsMember({256, 512, 1024, 2048, 4096}));
  app.add_option("-x,--gid-index", o.gid_index, "Test uses GID with GID index (default 0)")
      ->check(CLI::NonNegativeNumber);
  if (verb == Verb::kRead) {
    app.add_option("-o,--outs", o.out_reads, "Num of outstanding read/atom (default max of device)")
        ->check(CLI::Range(1, 65535));
  } else {
    app.add_option("-I,--inline_size", o.inline_size, "Max size of message to be sent in inline")
        ->check(CLI::Range(0, 1 << 16));
  }
  if (bw) app.add_flag("-N,--noPeak", o.no_peak, "Cancel peak-bw calculation");

  app.add_option("--dev-port", o.dev_port,
                 "Braid: DPDK port, a vdev spec (net_memif0,role=server,socket=/tmp/m.sock) or a "
                 "PCI address")
      ->required();
  app.add_option("--ip", o.ip, "Braid: our IPv4 address on that port")->required();
  app.add_option("--prefix-len", o.prefix_len, "Braid: on-link prefix length (default 24)")
      ->check(CLI::Range(1, 32));
  app.add_option("--gateway", o.gateway, "Braid: next hop for off-link peers");
  app.add_option("--neighbors", o.neighbors, "Braid: static ARP entries ip=mac,ip=mac");
  app.add_option("--eal-args", o.eal_args, "Braid: extra DPDK EAL arguments, space separated");
  app.add_option("--lcore", o.lcore, "Braid: CPU core for this process's engine (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--entropies", o.entropies,
                 "Braid: UDP source ports sprayed per QP, 1..256 (default 16)")
      ->check(CLI::Range(1, 256));
  app.add_option("--link-mtu", o.link_mtu, "Braid: Ethernet MTU of the port (default 1500)")
      ->check(CLI::Range(576, 9216));
  app.add_option("--udp-port", o.udp_port, "Braid: UDP destination port (default 4793)");
  app.add_option("--crc", o.crc,
                 "Braid: CRC-32C trailer on what we send: on, off, or auto (default: on where "
                 "frames leave the host); every trailer received is checked")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--auth", o.auth,
                 "Braid: authenticated mode (AES-256-GCM, UET's TSS): off, on, or required "
                 "(on, and no answer to anything unauthenticated); both ends alike")
      ->check(CLI::IsMember({"off", "on", "required"}));
  app.add_option("--auth-key", o.auth_key,
                 "Braid: the shared secret for --auth: 64 hex digits, or @file holding them "
                 "(default: $BRAID_AUTH_KEY)");
  app.add_option("--engines", o.engines,
                 "Braid: engines on the port, one per queue pair (default 1); QP n runs on "
                 "engine n % engines, and both ends' ports need that many queues")
      ->check(CLI::Range(1, 16));
  app.add_flag("--tx-copy", o.tx_copy,
               "Braid: copy every payload into the packet buffer, also where the port could "
               "send it from registered memory (memif)");
  app.add_option("--paths", o.paths,
                 "Braid: how a QP chooses each packet's entropy: reps (recycle the ones that came "
                 "back unmarked), bitmap (in turn, passing over the ones penalised by ECN, NACK "
                 "or loss), round-robin, or any other policy the build registers (default reps)")
      ->check(CLI::Validator(
          [](std::string& s) {
            return braid_paths_from_name(s.c_str()) != 0 ? std::string{}
                                                         : "no path policy is named " + s;
          },
          "POLICY"));
  app.add_option("--cc", o.cc,
                 "Braid: congestion control: nscc (UET's, the default), fixed (a 1 MiB window), "
                 "dcqcn, or any other algorithm the build registers")
      ->check(CLI::Validator(
          [](std::string& s) {
            return braid_cc_from_name(s.c_str()) != 0 ? std::string{}
                                                      : "no congestion control is named " + s;
          },
          "ALGORITHM"));
  app.add_option("--cc-scope", o.cc_scope,
                 "Braid: peer (default: the QPs to one peer share one congestion window) or qp "
                 "(a window each, as RoCE's DCQCN per QP)")
      ->check(CLI::IsMember({"peer", "qp"}));
  app.add_flag("--credit", o.credit,
               "Braid: receiver-driven credit on top of --cc: a BDP from idle, then only what "
               "the receiver grants at its link rate (for many-to-one incasts)");
  app.add_option("--link-mbps", o.link_mbps,
                 "Braid: link rate congestion control scales by (default: the port's)")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--base-rtt-us", o.base_rtt_us,
                 "Braid: the network's base RTT NSCC takes its parameters from (default " +
                     std::to_string(BRAID_DEFAULT_BASE_RTT_US) + ")")
      ->check(CLI::Range(0, 1'000'000));
  app.add_option("--idle-yield", o.idle_yield,
                 "Braid: yield the core after this many polls in a row that found no work, for "
                 "more busy processes than cores (default 0: never)")
      ->check(CLI::Range(0, 1'000'000));
  if (bw) {
    app.add_option("--buffer-span", o.buffer_span,
                   "Braid: bytes each QP's source and target buffers span; messages cycle "
                   "through them (default: one message), e.g. to make one QP touch as much "
                   "memory as many QPs")
        ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34));
  }
  app.add_flag("--verify", o.verify, "Braid: check the transferred data byte for byte");
  app.add_flag("--stats", o.stats,
               "Braid: print transport counters (retransmits, losses, drops) after the run");
  app.add_option("--timeout", o.timeout_s,
                 "Braid: seconds to wait for the peer to connect or answer, and for a stalled "
                 "run (default 60)")
      ->check(CLI::Range(1, 86400));
  // A dead peer must end the run with an error report, not a signal: DPDK's
  // vhost-user and memif control sockets write to the peer without
  // MSG_NOSIGNAL.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.cq_mod_set = cq_mod->count() > 0;

  // perftest's dependencies (force_dependecies in perftest_parameters.c).
  if (o.is_duration() && o.all_sizes) {
    std::fprintf(stderr, " -a and -D cannot be used together\n");
    return 1;
  }
  if (o.is_duration()) {
    if (o.margin_s < 0) o.margin_s = o.duration_s / 4;
    if (!(o.duration_s > 2 * o.margin_s)) {
      print_result_line();
      std::fprintf(stderr, "please check that DURATION > 2*MARGIN\n");
      return 1;
    }
    if (!o.no_peak && bw) std::printf(" WARNING: BW peak won't be measured in this run.\n");
    o.no_peak = true;
  } else {
    o.tx_depth = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(o.tx_depth), o.iters));
    o.rx_depth = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(o.rx_depth), o.iters));
  }
  if (o.size > kCqModSizeLimit && !o.all_sizes) {
    if (!o.cq_mod_set) {
      o.cq_mod = 1;
    } else if (o.cq_mod > 1) {
      print_result_line();
      std::printf("Warning: Large message requested and CQ moderation enabled\n");
      std::printf("Warning: It can lead to inaccurate results\n");
    }
  }
  o.cq_mod = std::min(o.cq_mod, o.tx_depth);
  if (o.all_sizes) o.size = kMaxSize;
  if (verb == Verb::kRead) {
    o.inline_size = 0;
  } else if (o.inline_size < 0) {
    o.inline_size = !bw ? (verb == Verb::kWrite ? kInlineWriteLat : kInlineSendLat) : 0;
  }
  if (bw && verb == Verb::kSend && o.is_server() && !o.bidirectional) {
    if (!o.no_peak) std::printf(" WARNING: BW peak won't be measured in this run.\n");
    o.no_peak = true;
  }
  if (bw && !o.is_duration() && o.iters > kPeakItersLimit && !o.no_peak) {
    std::printf(" WARNING: BW peak won't be measured in this run.\n");
    o.no_peak = true;
  }
  *out = o;
  return -1;
}

// --- Helpers -----------------------------------------------------------------

void fill_pattern(uint8_t* p, uint64_t len, int qp) {
  for (uint64_t i = 0; i < len; ++i) p[i] = pattern_byte(qp, i);
}

bool check_pattern(const uint8_t* p, uint64_t len, int qp, const char* what) {
  for (uint64_t i = 0; i < len; ++i) {
    if (p[i] != pattern_byte(qp, i)) {
      std::fprintf(stderr,
                   " Data verification failed: %s of QP %d differs at byte %" PRIu64 " of %" PRIu64
                   " (0x%02x, expected 0x%02x)\n",
                   what, qp, i, len, p[i], pattern_byte(qp, i));
      return false;
    }
  }
  return true;
}

StallGuard::StallGuard(int timeout_s) : limit_ns_(uint64_t(timeout_s) * 1'000'000'000ull) {}

bool StallGuard::stalled(uint64_t progress) {
  if ((++spins_ & 1023) != 0) return false;
  const uint64_t now = now_ns();
  if (progress != last_progress_ || since_ns_ == 0) {
    last_progress_ = progress;
    since_ns_ = now;
    return false;
  }
  return now - since_ns_ > limit_ns_;
}

DurationClock::DurationClock(int duration_s, int margin_s)
    : start_ns_(now_ns()),
      margin_ns_(uint64_t(std::max(margin_s, 0)) * 1'000'000'000ull),
      duration_ns_(uint64_t(std::max(duration_s, 0)) * 1'000'000'000ull) {}

DurationClock::Phase DurationClock::update() {
  if ((calls_++ & 15) != 0) return phase_;
  const uint64_t now = now_ns();
  const uint64_t elapsed = now - start_ns_;
  if (phase_ == Phase::kWarmup && elapsed >= margin_ns_) {
    phase_ = Phase::kSample;
    sample_begin_ns_ = now;
  }
  if (phase_ == Phase::kSample && elapsed >= duration_ns_ - margin_ns_) {
    phase_ = Phase::kCooldown;
    sample_end_ns_ = now;
  }
  if (phase_ == Phase::kCooldown && elapsed >= duration_ns_) phase_ = Phase::kEnd;
  return phase_;
}

std::vector<uint64_t> message_sizes(const Options& o) {
  std::vector<uint64_t> sizes;
  if (o.all_sizes) {
    for (uint64_t s = 2; s <= kMaxSize; s *= 2) sizes.push_back(s);
  } else {
    sizes.push_back(o.size);
  }
  return sizes;
}

void print_result_line() {
  std::puts(
      "---------------------------------------------------------------------------------------");
}

void print_completion_error(braid_context* ctx, const braid_wc& wc, const char* side,
                            uint64_t posted, uint64_t completed) {
  std::fprintf(stderr, " Completion with error at %s:\n", side);
  std::fprintf(stderr, " Failed status %d (%s): wr_id %" PRIu64 " syndrom 0x%x\n",
               static_cast<int>(wc.status), wc_status_str(wc.status), wc.wr_id, wc.vendor_err);
  std::fprintf(stderr, "scnt=%" PRIu64 ", ccnt=%" PRIu64 "\n", posted, completed);
  if (wc.status != BRAID_WC_RETRY_EXC_ERR || ctx == nullptr) return;
  // Why nothing came back: the peer, or our own port.
  braid_port_attr port{};
  braid_port_stats stats{};
  if (braid_query_port(ctx, 1, &port) != 0 || braid_query_port_stats(ctx, &stats) != 0) return;
  if (stats.tx_stalled_ms > 0) {
    std::fprintf(stderr,
                 " The port's TX ring has taken no frame for %" PRIu64
                 " ms: the link is stalled (the peer stopped polling, or a virtio-user port "
                 "shares memory the vhost side cannot map)\n",
                 stats.tx_stalled_ms);
  } else if (port.state != BRAID_PORT_ACTIVE) {
    std::fprintf(stderr, " The port's link is down: the peer detached\n");
  } else {
    std::fprintf(stderr,
                 " The peer stopped answering (process gone, or no route to it) while the "
                 "port stayed up\n");
  }
}

// --- Session -----------------------------------------------------------------

Session::Session(const Options& o) : o_(o) {}

Session::~Session() {
  // Past the final barrier both sides hold every completion: neither owes
  // the other an ACK, so the QPs go through RESET, which sends nothing (a
  // destroyed QP that received data would send its CLOSE, and the peer may
  // be closing its port: see final_barrier).
  for (braid_qp* qp : qps_) {
    if (qp == nullptr) continue;
    if (passed_final_barrier_) {
      braid_qp_attr a{};
      a.qp_state = BRAID_QPS_RESET;
      braid_modify_qp(qp, &a, BRAID_QP_STATE);
    }
    braid_destroy_qp(qp);
  }
  if (recv_cq_ && recv_cq_ != send_cq_) braid_destroy_cq(recv_cq_);
  if (send_cq_) braid_destroy_cq(send_cq_);
  if (mr_) braid_dereg_mr(mr_);
  if (pd_) braid_dealloc_pd(pd_);
  if (ctx_) braid_close_device(ctx_);
  std::free(buf_);
  if (fd_ >= 0) braid_exchange_close(fd_);
}

int Session::setup() {
  if (open_device() || connect_peer() || wait_port_active() || check_peer_options() ||
      create_resources()) {
    return 1;
  }
  print_banner();
  if (const int err = braid_exchange_info(fd_, mine_.data(), remote_.data(), o_.num_qps)) {
    std::fprintf(stderr, " Failed to exchange data between server and clients: %s\n",
                 std::strerror(err));
    return 1;
  }
  if (o_.auth != "off") {
    // Fresh keys for these connections: 16 random bytes a QP from each end,
    // XORed (both ends run with --auth, checked with the other options).
    std::vector<std::array<uint8_t, 16>> mine(static_cast<size_t>(o_.num_qps)), theirs(mine.size());
    std::random_device rd;
    for (auto& n : mine) {
      for (uint8_t& b : n) b = static_cast<uint8_t>(rd());
    }
    if (const int err = braid_exchange_data(fd_, mine.data(), theirs.data(), 16 * mine.size())) {
      std::fprintf(stderr, " Failed to exchange data between server and clients: %s\n",
                   std::strerror(err));
      return 1;
    }
    nonces_.resize(mine.size());
    for (size_t q = 0; q < mine.size(); ++q) {
      for (size_t k = 0; k < 16; ++k) nonces_[q][k] = mine[q][k] ^ theirs[q][k];
    }
  }
  uint32_t v4;
  if (braid_gid_to_ipv4(&remote_[0].gid, &v4) != 0) {
    std::fprintf(stderr, "\n Found Incompatibility issue with GID types.\n");
    std::fprintf(stderr, " The peer's GID is not an IPv4-mapped address.\n\n");
    return 1;
  }
  if (connect_qps()) return 1;
  for (const braid_conn_info& info : mine_) print_address(info, true);
  for (const braid_conn_info& info : remote_) print_address(info, false);
  std::fflush(stdout);
  // The setup is bounded by --timeout; from here on the peer may be busy
  // with a long run while we wait. Waits are then unbounded: a peer that
  // exits closes the connection, a vanished host trips TCP keepalive, and
  // a peer whose run stalls gives up after --timeout and exits.
  braid_exchange_set_timeout(fd_, -1);
  return barrier();  // both sides' QPs are ready to receive
}

int Session::open_device() {
  braid_device_config cfg{};
  cfg.port = o_.dev_port.c_str();
  cfg.ipv4 = o_.ip.c_str();
  cfg.prefix_len = o_.prefix_len;
  cfg.gateway = o_.gateway.empty() ? nullptr : o_.gateway.c_str();
  cfg.neighbors = o_.neighbors.empty() ? nullptr : o_.neighbors.c_str();
  cfg.eal_args = o_.eal_args.empty() ? nullptr : o_.eal_args.c_str();
  cfg.lcore = o_.lcore;
  cfg.mtu = o_.link_mtu;
  cfg.entropies = o_.entropies;
  cfg.udp_port = o_.udp_port;
  cfg.crc = o_.crc == "on" ? 1 : o_.crc == "off" ? -1 : 0;
  cfg.tx_copy = o_.tx_copy ? 1 : 0;
  cfg.engines = o_.engines;
  cfg.auth = o_.auth == "on" ? BRAID_AUTH_ON : o_.auth == "required" ? BRAID_AUTH_REQUIRED : 0;
  const char* env_key = std::getenv("BRAID_AUTH_KEY");
  cfg.auth_key = !o_.auth_key.empty() ? o_.auth_key.c_str() : env_key;
  cfg.paths = o_.paths.empty() ? BRAID_PATHS_REPS : braid_paths_from_name(o_.paths.c_str());
  cfg.cc = o_.cc.empty() ? BRAID_CC_NSCC : braid_cc_from_name(o_.cc.c_str());
  cfg.link_mbps = o_.link_mbps;
  cfg.base_rtt_us = o_.base_rtt_us;
  cfg.idle_yield = o_.idle_yield;
  cfg.credit = o_.credit ? 1 : 0;
  cfg.cc_per_qp = o_.cc_scope == "qp" ? 1 : 0;
  // A client port (memif client, virtio-user) may wait for its peer as long
  // as the whole setup may take.
  cfg.link_wait_ms = static_cast<uint32_t>(std::clamp(o_.timeout_s, 1, 3600)) * 1000;
  ctx_ = braid_open_device(&cfg);
  if (!ctx_) {
    std::fprintf(stderr, " Couldn't open the Braid device on %s: %s\n", o_.dev_port.c_str(),
                 braid_last_error());
    return 1;
  }
  if (const int err = braid_query_device(ctx_, &dev_attr_)) {
    std::fprintf(stderr, " Failed to query device props: %s\n", std::strerror(err));
    return 1;
  }
  if (const int err = braid_query_gid(ctx_, kIbPort, o_.gid_index, &gid_)) {
    std::fprintf(stderr, " Failed to query GID index %d: %s\n", o_.gid_index, std::strerror(err));
    return 1;
  }
  if (o_.verb == Verb::kRead) {
    const int max = std::max(1, std::min(dev_attr_.max_qp_rd_atom, kMaxOutReads));
    if (o_.out_reads == 0) {
      o_.out_reads = max;
    } else if (o_.out_reads > dev_attr_.max_qp_rd_atom) {
      std::printf(" Number of outstanding reads is above max = %d\n Changing to that max\n",
                  dev_attr_.max_qp_rd_atom);
      o_.out_reads = std::max(1, dev_attr_.max_qp_rd_atom);
    }
  } else {
    o_.out_reads = 1;
  }
  return 0;
}

int Session::wait_port_active() {
  // A virtual link (memif, vhost) comes up only once the peer process has
  // attached: give it until --timeout, driving the device meanwhile.
  const uint64_t deadline = now_ns() + uint64_t(o_.timeout_s) * 1'000'000'000ull;
  for (;;) {
    if (const int err = braid_query_port(ctx_, kIbPort, &port_attr_)) {
      std::fprintf(stderr, " Unable to query port attributes: %s\n", std::strerror(err));
      return 1;
    }
    if (port_attr_.state == BRAID_PORT_ACTIVE) break;
    if (now_ns() > deadline) {
      std::fprintf(stderr, " Port number %d state is not active (after %d s)\n", kIbPort,
                   o_.timeout_s);
      return 1;
    }
    braid_progress(ctx_);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  path_mtu_ = port_attr_.active_mtu;
  if (o_.mtu > 0) {
    const enum braid_mtu want = mtu_from_bytes(o_.mtu);
    if (want > port_attr_.active_mtu) {
      std::printf(" Requested mtu is higher than active mtu \n Changing to active mtu - %d\n",
                  static_cast<int>(mtu_bytes(port_attr_.active_mtu)));
    } else {
      path_mtu_ = want;
    }
  }
  return 0;
}

int Session::connect_peer() {
  const int timeout_ms = o_.timeout_s * 1000;
  int err;
  if (o_.is_server()) {
    std::printf("\n************************************\n");
    std::printf("* Waiting for client to connect... *\n");
    std::printf("************************************\n");
    std::fflush(stdout);
    err = braid_exchange_listen(o_.port, timeout_ms, &fd_);
  } else {
    err = braid_exchange_connect(o_.host.c_str(), o_.port, timeout_ms, &fd_);
  }
  if (err) {
    std::fprintf(stderr, " Unable to init the socket connection: %s\n", std::strerror(err));
    fd_ = -1;
    return 1;
  }
  // While we wait for the peer, our engine must keep acknowledging its
  // traffic: the device runs inside our verbs calls.
  braid_exchange_set_idle(fd_, progress_hook, ctx_);
  return 0;
}

int Session::check_peer_options() {
  // The flags perftest calls SYMMETRIC: both sides must agree on them or the
  // run would wait forever for messages that never come.
  const std::string mine = fmt::format(
      "braid-perftest/1 {} {} size={} iters={} all={} duration={} margin={} qps={} "
      "bidirectional={} span={} auth={}",
      verb_name(o_.verb), o_.kind == TestKind::kBandwidth ? "BW" : "LAT", o_.size,
      o_.is_duration() ? 0 : o_.iters, o_.all_sizes, o_.duration_s,
      o_.is_duration() ? o_.margin_s : 0, o_.num_qps, o_.bidirectional, o_.buffer_span,
      o_.auth == "off" ? "off" : "on");
  std::string theirs;
  if (exchange_text(mine, &theirs)) return 1;
  if (theirs != mine) {
    std::fprintf(stderr,
                 " The client and the server run different tests:\n  local : %s\n  remote: %s\n",
                 mine.c_str(), theirs.c_str());
    return 1;
  }
  return 0;
}

int Session::create_resources() {
  const int q = o_.num_qps;
  const uint64_t max_size = o_.all_sizes ? kMaxSize : o_.size;
  region_ = (std::max<uint64_t>({max_size, o_.buffer_span, 64}) + 4095) / 4096 * 4096;
  const uint64_t total = 2 * static_cast<uint64_t>(q) * region_;
  buf_ = static_cast<uint8_t*>(std::aligned_alloc(4096, total));
  if (!buf_) {
    std::fprintf(stderr, "Couldn't allocate work buf (%" PRIu64 " bytes).\n", total);
    return 1;
  }
  std::memset(buf_, 0, total);
  // READ reads the peer's target region; WRITE and SEND send the local one.
  for (int i = 0; i < q; ++i)
    fill_pattern(o_.verb == Verb::kRead ? target(i) : local(i), max_size, i);

  pd_ = braid_alloc_pd(ctx_);
  if (!pd_) {
    std::fprintf(stderr, "Couldn't allocate PD: %s\n", std::strerror(errno));
    return 1;
  }
  int access = BRAID_ACCESS_LOCAL_WRITE;
  if (o_.verb == Verb::kWrite) access |= BRAID_ACCESS_REMOTE_WRITE;
  if (o_.verb == Verb::kRead) access |= BRAID_ACCESS_REMOTE_READ;
  mr_ = braid_reg_mr(pd_, buf_, total, access);
  if (!mr_) {
    std::fprintf(stderr, "Couldn't allocate MR: %s\n", std::strerror(errno));
    return 1;
  }
  send_cq_ = braid_create_cq(ctx_, o_.tx_depth * q, nullptr, nullptr, 0);
  if (!send_cq_) {
    std::fprintf(stderr, "Couldn't create CQ: %s\n", std::strerror(errno));
    return 1;
  }
  recv_cq_ = send_cq_;
  if (o_.verb == Verb::kSend) {
    recv_cq_ = braid_create_cq(ctx_, o_.rx_depth * q, nullptr, nullptr, 0);
    if (!recv_cq_) {
      std::fprintf(stderr, "Couldn't create CQ: %s\n", std::strerror(errno));
      return 1;
    }
  }

  std::random_device rd;
  std::mt19937 rng(rd());
  mine_.assign(static_cast<size_t>(q), braid_conn_info{});
  remote_.assign(static_cast<size_t>(q), braid_conn_info{});
  for (int i = 0; i < q; ++i) {
    braid_qp_init_attr init{};
    init.send_cq = send_cq_;
    init.recv_cq = recv_cq_;
    init.cap.max_send_wr = static_cast<uint32_t>(o_.tx_depth);
    init.cap.max_recv_wr = o_.verb == Verb::kSend ? static_cast<uint32_t>(o_.rx_depth) : 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = static_cast<uint32_t>(o_.inline_size);
    init.qp_type = BRAID_QPT_RC;
    braid_qp* qp = braid_create_qp(pd_, &init);
    if (!qp) {
      std::fprintf(stderr, "Couldn't create QP: %s\n", std::strerror(errno));
      return 1;
    }
    qps_.push_back(qp);

    braid_qp_attr attr{};
    attr.qp_state = BRAID_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = kIbPort;
    attr.qp_access_flags = o_.verb == Verb::kWrite ? BRAID_ACCESS_REMOTE_WRITE
                           : o_.verb == Verb::kRead
                               ? BRAID_ACCESS_REMOTE_READ
                               : BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_LOCAL_WRITE;
    if (const int err = braid_modify_qp(
            qp, &attr,
            BRAID_QP_STATE | BRAID_QP_PKEY_INDEX | BRAID_QP_PORT | BRAID_QP_ACCESS_FLAGS)) {
      std::fprintf(stderr, "Failed to modify QP to INIT, ret=%d (%s)\n", err, std::strerror(err));
      return 1;
    }
    braid_conn_info& me = mine_[static_cast<size_t>(i)];
    me.lid = 0;
    me.out_reads = static_cast<uint32_t>(o_.out_reads);
    me.qpn = braid_qp_num(qp);
    me.psn = rng() & 0xffffff;
    me.rkey = mr_->rkey;
    me.vaddr = reinterpret_cast<uintptr_t>(target(i));
    me.gid = gid_;
    me.srqn = 0;
  }
  return 0;
}

int Session::connect_qps() {
  for (int i = 0; i < o_.num_qps; ++i) {
    const braid_conn_info& me = mine_[static_cast<size_t>(i)];
    const braid_conn_info& peer = remote_[static_cast<size_t>(i)];
    braid_qp_attr attr{};
    attr.qp_state = BRAID_QPS_RTR;
    attr.path_mtu = path_mtu_;
    attr.dest_qp_num = peer.qpn;
    attr.rq_psn = peer.psn;
    attr.max_dest_rd_atomic = static_cast<uint8_t>(std::min<uint32_t>(me.out_reads, 255));
    attr.min_rnr_timer = kMinRnrTimer;
    attr.ah_attr.dgid = peer.gid;
    attr.ah_attr.port_num = kIbPort;
    int mask = BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
               BRAID_QP_RQ_PSN | BRAID_QP_MAX_DEST_RD_ATOMIC | BRAID_QP_MIN_RNR_TIMER;
    if (!nonces_.empty()) {
      std::memcpy(attr.auth_nonce, nonces_[static_cast<size_t>(i)].data(), 16);
      mask |= BRAID_QP_AUTH_NONCE;
    }
    if (const int err = braid_modify_qp(qps_[static_cast<size_t>(i)], &attr, mask)) {
      std::fprintf(stderr, "Failed to modify QP %u to RTR: %s\n", me.qpn, std::strerror(err));
      return 1;
    }
    attr = braid_qp_attr{};
    attr.qp_state = BRAID_QPS_RTS;
    attr.sq_psn = me.psn;
    attr.timeout = static_cast<uint8_t>(o_.qp_timeout);
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = static_cast<uint8_t>(std::min<uint32_t>(peer.out_reads, 255));
    if (const int err = braid_modify_qp(qps_[static_cast<size_t>(i)], &attr,
                                        BRAID_QP_STATE | BRAID_QP_SQ_PSN | BRAID_QP_TIMEOUT |
                                            BRAID_QP_RETRY_CNT | BRAID_QP_RNR_RETRY |
                                            BRAID_QP_MAX_QP_RD_ATOMIC)) {
      std::fprintf(stderr, "Failed to modify QP to RTS: %s\n", std::strerror(err));
      return 1;
    }
  }
  return 0;
}

void Session::print_banner() const {
  const bool bw = o_.kind == TestKind::kBandwidth;
  std::string device = o_.ib_dev;
  if (device.empty()) device = o_.dev_port.substr(0, o_.dev_port.find(','));
  const char* link = port_attr_.link_layer == 2                                   ? "Ethernet"
                     : (port_attr_.link_layer == 0 || port_attr_.link_layer == 1) ? "IB"
                                                                                  : "Unknown";
  print_result_line();
  std::printf("                    %s %s%sTest\n", verb_name(o_.verb),
              bw && o_.bidirectional ? "Bidirectional " : "", bw ? "BW " : "Latency ");
  std::printf(" Dual-port       : OFF\t\tDevice         : %s\n", device.c_str());
  std::printf(" Number of qps   : %d\t\tTransport type : Braid (UET RUD)\n", o_.num_qps);
  std::printf(" Connection type : RC\t\tUsing SRQ      : OFF\n");
  if (!o_.is_server() || o_.bidirectional) std::printf(" TX depth        : %d\n", o_.tx_depth);
  if (o_.verb == Verb::kSend && (o_.is_server() || o_.bidirectional)) {
    std::printf(" RX depth        : %d\n", o_.rx_depth);
  }
  if (bw) std::printf(" CQ Moderation   : %d\n", o_.cq_mod);
  std::printf(" Mtu             : %lu[B]\n", static_cast<unsigned long>(mtu_bytes(path_mtu_)));
  std::printf(" Link type       : %s\n", link);
  std::printf(" GID index       : %d\n", o_.gid_index);
  if (o_.verb != Verb::kRead) {
    std::printf(" Max inline data : %d[B]\n", o_.inline_size);
  } else {
    std::printf(" Outstand reads  : %d\n", o_.out_reads);
  }
  std::printf(" rdma_cm QPs\t : OFF\n");
  std::printf(" Data ex. method : Ethernet\n");
  std::printf(" Link MTU        : %u[B]\t\tEntropies      : %u\n", port_attr_.link_mtu,
              o_.entropies ? o_.entropies : 16u);
  std::printf(" TX payloads     : %s\n",
              port_attr_.tx_in_place ? "from registered memory" : "copied");
  print_result_line();
}

void Session::print_address(const braid_conn_info& info, bool local) const {
  std::printf(" %s address: LID %#04x QPN %#06x PSN %#06x", local ? "local" : "remote", info.lid,
              info.qpn, info.psn);
  if (o_.verb == Verb::kRead) std::printf(" OUT %#04x", info.out_reads);
  if (o_.verb != Verb::kSend) {
    std::printf(" RKey %#08x VAddr %#016llx", info.rkey,
                static_cast<unsigned long long>(info.vaddr));
  }
  std::putchar('\n');
  const uint8_t* g = info.gid.raw;
  // perftest prints the GID bytes in decimal.
  std::printf(
      " GID: %02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d\n",
      g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14],
      g[15]);
}

int Session::barrier() {
  if (const int err = braid_exchange_barrier(fd_)) {
    std::fprintf(stderr, " Failed to exchange data between server and clients: %s\n",
                 std::strerror(err));
    return 1;
  }
  return 0;
}

// Once both sides have passed the run's last barrier neither needs the
// other's engine: every completion is in. A second exchange follows over TCP
// alone, without driving the engine, so that a peer closing its port right
// after it never finds us transmitting into it: memif's PMD frees a ring
// when its peer disconnects, on its own thread, while a transmit on the
// ring may be under way (a crash in 1 of 20 memif loopback runs).
int Session::final_barrier() {
  if (barrier()) return 1;
  braid_exchange_set_idle(fd_, nullptr, nullptr);
  if (barrier()) return 1;
  passed_final_barrier_ = true;
  return 0;
}

int Session::exchange_text(const std::string& mine, std::string* theirs) {
  char out[kTextSize] = {}, in[kTextSize] = {};
  std::snprintf(out, sizeof out, "%s", mine.c_str());
  if (const int err = braid_exchange_data(fd_, out, in, sizeof in)) {
    std::fprintf(stderr, " Failed to exchange data between server and clients: %s\n",
                 std::strerror(err));
    return 1;
  }
  in[kTextSize - 1] = '\0';
  *theirs = in;
  return 0;
}

int Session::post_receives(int i, uint64_t size, uint64_t count) {
  braid_sge sge{reinterpret_cast<uintptr_t>(target(i)), static_cast<uint32_t>(size), lkey()};
  braid_recv_wr wr{};
  wr.wr_id = static_cast<uint64_t>(i) << kWrIdQpShift;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  for (uint64_t n = 0; n < count; ++n) {
    braid_recv_wr* bad = nullptr;
    if (const int err = braid_post_recv(qp(i), &wr, &bad)) {
      std::fprintf(stderr, "Couldn't post recv Qp = %d: %s\n", i, std::strerror(err));
      return 1;
    }
  }
  return 0;
}

int Session::wait_completion(braid_cq* cq, braid_wc* wc, DurationClock* clock, const char* side) {
  StallGuard guard(o_.timeout_s);
  for (;;) {
    const int n = braid_poll_cq(cq, 1, wc);
    if (n > 0) {
      if (wc->status != BRAID_WC_SUCCESS) {
        print_completion_error(ctx_, *wc, side, 0, 0);
        return 1;
      }
      return 0;
    }
    if (n < 0) {
      std::fprintf(stderr, "poll CQ failed %d\n", n);
      return 1;
    }
    if (clock && clock->update() == DurationClock::Phase::kEnd) return 2;
    if (guard.stalled(0)) {
      std::fprintf(stderr, " No completion for %d s: the peer or the transport stopped\n",
                   o_.timeout_s);
      return 1;
    }
  }
}

void Session::print_stats() const {
  braid_qp_stats sum{};
  for (braid_qp* qp : qps_) {
    braid_qp_stats q{};
    if (braid_query_qp_stats(qp, &q) != 0) continue;
    sum.data_packets_sent += q.data_packets_sent;
    sum.retransmits += q.retransmits;
    sum.data_packets_received += q.data_packets_received;
    sum.duplicates += q.duplicates;
    sum.acks_sent += q.acks_sent;
    sum.acks_received += q.acks_received;
    sum.nacks_sent += q.nacks_sent;
    sum.nacks_received += q.nacks_received;
    sum.lost_inferred += q.lost_inferred;
    sum.lost_nacked += q.lost_nacked;
    sum.lost_timeout += q.lost_timeout;
    sum.timeouts += q.timeouts;
    sum.rnr_nacks_sent += q.rnr_nacks_sent;
    sum.rnr_nacks_received += q.rnr_nacks_received;
    sum.access_errors += q.access_errors;
    sum.ecn_received += q.ecn_received;
    sum.cnps_sent += q.cnps_sent;
    sum.cnps_received += q.cnps_received;
    sum.credit_requests_sent += q.credit_requests_sent;
    sum.credit_requests_received += q.credit_requests_received;
    sum.credits_sent += q.credits_sent;
    sum.credits_received += q.credits_received;
    sum.credit_bytes_granted += q.credit_bytes_granted;
    sum.unscheduled_sent += q.unscheduled_sent;
    sum.credit_stalls += q.credit_stalls;
    sum.wrong_job_id += q.wrong_job_id;
    sum.auth_failed += q.auth_failed;
    sum.auth_replayed += q.auth_replayed;
    sum.unsealed += q.unsealed;
    sum.spurious_timeouts += q.spurious_timeouts;
  }
  // The sender's state and its paths, for the first QP.
  braid_qp_stats q0{};
  if (!qps_.empty() && braid_query_qp_stats(qps_[0], &q0) == 0 && q0.data_packets_sent > 0) {
    std::printf(
        " QP 0: srtt %.1f us, min RTT %.1f us, cwnd %u B, in flight %u B, rate %s; %u of %u "
        "paths skipped or assumed bad\n",
        static_cast<double>(q0.srtt_ns) / 1e3, static_cast<double>(q0.min_rtt_ns) / 1e3,
        q0.cwnd_bytes, q0.inflight_bytes,
        q0.rate_mbps > 0 ? fmt::format("{} Mb/s", q0.rate_mbps).c_str() : "not paced", q0.paths_bad,
        q0.entropies);
    if (q0.base_rtt_ns > 0) {
      std::printf(
          " QP 0 NSCC: base RTT %.1f us, target delay %.1f us, max window %u B, %u "
          "decreases\n",
          q0.base_rtt_ns / 1e3, q0.target_delay_ns / 1e3, q0.max_cwnd_bytes, q0.decreases);
    }
    std::printf(" QP 0 paths (port: sent/acked/ECN/lost, srtt/late us, state):");
    for (unsigned i = 0; i < q0.entropies; ++i) {
      braid_path_stats p{};
      if (braid_query_path_stats(qps_[0], i, &p) != 0) break;
      std::printf("%s %u: %u/%u/%u/%u %.0f/%.0f%s", i % 4 == 0 ? "\n  " : ";", p.udp_src_port,
                  p.sent, p.acked, p.ecn_marked, p.lost, static_cast<double>(p.srtt_ns) / 1e3,
                  static_cast<double>(p.late_ns) / 1e3,
                  p.state == 1   ? " SKIP"
                  : p.state == 2 ? " BAD"
                                 : "");
    }
    std::printf("\n");
  }
  braid_port_stats port{};
  braid_query_port_stats(ctx_, &port);
  std::printf(" Transport (%d QPs): data packets sent %" PRIu64 ", retransmitted %" PRIu64
              ", received %" PRIu64 ", duplicates %" PRIu64 "\n",
              o_.num_qps, sum.data_packets_sent, sum.retransmits, sum.data_packets_received,
              sum.duplicates);
  std::printf(" Lost: inferred %" PRIu64 ", nacked %" PRIu64 ", timed out %" PRIu64
              " (timer expirations %" PRIu64 ", %" PRIu64 " spurious); ACKs sent %" PRIu64
              " received %" PRIu64 "; NACKs sent %" PRIu64 " received %" PRIu64
              "; RNR sent %" PRIu64 " received %" PRIu64 "; access errors %" PRIu64 "\n",
              sum.lost_inferred, sum.lost_nacked, sum.lost_timeout, sum.timeouts,
              sum.spurious_timeouts, sum.acks_sent, sum.acks_received, sum.nacks_sent,
              sum.nacks_received, sum.rnr_nacks_sent, sum.rnr_nacks_received, sum.access_errors);
  if (o_.auth != "off" || sum.wrong_job_id + sum.unsealed > 0) {
    std::printf(" Refused as foreign: wrong job id %" PRIu64 "; not authentic %" PRIu64
                ", replayed %" PRIu64 ", %s %" PRIu64 "\n",
                sum.wrong_job_id, sum.auth_failed, sum.auth_replayed,
                o_.auth != "off" ? "in clear" : "sealed", sum.unsealed);
  }
  std::printf(" Congestion: data packets received ECN-marked %" PRIu64 "; CNPs sent %" PRIu64
              " received %" PRIu64 "\n",
              sum.ecn_received, sum.cnps_sent, sum.cnps_received);
  if (o_.credit) {
    std::printf(" Credit: requests sent %" PRIu64 " received %" PRIu64 "; grants sent %" PRIu64
                " (%" PRIu64 " B) received %" PRIu64 "; data packets sent unscheduled %" PRIu64
                "; asked again %" PRIu64 " times\n",
                sum.credit_requests_sent, sum.credit_requests_received, sum.credits_sent,
                sum.credit_bytes_granted, sum.credits_received, sum.unscheduled_sent,
                sum.credit_stalls);
  }
  std::printf(" Port: frames received %" PRIu64 ", sent %" PRIu64 ", refused by the stack %" PRIu64
              " (bad CRC %" PRIu64 "), missed by the NIC %" PRIu64 ", lost on send %" PRIu64
              "; TX ring full %" PRIu64 " times, no TX buffer %" PRIu64
              " times; payloads sent in place %" PRIu64 "\n",
              port.rx_frames, port.tx_frames, port.rx_dropped, port.rx_bad_crc, port.rx_missed,
              port.tx_dropped, port.tx_ring_full, port.tx_no_buffer, port.tx_in_place);
  std::printf(" Polling: gaps of 0.5 ms or more between polls %" PRIu64 " (longest %.1f ms)\n",
              port.poll_gaps, static_cast<double>(port.longest_poll_gap_us) / 1000.0);
  if (o_.engines > 1) {
    std::printf(" Engines: %d; frames handed to the QP's engine %" PRIu64
                ", dropped (its inbox full) %" PRIu64 "\n",
                o_.engines, port.steered, port.steer_dropped);
  }
  print_result_line();
}

// --- Bandwidth test ----------------------------------------------------------

int run_bw_main(Verb verb, int argc, char** argv) {
  Options o;
  if (const int rc = parse_options(verb, TestKind::kBandwidth, argc, argv, &o); rc >= 0) return rc;
  Session s(o);
  if (s.setup()) return 1;
  o = s.opts();  // with the values the device settled (outstanding reads)

  print_result_line();
  std::printf("%s\n", o.report_gbits ? kBwHeaderGb : kBwHeaderMiB);
  std::fflush(stdout);

  const bool rdma = verb != Verb::kSend;
  // A WRITE/READ server only serves the client's requests; its engine runs
  // while it waits for the client's report of each size.
  const bool passive = rdma && o.is_server() && !o.bidirectional;
  const bool sending = !o.is_server() || o.bidirectional;
  const bool receiving = !rdma && (o.is_server() || o.bidirectional);
  const std::vector<uint64_t> sizes = message_sizes(o);
  bool intact = true;

  for (const uint64_t size : sizes) {
    BwReport mine, theirs;
    if (passive) {
      std::string text;
      if (s.exchange_text(encode_report(mine), &text) || !decode_report(text, &theirs)) return 1;
      print_bw_row(o, theirs);
      continue;
    }
    const uint64_t pre_posted =
        o.is_duration() ? uint64_t(o.rx_depth) : std::min<uint64_t>(uint64_t(o.rx_depth), o.iters);
    if (receiving) {
      for (int i = 0; i < o.num_qps; ++i) {
        if (s.post_receives(i, size, pre_posted)) return 1;
      }
    }
    // Receives are posted (SEND) and both directions start together (-b).
    if ((!rdma || o.bidirectional) && s.barrier()) return 1;
    if (run_bw(s, size, sending, receiving, pre_posted, &mine)) {
      if (o.stats) s.print_stats();  // what the transport saw up to the failure
      return 1;
    }

    if (o.bidirectional) {
      std::string text;
      if (s.exchange_text(encode_report(mine), &text) || !decode_report(text, &theirs)) return 1;
      BwReport sum = mine;
      sum.peak_bps += theirs.peak_bps;
      sum.avg_bps += theirs.avg_bps;
      sum.msg_rate_mpps += theirs.msg_rate_mpps;
      print_bw_row(o, sum);
    } else {
      print_bw_row(o, mine);
      std::string ignored;
      if (rdma && s.exchange_text(encode_report(mine), &ignored)) return 1;
    }
    if (!rdma && s.barrier()) return 1;  // the peer is done with this size too

    if (o.verify) {
      for (int i = 0; i < o.num_qps && intact; ++i) {
        if (verb == Verb::kRead) intact = check_pattern(s.local(i), size, i, "read data");
        if (verb == Verb::kSend && receiving)
          intact = check_pattern(s.target(i), size, i, "received data");
      }
    }
  }
  print_result_line();

  if (o.verify && verb == Verb::kWrite && (o.is_server() || o.bidirectional)) {
    // Every size wrote the same bytes: the buffer holds the largest.
    for (int i = 0; i < o.num_qps && intact; ++i) {
      intact = check_pattern(s.target(i), sizes.back(), i, "written data");
    }
  }
  if (s.final_barrier()) return 1;  // as perftest's ctx_close_connection
  if (o.verify) {
    const bool checked = verb == Verb::kWrite  ? (o.is_server() || o.bidirectional)
                         : verb == Verb::kRead ? sending
                                               : receiving;
    if (checked && intact) {
      std::printf(" Data verification: OK (%d QPs, %" PRIu64 " bytes each)\n", o.num_qps,
                  sizes.back());
    }
  }
  if (o.stats) s.print_stats();
  return intact ? 0 : 1;
}

// --- Latency test ------------------------------------------------------------

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
