// A software packet backend for tests: two PacketIo ends joined by in-memory
// queues, like a cable. Frames are copied; it allocates; it is for tests and
// examples, not the datapath. Both ends may be driven from one thread, or each
// from its own (the queues are locked). Several pairs make the queues of one
// port for a device with several engines: a received frame may be released
// through any of them, from any thread.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/packet_io.h"

namespace braid {

class PipeIo : public PacketIo {
 public:
  // Two ends of one cable.
  static std::pair<std::unique_ptr<PipeIo>, std::unique_ptr<PipeIo>> make_pair(
      const wire::MacAddr& a, const wire::MacAddr& b, uint32_t max_frame = 1514);

  uint16_t rx_burst(RxFrame* frames, uint16_t n) override;
  void rx_release(RxFrame* frames, uint16_t n) override;
  uint16_t tx_alloc(TxFrame* frames, uint16_t n) override;
  uint16_t tx_burst(TxFrame* frames, uint16_t n) override;
  void tx_free(TxFrame* frames, uint16_t n) override;
  wire::MacAddr mac() const override { return mac_; }
  uint32_t max_frame() const override { return max_frame_; }
  bool link_up() const override { return link_up_.load(std::memory_order_relaxed); }
  PacketIoStats stats() const override { return stats_; }
  std::string describe() const override { return "pipe"; }
  bool host_local() const override { return true; }

  // Test hooks: frames sent from this end are dropped while cut; inject()
  // puts any bytes on the wire towards the other end, as if sent.
  void set_cut(bool cut) { cut_ = cut; }
  // The link as link_up() reports it (frames still pass: set_cut for that).
  void set_link_up(bool up) { link_up_.store(up, std::memory_order_relaxed); }
  // While stuck, the TX ring takes nothing (tx_burst hands every frame
  // back): a link that is up but has stalled.
  void set_tx_stuck(bool stuck) { tx_stuck_ = stuck; }
  // Every n-th frame sent from this end has a bit flipped (0: none).
  void set_corrupt_every(uint32_t n) { corrupt_every_ = n; }
  void inject(const uint8_t* frame, size_t len) {
    std::lock_guard<std::mutex> g(out_->lock);
    out_->frames.emplace_back(frame, frame + len);
  }

 private:
  struct Wire {
    std::mutex lock;
    std::deque<std::vector<uint8_t>> frames;
  };
  PipeIo(const wire::MacAddr& mac, uint32_t max_frame, std::shared_ptr<Wire> in,
         std::shared_ptr<Wire> out)
      : mac_(mac), max_frame_(max_frame), in_(std::move(in)), out_(std::move(out)) {}

  wire::MacAddr mac_;
  uint32_t max_frame_;
  std::shared_ptr<Wire> in_, out_;
  bool cut_ = false;
  std::atomic<bool> link_up_{true};
  bool tx_stuck_ = false;
  uint32_t corrupt_every_ = 0;
  uint64_t sent_ = 0;
  PacketIoStats stats_;
};

}  // namespace braid
