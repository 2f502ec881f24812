#include "core/congestion_control.h"

#include "core/registry.h"

namespace braid {

namespace {
// A number no algorithm has: the first (the fixed window).
CcAlgorithm known(CcAlgorithm a) {
  return static_cast<size_t>(a) < kCcAlgorithmCount ? a : CcAlgorithm::kFixedWindow;
}
}  // namespace

std::string_view cc_algorithm_name(CcAlgorithm a) {
  return registry_name<CcAlgorithms>(static_cast<size_t>(a));
}

std::optional<CcAlgorithm> cc_algorithm_named(std::string_view name) {
  const auto i = registry_index<CcAlgorithms>(name);
  return i ? std::optional<CcAlgorithm>(static_cast<CcAlgorithm>(*i)) : std::nullopt;
}

CongestionControl::CongestionControl(const CcConfig& cfg, uint32_t packet_bytes)
    : algo_(registry_make<CcAlgorithms>(static_cast<size_t>(known(cfg.algorithm)), cfg,
                                        packet_bytes)),
      algorithm_(known(cfg.algorithm)) {
  sync();
}

}  // namespace braid
