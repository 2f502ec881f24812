// What a QP costs at scale: N RC QPs on one device, connected in pairs on
// the device itself (QP 2k to QP 2k+1, as two processes' QPs would be, but
// with no second process), each moved INIT -> RTR -> RTS, then one WRITE on
// every QP, checked. Prints heap bytes per QP (glibc's mallinfo2) after
// creation and after RTS, the resident set, and set-up time per QP.
//   braid_qp_scale [--qps 10000] [--send-wr 128] [--recv-wr 1] [--port net_ring0]
//                  [--pdc-scope qp|peer]
// Runs on any DPDK port; the default is a ring vdev (no peer, no hugepages):
// frames between QPs of one device never reach the port.
#include <braid/verbs.h>
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

size_t heap_bytes() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "qp_scale: %s: %s\n", what, braid_last_error());
  std::exit(1);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int qps = 10000;
  uint32_t send_wr = 128, recv_wr = 1;
  std::string port = "net_ring0";
  uint32_t entropies = 16;
  CLI::App app{"QPs at scale on one device: memory and set-up time"};
  app.add_option("--qps", qps, "QPs (an even number)")->check(CLI::Range(2, 65534));
  app.add_option("--send-wr", send_wr, "max_send_wr of each QP")->check(CLI::Range(1, 32768));
  app.add_option("--recv-wr", recv_wr, "max_recv_wr of each QP")->check(CLI::Range(1, 32768));
  app.add_option("--entropies", entropies, "entropies per QP")->check(CLI::Range(1, 256));
  app.add_option("--port", port, "DPDK port");
  std::string pdc_scope = "qp";
  app.add_option("--pdc-scope", pdc_scope,
                 "qp: a PDC (transport state) per QP; peer: one for all (braid_device_config."
                 "pdc_per_peer)")
      ->check(CLI::IsMember({"peer", "qp"}));
  CLI11_PARSE(app, argc, argv);
  qps &= ~1;

  braid_device_config cfg{};
  cfg.port = port.c_str();
  cfg.ipv4 = "198.18.0.1";
  cfg.entropies = static_cast<uint16_t>(entropies);
  cfg.pdc_per_peer = pdc_scope == "peer" ? 1 : 0;
  braid_context* ctx = braid_open_device(&cfg);
  if (ctx == nullptr) die("open");
  braid_pd* pd = braid_alloc_pd(ctx);
  if (pd == nullptr) die("alloc_pd");
  braid_cq* cq = braid_create_cq(ctx, 65536, nullptr, nullptr, 0);
  if (cq == nullptr) die("create_cq");
  // One 64-byte slot per QP to write from and one to write to.
  std::vector<uint8_t> src(size_t(qps) * 64), dst(size_t(qps) * 64, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + i / 64);
  braid_mr* smr = braid_reg_mr(pd, src.data(), src.size(), BRAID_ACCESS_LOCAL_WRITE);
  braid_mr* dmr = braid_reg_mr(pd, dst.data(), dst.size(),
                               BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE);
  if (smr == nullptr || dmr == nullptr) die("reg_mr");

  const size_t heap0 = heap_bytes(), rss0 = rss_bytes();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<braid_qp*> qp(static_cast<size_t>(qps));
  for (auto& q : qp) {
    braid_qp_init_attr ia{};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.cap = {send_wr, recv_wr, 1, 1, 0};
    ia.qp_type = BRAID_QPT_RC;
    q = braid_create_qp(pd, &ia);
    if (q == nullptr) die("create_qp");
    braid_qp_attr at{};
    at.qp_state = BRAID_QPS_INIT;
    at.qp_access_flags = BRAID_ACCESS_REMOTE_WRITE;
    if (braid_modify_qp(q, &at, BRAID_QP_STATE | BRAID_QP_ACCESS_FLAGS) != 0) die("INIT");
  }
  const double create_s = seconds_since(t0);
  const size_t heap1 = heap_bytes();
  t0 = std::chrono::steady_clock::now();
  union braid_gid gid {};
  if (braid_query_gid(ctx, 1, 0, &gid) != 0) die("query_gid");
  for (int i = 0; i < qps; ++i) {
    braid_qp_attr at{};
    at.qp_state = BRAID_QPS_RTR;
    at.path_mtu = BRAID_MTU_1024;
    at.dest_qp_num = braid_qp_num(qp[static_cast<size_t>(i ^ 1)]);
    at.rq_psn = 0;
    at.ah_attr.dgid = gid;
    if (braid_modify_qp(qp[static_cast<size_t>(i)], &at,
                        BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
                            BRAID_QP_RQ_PSN) != 0) {
      die("RTR");
    }
    at = {};
    at.qp_state = BRAID_QPS_RTS;
    at.sq_psn = 0;
    if (braid_modify_qp(qp[static_cast<size_t>(i)], &at, BRAID_QP_STATE | BRAID_QP_SQ_PSN) != 0) {
      die("RTS");
    }
  }
  const double connect_s = seconds_since(t0);
  const size_t heap2 = heap_bytes(), rss2 = rss_bytes();

  // One 64-byte WRITE on every QP into its peer's slot, then every slot checked.
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < qps; ++i) {
    const size_t me = static_cast<size_t>(i), peer = static_cast<size_t>(i ^ 1);
    braid_sge sge{reinterpret_cast<uintptr_t>(&src[me * 64]), 64, smr->lkey};
    braid_send_wr wr{};
    wr.wr_id = me;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = BRAID_WR_RDMA_WRITE;
    wr.send_flags = BRAID_SEND_SIGNALED;
    wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(&dst[peer * 64]);
    wr.rdma.rkey = dmr->rkey;
    braid_send_wr* bad = nullptr;
    if (braid_post_send(qp[me], &wr, &bad) != 0) die("post_send");
  }
  int done = 0;
  std::vector<braid_wc> wc(256);
  while (done < qps) {
    braid_progress(ctx);
    const int n = braid_poll_cq(cq, static_cast<int>(wc.size()), wc.data());
    if (n < 0) die("poll_cq");
    for (int k = 0; k < n; ++k) {
      if (wc[static_cast<size_t>(k)].status != BRAID_WC_SUCCESS) {
        std::fprintf(stderr, "qp_scale: WRITE %llu failed with status %d\n",
                     static_cast<unsigned long long>(wc[static_cast<size_t>(k)].wr_id),
                     wc[static_cast<size_t>(k)].status);
        return 1;
      }
    }
    done += n;
  }
  const double write_s = seconds_since(t0);
  for (int i = 0; i < qps; ++i) {
    const size_t me = static_cast<size_t>(i), peer = static_cast<size_t>(i ^ 1);
    if (std::memcmp(&dst[peer * 64], &src[me * 64], 64) != 0) {
      std::fprintf(stderr, "qp_scale: QP %d's WRITE did not arrive intact\n", i);
      return 1;
    }
  }
  std::printf("%d QPs (max_send_wr %u, max_recv_wr %u, %u entropies)\n", qps, send_wr, recv_wr,
              entropies);
  std::printf("heap per QP: %.1f KiB created (INIT), %.1f KiB connected (RTS)\n",
              (heap1 - heap0) / 1024.0 / qps, (heap2 - heap0) / 1024.0 / qps);
  std::printf("heap for all: %.1f MiB; resident set grew %.1f MiB\n", (heap2 - heap0) / 1048576.0,
              (double(rss2) - double(rss0)) / 1048576.0);
  std::printf("set-up per QP: %.2f us create+INIT, %.2f us RTR+RTS; one WRITE each: %.1f ms\n",
              create_s / qps * 1e6, connect_s / qps * 1e6, write_s * 1e3);
  // What the WRITEs took besides one packet each (QP 0's transport: with
  // one PDC per peer, every QP's).
  braid_qp_stats st{};
  if (braid_query_qp_stats(qp[0], &st) == 0) {
    std::printf("QP 0's transport: %llu data packets sent, %llu retransmitted, %llu timeouts\n",
                static_cast<unsigned long long>(st.data_packets_sent),
                static_cast<unsigned long long>(st.retransmits),
                static_cast<unsigned long long>(st.timeouts));
  }
  for (braid_qp* q : qp) braid_destroy_qp(q);
  braid_dereg_mr(smr);
  braid_dereg_mr(dmr);
  braid_destroy_cq(cq);
  braid_dealloc_pd(pd);
  braid_close_device(ctx);
  return 0;
}
