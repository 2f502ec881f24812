// The boundary between Braid's engine and a packet I/O backend: bursts of
// frames in, bursts of frames out, with buffers owned by the backend (DPDK
// mbufs, or plain memory for software backends). One virtual call per burst,
// never per packet. A PacketIo is used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>

#include "wire/frame.h"

namespace braid {

// A received frame: valid until released back to the backend.
struct RxFrame {
  const uint8_t* data = nullptr;
  uint32_t len = 0;
  void* handle = nullptr;  // backend's buffer (e.g. rte_mbuf*)
};

// A buffer to transmit from: the engine writes up to `cap` bytes at `data`
// and sets `len`. On a backend that takes external payloads
// (PacketIo::tx_external), the frame may end with `ext_len` bytes at `ext`
// (registered memory) after its `len` bytes.
struct TxFrame {
  uint8_t* data = nullptr;
  uint32_t cap = 0;
  uint32_t len = 0;
  void* handle = nullptr;
  const uint8_t* ext = nullptr;
  uint32_t ext_len = 0;
};

struct PacketIoStats {
  uint64_t rx_frames = 0;
  uint64_t tx_frames = 0;
  uint64_t tx_dropped = 0;    // queued frames the backend then lost
  uint64_t tx_ring_full = 0;  // frames tx_burst handed back (ring full)
  uint64_t rx_missed = 0;     // dropped by the NIC (backend's count, if any)
  uint64_t tx_external = 0;   // frames sent with their payload read in place
};

class PacketIo {
 public:
  virtual ~PacketIo() = default;

  // Up to n received frames; 0 when none are waiting.
  virtual uint16_t rx_burst(RxFrame* frames, uint16_t n) = 0;
  virtual void rx_release(RxFrame* frames, uint16_t n) = 0;
  // Up to n empty transmit buffers.
  virtual uint16_t tx_alloc(TxFrame* frames, uint16_t n) = 0;
  // Queues frames[0..n) in order and returns how many were queued: always a
  // prefix. The rest (the ring is full) stay the caller's, to send again
  // later or tx_free.
  virtual uint16_t tx_burst(TxFrame* frames, uint16_t n) = 0;
  // Returns buffers from tx_alloc that will not be sent.
  virtual void tx_free(TxFrame* frames, uint16_t n) = 0;
  // Whether tx_burst takes frames with an external payload (TxFrame::ext).
  // It must be done reading every payload when it returns: the frames it
  // queued were copied out (a PMD that copies, such as memif), and the
  // ones it hands back have their payload copied in after their headers
  // (ext cleared), so no reference to the application's memory outlives
  // the call. A NIC that reads by DMA later cannot promise that.
  virtual bool tx_external() const { return false; }

  virtual wire::MacAddr mac() const = 0;
  // Largest frame the backend carries, L2 header included (MTU + 14).
  virtual uint32_t max_frame() const = 0;
  virtual bool link_up() const = 0;
  // The link's rate in Mb/s as the backend reports it; 0 when unknown.
  virtual uint32_t link_mbps() const { return 0; }
  virtual PacketIoStats stats() const = 0;
  virtual std::string describe() const = 0;
  // True when frames never leave this host's memory (a shared-memory or
  // in-process link): nothing on the way can corrupt them.
  virtual bool host_local() const { return false; }
  // The calling thread is about to drive this backend besides the one that
  // opened it (a progress thread), and is done with it. DPDK gives a thread
  // it does not know no per-core mbuf cache: every buffer then goes through
  // the shared pool.
  virtual void attach_thread() {}
  virtual void detach_thread() {}
  // Holds back the backend's asynchronous events for a short while (up to
  // ~1 s; a DPDK PMD's interrupt-thread handlers, such as memif's teardown
  // of its rings when the peer disconnects): while held, bursts stay safe
  // as a peer goes away. False when they cannot be held: the caller must
  // not burst then. Each true is matched by release_events().
  virtual bool hold_events() { return true; }
  virtual void release_events() {}
  // Holds back, from now until the backend closes, the events that would
  // make a burst unsafe when the peer goes (a memif peer's disconnect, which
  // DPDK handles by unmapping the rings under a running burst: SIGSEGV about
  // 1 run in 600 under load). The backend then does not see its peer go or
  // come back while open: for a device whose peer is set (its QPs are
  // connected). Backends without such events do nothing.
  virtual void hold_events_until_close() {}
};

}  // namespace braid
