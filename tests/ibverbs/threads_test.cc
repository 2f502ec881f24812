// libibverbs lets any thread create and destroy objects on a shared context.
// Several threads do, at once, through Braid's libibverbs.so.1 (compiled
// against the system's <infiniband/verbs.h>), on a DPDK null port; completion
// events are acknowledged meanwhile. Run under ThreadSanitizer too (the
// tsan preset), where any data race fails the test.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

class IbvThreads : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("BRAID_IBV_PORT", "net_null0", 1);
    setenv("BRAID_IBV_IP", "198.18.0.9", 1);
    setenv("BRAID_IBV_LINK_WAIT_MS", "1000", 1);
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_NE(list_, nullptr);
    ASSERT_EQ(n, 1);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr);
  }
  static void TearDownTestSuite() {
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    if (list_ != nullptr) ibv_free_device_list(list_);
  }
  static ibv_device** list_;
  static ibv_context* ctx_;
};
ibv_device** IbvThreads::list_ = nullptr;
ibv_context* IbvThreads::ctx_ = nullptr;

TEST_F(IbvThreads, ObjectsAreCreatedAndDestroyedFromManyThreadsAtOnce) {
  constexpr int kThreads = 4, kRounds = 60;
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ibv_cq* event_cq = ibv_create_cq(ctx_, 4, nullptr, ch, 0);
  ASSERT_NE(event_cq, nullptr);
  // Acknowledges events (none come) while the others work: it must not race
  // with the device's own bookkeeping.
  std::thread acker([&] {
    while (!done.load()) ibv_ack_cq_events(event_cq, 0);
  });
  std::vector<std::thread> workers;
  std::vector<std::vector<char>> bufs(kThreads, std::vector<char>(1 << 16));
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        ibv_pd* pd = ibv_alloc_pd(ctx_);
        ibv_mr* mr = pd ? ibv_reg_mr(pd, bufs[t].data(), bufs[t].size(),
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
                        : nullptr;
        ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
        ibv_qp* qp = nullptr;
        if (pd && cq) {
          ibv_qp_init_attr ia{};
          ia.send_cq = ia.recv_cq = cq;
          ia.cap = {8, 8, 1, 1, 0};
          ia.qp_type = IBV_QPT_RC;
          qp = ibv_create_qp(pd, &ia);
        }
        if (!pd || !mr || !cq || !qp) ++failures;
        if (qp) {
          ibv_qp_attr a{};
          a.qp_state = IBV_QPS_INIT;
          a.port_num = 1;
          a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
          if (ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
            ++failures;
          }
          if (ibv_destroy_qp(qp)) ++failures;
        }
        if (cq && ibv_destroy_cq(cq)) ++failures;
        if (mr && ibv_dereg_mr(mr)) ++failures;
        if (pd && ibv_dealloc_pd(pd)) ++failures;
      }
    });
  }
  for (std::thread& w : workers) w.join();
  done = true;
  acker.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ibv_destroy_cq(event_cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

}  // namespace
