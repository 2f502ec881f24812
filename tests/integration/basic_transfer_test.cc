// Single operations over a clean and a lossy simulated network.
#include <cstring>

#include "sim_pair.h"

namespace braid::test {
namespace {

TEST(BasicTransfer, WriteArrivesAndCompletes) {
  SimPairOptions o;
  o.link = four_path_link();
  SimPair p(o);
  std::vector<uint8_t> src(100'000), dst(100'000, 0);
  fill_pattern(src.data(), src.size(), 7);
  const uint32_t rkey = p.b.memory().register_region(dst.data(), dst.size(),
                                                     kAccessLocalWrite | kAccessRemoteWrite, 0);
  SendRequest wr;
  wr.wr_id = 42;
  wr.opcode = Opcode::kWrite;
  wr.local = sgl_of(src.data(), static_cast<uint32_t>(src.size()));
  wr.remote_addr = reinterpret_cast<uintptr_t>(dst.data());
  wr.rkey = rkey;
  ASSERT_EQ(p.qa->post_send(wr), PostError::kOk);
  WorkCompletion wc;
  ASSERT_TRUE(p.run_until([&] { return p.a_scq.size() > 0; }));
  ASSERT_EQ(p.a_scq.poll(&wc, 1), 1u);
  EXPECT_EQ(wc.wr_id, 42u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(wc.opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(src, dst);
  EXPECT_EQ(p.qa->stats().retransmits, 0u);
}

}  // namespace
}  // namespace braid::test
