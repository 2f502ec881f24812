// A random mix of RDMA operations between the two ends of a SimPair, posted
// in both directions at once, and the checks that everything arrived exactly
// once, byte for byte, with completions in RC order.
#pragma once

#include <algorithm>
#include <string>

#include "sim_pair.h"

namespace braid::test {

struct Op {
  Opcode opcode;
  uint32_t size;
  uint64_t wr_id;
  uint32_t imm;
  size_t local_off;   // in the sender's local buffer
  size_t remote_off;  // WRITE/READ: in the target's region; SEND: recv buffer index
};

struct Side {
  Connection* qp;
  Endpoint* ep;
  CompletionQueue* scq;
  CompletionQueue* rcq;
  std::vector<uint8_t> local;   // sources of WRITE/SEND, destinations of READ
  std::vector<uint8_t> region;  // target of the peer's WRITE/READ
  std::vector<std::vector<uint8_t>> recv_bufs;
  uint32_t rkey = 0;
  std::vector<Op> ops;  // what this side sends
  std::vector<WorkCompletion> send_wcs, recv_wcs;
};

inline uint32_t random_size(std::mt19937_64& g, uint32_t max_size) {
  static constexpr uint32_t kEdges[] = {1, 2, 63, 64, 4095, 4096, 4097, 8192, 12289};
  switch (g() % 4) {
    case 0:
      return std::min(kEdges[g() % std::size(kEdges)], max_size);
    case 1:
      return 1 + static_cast<uint32_t>(g() % 256);
    default:
      return 1 + static_cast<uint32_t>(g() % max_size);
  }
}

inline void plan(Side& s, Side& peer, std::mt19937_64& g, uint32_t n_ops, uint32_t max_size) {
  size_t local = 0, remote = 0;
  for (uint32_t i = 0; i < n_ops; ++i) {
    Op op;
    op.opcode = static_cast<Opcode>(g() % 5);
    op.size = random_size(g, max_size);
    op.wr_id = (uint64_t{i} << 8) | static_cast<uint64_t>(op.opcode);
    op.imm = static_cast<uint32_t>(g());
    op.local_off = local;
    local += op.size;
    if (op.opcode == Opcode::kSend || op.opcode == Opcode::kSendImm) {
      op.remote_off = peer.recv_bufs.size();
      peer.recv_bufs.emplace_back(op.size + g() % 64, 0xee);
    } else {
      op.remote_off = remote;
      remote += op.size;
      if (op.opcode == Opcode::kWriteImm) peer.recv_bufs.emplace_back(16, 0xee);
    }
    s.ops.push_back(op);
  }
  s.local.assign(local, 0);
  fill_pattern(s.local.data(), s.local.size(), g());
  peer.region.assign(remote, 0);
  fill_pattern(peer.region.data(), peer.region.size(), g());
  // READ destinations start zeroed so a missing byte shows.
  for (const Op& op : s.ops) {
    if (op.opcode == Opcode::kRead) std::fill_n(s.local.begin() + op.local_off, op.size, 0);
  }
}

// Registers memory, posts receives then sends. Receives consumed by the
// peer's ops are posted in the order of those ops.
inline void post_all(Side& s, Side& peer) {
  s.rkey =
      s.ep->memory().register_region(s.region.data(), s.region.size(),
                                     kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead, 0);
  (void)peer;
}

inline void post_recvs(Side& s) {
  for (size_t i = 0; i < s.recv_bufs.size(); ++i) {
    auto& b = s.recv_bufs[i];
    ASSERT_EQ(s.qp->post_recv(1000 + i, sgl_of(b.data(), static_cast<uint32_t>(b.size()))),
              PostError::kOk);
  }
}

inline void post_sends(Side& s, Side& peer) {
  for (const Op& op : s.ops) {
    SendRequest wr;
    wr.wr_id = op.wr_id;
    wr.opcode = op.opcode;
    wr.local = sgl_of(s.local.data() + op.local_off, op.size);
    wr.imm_data = op.imm;
    if (op.opcode != Opcode::kSend && op.opcode != Opcode::kSendImm) {
      wr.remote_addr = reinterpret_cast<uintptr_t>(peer.region.data() + op.remote_off);
      wr.rkey = peer.rkey;
    }
    ASSERT_EQ(s.qp->post_send(wr), PostError::kOk);
  }
}

inline void drain(Side& s) {
  WorkCompletion wc[64];
  uint32_t n;
  while ((n = s.scq->poll(wc, 64)) > 0) s.send_wcs.insert(s.send_wcs.end(), wc, wc + n);
  while ((n = s.rcq->poll(wc, 64)) > 0) s.recv_wcs.insert(s.recv_wcs.end(), wc, wc + n);
}

inline size_t recv_consuming(const Side& s) {
  return std::count_if(s.ops.begin(), s.ops.end(), [](const Op& o) {
    return o.opcode == Opcode::kSend || o.opcode == Opcode::kSendImm ||
           o.opcode == Opcode::kWriteImm;
  });
}

inline bool finished(Side& x, Side& y) {
  drain(x);
  drain(y);
  return x.send_wcs.size() == x.ops.size() && y.send_wcs.size() == y.ops.size() &&
         x.recv_wcs.size() == recv_consuming(y) && y.recv_wcs.size() == recv_consuming(x);
}

// Checks what `s` sent arrived at `peer`, and `s`'s completions.
inline void verify(const Side& s, const Side& peer, const std::string& ctx) {
  ASSERT_EQ(s.send_wcs.size(), s.ops.size()) << ctx;
  size_t r = 0;
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op& op = s.ops[i];
    const WorkCompletion& wc = s.send_wcs[i];
    ASSERT_EQ(wc.wr_id, op.wr_id) << ctx << " send completion order at " << i;
    ASSERT_EQ(wc.status, WcStatus::kSuccess)
        << ctx << " op " << i << " opcode " << static_cast<int>(op.opcode) << " size " << op.size
        << " peer invalid " << peer.qp->stats().invalid_requests << " access "
        << peer.qp->stats().access_errors;
    const uint8_t* mine = s.local.data() + op.local_off;
    switch (op.opcode) {
      case Opcode::kWrite:
      case Opcode::kWriteImm:
        ASSERT_EQ(wc.opcode, WcOpcode::kRdmaWrite) << ctx;
        ASSERT_EQ(0, std::memcmp(mine, peer.region.data() + op.remote_off, op.size))
            << ctx << " WRITE " << i << " size " << op.size;
        break;
      case Opcode::kRead:
        ASSERT_EQ(wc.opcode, WcOpcode::kRdmaRead) << ctx;
        ASSERT_EQ(0, std::memcmp(mine, peer.region.data() + op.remote_off, op.size))
            << ctx << " READ " << i << " size " << op.size;
        break;
      case Opcode::kSend:
      case Opcode::kSendImm:
        ASSERT_EQ(wc.opcode, WcOpcode::kSend) << ctx;
        ASSERT_EQ(0, std::memcmp(mine, peer.recv_bufs[op.remote_off].data(), op.size))
            << ctx << " SEND " << i << " size " << op.size;
        break;
      case Opcode::kAtomicFetchAdd:
      case Opcode::kAtomicCmpSwap:
        FAIL() << ctx << " the workload plans no atomics";  // (atomic_test.cc has theirs)
    }
    if (op.opcode == Opcode::kSend || op.opcode == Opcode::kSendImm ||
        op.opcode == Opcode::kWriteImm) {
      ASSERT_LT(r, peer.recv_wcs.size()) << ctx;
      const WorkCompletion& rc = peer.recv_wcs[r];
      ASSERT_EQ(rc.status, WcStatus::kSuccess) << ctx;
      ASSERT_EQ(rc.wr_id, 1000 + r) << ctx << " receive completion order";
      ASSERT_EQ(rc.byte_len, op.size) << ctx;
      const bool imm = op.opcode != Opcode::kSend;
      ASSERT_EQ(rc.has_imm, imm) << ctx;
      if (imm) {
        ASSERT_EQ(rc.imm_data, op.imm) << ctx;
      }
      ASSERT_EQ(rc.opcode,
                op.opcode == Opcode::kWriteImm ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv)
          << ctx;
      ++r;
    }
  }
  ASSERT_EQ(r, peer.recv_wcs.size()) << ctx;
}

}  // namespace braid::test
