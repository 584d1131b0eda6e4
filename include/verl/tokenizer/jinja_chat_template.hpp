// A chat template given as Jinja source (tokenizer_config.json "chat_template"), rendered with
// the engine in jinja/ exactly as transformers' apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) renders it with jinja2. The variables are those transformers
// passes: messages, add_generation_prompt, bos_token / eos_token (when the tokenizer has them),
// tools and documents (None unless given), plus any extra context (enable_thinking, date_string,
// tools, ...).
#pragma once

#include <nlohmann/json.hpp>

#include <ctime>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/tokenizer/chat_message.hpp"
#include "verl/tokenizer/jinja/template.hpp"

namespace verl::tokenizer {

class JinjaChatTemplate {
 public:
  static constexpr std::string_view name = "jinja";

  /// Parses `source` once; a syntax error throws verl::InvalidArgument naming line, column and
  /// the expected construct. `extra_context` (a JSON object, or null) adds template variables.
  template <class Json = nlohmann::ordered_json>
  explicit JinjaChatTemplate(std::string_view source, std::optional<std::string> bos_token = std::nullopt,
                             std::optional<std::string> eos_token = std::nullopt, const Json& extra_context = Json())
      : source_(source), template_(source), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {
    if (!extra_context.is_null()) {
      VERL_CHECK_ARG(extra_context.is_object(), "JinjaChatTemplate: extra_context: expected a JSON object, got {}",
                     extra_context.type_name());
      extra_context_ = jinja::from_json(extra_context).object();
    }
  }

  /// The ChatTemplate entry point: {role, content} messages.
  [[nodiscard]] std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    std::vector<jinja::Value> items;
    items.reserve(messages.size());
    for (const auto& message : messages) {
      jinja::Object object;
      object.items.emplace_back("role", jinja::Value(message.role));
      object.items.emplace_back("content", jinja::Value(message.content));
      items.emplace_back(std::move(object));
    }
    return render_values(jinja::Value::list(std::move(items)), add_generation_prompt, jinja::Object{});
  }

  /// Messages as JSON objects (so reasoning_content, tool_calls, list contents, ... reach the
  /// template), with per-call variables (e.g. {"tools": [...], "enable_thinking": false}) that
  /// override the constructor's.
  template <class Json>
  [[nodiscard]] std::string render_json(const Json& messages, bool add_generation_prompt,
                                        const Json& context = Json()) const {
    VERL_CHECK_ARG(messages.is_array(), "JinjaChatTemplate: messages: expected a JSON list, got {}", messages.type_name());
    VERL_CHECK_ARG(context.is_null() || context.is_object(), "JinjaChatTemplate: context: expected a JSON object, got {}",
                   context.type_name());
    return render_values(jinja::from_json(messages), add_generation_prompt,
                         context.is_null() ? jinja::Object{} : jinja::from_json(context).object());
  }

  /// Makes strftime_now() return this time instead of the clock's (for reproducible output).
  void set_fixed_now(const std::tm& now) { environment_.now = now; }

  [[nodiscard]] const std::string& source() const { return source_; }
  [[nodiscard]] const std::optional<std::string>& bos_token() const { return bos_token_; }
  [[nodiscard]] const std::optional<std::string>& eos_token() const { return eos_token_; }

 private:
  [[nodiscard]] std::string render_values(jinja::Value messages, bool add_generation_prompt,
                                          const jinja::Object& call_context) const {
    jinja::Object context;
    context.set("messages", std::move(messages));
    context.set("tools", jinja::Value(jinja::None{}));
    context.set("documents", jinja::Value(jinja::None{}));
    context.set("add_generation_prompt", jinja::Value(add_generation_prompt));
    if (bos_token_) context.set("bos_token", jinja::Value(*bos_token_));
    if (eos_token_) context.set("eos_token", jinja::Value(*eos_token_));
    for (const auto& [key, value] : extra_context_.items) context.set(key, value);
    for (const auto& [key, value] : call_context.items) context.set(key, value);
    return template_.render(context, environment_);
  }

  std::string source_;
  jinja::Template template_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
  jinja::Object extra_context_;
  jinja::Environment environment_;
};

static_assert(ChatTemplate<JinjaChatTemplate>);

}  // namespace verl::tokenizer
