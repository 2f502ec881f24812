// The tools' options, as perftest's (CLI11).
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
// --- Options -----------------------------------------------------------------

namespace {
// An option whose value must be a name the build registers (`number` of
// it 0: none).
CLI::Validator registered(const char* kind, const std::string& what, int (*number)(const char*)) {
  return CLI::Validator(
      [what, number](std::string& s) {
        return number(s.c_str()) != 0 ? std::string{} : "no " + what + " is named " + s;
      },
      kind);
}
}  // namespace

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
      ->check(registered("POLICY", "path policy", braid_paths_from_name));
  app.add_option("--cc", o.cc,
                 "Braid: congestion control: nscc (UET's, the default), fixed (a 1 MiB window), "
                 "dcqcn, or any other algorithm the build registers")
      ->check(registered("ALGORITHM", "congestion control", braid_cc_from_name));
  app.add_option("--cc-scope", o.cc_scope,
                 "Braid: peer (default: the QPs to one peer share one congestion window) or qp "
                 "(a window each, as RoCE's DCQCN per QP)")
      ->check(CLI::IsMember({"peer", "qp"}));
  app.add_option("--pdc-scope", o.pdc_scope,
                 "Braid: qp (default: transport state, PSNs and ACKs per QP) or peer (one PDC "
                 "shared by the QPs to a peer; both ends alike)")
      ->check(CLI::IsMember({"peer", "qp"}));
  app.add_flag("--credit", o.credit,
               "Braid: receiver-driven credit on top of --cc: a BDP from idle, then only what "
               "the receiver grants at its link rate (for many-to-one incasts)");
  app.add_option("--link-mbps", o.link_mbps,
                 "Braid: link rate congestion control scales by (default: the port's; 100000 "
                 "when it reports none or is host-local)")
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

}  // namespace braid::perftest
