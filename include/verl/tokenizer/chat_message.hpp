// One chat message and the ChatTemplate concept every chat template policy satisfies (the
// hard-coded renderers in chat_template.hpp and the Jinja one in jinja_chat_template.hpp).
#pragma once

#include <concepts>
#include <span>
#include <string>
#include <string_view>

namespace verl::tokenizer {

/// One chat message, as in verl's `prompt` column.
struct ChatMessage {
  std::string role;
  std::string content;
  friend bool operator==(const ChatMessage&, const ChatMessage&) = default;
};

/// render(messages, add_generation_prompt) -> the prompt text; `name` is the registry name.
template <class T>
concept ChatTemplate = requires(const T& chat_template, std::span<const ChatMessage> messages, bool flag) {
  { T::name } -> std::convertible_to<std::string_view>;
  { chat_template.render(messages, flag) } -> std::same_as<std::string>;
};

}  // namespace verl::tokenizer
