// Errors raised for bad input: every message names the argument, what was expected and what
// was received.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace verl {

/// Raised when an argument has the wrong shape, an invalid value or an unknown name.
/// Mirrors verl's ValueError/AssertionError cases.
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Raised for a configuration or mode verl does not implement (verl's NotImplementedError).
class NotImplemented : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {

template <class... Args>
[[noreturn]] inline void throw_invalid_argument(fmt::format_string<Args...> format, Args&&... args) {
  throw InvalidArgument(fmt::format(format, std::forward<Args>(args)...));
}

template <class... Args>
[[noreturn]] inline void throw_not_implemented(fmt::format_string<Args...> format, Args&&... args) {
  throw NotImplemented(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace detail
}  // namespace verl

/// Checks a runtime precondition; on failure throws verl::InvalidArgument with the formatted
/// message (which must name the argument, the expected and the actual value).
#define VERL_CHECK_ARG(CONDITION, ...)                        \
  do {                                                        \
    if (!(CONDITION)) ::verl::detail::throw_invalid_argument(__VA_ARGS__); \
  } while (false)
