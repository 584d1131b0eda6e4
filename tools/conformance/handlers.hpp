// The conformance runner's dispatch table: verl function name -> a handler that runs the C++
// implementation on a golden case and records comparisons in a CaseCheck. A handler throws
// (any std::exception) where verl raises. Each family_*.cpp registers its handlers through a
// static Registrar, so a runner can be linked with any subset of families.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/testing/golden.hpp"

namespace verl::conformance {

using testing::CaseCheck;
using testing::GoldenCase;
using testing::json;

using Handler = std::function<void(const GoldenCase&, CaseCheck&)>;
using HandlerTable = std::map<std::string, Handler, std::less<>>;

inline HandlerTable& handler_table() {
  static HandlerTable table;
  return table;
}

/// `static const Registrar registrar{register_my_family};` in a family file adds its handlers.
struct Registrar {
  explicit Registrar(void (*register_family)(HandlerTable&)) { register_family(handler_table()); }
};

/// The CUDA path (`--device cuda`): cuda_handlers.cpp registers it when the build has CUDA. A
/// function without a handler here, or whose `supports` predicate rejects the case, is reported
/// as unsupported on cuda (neither passed nor failed).
struct CudaSupport {
  std::string (*unavailable_reason)() = nullptr;  ///< null: this build has no CUDA path
  HandlerTable handlers;
  std::map<std::string, bool (*)(const GoldenCase&), std::less<>> supports;
};

inline CudaSupport& cuda_support() {
  static CudaSupport support;
  return support;
}

struct CudaRegistrar {
  explicit CudaRegistrar(void (*register_cuda)(CudaSupport&)) { register_cuda(cuda_support()); }
};

/// Fails the case for every output the handler does not compare (`known` lists those it does), so
/// that a golden file growing a new output cannot pass unnoticed. `path` names the handler's path
/// in the message ("cpu", "cuda").
inline void require_known_outputs(const GoldenCase& c, CaseCheck& check, std::initializer_list<std::string_view> known,
                                  std::string_view path = "cpu") {
  for (auto it = c.outputs().begin(); it != c.outputs().end(); ++it) {
    bool listed = false;
    for (auto k : known) listed = listed || k == it.key();
    if (!listed) check.fail(it.key(), fmt::format("output '{}' is not compared by the {} handler", it.key(), path));
  }
}

/// Optional JSON number (absent or null -> nullopt).
inline std::optional<double> optional_number(const json& object, const char* key) {
  if (!object.contains(key) || object.at(key).is_null()) return std::nullopt;
  return object.at(key).get<double>();
}

/// masked_whiten's shift_mean as verl reads it (`if not shift_mean: whitened += mean`): absent is
/// the default True, an explicit None is falsy, so the mean is added back as with False.
inline bool shift_mean_of(const json& args) {
  if (!args.contains("shift_mean")) return true;
  const json& value = args.at("shift_mean");
  return value.is_null() ? false : value.get<bool>();
}

}  // namespace verl::conformance
