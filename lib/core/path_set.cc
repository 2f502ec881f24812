#include "core/path_set.h"

#include "core/registry.h"

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

namespace braid {

namespace {

template <size_t... I>
constexpr std::array<bool, sizeof...(I)> adaptives(std::index_sequence<I...>) {
  return {std::variant_alternative_t<I, PathPolicies>::kAdaptive...};
}
constexpr auto kAdaptive = adaptives(std::make_index_sequence<kPathPolicyCount>());

// The policies code names (PathPolicy) are where the registry has them.
static_assert(
    std::is_same_v<std::variant_alternative_t<size_t(PathPolicy::kRoundRobin), PathPolicies>,
                   RoundRobinPaths>);
static_assert(
    std::is_same_v<std::variant_alternative_t<size_t(PathPolicy::kReps), PathPolicies>, RepsPaths>);
static_assert(std::is_same_v<std::variant_alternative_t<size_t(PathPolicy::kBitmap), PathPolicies>,
                             BitmapPaths>);

// A number no policy has: the first (round robin).
PathPolicy known(PathPolicy p) {
  return static_cast<size_t>(p) < kPathPolicyCount ? p : PathPolicy::kRoundRobin;
}
EntropyConfig clamped(EntropyConfig c) {
  c.count = std::clamp<uint16_t>(c.count, 1, 256);
  c.policy = known(c.policy);
  return c;
}

}  // namespace

std::string_view path_policy_name(PathPolicy p) {
  return registry_name<PathPolicies>(static_cast<size_t>(p));
}

std::optional<PathPolicy> path_policy_named(std::string_view name) {
  const auto i = registry_index<PathPolicies>(name);
  return i ? std::optional<PathPolicy>(static_cast<PathPolicy>(*i)) : std::nullopt;
}

PathSet::PathSet(const EntropyConfig& cfg)
    : cfg_(clamped(cfg)),
      policy_(registry_make<PathPolicies>(static_cast<size_t>(cfg_.policy), cfg_)),
      adaptive_(kAdaptive[static_cast<size_t>(cfg_.policy)]) {
  paths_.resize(cfg_.count);
  if (adaptive()) health_.resize(cfg_.count);
  // Keep every entropy inside the dynamic port range 49152..65535.
  for (uint16_t i = 0; i < cfg_.count; ++i) {
    const uint32_t off = (uint32_t{cfg_.base_port} + uint32_t{i} * cfg_.stride) & 0x3fff;
    paths_[i].port = static_cast<uint16_t>(0xc000 | off);
  }
}

void PathSet::on_rtt(uint8_t i, uint64_t rtt_ns, TimeNs now, TimeNs late_ns) {
  EntropyStats& s = paths_[i].stats;
  const uint32_t r = rtt_ns > 0xffffffffu ? 0xffffffffu : static_cast<uint32_t>(rtt_ns);
  const uint32_t l = late_ns > 0xffffffffu ? 0xffffffffu : static_cast<uint32_t>(late_ns);
  s.late_ns = s.rtt_samples == 0 ? l : s.late_ns - (s.late_ns >> 3) + (l >> 3);
  s.srtt_ns = s.rtt_samples == 0 ? r : s.srtt_ns - (s.srtt_ns >> 3) + (r >> 3);
  s.min_rtt_ns = (s.min_rtt_ns == 0 || r < s.min_rtt_ns) ? r : s.min_rtt_ns;
  ++s.rtt_samples;
  if (!adaptive()) return;
  if (--samples_to_median_ == 0) update_median();
  // Far slower than the connection's typical path: skip it.
  if (health_[i].state == PathState::kGood && median_srtt_ != 0 && s.rtt_samples >= 8 &&
      uint64_t{s.srtt_ns} > uint64_t{median_srtt_} * kSlowFactor) {
    set_aside(i, PathState::kSkip, now + probe_interval(median_srtt_));
  }
}

void PathSet::update_median() {
  samples_to_median_ = 32;
  uint32_t v[256];
  size_t n = 0;
  for (const Path& p : paths_) {
    if (p.stats.rtt_samples > 0) v[n++] = p.stats.srtt_ns;
  }
  if (n < 3) {
    median_srtt_ = 0;
    return;
  }
  std::nth_element(v, v + n / 2, v + n);
  median_srtt_ = v[n / 2];
}

void PathSet::adaptive_acked(uint8_t i, uint32_t seq, bool marked, TimeNs now, TimeNs delay) {
  PathHealth& h = health_[i];
  if (h.state != PathState::kGood) {
    // Only a packet sent after it went bad says how it is now.
    if (static_cast<int32_t>(seq - h.revive_seq) < 0) return;
    if (h.state == PathState::kSkip && delay * 2 > TimeNs{median_srtt_} * kSlowFactor) {
      if (h.probing) probe_failed(i, now, median_srtt_);  // still slow
      return;
    }
    h.state = PathState::kGood;
    h.backoff = 0;
    h.probing = false;
    if (delay != 0)
      paths_[i].stats.srtt_ns = static_cast<uint32_t>(std::min<TimeNs>(delay, 0xffffffffu));
    --bad_count_;
  }
  h.losses_in_row = 0;
  std::visit([&](auto& p) { p.on_delivered(*this, i, marked); }, policy_);
}

}  // namespace braid
