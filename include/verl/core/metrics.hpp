// Metrics as verl logs them: a name (e.g. "actor/pg_clipfrac") mapped to a number.
#pragma once

#include <map>
#include <string>

namespace verl {

/// Ordered so that printing and logging are deterministic.
using Metrics = std::map<std::string, double, std::less<>>;

}  // namespace verl
