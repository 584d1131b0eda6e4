// The Tokenizer concept: what rollout, datasets and the trainer need from a tokenizer, met by the
// Hugging Face BPE tokenizer (HfTokenizer) and the character tokenizer
// (CharTokenizer) alike.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace verl::tokenizer {

/// Token ids are int64, like torch.long input_ids.
using TokenId = std::int64_t;

/// The ids generation and padding use; unset where the tokenizer has none.
struct SpecialTokenIds {
  std::optional<TokenId> bos;
  std::optional<TokenId> eos;
  std::optional<TokenId> pad;
  friend bool operator==(const SpecialTokenIds&, const SpecialTokenIds&) = default;
};

/// encode(text, add_special_tokens) -> ids; decode(ids, skip_special_tokens) -> text;
/// vocab_size() bounds every id (ids are in [0, vocab_size)); special_ids() gives bos/eos/pad;
/// `name` identifies the kind of tokenizer.
template <class T>
concept Tokenizer = requires(const T& tokenizer, std::string_view text, std::span<const TokenId> ids, bool flag) {
  { T::name } -> std::convertible_to<std::string_view>;
  { tokenizer.encode(text, flag) } -> std::same_as<std::vector<TokenId>>;
  { tokenizer.decode(ids, flag) } -> std::same_as<std::string>;
  { tokenizer.vocab_size() } -> std::same_as<std::size_t>;
  { tokenizer.special_ids() } -> std::same_as<SpecialTokenIds>;
};

}  // namespace verl::tokenizer
