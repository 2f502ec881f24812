#include "core/path_set.h"

#include <algorithm>

namespace braid {

PathSet::PathSet(const EntropyConfig& cfg) : cfg_(cfg) {
  cfg_.count = std::clamp<uint16_t>(cfg_.count, 1, 256);
  paths_.resize(cfg_.count);
  // Keep every entropy inside the dynamic port range 49152..65535.
  for (uint16_t i = 0; i < cfg_.count; ++i) {
    const uint32_t off = (uint32_t{cfg_.base_port} + uint32_t{i} * cfg_.stride) & 0x3fff;
    paths_[i].port = static_cast<uint16_t>(0xc000 | off);
  }
}

void PathSet::on_rtt(uint8_t i, uint64_t rtt_ns) {
  EntropyStats& s = paths_[i].stats;
  const uint32_t r = rtt_ns > 0xffffffffu ? 0xffffffffu : static_cast<uint32_t>(rtt_ns);
  s.last_rtt_ns = r;
  s.srtt_ns = s.rtt_samples == 0 ? r : s.srtt_ns - (s.srtt_ns >> 3) + (r >> 3);
  s.min_rtt_ns = (s.min_rtt_ns == 0 || r < s.min_rtt_ns) ? r : s.min_rtt_ns;
  ++s.rtt_samples;
}

}  // namespace braid
