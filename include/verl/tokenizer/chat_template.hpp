// Chat templates for verl's `prompt` message lists ([{role, content}, ...]), producing exactly
// the strings transformers' apply_chat_template renders: two fast renderers written out by hand,
// the ChatML family (Qwen2) and Llama-3, and JinjaChatTemplate (jinja_chat_template.hpp), which
// runs any model's Jinja template with jinja2's semantics.
//
// Each template is a policy type (ChatMLTemplate, Llama3Template, JinjaChatTemplate) satisfying
// ChatTemplate; the registry make_chat_template("chatml" | "qwen2" | "llama3") and
// detect_chat_template(jinja), which recognises the sources the fast renderers reproduce, give
// them at run time, and AnyChatTemplate holds any of them.
#pragma once

#include <concepts>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/tokenizer/chat_message.hpp"
#include "verl/tokenizer/jinja_chat_template.hpp"
#include "verl/tokenizer/detail/unicode.hpp"

namespace verl::tokenizer {

/// ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
/// "<|im_start|>assistant\n" when asking for a generation. With a default system prompt (Qwen2
/// and Qwen2.5 instruct models), a conversation that does not open with a system message gets
/// one first.
struct ChatMLTemplate {
  static constexpr std::string_view name = "chatml";
  std::optional<std::string> default_system_prompt;

  /// Qwen2-Instruct's template.
  static ChatMLTemplate qwen2() { return ChatMLTemplate{"You are a helpful assistant."}; }

  [[nodiscard]] std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    std::string out;
    std::size_t size = 32;
    for (const auto& message : messages) size += message.role.size() + message.content.size() + 24;
    out.reserve(size);
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (i == 0 && default_system_prompt && messages[0].role != "system") {
        out.append("<|im_start|>system\n").append(*default_system_prompt).append("<|im_end|>\n");
      }
      out.append("<|im_start|>").append(messages[i].role).append("\n").append(messages[i].content).append("<|im_end|>\n");
    }
    if (add_generation_prompt) out.append("<|im_start|>assistant\n");
    return out;
  }
};

/// Llama-3 Instruct: bos, then "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"
/// per message with the content stripped of surrounding white space (Jinja's `trim`, i.e.
/// Python's str.strip()), then the assistant header when asking for a generation.
struct Llama3Template {
  static constexpr std::string_view name = "llama3";
  std::string bos_token = "<|begin_of_text|>";

  [[nodiscard]] std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    std::string out;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out.append(bos_token);
      out.append("<|start_header_id|>")
          .append(messages[i].role)
          .append("<|end_header_id|>\n\n")
          .append(detail::python_strip(messages[i].content))
          .append("<|eot_id|>");
    }
    if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
    return out;
  }
};

static_assert(ChatTemplate<ChatMLTemplate>);
static_assert(ChatTemplate<Llama3Template>);
static_assert(ChatTemplate<JinjaChatTemplate>);

/// One of the chat templates, chosen at run time.
class AnyChatTemplate {
 public:
  using Variant = std::variant<ChatMLTemplate, Llama3Template, JinjaChatTemplate>;

  template <ChatTemplate T>
  AnyChatTemplate(T chat_template) : template_(std::move(chat_template)) {}  // NOLINT: implicit by design

  [[nodiscard]] std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return std::visit([&](const auto& chat_template) { return chat_template.render(messages, add_generation_prompt); },
                      template_);
  }
  [[nodiscard]] std::string_view name() const {
    return std::visit([](const auto& chat_template) -> std::string_view { return chat_template.name; }, template_);
  }
  [[nodiscard]] const Variant& get() const { return template_; }

 private:
  Variant template_;
};

/// The registry: "chatml" (no default system prompt), "qwen2" (ChatML with Qwen2's default
/// system prompt) or "llama3".
inline AnyChatTemplate make_chat_template(std::string_view name) {
  if (name == "chatml") return ChatMLTemplate{};
  if (name == "qwen2") return ChatMLTemplate::qwen2();
  if (name == "llama3") return Llama3Template{};
  ::verl::detail::throw_invalid_argument("chat_template: expected one of chatml, qwen2, llama3, got '{}'", name);
}

namespace detail {

/// Undoes the escapes of a Jinja string literal (\n, \t, \', \", \\).
inline std::string unescape_jinja_literal(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      const char e = text[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace detail

/// Recognizes a tokenizer_config.json "chat_template" (Jinja source) that one of the fast
/// renderers reproduces: ChatML templates (with the default system prompt they embed, if any) and
/// the Llama-3 Instruct template. Returns nullopt for anything else (e.g. Llama-3.1's, which adds
/// dated system text, or templates with reasoning blocks such as Qwen3's), rather than guessing;
/// those render through JinjaChatTemplate (load_pretrained_tokenizer does this).
inline std::optional<AnyChatTemplate> detect_chat_template(std::string_view jinja,
                                                           std::string_view bos_token = "<|begin_of_text|>") {
  if (jinja.find("<think>") != std::string_view::npos) return std::nullopt;
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    ChatMLTemplate chatml;
    // A default system turn is a literal '<|im_start|>system\n...<|im_end|>' in the source.
    constexpr std::string_view opening = "'<|im_start|>system\\n";
    for (std::size_t at = jinja.find(opening); at != std::string_view::npos; at = jinja.find(opening, at + 1)) {
      const std::size_t begin = at + opening.size();
      const std::size_t end = jinja.find("<|im_end|>", begin);
      if (end == std::string_view::npos) break;
      const std::string_view literal = jinja.substr(begin, end - begin);
      if (literal.find('\'') == std::string_view::npos) {  // not an expression like ' + content + '
        chatml.default_system_prompt = detail::unescape_jinja_literal(literal);
        break;
      }
    }
    return chatml;
  }
  if (jinja.find("<|start_header_id|>") != std::string_view::npos &&
      jinja.find("Cutting Knowledge Date") == std::string_view::npos && jinja.find("tools") == std::string_view::npos) {
    return Llama3Template{std::string(bos_token)};
  }
  return std::nullopt;
}

}  // namespace verl::tokenizer
