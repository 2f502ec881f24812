// A DPDK ethdev port as a PacketIo (its queue 0; queue() gives each queue
// pair a PacketIo of its own, for engines on several cores): any PMD -- a NIC, memif,
// virtio-user, vhost, AF_XDP, AF_PACKET, or rings joined in one process.
// Frames are mbufs; the engine sees (pointer, length) views of them. The
// header needs no DPDK include; the EAL must be up (Eal::init) before open.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/packet_io.h"

struct rte_mempool;
struct rte_eth_dev_info;

namespace braid::dpdk {

struct EthdevPortConfig {
  // An ethdev name: a vdev ("net_memif0"), a PCI address, or a name given to
  // rte_eth_from_rings. When empty, port_id is used.
  std::string name;
  std::optional<uint16_t> port_id;
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  // 0: enough for both rings, the bursts in the engine's hands and the frames
  // a peer in the same process (ring PMD) holds.
  uint32_t mbufs = 0;
  uint32_t mtu = 1500;
  // Bytes of frame an mbuf holds (its data room without headroom). 0: sized
  // from the MTU. Every frame must fit one mbuf: received frames are handed
  // to the engine as one contiguous view.
  uint32_t mbuf_data_room = 0;
  bool promiscuous = false;
  // Open waits up to link_wait_ms for the link and fails if it stays down.
  // A memif server or vhost side whose peer starts later sets it false:
  // open returns at once and the caller polls link_up().
  bool require_link_up = true;
  uint32_t link_wait_ms = 2000;
  // Queue pairs, each with its own mbuf pool (of `mbufs` buffers): one per
  // engine (queue()). The PMD must have as many (memif and vhost: the
  // vdev's queues argument).
  uint16_t queues = 1;
  // Send payloads straight from registered memory (a header mbuf chained
  // to an mbuf attached to the application's buffer) where the PMD copies
  // every frame out within tx_burst: memif in copy mode. Elsewhere, and
  // when false, the payload is copied into the mbuf (PacketIo::tx_external).
  bool tx_external = true;
};

class EthdevPort final : public PacketIo {
 public:
  // Configures and starts the port, or returns null with *error naming the
  // cause and the fix.
  static std::unique_ptr<EthdevPort> open(const EthdevPortConfig& config, std::string* error);
  // Stops the port. Its queues and mbuf pool stay set up: the next open
  // with the same parameters starts it again on them (so open/close cycles
  // grow nothing, whatever buffers are still out: in a PMD's descriptors or
  // RX queue, or a same-process peer's ring).
  ~EthdevPort() override;

  EthdevPort(const EthdevPort&) = delete;
  EthdevPort& operator=(const EthdevPort&) = delete;

  uint16_t rx_burst(RxFrame* frames, uint16_t n) override { return rx_burst_on(0, frames, n); }
  // Frames of any queue of this port (any mbuf) go back to their own pool.
  void rx_release(RxFrame* frames, uint16_t n) override;
  uint16_t tx_alloc(TxFrame* frames, uint16_t n) override { return tx_alloc_on(0, frames, n); }
  uint16_t tx_burst(TxFrame* frames, uint16_t n) override { return tx_burst_on(0, frames, n); }
  void tx_free(TxFrame* frames, uint16_t n) override;

  // Queue pair q (0..queues()-1) as a PacketIo, for one engine's thread; it
  // must not outlive this port. Null for a queue the port does not have.
  std::unique_ptr<PacketIo> queue(uint16_t q);
  uint16_t queues() const { return static_cast<uint16_t>(queues_.size()); }
  uint16_t rx_burst_on(uint16_t queue, RxFrame* frames, uint16_t n);
  uint16_t tx_alloc_on(uint16_t queue, TxFrame* frames, uint16_t n);
  uint16_t tx_burst_on(uint16_t queue, TxFrame* frames, uint16_t n);
  // One queue's frames (the port's stats() sums them and adds what the
  // device missed).
  PacketIoStats queue_stats(uint16_t queue) const;

  wire::MacAddr mac() const override { return mac_; }
  // Times open() started a memif client's handshake again (it went nowhere).
  uint32_t reconnects() const { return reconnects_; }
  uint32_t max_frame() const override { return mtu_ + wire::kEthernetSize; }
  bool link_up() const override;
  uint32_t link_mbps() const override;
  // The EAL's interrupt thread parked (Eal::pause_interrupts).
  bool hold_events() override;
  void release_events() override;
  void hold_events_until_close() override;
  // rx_missed: the PMD's imissed and rx_nombuf, plus received frames dropped
  // here because they spanned several mbufs (rx_chained_dropped).
  PacketIoStats stats() const override;
  void attach_thread() override;
  void detach_thread() override;
  std::string describe() const override;
  // memif, vhost-user, virtio-user, ring and null ports.
  bool host_local() const override;
  bool tx_external() const override { return tx_external_; }

  uint16_t port_id() const { return port_id_; }
  uint32_t mtu() const { return mtu_; }
  uint32_t mbuf_data_room() const { return data_room_; }
  // Free buffers in the pool (caches included): diagnostics and tests.
  uint32_t pool_available() const;
  uint64_t rx_chained_dropped() const;
  // Frames tx_burst handed back because the TX ring was full.
  uint64_t tx_ring_full() const;

  // Most frames one rx_burst / tx_alloc call handles.
  static constexpr uint16_t kMaxBurst = 256;

 private:
  EthdevPort() = default;
  void release_pool();
  // open()'s steps; each returns what went wrong ("" when all went well).
  // The port named by config (its name, or its id).
  static std::string find_port(const EthdevPortConfig& config, uint16_t* port);
  // Checks the MTU against the PMD's limits and sizes frames and mbufs
  // (mtu_, data_room_); *ethdev_mtu: the MTU ethdev is told.
  std::string size_frames(const EthdevPortConfig& config, const rte_eth_dev_info& info,
                          const std::string& label, uint32_t* ethdev_mtu);
  // Queue pairs, descriptors, pools (kept from an earlier open of the port
  // when they fit), and the pools for payloads sent in place.
  std::string open_queues(const EthdevPortConfig& config, const rte_eth_dev_info& info,
                          const std::string& label, uint32_t ethdev_mtu);
  // Starts the port (a memif client retried), sets promiscuous mode, reads
  // the MAC and waits for the link.
  std::string start(const EthdevPortConfig& config, const rte_eth_dev_info& info,
                    const std::string& label);

  uint16_t port_id_ = 0;
  bool started_ = false;
  uint32_t reconnects_ = 0;  // memif client handshakes started again at open
  bool reserved_ = false;    // this port's setup record is ours until close
  bool setup_kept_ = false;  // the pools belong to the port's recorded setup
  uint32_t mtu_ = 0;
  uint32_t data_room_ = 0;
  uint16_t rx_descriptors_ = 0;
  uint16_t tx_descriptors_ = 0;
  uint64_t rx_offloads_ = 0;
  uint64_t tx_offloads_ = 0;
  std::string name_;
  std::string driver_;
  wire::MacAddr mac_{};

  // Each queue pair's pool and counters (written by its one thread).
  struct Queue {
    rte_mempool* pool = nullptr;
    rte_mempool* ext_pool = nullptr;  // mbufs attached to external payloads
    uint64_t tx_external = 0;         // frames sent that way
    uint64_t rx_frames = 0;
    uint64_t tx_frames = 0;
    uint64_t tx_ring_full = 0;
    uint64_t rx_chained_dropped = 0;
  };
  std::vector<Queue> queues_;
  bool tx_external_ = false;
  bool events_held_ = false;  // hold_events_until_close (control path only)
};

}  // namespace braid::dpdk
