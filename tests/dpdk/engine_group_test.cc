// Engines on the queues of one port, one thread each (issue 13, part 4):
// two ring ports of two queue pairs, A's TX queue q being B's RX queue q,
// an EngineGroup of two engines on each. Connections are placed so that
// every kind of path is taken: engine to engine on the same queue index
// (no hand-over), across (a packet arrives on a queue whose engine does not
// own its connection and is handed over, both ways), and between two
// engines of the same port (delivered locally, then handed over). Every
// byte is compared; every engine runs on its own thread, as on its own
// core, and the test runs under ASan and TSan.

#include <gtest/gtest.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/completion_queue.h"
#include "dpdk/eal.h"
#include "dpdk/ethdev_port.h"
#include "engine/engine.h"
#include "engine/engine_group.h"
#include "test_env.h"

namespace braid::dpdk {
namespace {

constexpr char kMqPortA[] = "net_ring_braid_mqa";
constexpr char kMqPortB[] = "net_ring_braid_mqb";
constexpr char kOneQueuePort[] = "net_ring_braid_a";
constexpr uint32_t kIpA = 0xc6120001;  // 198.18.0.1
constexpr uint32_t kIpB = 0xc6120002;  // 198.18.0.2

std::unique_ptr<EthdevPort> open_port(const char* name, uint16_t queues, std::string* error) {
  EthdevPortConfig c;
  c.name = name;
  c.queues = queues;
  c.mbufs = 4095;  // per queue: the EAL of these tests has 512 MB for all ports
  return EthdevPort::open(c, error);
}

class EngineGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!test_env_up(&why)) GTEST_FAIL() << "EAL not up: " << why;
  }
};

TEST_F(EngineGroupTest, QueuesOfAPortAreSeparatePacketIos) {
  std::string error;
  auto a = open_port(kMqPortA, 2, &error);
  ASSERT_TRUE(a) << error;
  auto b = open_port(kMqPortB, 2, &error);
  ASSERT_TRUE(b) << error;
  EXPECT_EQ(a->queues(), 2);
  EXPECT_EQ(a->queue(2), nullptr);
  auto a1 = a->queue(1);
  auto b0 = b->queue(0);
  auto b1 = b->queue(1);
  ASSERT_TRUE(a1 && b0 && b1);
  EXPECT_NE(a1->describe().find("queue 1 of 2"), std::string::npos) << a1->describe();
  const uint32_t idle = a->pool_available();
  // A frame sent on A's queue 1 arrives on B's queue 1 only, from queue 1's
  // pool.
  TxFrame tx;
  ASSERT_EQ(a1->tx_alloc(&tx, 1), 1);
  EXPECT_EQ(a->pool_available(), idle - 1);
  for (uint32_t i = 0; i < 100; ++i) tx.data[i] = static_cast<uint8_t>(i * 3);
  tx.len = 100;
  ASSERT_EQ(a1->tx_burst(&tx, 1), 1);
  RxFrame rx[4];
  EXPECT_EQ(b0->rx_burst(rx, 4), 0);
  ASSERT_EQ(b1->rx_burst(rx, 4), 1);
  ASSERT_EQ(rx[0].len, 100u);
  for (uint32_t i = 0; i < 100; ++i) ASSERT_EQ(rx[0].data[i], static_cast<uint8_t>(i * 3));
  EXPECT_EQ(a1->stats().tx_frames, 1u);
  EXPECT_EQ(a->queue(0)->stats().tx_frames, 0u);
  EXPECT_EQ(b1->stats().rx_frames, 1u);
  // Released through another queue's PacketIo: back to its own pool.
  b0->rx_release(rx, 1);
  EXPECT_EQ(a->pool_available(), idle);
}

TEST_F(EngineGroupTest, MoreQueuesThanThePmdHasAreRefusedWithTheCount) {
  std::string error;
  EXPECT_FALSE(open_port(kOneQueuePort, 2, &error));
  EXPECT_NE(error.find("2 queue pair(s) asked"), std::string::npos) << error;
  EXPECT_NE(error.find("which has 1"), std::string::npos) << error;
  EXPECT_FALSE(open_port(kOneQueuePort, 0, &error));
  // The refused opens left the port as it was: one queue opens.
  EXPECT_TRUE(open_port(kOneQueuePort, 1, &error)) << error;
}

// One engine's side of the test: its engine, its CQs, its thread.
struct EngineSlot {
  std::unique_ptr<Engine> engine;
  CompletionQueue scq{1024}, rcq{1024};
  uint64_t sends_ok = 0, recvs_ok = 0, errors = 0;
};

// One connection: what it sends (src), where its peer's WRITEs land (dst),
// where its peer's SEND lands (inbox).
struct Conn {
  EngineSlot* slot = nullptr;
  uint16_t id = 0;
  Connection* c = nullptr;
  std::vector<uint8_t> src, dst, inbox;
  uint32_t dst_rkey = 0;
  Conn* peer = nullptr;
};

constexpr uint32_t kWrites = 32;
constexpr uint32_t kWriteSize = 16 * 1024;
constexpr uint32_t kSendSize = 3000;

// Two engines on each of two ports of two queue pairs, joined so that A's
// TX queue q reaches B's RX queue q.
void transfer_on_two_engines_per_port(EthdevPort* port_a, EthdevPort* port_b) {
  const wire::MacAddr mac_a = port_a->mac(), mac_b = port_b->mac();

  EngineGroup group_a(2), group_b(2);
  EngineSlot slots[4];  // A0, A1, B0, B1
  for (uint16_t i = 0; i < 4; ++i) {
    const bool on_a = i < 2;
    const auto q = static_cast<uint16_t>(i % 2);
    EngineConfig ec;
    ec.ip = on_a ? kIpA : kIpB;
    slots[i].engine = std::make_unique<Engine>((on_a ? port_a : port_b)->queue(q), ec);
    slots[i].engine->join(on_a ? &group_a : &group_b, q);
    slots[i].engine->add_neighbor(on_a ? kIpB : kIpA, on_a ? mac_b : mac_a);
  }

  // (side, id) pairs; the owner is id % 2.
  struct PairSpec {
    bool a_first;
    uint16_t id1;
    bool a_second;
    uint16_t id2;
  };
  const PairSpec specs[] = {
      {true, 2, false, 4},  // A0 - B0: same queue index both ways
      {true, 3, false, 5},  // A1 - B1
      {true, 4, false, 7},  // A0 - B1: arrives on B's queue 0, handed to B1, and back
      {true, 5, false, 6},  // A1 - B0
      {true, 6, true, 7},   // A0 - A1: delivered locally, handed over
  };
  std::vector<std::unique_ptr<Conn>> conns;
  auto make_conn = [&](bool on_a, uint16_t id) {
    auto c = std::make_unique<Conn>();
    c->slot = &slots[(on_a ? 0 : 2) + id % 2];
    c->id = id;
    c->src.resize(kWrites * kWriteSize + kSendSize);
    for (size_t i = 0; i < c->src.size(); ++i) {
      c->src[i] = static_cast<uint8_t>(i * 13 + id * 101 + (on_a ? 7 : 0) + (i >> 9));
    }
    c->dst.assign(kWrites * kWriteSize, 0);
    c->inbox.assign(kSendSize, 0);
    Endpoint& ep = c->slot->engine->endpoint();
    c->dst_rkey = ep.memory().register_region(c->dst.data(), c->dst.size(),
                                              kAccessLocalWrite | kAccessRemoteWrite, 0);
    conns.push_back(std::move(c));
    return conns.back().get();
  };
  for (const PairSpec& s : specs) {
    Conn* x = make_conn(s.a_first, s.id1);
    Conn* y = make_conn(s.a_second, s.id2);
    x->peer = y;
    y->peer = x;
    for (auto [me, other, me_a, other_a] :
         {std::tuple{x, y, s.a_first, s.a_second}, std::tuple{y, x, s.a_second, s.a_first}}) {
      ASSERT_TRUE(me->slot->engine->owns(me->id));
      ConnectionConfig cc;
      cc.local_id = me->id;
      cc.remote_id = other->id;
      cc.qp_num = me->id;
      cc.remote_qpn = other->id;
      cc.remote_mac = other_a ? mac_a : mac_b;
      cc.remote_ip = other_a ? kIpA : kIpB;
      cc.mtu = 1024;
      me->c = me->slot->engine->endpoint().create_connection(cc, &me->slot->scq, &me->slot->rcq);
      ASSERT_NE(me->c, nullptr);
      (void)me_a;
    }
  }
  // Receives for the peers' SENDs, before any engine runs.
  for (auto& c : conns) {
    SgList l;
    l.num = 1;
    l.sge[0] = Sge{c->inbox.data(), kSendSize, 0};
    ASSERT_EQ(c->c->post_recv(c->id, l), PostError::kOk);
  }

  std::atomic<int> finished{0};
  std::atomic<bool> give_up{false};
  auto run = [&](uint16_t slot_index) {
    EngineSlot& slot = slots[slot_index];
    Engine& e = *slot.engine;
    e.io().attach_thread();
    std::vector<Conn*> mine;
    for (auto& c : conns) {
      if (c->slot == &slot) mine.push_back(c.get());
    }
    // Everything is posted by the thread that drives the engine.
    for (Conn* c : mine) {
      for (uint32_t w = 0; w < kWrites; ++w) {
        SendRequest wr;
        wr.wr_id = w;
        wr.opcode = Opcode::kWrite;
        wr.local.num = 1;
        wr.local.sge[0] = Sge{c->src.data() + size_t{w} * kWriteSize, kWriteSize, 0};
        wr.remote_addr = reinterpret_cast<uintptr_t>(c->peer->dst.data()) + size_t{w} * kWriteSize;
        wr.rkey = c->peer->dst_rkey;
        if (c->c->post_send(wr) != PostError::kOk) ++slot.errors;
      }
      SendRequest send;
      send.wr_id = kWrites;
      send.opcode = Opcode::kSend;
      send.local.num = 1;
      send.local.sge[0] = Sge{c->src.data() + size_t{kWrites} * kWriteSize, kSendSize, 0};
      if (c->c->post_send(send) != PostError::kOk) ++slot.errors;
    }
    const uint64_t want_sends = mine.size() * (kWrites + 1);
    const uint64_t want_recvs = mine.size();
    bool done = false;
    WorkCompletion wc[64];
    // Peers need this engine's ACKs until every engine has its completions.
    while (finished.load() < 4 && !give_up.load()) {
      e.poll(Engine::kAckNow);
      for (uint32_t n; (n = slot.scq.poll(wc, 64)) > 0;) {
        for (uint32_t i = 0; i < n; ++i) {
          (wc[i].status == WcStatus::kSuccess ? slot.sends_ok : slot.errors) += 1;
        }
      }
      for (uint32_t n; (n = slot.rcq.poll(wc, 64)) > 0;) {
        for (uint32_t i = 0; i < n; ++i) {
          (wc[i].status == WcStatus::kSuccess ? slot.recvs_ok : slot.errors) += 1;
        }
      }
      if (!done && (slot.sends_ok + slot.errors >= want_sends && slot.recvs_ok >= want_recvs)) {
        done = true;
        finished.fetch_add(1);
      }
    }
    e.io().detach_thread();
  };
  std::vector<std::thread> threads;
  for (uint16_t i = 0; i < 4; ++i) threads.emplace_back(run, i);
  // A guard against a hang, not a measure: the transfer takes milliseconds.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (finished.load() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  give_up = true;
  for (auto& t : threads) t.join();
  ASSERT_EQ(finished.load(), 4) << "not every engine got its completions in 120 s";

  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const EngineSlot& s = slots[i];
    EXPECT_EQ(s.errors, 0u);
    size_t on_slot = 0;
    for (auto& c : conns) on_slot += c->slot == &s;
    EXPECT_EQ(s.recvs_ok, on_slot);  // one SEND from each connection's peer
    EXPECT_EQ(s.sends_ok, on_slot * (kWrites + 1));
  }
  for (auto& c : conns) {
    SCOPED_TRACE(c->id);
    EXPECT_EQ(c->c->state(), ConnectionState::kActive);
    // The peer's WRITEs and SEND, byte for byte.
    ASSERT_EQ(std::memcmp(c->dst.data(), c->peer->src.data(), c->dst.size()), 0);
    ASSERT_EQ(
        std::memcmp(c->inbox.data(), c->peer->src.data() + size_t{kWrites} * kWriteSize, kSendSize),
        0);
  }
  // Every engine handed frames over and took some (the pairs above make
  // each of them do both), and both queues of each port carried frames.
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const EngineStats& st = slots[i].engine->stats();
    EXPECT_GT(st.steered_out, 0u);
    EXPECT_GT(st.steered_in, 0u);
    EXPECT_GT(st.local_frames + st.tx_frames, 0u);
  }
  for (uint16_t q = 0; q < 2; ++q) {
    EXPECT_GT(port_a->queue_stats(q).rx_frames, 0u);
    EXPECT_GT(port_b->queue_stats(q).rx_frames, 0u);
  }
  for (auto& s : slots) s.engine.reset();
}

TEST_F(EngineGroupTest, TwoEnginesPerPortCarryQpsOnBothByteExact) {
  std::string error;
  auto port_a = open_port(kMqPortA, 2, &error);
  ASSERT_TRUE(port_a) << error;
  auto port_b = open_port(kMqPortB, 2, &error);
  ASSERT_TRUE(port_b) << error;
  transfer_on_two_engines_per_port(port_a.get(), port_b.get());
}

// The same over memif (a server and a client in this process), a PMD that
// copies into shared rings and pairs queue q of one side with queue q of
// the other.
TEST_F(EngineGroupTest, TwoEnginesPerPortOverMemifByteExact) {
  static int run = 0;
  const std::string socket =
      "/tmp/braid-mq-" + std::to_string(::getpid()) + "-" + std::to_string(run++) + ".sock";
  ASSERT_EQ(rte_dev_probe(("net_memif9,role=server,id=9,socket=" + socket).c_str()), 0);
  ASSERT_EQ(rte_dev_probe(("net_memif10,role=client,id=9,socket=" + socket).c_str()), 0);
  {
    EthdevPortConfig c;
    c.queues = 2;
    c.mbufs = 4095;
    std::string error;
    auto [server, client] = open_memif_pair("net_memif9", "net_memif10", c, &error);
    ASSERT_TRUE(server && client) << error;
    ASSERT_TRUE(server->link_up());
    transfer_on_two_engines_per_port(client.get(), server.get());
  }
  EXPECT_TRUE(Eal::remove_vdev("net_memif10").ok());
  EXPECT_TRUE(Eal::remove_vdev("net_memif9").ok());
}

}  // namespace
}  // namespace braid::dpdk
