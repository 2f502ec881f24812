// What Braid's perftest-style tools share: perftest's flags, banner and
// tables, the verbs resources (device, PD, MR, CQs, RC QPs connected through
// the TCP exchange of braid/connect.h), timing, and the bandwidth test.
// Each tool is a small main(): the bandwidth tools differ only by verb, the
// latency tools bring their ping-pong loop (LatencyOps).
#ifndef BRAID_APPS_PERFTEST_PERFTEST_COMMON_H_
#define BRAID_APPS_PERFTEST_PERFTEST_COMMON_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/connect.h"
#include "braid/verbs.h"

namespace braid::perftest {

enum class Verb { kSend, kWrite, kRead };
enum class TestKind { kBandwidth, kLatency };

struct Options {
  Verb verb = Verb::kWrite;
  TestKind kind = TestKind::kBandwidth;

  // perftest's flags (same letters, defaults and dependencies).
  std::string host;  // empty: server
  uint64_t size = 0;
  uint64_t iters = 0;
  int duration_s = 0;  // -D: 0 runs a number of iterations
  int margin_s = -1;   // -f: default duration/4
  bool all_sizes = false;
  int num_qps = 1;
  int tx_depth = 0;
  int rx_depth = 512;
  int cq_mod = 100;
  bool cq_mod_set = false;
  bool bidirectional = false;
  uint16_t port = BRAID_EXCHANGE_DEFAULT_PORT;
  std::string ib_dev;  // informational
  bool report_gbits = false;
  bool cpu_freq_f = false;  // accepted: Braid times with a monotonic clock
  int qp_timeout = 14;
  int mtu = 0;  // IB MTU in bytes; 0: the port's active MTU
  int gid_index = 0;
  int out_reads = 0;     // 0: the device maximum (max_qp_rd_atom)
  int inline_size = -1;  // -1: perftest's default for the test
  bool no_peak = false;

  // Braid's own.
  std::string dev_port;  // DPDK port: a vdev spec or a PCI address
  std::string ip;        // our IPv4 address
  int prefix_len = 0;
  std::string gateway;
  std::string neighbors;
  std::string eal_args;
  int lcore = 0;  // core the engine (EAL lcore) runs on
  uint32_t link_mtu = 0;
  uint16_t entropies = 0;
  uint16_t udp_port = 0;
  std::string crc = "auto";
  std::string auth = "off";
  std::string auth_key;  // 64 hex digits or @file; default $BRAID_AUTH_KEY
  bool tx_copy = false;
  int engines = 1;
  std::string paths = "reps";
  std::string cc = "nscc";
  uint32_t link_mbps = 0;
  uint32_t base_rtt_us = 0;
  uint32_t idle_yield = 0;
  bool credit = false;
  std::string cc_scope = "peer";
  std::string pdc_scope = "qp";
  bool verify = false;
  bool stats = false;  // print transport and port counters after the run
  int timeout_s = 60;
  // Bytes each QP's local and target regions span (0: the largest message).
  // Bandwidth tests cycle their messages through them, so one QP can touch
  // as much memory as many QPs do.
  uint64_t buffer_span = 0;

  bool is_server() const { return host.empty(); }
  bool is_duration() const { return duration_s > 0; }
};

// Parses argv as perftest does and applies its dependencies (tx depth <= iters,
// CQ moderation off for large messages, no peak in duration mode, ...).
// Returns -1 to go on, otherwise the exit code (help, bad flags).
int parse_options(Verb verb, TestKind kind, int argc, char** argv, Options* o);

// Send flags as plain unsigned values (C enumerators mix badly with 0 in ?:).
inline constexpr unsigned kSignaled = BRAID_SEND_SIGNALED;
inline constexpr unsigned kInline = BRAID_SEND_INLINE;

inline uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// The data pattern of QP `qp`'s buffers, the same on both sides (--verify).
inline uint8_t pattern_byte(int qp, uint64_t offset) {
  return static_cast<uint8_t>(offset * 131 + (offset >> 8) * 17 + 7 +
                              static_cast<uint64_t>(qp) * 29);
}
void fill_pattern(uint8_t* p, uint64_t len, int qp);
// Reports the first difference on stderr; true when the data is intact.
bool check_pattern(const uint8_t* p, uint64_t len, int qp, const char* what);

// Detects a run that stopped moving (peer gone, transport stuck): cheap to
// call in every spin, it reads the clock once every 1024 calls.
class StallGuard {
 public:
  explicit StallGuard(int timeout_s);
  // `progress`: any counter that grows while the run advances.
  bool stalled(uint64_t progress);

 private:
  uint64_t limit_ns_;
  uint64_t spins_ = 0;
  uint64_t last_progress_ = ~0ull;
  uint64_t since_ns_ = 0;
};

// perftest's duration mode: warm up for the margin, sample for
// duration - 2 * margin, cool down for the margin.
class DurationClock {
 public:
  enum class Phase { kWarmup, kSample, kCooldown, kEnd };
  DurationClock(int duration_s, int margin_s);
  // Reads the clock every 16th call (a clock read cost 5% of a 64 B
  // WRITE's sender time): phases change up to 15 loop turns late, and the
  // messages counted and the sampled time change at the same instants.
  Phase update();
  Phase phase() const { return phase_; }
  uint64_t sample_ns() const { return sample_end_ns_ - sample_begin_ns_; }

 private:
  uint64_t start_ns_, margin_ns_, duration_ns_;
  uint64_t sample_begin_ns_ = 0, sample_end_ns_ = 0;
  Phase phase_ = Phase::kWarmup;
  uint32_t calls_ = 0;
};

// The verbs resources of one test and the TCP connection to the peer.
// Buffers: per QP a local region (source of WRITE/SEND, destination of
// READ) and a target region (what the peer writes to, reads from or sends
// to), each as large as the largest message.
class Session {
 public:
  explicit Session(const Options& o);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Opens the device, connects to the peer over TCP, waits for the port to
  // come up (a memif link needs both processes), checks that both run the
  // same test, creates and connects the QPs, prints the banner and
  // addresses. Prints the reason and returns nonzero on failure.
  int setup();

  // A sync point with the peer; the device keeps progressing meanwhile.
  int barrier();
  // The run's last barrier, then one more over TCP alone with the engine no
  // longer driven (see the definition).
  int final_barrier();
  // Sends `mine` and receives the peer's text (up to 255 characters).
  int exchange_text(const std::string& mine, std::string* theirs);

  const Options& opts() const { return o_; }
  // Transport counters summed over the QPs, and the port's (--stats).
  void print_stats() const;
  braid_context* context() const { return ctx_; }
  braid_cq* send_cq() const { return send_cq_; }
  braid_cq* recv_cq() const { return recv_cq_; }
  braid_qp* qp(int i) const { return qps_[static_cast<size_t>(i)]; }
  uint32_t lkey() const { return mr_->lkey; }
  uint8_t* local(int i) const { return buf_ + (2 * static_cast<uint64_t>(i)) * region_; }
  // Bytes of each local and target region (--buffer-span, at least the
  // largest message, rounded up to a page).
  uint64_t region() const { return region_; }
  uint8_t* target(int i) const { return buf_ + (2 * static_cast<uint64_t>(i) + 1) * region_; }
  const braid_conn_info& remote(int i) const { return remote_[static_cast<size_t>(i)]; }

  // Posts `count` receives of `size` bytes into QP i's target region.
  int post_receives(int i, uint64_t size, uint64_t count);
  // Polls `cq` until one completion arrives. 0: *wc holds it (status
  // checked), 1: error (printed), 2: the duration ended first.
  int wait_completion(braid_cq* cq, braid_wc* wc, DurationClock* clock, const char* side);

 private:
  int open_device();
  int connect_peer();
  int wait_port_active();
  int check_peer_options();
  int create_resources();
  int connect_qps();
  void print_banner() const;
  void print_address(const braid_conn_info& info, bool local) const;

  Options o_;
  braid_context* ctx_ = nullptr;
  braid_pd* pd_ = nullptr;
  braid_mr* mr_ = nullptr;
  braid_cq* send_cq_ = nullptr;
  braid_cq* recv_cq_ = nullptr;
  std::vector<braid_qp*> qps_;
  uint8_t* buf_ = nullptr;
  uint64_t region_ = 0;
  int fd_ = -1;
  bool passed_final_barrier_ = false;  // both sides hold every completion
  braid_device_attr dev_attr_{};
  braid_port_attr port_attr_{};
  enum braid_mtu path_mtu_ = BRAID_MTU_1024;
  union braid_gid gid_ {};
  std::vector<braid_conn_info> mine_, remote_;
  // --auth: each QP's nonce, both ends' random bytes XORed (auth_nonce).
  std::vector<std::array<uint8_t, 16>> nonces_;
};

// Message sizes of the run: 2 .. 2^23 with -a, else -s.
std::vector<uint64_t> message_sizes(const Options& o);

// perftest's tables.
void print_result_line();
// With the port's condition when the transport gave up (RETRY_EXC_ERR).
void print_completion_error(braid_context* ctx, const braid_wc& wc, const char* side,
                            uint64_t posted, uint64_t completed);

// The bandwidth tools (ib_write_bw, ib_read_bw, ib_send_bw).
int run_bw_main(Verb verb, int argc, char** argv);

// What a latency tool measured for one message size.
struct LatencySamples {
  std::vector<uint64_t> tposted;  // iterations: the time of each post
  uint64_t sample_iters = 0;      // duration: iterations in the sample window
  uint64_t sample_ns = 0;
};

// A latency tool's loop. prepare runs before the sync point that starts each
// size (post receives, reset poll bytes), run measures, verify (with
// --verify) checks the data once both sides are done. 0 on success.
struct LatencyOps {
  int (*prepare)(Session& s, uint64_t size);
  int (*run)(Session& s, uint64_t size, LatencySamples* out);
  int (*verify)(Session& s, uint64_t size);
};

// The latency tools (ib_write_lat, ib_read_lat, ib_send_lat).
int run_lat_main(Verb verb, int argc, char** argv, const LatencyOps& ops);

}  // namespace braid::perftest

#endif  // BRAID_APPS_PERFTEST_PERFTEST_COMMON_H_
