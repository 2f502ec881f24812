// Engines that share one port: one per core, each on its own receive and
// transmit queue (and mbuf pool), each with its own endpoint, connections,
// timers and completion queues. Nothing is locked on the way of a packet.
//
// Connection ids are split among the engines: engine k owns the ids with
// id % engines == k. A packet's destination PDC id names its connection, so
// whichever queue a packet arrives on (RSS hashes the entropy in the UDP
// source port, which changes with every packet; a shared-memory PMD
// delivers on the queue its peer sent on), the engine that receives it
// knows whose it is and hands it to the owner through a single-producer
// single-consumer ring, one per ordered pair of engines: software steering,
// the fallback that works with any PMD. A NIC that can steer on the PDC id
// (a flow rule on those two bytes) or on a per-engine UDP port would make
// the hand-over rare; docs/architecture.md models both.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/packet_io.h"
#include "engine/spsc_ring.h"

namespace braid {

class EngineGroup {
 public:
  // `engines` engines (1..1024); each inbox holds up to inbox_frames frames
  // handed from one engine to another.
  explicit EngineGroup(uint16_t engines, uint32_t inbox_frames = 1024) : n_(engines) {
    boxes_.reserve(size_t{n_} * n_);
    for (uint32_t i = 0; i < uint32_t{n_} * n_; ++i) {
      boxes_.push_back(std::make_unique<SpscRing<RxFrame>>(inbox_frames));
    }
  }
  EngineGroup(const EngineGroup&) = delete;
  EngineGroup& operator=(const EngineGroup&) = delete;

  uint16_t size() const { return n_; }
  // The engine that owns connection `id`.
  uint16_t owner(uint16_t id) const { return static_cast<uint16_t>(id % n_); }
  // Frames engine `from` received for connections of engine `to`.
  SpscRing<RxFrame>& inbox(uint16_t from, uint16_t to) { return *boxes_[size_t{from} * n_ + to]; }

 private:
  uint16_t n_;
  std::vector<std::unique_ptr<SpscRing<RxFrame>>> boxes_;
};

}  // namespace braid
