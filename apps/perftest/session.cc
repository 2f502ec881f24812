// A session: the device, resources, the connection with the peer, barriers
// and statistics.
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
  cfg.pdc_per_peer = o_.pdc_scope == "peer" ? 1 : 0;
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
    const int max = std::max(1, dev_attr_.max_qp_rd_atom);  // perftest's default, too
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

}  // namespace braid::perftest
