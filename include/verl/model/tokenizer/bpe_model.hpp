// Deprecated path: this header moved to verl/tokenizer/bpe_model.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/model/tokenizer/bpe_model.hpp is deprecated: include verl/tokenizer/bpe_model.hpp")

#include "verl/tokenizer/bpe_model.hpp"

// The tokenizer types lived in verl::model before; the old names stay valid for one release.
namespace verl::model {
using namespace ::verl::tokenizer;
}  // namespace verl::model
