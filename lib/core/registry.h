// What the registries of policies share (cc/registry.h, paths/registry.h):
// a std::variant whose alternatives each have a kName. An alternative's
// number is its place in the variant.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <variant>

namespace braid {

namespace registry_detail {
template <class V, size_t... I>
constexpr std::array<std::string_view, sizeof...(I)> names(std::index_sequence<I...>) {
  return {std::variant_alternative_t<I, V>::kName...};
}
template <class V, class... A, size_t... I>
constexpr auto makers(std::index_sequence<I...>) {
  using Make = V (*)(const A&...);
  return std::array<Make, sizeof...(I)>{
      [](const A&... a) { return V(std::in_place_index<I>, a...); }...};
}
}  // namespace registry_detail

// The name of each alternative, in order.
template <class V>
inline constexpr auto kRegistryNames =
    registry_detail::names<V>(std::make_index_sequence<std::variant_size_v<V>>());

// The number of the alternative named `name`, if one is.
template <class V>
constexpr std::optional<size_t> registry_index(std::string_view name) {
  for (size_t i = 0; i < kRegistryNames<V>.size(); ++i) {
    if (kRegistryNames<V>[i] == name) return i;
  }
  return std::nullopt;
}

// The name of alternative i, "" when there is none.
template <class V>
constexpr std::string_view registry_name(size_t i) {
  return i < kRegistryNames<V>.size() ? kRegistryNames<V>[i] : std::string_view{};
}

// Alternative i (below the variant's size) made from `a`.
template <class V, class... A>
V registry_make(size_t i, const A&... a) {
  static constexpr auto kMakers =
      registry_detail::makers<V, A...>(std::make_index_sequence<std::variant_size_v<V>>());
  return kMakers[i](a...);
}

}  // namespace braid
