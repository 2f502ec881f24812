// Two Braid endpoints joined by the simulated network, one connection each
// way, and helpers to post traffic and check it byte for byte.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/completion_queue.h"
#include "core/endpoint.h"
#include "network/sim_network.h"

namespace braid::test {

inline wire::MacAddr mac_of(uint8_t last) {
  return {0x02, 0, 0, 0, 0, last};
}
inline constexpr uint32_t kIpA = 0xc6120001;  // 198.18.0.1
inline constexpr uint32_t kIpB = 0xc6120002;  // 198.18.0.2

struct SimPairOptions {
  uint64_t seed = 1;
  sim::LinkConfig link;
  ConnectionConfig conn;  // shared template; ids, PSNs and addresses filled in
  bool crc = false;
  uint32_t cq_depth = 4096;
};

// Four paths of different delays: reordering by entropy.
inline sim::LinkConfig four_path_link(double loss = 0) {
  sim::LinkConfig l;
  l.paths.clear();
  for (TimeNs d : {4'000, 6'000, 9'000, 13'000}) {
    sim::PathConfig p;
    p.delay_ns = d;
    p.gbps = 25.0;
    l.paths.push_back(p);
  }
  l.impair.loss = loss;
  return l;
}

class SimPair {
 public:
  explicit SimPair(const SimPairOptions& o)
      : net(o.seed),
        a(EndpointConfig{
            mac_of(1), kIpA, wire::kUetUdpPort, o.crc, o.link.impair.trim_dscp, 1000, {}}),
        b(EndpointConfig{
            mac_of(2), kIpB, wire::kUetUdpPort, o.crc, o.link.impair.trim_dscp, 1000, {}}),
        a_scq(o.cq_depth),
        a_rcq(o.cq_depth),
        b_scq(o.cq_depth),
        b_rcq(o.cq_depth) {
    ha = net.add_host(&a);
    hb = net.add_host(&b);
    net.connect(ha, hb, o.link);
    ConnectionConfig ca = o.conn;
    ca.local_id = 1;
    ca.remote_id = 2;
    ca.qp_num = 101;
    ca.remote_qpn = 202;
    ca.remote_mac = mac_of(2);
    ca.remote_ip = kIpB;
    ca.tx_psn = 0xfffffff0u;  // wraps early: PSN arithmetic is exercised
    ca.rx_psn = 1000;
    ConnectionConfig cb = o.conn;
    cb.local_id = 2;
    cb.remote_id = 1;
    cb.qp_num = 202;
    cb.remote_qpn = 101;
    cb.remote_mac = mac_of(1);
    cb.remote_ip = kIpA;
    cb.tx_psn = ca.rx_psn;
    cb.rx_psn = ca.tx_psn;
    qa = a.create_connection(ca, &a_scq, &a_rcq);
    qb = b.create_connection(cb, &b_scq, &b_rcq);
  }

  bool run_until(const std::function<bool()>& done, TimeNs budget = 10'000'000'000ull) {
    return net.run(done, net.now() + budget);
  }

  sim::SimNetwork net;
  Endpoint a, b;
  CompletionQueue a_scq, a_rcq, b_scq, b_rcq;
  int ha = 0, hb = 0;
  Connection* qa = nullptr;
  Connection* qb = nullptr;
};

inline void fill_pattern(uint8_t* p, size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = g();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(g());
}

inline SgList sgl_of(uint8_t* p, uint32_t n) {
  SgList l;
  l.sge[0] = Sge{p, n};
  l.num = 1;
  return l;
}

// A work request of `len` bytes at `local` (none when null), to `remote`.
inline SendRequest request(uint64_t id, Opcode op, uint8_t* local, uint32_t len,
                           uint8_t* remote = nullptr, uint32_t rkey = 0) {
  SendRequest wr;
  wr.wr_id = id;
  wr.opcode = op;
  if (local != nullptr) wr.local = sgl_of(local, len);
  wr.remote_addr = reinterpret_cast<uintptr_t>(remote);
  wr.rkey = rkey;
  return wr;
}

// Every completion the queue holds, oldest first.
inline std::vector<WorkCompletion> poll_all(CompletionQueue& cq) {
  std::vector<WorkCompletion> v;
  WorkCompletion wc[16];
  uint32_t n;
  while ((n = cq.poll(wc, 16)) > 0) v.insert(v.end(), wc, wc + n);
  return v;
}

}  // namespace braid::test
