#include "core/congestion_control.h"

#include <array>
#include <utility>

namespace braid {

namespace {

using Make = CcAlgorithms (*)(const CcConfig&, uint32_t);

template <size_t... I>
constexpr std::array<Make, sizeof...(I)> makers(std::index_sequence<I...>) {
  return {[](const CcConfig& c, uint32_t packet_bytes) {
    return CcAlgorithms(std::in_place_index<I>, c, packet_bytes);
  }...};
}
constexpr auto kMakers = makers(std::make_index_sequence<kCcAlgorithmCount>());

template <size_t... I>
constexpr std::array<std::string_view, sizeof...(I)> names(std::index_sequence<I...>) {
  return {std::variant_alternative_t<I, CcAlgorithms>::kName...};
}
constexpr auto kNames = names(std::make_index_sequence<kCcAlgorithmCount>());

}  // namespace

std::string_view cc_algorithm_name(CcAlgorithm a) {
  const auto i = static_cast<size_t>(a);
  return i < kNames.size() ? kNames[i] : std::string_view{};
}

std::optional<CcAlgorithm> cc_algorithm_named(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<CcAlgorithm>(i);
  }
  return std::nullopt;
}

CongestionControl::CongestionControl(const CcConfig& cfg, uint32_t packet_bytes)
    // A number no algorithm has: the first (the fixed window).
    : algo_(kMakers[static_cast<size_t>(cfg.algorithm) < kMakers.size()
                        ? static_cast<size_t>(cfg.algorithm)
                        : 0](cfg, packet_bytes)),
      algorithm_(static_cast<size_t>(cfg.algorithm) < kMakers.size() ? cfg.algorithm
                                                                     : CcAlgorithm::kFixedWindow) {
  sync();
}

}  // namespace braid
