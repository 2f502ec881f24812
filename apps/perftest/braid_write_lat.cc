// braid_write_lat: ib_write_lat over Braid. Ping-pong of RDMA WRITEs: each
// side writes a counter into the last byte of the peer's buffer and spins on
// the last byte of its own, driving its engine meanwhile. Reports RTT/2.
//
// Caveat of a spraying transport: the packets of a multi-packet message may
// be placed out of order, so the last byte can land before the rest. The
// latency of messages larger than one MTU is then optimistic; the data
// itself is checked (--verify) only after both sides completed.
#include <atomic>
#include <cstring>

#include "perftest_common.h"

namespace {

using braid::perftest::DurationClock;
using braid::perftest::LatencySamples;
using braid::perftest::Session;

int prepare(Session& s, uint64_t size) {
  // The peer's counter starts at 1 again: clear the byte we poll, and undo
  // the counter the previous size left in our payload.
  braid::perftest::fill_pattern(s.local(0), size, 0);
  std::memset(s.target(0), 0, size);
  return 0;
}

int run(Session& s, uint64_t size, LatencySamples* out) {
  const braid::perftest::Options& o = s.opts();
  const bool dur = o.is_duration();
  const uint64_t iters = dur ? 0 : o.iters;
  const bool server = o.is_server();
  uint8_t* post_byte = s.local(0) + size - 1;
  uint8_t* poll_byte = s.target(0) + size - 1;

  braid_sge sge{reinterpret_cast<uintptr_t>(s.local(0)), static_cast<uint32_t>(size), s.lkey()};
  braid_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = BRAID_WR_RDMA_WRITE;
  wr.send_flags = BRAID_SEND_SIGNALED;
  if (size <= static_cast<uint64_t>(o.inline_size)) wr.send_flags |= BRAID_SEND_INLINE;
  wr.rdma.remote_addr = s.remote(0).vaddr;
  wr.rdma.rkey = s.remote(0).rkey;

  if (!dur) out->tposted.assign(iters, 0);
  DurationClock clock(o.duration_s, o.margin_s);
  DurationClock* clk = dur ? &clock : nullptr;
  braid::perftest::StallGuard guard(o.timeout_s);
  uint64_t scnt = 0, ccnt = 0, rcnt = 0;
  const auto ended = [&] { return dur && clock.update() == DurationClock::Phase::kEnd; };

  while (dur ? !ended() : (scnt < iters || ccnt < iters || rcnt < iters)) {
    // The server writes first, as in perftest.
    if ((dur || rcnt < iters) && !(scnt == 0 && server)) {
      ++rcnt;
      const auto want = static_cast<uint8_t>(rcnt);
      while (std::atomic_ref<uint8_t>(*poll_byte).load(std::memory_order_acquire) != want) {
        braid_progress(s.context());
        if (ended()) break;
        if (guard.stalled(rcnt + scnt + ccnt)) {
          std::fprintf(stderr, " No write from the peer for %d s (iteration %lu)\n", o.timeout_s,
                       static_cast<unsigned long>(rcnt));
          return 1;
        }
      }
      if (dur && clock.phase() == DurationClock::Phase::kEnd) break;
    }
    if (dur || scnt < iters) {
      if (!dur) out->tposted[scnt] = braid::perftest::now_ns();
      *post_byte = static_cast<uint8_t>(++scnt);
      braid_send_wr* bad = nullptr;
      if (const int err = braid_post_send(s.qp(0), &wr, &bad)) {
        std::fprintf(stderr, "Couldn't post send: scnt=%lu: %s\n", static_cast<unsigned long>(scnt),
                     std::strerror(err));
        return 1;
      }
    }
    if (dur || ccnt < iters) {
      braid_wc wc;
      const int rc = s.wait_completion(s.send_cq(), &wc, clk, server ? "server" : "client");
      if (rc == 1) return 1;
      if (rc == 2) break;
      ++ccnt;
      if (dur && clock.phase() == DurationClock::Phase::kSample) ++out->sample_iters;
    }
  }
  if (dur) out->sample_ns = clock.sample_ns();
  return 0;
}

int verify(Session& s, uint64_t size) {
  // All but the last byte, which carried the counter.
  return braid::perftest::check_pattern(s.target(0), size - 1, 0, "written data") ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return braid::perftest::run_lat_main(braid::perftest::Verb::kWrite, argc, argv,
                                       {prepare, run, verify});
}
