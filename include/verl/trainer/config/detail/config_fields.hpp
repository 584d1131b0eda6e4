// Configuration sections as lists of their field names. VERL_CONFIG_FIELDS(Section, a, b, ...)
// declares once which members of a section are keys, in order; visit_config_field derives every
// dotted key path from the nesting of sections, so no key is spelled twice (as a string and as a
// member) and a new key is one name in one list.
#pragma once

#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

// VERL_DETAIL_FOR_EACH(macro, a, b, ...) expands to macro(a) macro(b) ... (up to 256 arguments:
// each level of VERL_DETAIL_EXPAND rescans four times).
#define VERL_DETAIL_PARENS ()
#define VERL_DETAIL_EXPAND(...) \
  VERL_DETAIL_EXPAND3(VERL_DETAIL_EXPAND3(VERL_DETAIL_EXPAND3(VERL_DETAIL_EXPAND3(__VA_ARGS__))))
#define VERL_DETAIL_EXPAND3(...) \
  VERL_DETAIL_EXPAND2(VERL_DETAIL_EXPAND2(VERL_DETAIL_EXPAND2(VERL_DETAIL_EXPAND2(__VA_ARGS__))))
#define VERL_DETAIL_EXPAND2(...) \
  VERL_DETAIL_EXPAND1(VERL_DETAIL_EXPAND1(VERL_DETAIL_EXPAND1(VERL_DETAIL_EXPAND1(__VA_ARGS__))))
#define VERL_DETAIL_EXPAND1(...) __VA_ARGS__
#define VERL_DETAIL_FOR_EACH(macro, ...) \
  __VA_OPT__(VERL_DETAIL_EXPAND(VERL_DETAIL_FOR_EACH_STEP(macro, __VA_ARGS__)))
#define VERL_DETAIL_FOR_EACH_STEP(macro, first, ...) \
  macro(first) __VA_OPT__(VERL_DETAIL_FOR_EACH_AGAIN VERL_DETAIL_PARENS(macro, __VA_ARGS__))
#define VERL_DETAIL_FOR_EACH_AGAIN() VERL_DETAIL_FOR_EACH_STEP

#define VERL_DETAIL_VISIT_CONFIG_FIELD(field) \
  ::verl::trainer::detail::visit_config_field(prefix, #field, section.field, visitor);

/// Declares the keys of config section `Section` (a struct of the same namespace): the listed
/// members, in order. A member that is itself a section contributes its keys under its name.
#define VERL_CONFIG_FIELDS(Section, ...)                                          \
  template <class S, class Visitor>                                               \
    requires std::same_as<std::remove_const_t<S>, Section>                       \
  void visit_config_fields(S& section, std::string_view prefix, Visitor& visitor) { \
    VERL_DETAIL_FOR_EACH(VERL_DETAIL_VISIT_CONFIG_FIELD, __VA_ARGS__)             \
  }

namespace verl::trainer::detail {

/// Accepts any field: what the ConfigSection check below visits with.
struct IgnoreFields {
  template <class Field>
  void operator()(std::string_view, Field&) const {}
};

/// A type declared with VERL_CONFIG_FIELDS (found by argument-dependent lookup).
template <class Field>
concept ConfigSection = requires(Field& field, IgnoreFields& visitor) {
  visit_config_fields(field, std::string_view{}, visitor);
};

/// Visits `field` under `prefix.name`: a section's keys one by one, anything else as one key.
template <class Field, class Visitor>
void visit_config_field(std::string_view prefix, std::string_view name, Field& field, Visitor& visitor) {
  std::string path;
  path.reserve(prefix.size() + 1 + name.size());
  if (!prefix.empty()) path.append(prefix).push_back('.');
  path.append(name);
  if constexpr (ConfigSection<Field>) {
    visit_config_fields(field, path, visitor);
  } else {
    visitor(std::string_view(path), field);
  }
}

}  // namespace verl::trainer::detail
