// Congestion control of a connection's sending side: a window of bytes in
// flight and a pacing rate, fed with what ACKs, NACKs and losses say. Each
// algorithm is a small class with the same calls, testable alone (events in,
// window and rate out), in a file of its own under cc/ and registered in
// cc/registry.h; CongestionControl holds the one a connection uses and
// dispatches with std::visit over the registry's variant (a switch, no
// virtual call), keeping the window and rate in plain fields for the
// transmit path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <variant>

#include "core/cc/registry.h"
#include "core/cc_types.h"

namespace braid {

inline constexpr size_t kCcAlgorithmCount = std::variant_size_v<CcAlgorithms>;
// The algorithms code names (CcAlgorithm) are where the registry has them.
static_assert(
    std::is_same_v<std::variant_alternative_t<size_t(CcAlgorithm::kFixedWindow), CcAlgorithms>,
                   FixedWindowCc>);
static_assert(
    std::is_same_v<std::variant_alternative_t<size_t(CcAlgorithm::kNscc), CcAlgorithms>, NsccCc>);
static_assert(
    std::is_same_v<std::variant_alternative_t<size_t(CcAlgorithm::kDcqcn), CcAlgorithms>, DcqcnCc>);

// An algorithm's name (its kName), "" for a number no algorithm has.
std::string_view cc_algorithm_name(CcAlgorithm a);
// The algorithm of that name, if one has it.
std::optional<CcAlgorithm> cc_algorithm_named(std::string_view name);

class CongestionControl {
 public:
  using Algorithms = CcAlgorithms;
  // packet_bytes: a full packet as the window counts it.
  CongestionControl(const CcConfig& cfg, uint32_t packet_bytes);

  void on_ack(const AckEvent& e) {
    std::visit([&](auto& a) { a.on_ack(e); }, algo_);
    sync();
  }
  void on_loss(const LossEvent& e) {
    std::visit([&](auto& a) { a.on_loss(e); }, algo_);
    sync();
  }
  // A paced frame of `bytes` left (DCQCN's byte counter; the others pace
  // at a fixed rate or not at all).
  void on_sent(uint32_t bytes, TimeNs now) {
    std::visit(
        [&](auto& a) {
          if constexpr (requires { a.on_sent(bytes, now); }) a.on_sent(bytes, now);
        },
        algo_);
    sync();
  }
  // A timeout shown spurious: what it took from the window goes back
  // (NSCC; the others' windows do not shrink on timeouts).
  void on_spurious_timeout() {
    std::visit(
        [&](auto& a) {
          if constexpr (requires { a.on_spurious_timeout(); }) a.on_spurious_timeout();
        },
        algo_);
    sync();
  }
  // A CNP from the receiver (DCQCN's; the others do not ask for them).
  void on_cnp(TimeNs now) {
    std::visit(
        [&](auto& a) {
          if constexpr (requires { a.on_cnp(now); }) a.on_cnp(now);
        },
        algo_);
    sync();
  }

  uint32_t cwnd_bytes() const { return cwnd_; }
  uint64_t pacing_rate_bps() const { return rate_; }
  CcAlgorithm algorithm() const { return algorithm_; }
  // The algorithm's own state, for tests and statistics (nullptr: another).
  const NsccCc* nscc() const { return std::get_if<NsccCc>(&algo_); }
  const DcqcnCc* dcqcn() const { return std::get_if<DcqcnCc>(&algo_); }

 private:
  void sync() {
    std::visit(
        [&](const auto& a) {
          cwnd_ = a.cwnd_bytes();
          rate_ = a.rate_bps();
        },
        algo_);
  }

  Algorithms algo_;
  CcAlgorithm algorithm_;
  uint32_t cwnd_ = 0;
  uint64_t rate_ = 0;
};

}  // namespace braid
