// An unreliable datagram queue pair (InfiniBand's UD): every message is one
// packet of at most the path MTU, sent to whichever peer its work request
// names (an address: IP, MAC, QP number and Q_Key), with no connection, no
// acknowledgement and no retransmission. On the wire: a UET UUD request
// (no PSN) and a standard SES request, opcode DGRAM_SEND (docs/wire-format.md).
//
// A received datagram lands in the oldest receive behind a 40-byte GRH
// (InfiniBand's layout with IPv4-mapped GIDs: the destination address in its
// last 4 bytes, where RoCEv2's IPv4 layout puts it too); one with no receive
// posted, or whose Q_Key is not this queue pair's, is dropped and counted.
// Sends complete once their frame is built.
#pragma once

#include <cstdint>
#include <vector>

#include "core/completion_queue.h"
#include "core/sg_list.h"
#include "core/types.h"
#include "wire/frame.h"

namespace braid {

struct TxOut;

struct DatagramConfig {
  uint32_t qp_num = 0;
  uint32_t qkey = 0;    // received datagrams must carry it
  uint32_t mtu = 1024;  // payload bytes per datagram at most
  uint32_t sq_depth = 256;
  uint32_t rq_depth = 256;
  wire::MacAddr local_mac{};
  uint32_t local_ip = 0;
  uint16_t udp_port = wire::kUetUdpPort;
  bool crc_trailer = false;  // a CRC-32C trailer on what it sends
  uint16_t entropies = 16;   // UDP source ports it sprays over
};

struct DatagramRequest {
  uint64_t wr_id = 0;
  bool signaled = true;
  SgList local;
  wire::MacAddr dst_mac{};
  uint32_t dst_ip = 0;
  uint32_t dst_qpn = 0;
  uint32_t qkey = 0;
  bool has_imm = false;
  uint32_t imm_data = 0;
  bool deliverable = true;  // false: no route to the peer (no MAC): completes, not sent
  WcStatus status = WcStatus::kSuccess;  // LOC_PROT_ERR: its region went; not read
};

struct DatagramStats {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t no_receive = 0;     // dropped: no receive posted
  uint64_t wrong_qkey = 0;     // dropped: another Q_Key
  uint64_t too_long = 0;       // its receive was too small (completes with LOC_LEN_ERR)
  uint64_t malformed = 0;      // dropped: not a datagram a peer could send
  uint64_t undeliverable = 0;  // sends with no route: completed, never sent
  uint64_t not_ready = 0;      // dropped: the queue pair is not in RTR yet
};

class DatagramQueuePair {
 public:
  // The GRH in front of every received datagram.
  static constexpr uint32_t kGrhSize = 40;

  DatagramQueuePair(const DatagramConfig& cfg, CompletionQueue* send_cq, CompletionQueue* recv_cq);

  const DatagramConfig& config() const { return cfg_; }
  const DatagramStats& stats() const { return stats_; }
  void set_qkey(uint32_t qkey) { cfg_.qkey = qkey; }
  // From RTR on it takes datagrams (before, they are dropped, as InfiniBand).
  void set_receiving(bool on) { receiving_ = on; }
  // Work requests whose buffers lie in the region of this key (dereg_mr)
  // complete with LOC_PROT_ERR when their turn comes, touching no byte.
  void revoke_local_key(uint32_t lkey);
  bool in_error() const { return error_; }

  // kInvalid: more than the MTU, or too many SGEs.
  PostError post_send(const DatagramRequest& r);
  PostError post_recv(uint64_t wr_id, const SgList& sgl);
  bool has_pending() const { return sq_head_ != sq_tail_; }
  // The sequence number the next accepted send gets.
  uint32_t next_seq() const { return sq_tail_; }
  uint32_t outstanding_sends() const { return sq_tail_ - sq_head_; }
  uint32_t posted_recvs() const { return rq_tail_ - rq_head_; }

  // Builds the frame of the oldest send into out (headers in out.buf, the
  // payload copied after them) and completes it; 0 when none is pending,
  // or there is no room.
  uint32_t produce(TxOut& out);
  // A datagram decoded for this queue pair (its SES names it); `ip_header`
  // is the frame's IPv4 header (20 bytes, checked), for the GRH.
  void on_packet(const wire::ParsedPacket& pkt, const uint8_t* ip_header);
  // The error state: every send and receive completes with WR_FLUSH_ERR.
  void flush();

 private:
  struct Recv {
    uint64_t wr_id = 0;
    SgList sgl;
    WcStatus status = WcStatus::kSuccess;
  };
  CompletionQueue* send_cq_;
  CompletionQueue* recv_cq_;
  DatagramConfig cfg_;
  DatagramStats stats_;
  bool error_ = false;
  bool receiving_ = false;
  std::vector<DatagramRequest> sq_;
  uint32_t sq_head_ = 0, sq_tail_ = 0;
  std::vector<Recv> rq_;
  uint32_t rq_head_ = 0, rq_tail_ = 0;
  uint32_t entropy_next_ = 0;
};

}  // namespace braid
