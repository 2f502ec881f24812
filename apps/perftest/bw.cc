// The bandwidth test: perftest's run_iter_bw and its report.
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

}  // namespace

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

}  // namespace braid::perftest
