// Type lists: each policy family (advantage estimators, policy losses, KL estimators, aggregation
// modes, reward scorers, loggers) is listed once, as a TypeList of its policy types, and
// everything else is derived from that list: the std::variant that holds any of them, the array
// of verl's names, the by-name factory and its error message. Adding a policy then touches its
// own header, the list and its test.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

namespace verl {

template <class... Ts>
struct TypeList {
  static constexpr std::size_t size = sizeof...(Ts);
};

/// A policy type that carries verl's registry name.
template <class T>
concept NamedPolicy = requires {
  { T::name } -> std::convertible_to<std::string_view>;
};

namespace detail {

template <class List>
struct variant_of;
template <class... Ts>
struct variant_of<TypeList<Ts...>> {
  using type = std::variant<Ts...>;
};

template <class List, class... Extra>
struct append;
template <class... Ts, class... Extra>
struct append<TypeList<Ts...>, Extra...> {
  using type = TypeList<Ts..., Extra...>;
};

template <class T, class List>
struct index_in;
template <class T, class... Ts>
struct index_in<T, TypeList<Ts...>> {
  static constexpr std::size_t value = [] {
    constexpr bool same[] = {std::is_same_v<T, Ts>..., false};
    std::size_t i = 0;
    while (i < sizeof...(Ts) && !same[i]) ++i;
    return i;
  }();
};

}  // namespace detail

/// std::variant<Ts...> of a TypeList<Ts...>.
template <class List>
using variant_of_t = typename detail::variant_of<List>::type;

/// TypeList<Ts..., Extra...>.
template <class List, class... Extra>
using append_t = typename detail::append<List, Extra...>::type;

/// The position of T in List (List::size when absent).
template <class T, class List>
inline constexpr std::size_t index_in_v = detail::index_in<T, List>::value;

template <class T, class List>
inline constexpr bool contains_v = index_in_v<T, List> < List::size;

/// verl's names of the list's types, in list order.
template <class... Ts>
constexpr std::array<std::string_view, sizeof...(Ts)> names_of(TypeList<Ts...>) {
  return {std::string_view(Ts::name)...};
}

/// The list's names as "a, b, c" (for error messages that list the valid names).
template <class List>
std::string joined_names_of(List list = {}) {
  std::string joined;
  for (const std::string_view name : names_of(list)) {
    if (!joined.empty()) joined += ", ";
    joined += name;
  }
  return joined;
}

/// Calls `f(std::type_identity<T>{})` for the first T of the list whose name is `name`; returns
/// whether one was found.
template <class... Ts, class F>
constexpr bool visit_by_name(TypeList<Ts...>, std::string_view name, F&& f) {
  return ((std::string_view(Ts::name) == name ? (f(std::type_identity<Ts>{}), true) : false) || ...);
}

/// Calls `f(std::type_identity<T>{})` for every T of the list, in order.
template <class... Ts, class F>
constexpr void for_each_type(TypeList<Ts...>, F&& f) {
  (f(std::type_identity<Ts>{}), ...);
}

}  // namespace verl
