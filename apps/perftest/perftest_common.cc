// perftest's conventions over Braid's verbs: output formats follow
// linux-rdma/perftest (perftest_parameters.h) so existing result parsers
// keep working. Shared helpers, the data patterns, the stall guard, the
// duration clock, message sizes and the result line.
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

}  // namespace braid::perftest
