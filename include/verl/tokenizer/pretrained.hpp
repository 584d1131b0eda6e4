// A Hugging Face model folder's tokenizer: tokenizer.json plus, when present,
// tokenizer_config.json (bos/eos/pad tokens and the chat template). The chat template renders
// through JinjaChatTemplate, as transformers' apply_chat_template does, or through one of the fast
// renderers (detect_chat_template) where that gives the same text on probe conversations.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/file_io.hpp"
#include "verl/tokenizer/chat_template.hpp"
#include "verl/tokenizer/hf_tokenizer.hpp"

namespace verl::tokenizer {

struct PretrainedTokenizer {
  HfTokenizer tokenizer;
  std::optional<AnyChatTemplate> chat_template;  ///< nullopt when tokenizer_config.json gives none
  std::optional<std::string> chat_template_source;  ///< the Jinja source, when given

  /// The prompt text for `messages` (what apply_chat_template(..., tokenize=False) returns).
  [[nodiscard]] std::string apply_chat_template(std::span<const ChatMessage> messages,
                                                bool add_generation_prompt = true) const {
    VERL_CHECK_ARG(chat_template.has_value(),
                   "chat_template: this tokenizer has no chat template (tokenizer_config.json has no 'chat_template'); "
                   "pass one explicitly with make_chat_template() or JinjaChatTemplate");
    return chat_template->render(messages, add_generation_prompt);
  }
  /// The folder's chat template with extra template variables (transformers'
  /// apply_chat_template(..., **kwargs); e.g. {"enable_thinking": false} for Qwen3), rendered
  /// through its Jinja source.
  [[nodiscard]] JinjaChatTemplate chat_template_with(const nlohmann::ordered_json& variables) const {
    VERL_CHECK_ARG(chat_template_source.has_value(),
                   "chat template variables {}: this tokenizer has no chat template (tokenizer_config.json has no "
                   "'chat_template')",
                   variables.dump());
    return jinja_chat_template(*chat_template_source, variables);
  }
  /// Another Jinja chat template (say, verl's custom_chat_template) with this tokenizer's bos and
  /// eos tokens and the given variables.
  [[nodiscard]] JinjaChatTemplate jinja_chat_template(std::string_view source,
                                                      const nlohmann::ordered_json& variables = {}) const {
    VERL_CHECK_ARG(variables.is_null() || variables.is_object(),
                   "chat template variables: expected a JSON object, got {}", variables.dump());
    auto token = [&](std::optional<TokenId> id) { return id ? tokenizer.id_to_token(*id) : std::nullopt; };
    const auto special = tokenizer.special_ids();
    return JinjaChatTemplate(source, token(special.bos), token(special.eos), variables);
  }
  /// The prompt ids, tokenized as verl's RLHFDataset does (no extra special tokens: the template
  /// already wrote them).
  [[nodiscard]] std::vector<TokenId> encode_chat(std::span<const ChatMessage> messages,
                                                 bool add_generation_prompt = true) const {
    return tokenizer.encode(apply_chat_template(messages, add_generation_prompt), false);
  }
};

namespace detail {

/// tokenizer_config.json spells a special token as a string or as {"content": ...}.
inline std::optional<std::string> special_token_content(const nlohmann::json& config, std::string_view key,
                                                        std::string_view source) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) return std::nullopt;
  if (found->is_string()) return found->get<std::string>();
  VERL_CHECK_ARG(found->is_object() && found->contains("content") && (*found)["content"].is_string(),
                 "{}: key '{}': expected a string or an object with 'content', got {}", source, key, found->dump());
  return (*found)["content"].get<std::string>();
}

/// Whether `fast` renders a few typical conversations (system or not, multi-turn, white space at
/// the edges of contents, both add_generation_prompt values) exactly as `exact` does.
inline bool renders_like(const AnyChatTemplate& fast, const JinjaChatTemplate& exact) {
  const std::vector<std::vector<ChatMessage>> probes = {
      {{"user", "Hello there! What is 2 + 3?"}},
      {{"system", "You are terse."}, {"user", " 2 + 2? "}, {"assistant", "4\n"}, {"user", "And 3 + 3?"}},
      {{"user", "first"}, {"assistant", "second"}, {"user", "\tthird\n"}},
  };
  try {
    for (const auto& messages : probes) {
      for (const bool add_generation_prompt : {false, true}) {
        if (fast.render(messages, add_generation_prompt) != exact.render(messages, add_generation_prompt)) return false;
      }
    }
  } catch (const InvalidArgument&) {
    return false;  // the template refuses a probe (say, a system message): keep the template itself
  }
  return true;
}

/// Makes `jinja` the tokenizer's chat template (`where` names its origin in errors). The older
/// substring-based detect_chat_template renderer is kept only when it renders the probe
/// conversations exactly as the template itself does.
inline void set_chat_template(std::string jinja, const std::string& where, const std::optional<std::string>& bos,
                              const std::optional<std::string>& eos, PretrainedTokenizer& loaded) {
  std::optional<JinjaChatTemplate> exact;
  try {
    exact.emplace(jinja, bos, eos);
  } catch (const InvalidArgument& error) {
    ::verl::detail::throw_invalid_argument("{}: {}", where, error.what());
  }
  const auto fast = detect_chat_template(jinja, bos.value_or("<|begin_of_text|>"));
  loaded.chat_template = fast && renders_like(*fast, *exact) ? *fast : AnyChatTemplate(std::move(*exact));
  loaded.chat_template_source = std::move(jinja);
}

/// Applies tokenizer_config.json: special token ids and (unless a chat_template.jinja file
/// replaces it) the chat template.
inline void apply_tokenizer_config(const nlohmann::json& config, const std::string& source,
                                   PretrainedTokenizer& loaded, bool with_chat_template = true) {
  SpecialTokenIds ids;
  auto resolve = [&](std::string_view key) -> std::optional<TokenId> {
    const auto content = detail::special_token_content(config, key, source);
    if (!content) return std::nullopt;
    const auto id = loaded.tokenizer.token_to_id(*content);
    VERL_CHECK_ARG(id.has_value(), "{}: key '{}': token '{}' is not in the tokenizer's vocabulary", source, key,
                   *content);
    return id;
  };
  ids.bos = resolve("bos_token");
  ids.eos = resolve("eos_token");
  ids.pad = resolve("pad_token");
  loaded.tokenizer.set_special_ids(ids);

  if (const auto found = config.find("chat_template"); with_chat_template && found != config.end() && !found->is_null()) {
    std::string jinja;
    if (found->is_string()) {
      jinja = found->get<std::string>();
    } else {
      // A list of named templates: the "default" one renders plain conversations.
      VERL_CHECK_ARG(found->is_array(), "{}: key 'chat_template': expected a string or a list, got {}", source,
                     found->type_name());
      for (const auto& entry : *found) {
        if (entry.value("name", std::string()) == "default") jinja = entry.value("template", std::string());
      }
    }
    if (!jinja.empty()) {
      set_chat_template(std::move(jinja), fmt::format("{}: key 'chat_template'", source),
                        detail::special_token_content(config, "bos_token", source),
                        detail::special_token_content(config, "eos_token", source), loaded);
    }
  }
}

}  // namespace detail

namespace detail {

/// Reads tokenizer_config.json into `loaded` (special tokens, chat template) and returns it.
inline nlohmann::json read_tokenizer_config(const std::filesystem::path& config_path, PretrainedTokenizer& loaded,
                                            bool with_chat_template) {
  const std::string source = config_path.string();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(io::read_text_file(config_path));
  } catch (const nlohmann::json::exception& error) {
    ::verl::detail::throw_invalid_argument("{}: not valid JSON ({})", source, error.what());
  }
  VERL_CHECK_ARG(config.is_object(), "{}: expected a JSON object", source);
  try {
    apply_tokenizer_config(config, source, loaded, with_chat_template);
  } catch (const nlohmann::json::exception& error) {
    ::verl::detail::throw_invalid_argument("{}: malformed ({})", source, error.what());
  }
  return config;
}

}  // namespace detail

/// A tokenizer from tokenizer.json and tokenizer_config.json already parsed (the config may be
/// null), as load_pretrained_tokenizer builds it from a folder; `source` names them in errors.
/// Loaders of other formats (GGUF's tokenizer.ggml.* keys) describe their tokenizer this way.
inline PretrainedTokenizer make_pretrained_tokenizer(const nlohmann::json& tokenizer_json,
                                                     const nlohmann::json& tokenizer_config, const std::string& source) {
  PretrainedTokenizer loaded{HfTokenizer::from_json(tokenizer_json), std::nullopt, std::nullopt};
  if (tokenizer_config.is_null()) return loaded;
  VERL_CHECK_ARG(tokenizer_config.is_object(), "{}: tokenizer config: expected a JSON object, got {}", source,
                 tokenizer_config.type_name());
  try {
    detail::apply_tokenizer_config(tokenizer_config, source, loaded);
  } catch (const nlohmann::json::exception& error) {
    ::verl::detail::throw_invalid_argument("{}: malformed tokenizer config ({})", source, error.what());
  }
  return loaded;
}

/// Loads `folder`/tokenizer.json and, when present, `folder`/tokenizer_config.json and
/// `folder`/chat_template.jinja (where transformers >= 4.51 saves the template; like
/// transformers, it takes precedence over tokenizer_config.json's "chat_template").
inline PretrainedTokenizer load_pretrained_tokenizer(const std::filesystem::path& folder) {
  PretrainedTokenizer loaded{HfTokenizer::from_file(folder / "tokenizer.json"), std::nullopt, std::nullopt};
  const auto config_path = folder / "tokenizer_config.json";
  const auto template_path = folder / "chat_template.jinja";
  const bool template_file = std::filesystem::exists(template_path);
  nlohmann::json config = nlohmann::json::object();
  // The file's template replaces the config's, which is then neither parsed nor checked.
  if (std::filesystem::exists(config_path)) config = detail::read_tokenizer_config(config_path, loaded, !template_file);
  if (template_file) {
    const std::string source = config_path.string();
    detail::set_chat_template(io::read_text_file(template_path), template_path.string(),
                              detail::special_token_content(config, "bos_token", source),
                              detail::special_token_content(config, "eos_token", source), loaded);
  }
  return loaded;
}

}  // namespace verl::tokenizer
