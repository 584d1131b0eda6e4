// Which chat template renders the dataset's prompts, decided as verl decides it.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "verl/core/error.hpp"
#include "verl/tokenizer/chat_template.hpp"
#include "verl/tokenizer/jinja_chat_template.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/trainer/config/ppo_config.hpp"

namespace verl::trainer {

/// The template prompts render with, as verl decides it: actor_rollout_ref.model.custom_chat_template
/// (Jinja source, or one of verl-cpp's registry names) over the tokenizer's own, and
/// data.apply_chat_template_kwargs as extra template variables.
inline std::optional<tokenizer::AnyChatTemplate> prompt_chat_template(const PPOConfig& config,
                                                                  const tokenizer::PretrainedTokenizer& tokenizer) {
  const auto& custom = config.actor_rollout_ref.model.custom_chat_template;
  const auto& kwargs = config.data.apply_chat_template_kwargs;
  const bool has_kwargs = kwargs.is_object() && !kwargs.empty();
  VERL_CHECK_ARG(kwargs.is_object(), "data.apply_chat_template_kwargs: expected a mapping, got {}", kwargs.dump());
  constexpr std::array<std::string_view, 3> registry = {"chatml", "qwen2", "llama3"};
  if (custom && std::ranges::find(registry, *custom) != registry.end()) {
    // These templates read no variables beyond the messages, so kwargs change nothing (as in verl).
    return tokenizer::make_chat_template(*custom);
  }
  if (!custom) {
    if (!has_kwargs) return tokenizer.chat_template;  // the loader's choice (fast or Jinja)
    try {
      return tokenizer.chat_template_with(kwargs);
    } catch (const InvalidArgument& error) {
      ::verl::detail::throw_invalid_argument("data.apply_chat_template_kwargs: {}", error.what());
    }
  }
  try {
    return tokenizer.jinja_chat_template(*custom, kwargs);
  } catch (const InvalidArgument& error) {
    ::verl::detail::throw_invalid_argument("actor_rollout_ref.model.custom_chat_template: {}", error.what());
  }
}

}  // namespace verl::trainer
