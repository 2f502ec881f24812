// braid_read_lat: ib_read_lat over Braid. The client reads the server's
// buffer one READ at a time and reports the full round trip; the server's
// engine answers while it waits for the client's results.
#include <cstring>

#include "perftest_common.h"

namespace {

using braid::perftest::DurationClock;
using braid::perftest::LatencySamples;
using braid::perftest::Session;

int prepare(Session& s, uint64_t size) {
  std::memset(s.local(0), 0, size);  // so that --verify sees this size's data
  return 0;
}

int run(Session& s, uint64_t size, LatencySamples* out) {
  const braid::perftest::Options& o = s.opts();
  const bool dur = o.is_duration();
  const uint64_t iters = dur ? 0 : o.iters;

  braid_sge sge{reinterpret_cast<uintptr_t>(s.local(0)), static_cast<uint32_t>(size), s.lkey()};
  braid_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = BRAID_WR_RDMA_READ;
  wr.send_flags = BRAID_SEND_SIGNALED;
  wr.rdma.remote_addr = s.remote(0).vaddr;
  wr.rdma.rkey = s.remote(0).rkey;

  if (!dur) out->tposted.assign(iters, 0);
  DurationClock clock(o.duration_s, o.margin_s);
  DurationClock* clk = dur ? &clock : nullptr;
  uint64_t scnt = 0;
  while (dur ? clock.update() != DurationClock::Phase::kEnd : scnt < iters) {
    if (!dur) out->tposted[scnt] = braid::perftest::now_ns();
    ++scnt;
    braid_send_wr* bad = nullptr;
    if (const int err = braid_post_send(s.qp(0), &wr, &bad)) {
      std::fprintf(stderr, "Couldn't post send: scnt=%lu: %s\n", static_cast<unsigned long>(scnt),
                   std::strerror(err));
      return 1;
    }
    braid_wc wc;
    const int rc = s.wait_completion(s.send_cq(), &wc, clk, "client");
    if (rc == 1) return 1;
    if (rc == 2) break;
    if (dur && clock.phase() == DurationClock::Phase::kSample) ++out->sample_iters;
  }
  if (dur) out->sample_ns = clock.sample_ns();
  return 0;
}

int verify(Session& s, uint64_t size) {
  return braid::perftest::check_pattern(s.local(0), size, 0, "read data") ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return braid::perftest::run_lat_main(braid::perftest::Verb::kRead, argc, argv,
                                       {prepare, run, verify});
}
