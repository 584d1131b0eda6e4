// The message of the error a call throws, for tests that check what an error says.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <utility>

namespace verl::test_support {

/// What `call()` throws as an E (any std::exception by default: verl::InvalidArgument,
/// verl::NotImplemented, ...), as its message. A call that throws nothing is a test failure and
/// gives ""; an exception of another type propagates (a test failure too).
template <class E = std::exception, class F>
std::string message_of(F&& call) {
  try {
    std::forward<F>(call)();
  } catch (const E& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

}  // namespace verl::test_support
