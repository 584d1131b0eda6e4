// Deprecated path: this header moved to verl/tokenizer/chat_template.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/model/tokenizer/chat_template.hpp is deprecated: include verl/tokenizer/chat_template.hpp")

#include "verl/tokenizer/chat_template.hpp"

// The tokenizer types lived in verl::model before; the old names stay valid for one release.
namespace verl::model {
using namespace ::verl::tokenizer;
}  // namespace verl::model
