// Deprecated path: this header moved to verl/tokenizer/jinja/builtins.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/model/tokenizer/jinja/builtins.hpp is deprecated: include verl/tokenizer/jinja/builtins.hpp")

#include "verl/tokenizer/jinja/builtins.hpp"

// The tokenizer types lived in verl::model before; the old names stay valid for one release.
namespace verl::model {
using namespace ::verl::tokenizer;
}  // namespace verl::model
