// tokenizer.json's "normalizer": null, NFC (Qwen2), or a Sequence of those. Other normalizers
// (lowercasing, NFKC, sentencepiece replacements) throw verl::NotImplemented when loaded, so a
// tokenizer is never silently run with different text than Hugging Face would see.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/model/tokenizer/detail/nfc.hpp"

namespace verl::model {

class Normalizer {
 public:
  enum class Step { nfc };

  Normalizer() = default;

  static Normalizer from_json(const nlohmann::json& json) {
    Normalizer normalizer;
    normalizer.append(json);
    return normalizer;
  }

  /// No normalization at all (the text goes to pre-tokenization untouched).
  [[nodiscard]] bool is_identity() const { return steps_.empty(); }

  [[nodiscard]] std::string apply(std::string_view text) const {
    std::string out(text);
    for (const Step step : steps_) {
      switch (step) {
        case Step::nfc: out = detail::nfc(out); break;
      }
    }
    return out;
  }

 private:
  void append(const nlohmann::json& json) {
    if (json.is_null()) return;
    VERL_CHECK_ARG(json.is_object() && json.contains("type") && json["type"].is_string(),
                   "tokenizer.json normalizer: expected null or an object with a 'type', got {}", json.dump());
    const auto& type = json["type"].get_ref<const std::string&>();
    if (type == "NFC") {
      steps_.push_back(Step::nfc);
    } else if (type == "Sequence") {
      VERL_CHECK_ARG(json.contains("normalizers") && json["normalizers"].is_array(),
                     "tokenizer.json normalizer Sequence: expected a 'normalizers' list");
      for (const auto& inner : json["normalizers"]) append(inner);
    } else {
      ::verl::detail::throw_not_implemented(
          "tokenizer.json normalizer: type '{}' is not supported (supported: null, NFC, Sequence)", type);
    }
  }

  std::vector<Step> steps_;
};

}  // namespace verl::model
