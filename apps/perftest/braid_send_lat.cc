// braid_send_lat: ib_send_lat over Braid. SEND/RECV ping-pong: the client
// sends first, each side answers a receive with a send. Reports RTT/2.
#include <algorithm>
#include <cstring>

#include "perftest_common.h"

namespace {

using braid::perftest::DurationClock;
using braid::perftest::LatencySamples;
using braid::perftest::Session;

uint64_t receives_up_front(const braid::perftest::Options& o) {
  const auto depth = static_cast<uint64_t>(o.rx_depth);
  return o.is_duration() ? depth : std::min(depth, o.iters);
}

int prepare(Session& s, uint64_t size) {
  std::memset(s.target(0), 0, size);  // so that --verify sees this size's data
  return s.post_receives(0, size, receives_up_front(s.opts()));
}

int run(Session& s, uint64_t size, LatencySamples* out) {
  const braid::perftest::Options& o = s.opts();
  const bool dur = o.is_duration();
  const uint64_t iters = dur ? 0 : o.iters;
  const bool server = o.is_server();
  const char* side = server ? "server" : "client";
  const auto cq_mod = static_cast<uint64_t>(o.cq_mod);

  braid_sge sge{reinterpret_cast<uintptr_t>(s.local(0)), static_cast<uint32_t>(size), s.lkey()};
  braid_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = BRAID_WR_SEND;
  const unsigned inline_flag =
      size <= static_cast<uint64_t>(o.inline_size) ? braid::perftest::kInline : 0u;
  braid_sge rsge{reinterpret_cast<uintptr_t>(s.target(0)), static_cast<uint32_t>(size), s.lkey()};
  braid_recv_wr rwr{};
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;

  if (!dur) out->tposted.assign(iters, 0);
  DurationClock clock(o.duration_s, o.margin_s);
  DurationClock* clk = dur ? &clock : nullptr;
  uint64_t scnt = 0, rcnt = 0, rposted = receives_up_front(o);

  while (dur ? clock.update() != DurationClock::Phase::kEnd : (scnt < iters || rcnt < iters)) {
    // The server waits first; the client starts with a send.
    if ((dur || rcnt < iters) && !(scnt == 0 && !server)) {
      braid_wc wc;
      const int rc = s.wait_completion(s.recv_cq(), &wc, clk, side);
      if (rc == 1) return 1;
      if (rc == 2) break;
      ++rcnt;
      if (dur && clock.phase() == DurationClock::Phase::kSample) ++out->sample_iters;
      if (dur || rposted < iters) {
        braid_recv_wr* bad = nullptr;
        if (const int err = braid_post_recv(s.qp(0), &rwr, &bad)) {
          std::fprintf(stderr, "Couldn't post recv: rcnt=%lu: %s\n",
                       static_cast<unsigned long>(rcnt), std::strerror(err));
          return 1;
        }
        ++rposted;
      }
    }
    if (dur || scnt < iters) {
      if (!dur) out->tposted[scnt] = braid::perftest::now_ns();
      ++scnt;
      const bool signaled = scnt % cq_mod == 0 || (!dur && scnt == iters);
      wr.send_flags = (signaled ? braid::perftest::kSignaled : 0u) | inline_flag;
      braid_send_wr* bad = nullptr;
      if (const int err = braid_post_send(s.qp(0), &wr, &bad)) {
        std::fprintf(stderr, "Couldn't post send: scnt=%lu: %s\n", static_cast<unsigned long>(scnt),
                     std::strerror(err));
        return 1;
      }
      if (signaled) {
        braid_wc wc;
        const int rc = s.wait_completion(s.send_cq(), &wc, clk, side);
        if (rc == 1) return 1;
        if (rc == 2) break;
      }
    }
  }
  if (dur) out->sample_ns = clock.sample_ns();
  return 0;
}

int verify(Session& s, uint64_t size) {
  return braid::perftest::check_pattern(s.target(0), size, 0, "received data") ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return braid::perftest::run_lat_main(braid::perftest::Verb::kSend, argc, argv,
                                       {prepare, run, verify});
}
