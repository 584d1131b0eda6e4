// The PromptFormatter concept: how a dataset row's chat messages become the prompt text that is
// tokenized. Chat templates (verl/model/tokenizer/chat_template.hpp) are formatters; so is
// ContentOnlyFormatter, for character-level tasks whose tokenizers have no chat template.
#pragma once

#include <concepts>
#include <span>
#include <string>
#include <string_view>

#include "verl/tokenizer/chat_template.hpp"

namespace verl::data {

/// render(messages, add_generation_prompt) -> the prompt text.
template <class F>
concept PromptFormatter = requires(const F& formatter, std::span<const tokenizer::ChatMessage> messages, bool flag) {
  { formatter.render(messages, flag) } -> std::same_as<std::string>;
};

/// The messages' contents joined by `separator`, without roles or markers.
struct ContentOnlyFormatter {
  static constexpr std::string_view name = "content_only";
  std::string separator;

  [[nodiscard]] std::string render(std::span<const tokenizer::ChatMessage> messages, bool /*add_generation_prompt*/) const {
    std::string out;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (i > 0) out += separator;
      out += messages[i].content;
    }
    return out;
  }
};

static_assert(PromptFormatter<ContentOnlyFormatter> && PromptFormatter<tokenizer::AnyChatTemplate> &&
              PromptFormatter<tokenizer::ChatMLTemplate>);

}  // namespace verl::data
