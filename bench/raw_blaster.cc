// A raw packet tool on Braid's DPDK backend (Eal + EthdevPort, through the
// PacketIo interface) that measures what a virtual NIC path itself carries,
// as the baseline Braid's perftest tools are compared against
// (bench/compare_loopback.sh). No Braid protocol: fixed-size UDP/IPv4
// frames, counted or echoed.
//
//   --mode sink   receive and count frames of --size bytes for --seconds
//                 from the first one; then tell the blaster to stop.
//   --mode blast  send --size byte frames as fast as the port takes them
//                 until the sink says stop (or --timeout passes).
//   --mode echo   send every probe back with the MACs swapped, until the
//                 pinger says stop (or --timeout passes).
//   --mode ping   --samples probes one at a time; one-way = RTT / 2.
//
// Every mode ends by itself and prints one line starting with "RESULT".
// Exit status 0 only when the measurement completed.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dpdk/eal.h"
#include "dpdk/ethdev_port.h"
#include "wire/frame.h"

namespace {

using braid::RxFrame;
using braid::TxFrame;
using braid::dpdk::EthdevPort;
using Clock = std::chrono::steady_clock;

// UDP destination ports tell the kinds of frame apart.
constexpr uint16_t kDataPort = 0xB1A5;  // blast data and ping probes
constexpr uint16_t kStopPort = 0xB1A6;  // "measurement over, stop"
constexpr size_t kSeqOffset = braid::wire::kL2L4Size;
constexpr size_t kMinFrame = kSeqOffset + 8;
constexpr uint16_t kBurst = 32;

struct Options {
  std::string mode;
  std::string port;
  int lcore = 0;
  uint32_t size = 64;
  double seconds = 5.0;
  uint32_t samples = 10000;
  uint32_t mtu = 1500;
  double timeout = 60.0;  // hard bound on the whole run
  // blast writes each frame's payload from a 64 KiB source and sink copies
  // it out to a 64 KiB destination, as a transport carrying user data must.
  bool copy = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "raw_blaster: %s\n"
               "usage: braid_raw_blaster --mode blast|sink|ping|echo --port <vdev spec>\n"
               "       [--lcore N] [--size frame bytes (64)] [--seconds S (5)]\n"
               "       [--samples N (10000)] [--mtu M (1500)] [--timeout S (60)]\n"
               "       [--copy 1: blast fills payloads from memory, sink copies them out]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) usage("missing value after a flag");
    const char* v = argv[++i];
    if (flag == "--mode") {
      o.mode = v;
    } else if (flag == "--port") {
      o.port = v;
    } else if (flag == "--lcore") {
      o.lcore = std::atoi(v);
    } else if (flag == "--size") {
      o.size = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (flag == "--seconds") {
      o.seconds = std::strtod(v, nullptr);
    } else if (flag == "--samples") {
      o.samples = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (flag == "--mtu") {
      o.mtu = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (flag == "--timeout") {
      o.timeout = std::strtod(v, nullptr);
    } else if (flag == "--copy") {
      o.copy = std::atoi(v) != 0;
    } else {
      usage("unknown flag");
    }
  }
  if (o.mode != "blast" && o.mode != "sink" && o.mode != "ping" && o.mode != "echo") {
    usage("--mode must be blast, sink, ping or echo");
  }
  if (o.port.empty()) usage("--port is required");
  if (o.size < kMinFrame) usage("--size below 50 bytes (Ethernet + IPv4 + UDP + 8)");
  if (o.size > o.mtu + braid::wire::kEthernetSize) usage("--size above MTU + 14");
  if (o.seconds <= 0 || o.samples == 0 || o.timeout <= 0)
    usage("bad --seconds/--samples/--timeout");
  return o;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
uint16_t get16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}

// Ethernet (broadcast destination: neither side knows the other's MAC) +
// IPv4 with a valid checksum + UDP without checksum.
void build_header(uint8_t* f, uint32_t size, const braid::wire::MacAddr& src, uint16_t dport) {
  std::memset(f, 0xff, 6);
  std::memcpy(f + 6, src.data(), 6);
  put16(f + 12, braid::wire::kEtherTypeIpv4);
  uint8_t* ip = f + braid::wire::kEthernetSize;
  const uint32_t ip_len = size - static_cast<uint32_t>(braid::wire::kEthernetSize);
  std::memset(ip, 0, braid::wire::kIpv4Size);
  ip[0] = 0x45;
  put16(ip + 2, static_cast<uint16_t>(ip_len));
  ip[8] = 64;
  ip[9] = braid::wire::kIpProtoUdp;
  const uint8_t addrs[8] = {198, 18, 0, 2, 198, 18, 0, 1};
  std::memcpy(ip + 12, addrs, 8);
  uint32_t sum = 0;
  for (size_t i = 0; i < braid::wire::kIpv4Size; i += 2) sum += get16(ip + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  put16(ip + 10, static_cast<uint16_t>(~sum));
  uint8_t* udp = ip + braid::wire::kIpv4Size;
  put16(udp, 0xB1A0);
  put16(udp + 2, dport);
  put16(udp + 4, static_cast<uint16_t>(ip_len - braid::wire::kIpv4Size));
  put16(udp + 6, 0);
}

// The UDP destination port of one of our frames, or 0 for anything else.
uint16_t our_port(const RxFrame& f) {
  if (f.len < kMinFrame) return 0;
  if (get16(f.data + 12) != braid::wire::kEtherTypeIpv4) return 0;
  if (f.data[braid::wire::kEthernetSize + 9] != braid::wire::kIpProtoUdp) return 0;
  return get16(f.data + braid::wire::kEthernetSize + braid::wire::kIpv4Size + 2);
}

// Sends a few stop frames (a lost one must not leave the peer waiting).
void send_stop(EthdevPort& port) {
  for (int round = 0; round < 4; ++round) {
    TxFrame tx[8];
    const uint16_t n = port.tx_alloc(tx, 8);
    for (uint16_t i = 0; i < n; ++i) {
      build_header(tx[i].data, kMinFrame, port.mac(), kStopPort);
      tx[i].len = static_cast<uint32_t>(kMinFrame);
    }
    const uint16_t sent = port.tx_burst(tx, n);
    if (sent < n) port.tx_free(tx + sent, static_cast<uint16_t>(n - sent));
    const auto t = Clock::now();
    while (since(t) < 0.002) {
    }
  }
}

bool wait_link(EthdevPort& port, Clock::time_point start, double timeout) {
  while (!port.link_up()) {
    if (since(start) > timeout) return false;
  }
  return true;
}

// The user memory --copy moves payloads from and to.
constexpr size_t kUserBuffer = 65536;

int run_sink(EthdevPort& port, const Options& o, Clock::time_point start) {
  std::vector<uint8_t> user(kUserBuffer + 16384);
  size_t user_off = 0;
  const size_t payload = o.size - kMinFrame;
  RxFrame rx[kBurst];
  uint64_t counted = 0, other = 0;
  bool started = false;
  Clock::time_point t0{};
  double elapsed = 0;
  while (true) {
    const uint16_t n = port.rx_burst(rx, kBurst);
    if (n > 0) {
      for (uint16_t i = 0; i < n; ++i) {
        if (rx[i].len == o.size && our_port(rx[i]) == kDataPort) {
          // The clock starts at the first blast frame: a kernel-facing
          // port also hands over the kernel's own frames (IPv6 neighbour
          // discovery on a veth that just came up), maybe long before.
          if (!started) {
            started = true;
            t0 = Clock::now();
          }
          ++counted;
          if (o.copy) {
            std::memcpy(user.data() + user_off, rx[i].data + kMinFrame, payload);
            user_off = user_off + payload >= kUserBuffer ? 0 : user_off + payload;
          }
        } else {
          ++other;
        }
      }
      port.rx_release(rx, n);
    }
    if (started) {
      elapsed = since(t0);
      if (elapsed >= o.seconds) break;
    }
    if (since(start) > o.timeout) break;
  }
  send_stop(port);
  const bool ok = started && elapsed >= o.seconds;
  const double mpps = elapsed > 0 ? counted / elapsed / 1e6 : 0;
  const double gbps = elapsed > 0 ? counted * o.size * 8.0 / elapsed / 1e9 : 0;
  std::printf("RESULT mode=sink size=%u copy=%d frames=%" PRIu64 " other=%" PRIu64
              " seconds=%.3f mpps=%.3f gbps=%.3f rx_missed=%" PRIu64 " ok=%d\n",
              o.size, o.copy ? 1 : 0, counted, other, elapsed, mpps, gbps, port.stats().rx_missed,
              ok ? 1 : 0);
  return ok ? 0 : 1;
}

int run_blast(EthdevPort& port, const Options& o, Clock::time_point start) {
  // Blasts until the sink's stop frame arrives; without one, after the sink's
  // window plus a margin for it to start, bounded by --timeout.
  const double limit = std::min(o.timeout, o.seconds * 2 + 20);
  RxFrame rx[kBurst];
  TxFrame tx[kBurst];
  uint64_t seq = 0, queued = 0;
  bool stopped = false;
  const Clock::time_point t0 = Clock::now();
  uint32_t iter = 0;
  // Only the headers are written, from a template: the payload is whatever
  // the mbuf held.
  uint8_t header[kMinFrame];
  build_header(header, o.size, port.mac(), kDataPort);
  std::vector<uint8_t> user(kUserBuffer + 16384, 0x5a);
  size_t user_off = 0;
  const size_t payload = o.size - kMinFrame;
  while (!stopped) {
    const uint16_t n = port.tx_alloc(tx, kBurst);
    for (uint16_t i = 0; i < n; ++i) {
      std::memcpy(tx[i].data, header, kSeqOffset);
      std::memcpy(tx[i].data + kSeqOffset, &seq, 8);
      if (o.copy) {
        std::memcpy(tx[i].data + kMinFrame, user.data() + user_off, payload);
        user_off = user_off + payload >= kUserBuffer ? 0 : user_off + payload;
      }
      ++seq;
      tx[i].len = o.size;
    }
    const uint16_t sent = port.tx_burst(tx, n);
    queued += sent;
    // The ring is full: back off briefly rather than hammer the indices the
    // receiver is reading (and allocate frames only to free them again).
    if (sent < n) {
      port.tx_free(tx + sent, static_cast<uint16_t>(n - sent));
      for (int spin = 0; spin < 64; ++spin) __builtin_ia32_pause();
    }
    if ((++iter & 63) != 0) continue;
    const uint16_t r = port.rx_burst(rx, kBurst);
    for (uint16_t i = 0; i < r; ++i) stopped |= our_port(rx[i]) == kStopPort;
    port.rx_release(rx, r);
    if (since(start) > limit) break;
  }
  const double elapsed = since(t0);
  const auto st = port.stats();
  std::printf("RESULT mode=blast size=%u copy=%d sent=%" PRIu64 " ring_full=%" PRIu64
              " seconds=%.3f mpps=%.3f stopped_by_sink=%d\n",
              o.size, o.copy ? 1 : 0, queued, st.tx_ring_full, elapsed, queued / elapsed / 1e6,
              stopped ? 1 : 0);
  return stopped ? 0 : 1;
}

int run_echo(EthdevPort& port, const Options& o, Clock::time_point start) {
  RxFrame rx[kBurst];
  TxFrame tx[kBurst];
  uint64_t echoed = 0;
  bool stopped = false;
  uint32_t iter = 0;
  while (!stopped) {
    const uint16_t n = port.rx_burst(rx, kBurst);
    if (n > 0) {
      uint16_t k = 0;
      const uint16_t got = port.tx_alloc(tx, n);
      for (uint16_t i = 0; i < n; ++i) {
        const uint16_t dport = our_port(rx[i]);
        if (dport == kStopPort) stopped = true;
        if (dport != kDataPort || k >= got || rx[i].len > tx[k].cap) continue;
        std::memcpy(tx[k].data, rx[i].data + 6, 6);  // back to the sender
        std::memcpy(tx[k].data + 6, port.mac().data(), 6);
        std::memcpy(tx[k].data + 12, rx[i].data + 12, rx[i].len - 12);
        tx[k].len = rx[i].len;
        ++k;
      }
      port.rx_release(rx, n);
      if (got > k) port.tx_free(tx + k, static_cast<uint16_t>(got - k));
      const uint16_t sent = port.tx_burst(tx, k);
      if (sent < k) port.tx_free(tx + sent, static_cast<uint16_t>(k - sent));
      echoed += sent;
    }
    if ((++iter & 1023) == 0 && since(start) > o.timeout) break;
  }
  std::printf("RESULT mode=echo echoed=%" PRIu64 " stopped_by_ping=%d\n", echoed, stopped ? 1 : 0);
  return stopped ? 0 : 1;
}

int run_ping(EthdevPort& port, const Options& o, Clock::time_point start) {
  constexpr uint32_t kWarmup = 200;
  constexpr double kProbeTimeout = 0.05;  // then the probe counts as lost
  std::vector<double> rtt_us;
  rtt_us.reserve(o.samples);
  RxFrame rx[kBurst];
  uint64_t lost = 0;
  bool timed_out = false;
  for (uint64_t seq = 0; rtt_us.size() < o.samples; ++seq) {
    if (since(start) > o.timeout) {
      timed_out = true;
      break;
    }
    TxFrame tx;
    if (port.tx_alloc(&tx, 1) != 1) continue;
    build_header(tx.data, o.size, port.mac(), kDataPort);
    std::memcpy(tx.data + kSeqOffset, &seq, 8);
    tx.len = o.size;
    const Clock::time_point t0 = Clock::now();
    if (port.tx_burst(&tx, 1) != 1) {
      port.tx_free(&tx, 1);
      continue;
    }
    bool back = false;
    while (!back) {
      const uint16_t n = port.rx_burst(rx, kBurst);
      const Clock::time_point t1 = Clock::now();
      for (uint16_t i = 0; i < n; ++i) {
        uint64_t got = 0;
        if (our_port(rx[i]) != kDataPort || rx[i].len != o.size) continue;
        std::memcpy(&got, rx[i].data + kSeqOffset, 8);
        if (got == seq) {
          back = true;
          if (seq >= kWarmup) {
            rtt_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
          }
        }
      }
      port.rx_release(rx, n);
      if (!back && std::chrono::duration<double>(t1 - t0).count() > kProbeTimeout) {
        if (seq >= kWarmup) ++lost;
        break;
      }
    }
  }
  send_stop(port);
  if (rtt_us.empty()) {
    std::printf("RESULT mode=ping samples=0 lost=%" PRIu64 " ok=0\n", lost);
    return 1;
  }
  std::sort(rtt_us.begin(), rtt_us.end());
  auto pct = [&](double p) {
    const size_t i = static_cast<size_t>(p * static_cast<double>(rtt_us.size() - 1) + 0.5);
    return rtt_us[i];
  };
  std::printf("RESULT mode=ping size=%u samples=%zu lost=%" PRIu64
              " rtt_p50_us=%.3f rtt_p99_us=%.3f p50_us=%.3f p99_us=%.3f ok=%d\n",
              o.size, rtt_us.size(), lost, pct(0.5), pct(0.99), pct(0.5) / 2, pct(0.99) / 2,
              timed_out ? 0 : 1);
  return timed_out ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const Clock::time_point start = Clock::now();

  braid::dpdk::EalConfig eal;
  eal.vdevs = {o.port};
  eal.lcore = o.lcore;
  eal.extra_args = {"--log-level=lib.eal:warning"};
  if (auto st = braid::dpdk::Eal::init(eal); !st.ok()) {
    std::fprintf(stderr, "raw_blaster: EAL: %s\n", st.error.c_str());
    std::printf("RESULT mode=%s ok=0 error=eal\n", o.mode.c_str());
    return 1;
  }

  braid::dpdk::EthdevPortConfig pc;
  pc.name = o.port.substr(0, o.port.find(','));
  pc.mtu = o.mtu;
  // The side that starts first (sink, echo: vhost / memif server) waits for
  // its peer below; the other side needs the link at once.
  pc.require_link_up = o.mode == "blast" || o.mode == "ping";
  std::string err;
  std::unique_ptr<EthdevPort> port = EthdevPort::open(pc, &err);
  int rc = 1;
  if (!port) {
    std::fprintf(stderr, "raw_blaster: %s\n", err.c_str());
    std::printf("RESULT mode=%s ok=0 error=port\n", o.mode.c_str());
  } else if (!wait_link(*port, start, o.timeout)) {
    std::fprintf(stderr, "raw_blaster: the link stayed down for %.0f s\n", o.timeout);
    std::printf("RESULT mode=%s ok=0 error=link\n", o.mode.c_str());
  } else if (o.mode == "sink") {
    rc = run_sink(*port, o, start);
  } else if (o.mode == "blast") {
    rc = run_blast(*port, o, start);
  } else if (o.mode == "echo") {
    rc = run_echo(*port, o, start);
  } else {
    rc = run_ping(*port, o, start);
  }
  std::fflush(stdout);
  port.reset();
  braid::dpdk::Eal::shutdown();
  return rc;
}
