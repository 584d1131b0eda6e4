// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}): vocabulary,
// ranked merges, and the merge loop that turns one pre-tokenized word into token ids.
//
// The merge loop is the one `tokenizers` runs: a priority queue of adjacent pairs ordered by
// (merge rank, position), merging the best pair, then queueing the pairs it forms with its
// neighbours; stale entries are skipped. Results for short words are cached (as tokenizers does,
// up to 10,000 words below 256 bytes), so text with repeated words costs one hash lookup a word.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/tokenizer/detail/unicode.hpp"

namespace verl::tokenizer {

namespace detail {

/// std::hash<std::string_view> for heterogeneous lookup in string-keyed maps.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

using StringIdMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

/// Words already merged, shared by copies of a model; thread-safe.
class BpeCache {
 public:
  static constexpr std::size_t capacity = 10'000;
  static constexpr std::size_t max_word_bytes = 256;

  bool find(std::string_view word, std::vector<std::int32_t>& out) const {
    std::lock_guard lock(mutex_);
    const auto found = entries_.find(word);
    if (found == entries_.end()) return false;
    out.insert(out.end(), found->second.begin(), found->second.end());
    return true;
  }
  void insert(std::string_view word, std::span<const std::int32_t> ids) {
    if (word.size() >= max_word_bytes) return;
    std::lock_guard lock(mutex_);
    if (entries_.size() >= capacity) return;  // like tokenizers: stop filling, never evict
    entries_.emplace(std::string(word), std::vector<std::int32_t>(ids.begin(), ids.end()));
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>> entries_;
};

}  // namespace detail

/// BPE as tokenizer.json describes it: byte-level (GPT-2 style) or SentencePiece style with
/// byte_fallback (a character outside the vocabulary becomes its UTF-8 bytes as <0xXX> tokens);
/// unk_token and fuse_unk optional; no dropout, continuing-subword prefix or end-of-word suffix.
class BpeModel {
 public:
  BpeModel() = default;

  /// Reads the "model" object of tokenizer.json. Merges may be "a b" strings or [a, b] pairs.
  static BpeModel from_json(const nlohmann::json& model) {
    VERL_CHECK_ARG(model.is_object(), "tokenizer.json model: expected an object, got {}", model.type_name());
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") {
      ::verl::detail::throw_not_implemented("tokenizer.json model.type: only BPE is supported, got '{}'", type);
    }
    auto flag = [&](const char* key) {
      const auto found = model.find(key);
      if (found == model.end() || found->is_null()) return false;
      VERL_CHECK_ARG(found->is_boolean(), "tokenizer.json model.{}: expected a boolean, got {}", key, found->dump());
      return found->get<bool>();
    };
    auto string_or_empty = [&](const char* key) {
      const auto found = model.find(key);
      if (found == model.end() || found->is_null()) return std::string();
      VERL_CHECK_ARG(found->is_string(), "tokenizer.json model.{}: expected a string, got {}", key, found->dump());
      return found->get<std::string>();
    };
    if (!string_or_empty("continuing_subword_prefix").empty() || !string_or_empty("end_of_word_suffix").empty()) {
      ::verl::detail::throw_not_implemented(
          "tokenizer.json model: continuing_subword_prefix / end_of_word_suffix are not supported");
    }
    if (const auto dropout = model.find("dropout"); dropout != model.end() && !dropout->is_null()) {
      VERL_CHECK_ARG(dropout->is_number(), "tokenizer.json model.dropout: expected a number or null");
      if (dropout->get<double>() != 0.0) {
        ::verl::detail::throw_not_implemented("tokenizer.json model.dropout: BPE dropout is not supported");
      }
    }

    BpeModel bpe;
    bpe.ignore_merges_ = flag("ignore_merges");
    bpe.fuse_unk_ = flag("fuse_unk");
    bpe.byte_fallback_ = flag("byte_fallback");
    const auto vocab = model.find("vocab");
    VERL_CHECK_ARG(vocab != model.end() && vocab->is_object(), "tokenizer.json model.vocab: expected an object");
    bpe.vocab_.reserve(vocab->size());
    for (const auto& [token, id] : vocab->items()) {
      VERL_CHECK_ARG(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < (1LL << 31),
                     "tokenizer.json model.vocab['{}']: expected a non-negative id, got {}", token, id.dump());
      bpe.add_token(token, static_cast<std::int32_t>(id.get<std::int64_t>()));
    }
    const auto merges = model.find("merges");
    if (merges != model.end() && !merges->is_null()) {
      VERL_CHECK_ARG(merges->is_array(), "tokenizer.json model.merges: expected a list");
      bpe.merges_.reserve(merges->size());
      std::int32_t rank = 0;
      for (const auto& merge : *merges) {
        if (merge.is_string()) {
          const auto& text = merge.get_ref<const std::string&>();
          const auto space = text.find(' ');
          VERL_CHECK_ARG(space != std::string::npos && text.find(' ', space + 1) == std::string::npos,
                         "tokenizer.json model.merges[{}]: expected \"left right\", got \"{}\"", rank, text);
          bpe.add_merge(std::string_view(text).substr(0, space), std::string_view(text).substr(space + 1), rank);
        } else {
          VERL_CHECK_ARG(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
                         "tokenizer.json model.merges[{}]: expected [left, right], got {}", rank, merge.dump());
          bpe.add_merge(merge[0].get_ref<const std::string&>(), merge[1].get_ref<const std::string&>(), rank);
        }
        ++rank;
      }
    }
    const std::string unk = string_or_empty("unk_token");
    if (!unk.empty()) {
      const auto found = bpe.vocab_.find(unk);
      VERL_CHECK_ARG(found != bpe.vocab_.end(), "tokenizer.json model.unk_token: '{}' is not in the vocabulary", unk);
      bpe.unk_id_ = found->second;
    }
    if (bpe.byte_fallback_) {
      static constexpr char hex[] = "0123456789ABCDEF";
      for (std::size_t byte = 0; byte < 256; ++byte) {
        const char name[] = {'<', '0', 'x', hex[byte >> 4], hex[byte & 15], '>'};
        if (const auto id = bpe.token_to_id(std::string_view(name, sizeof(name)))) bpe.byte_ids_[byte] = *id;
      }
    }
    return bpe;
  }

  /// Number of ids the vocabulary spans (largest id + 1).
  [[nodiscard]] std::size_t id_space() const { return id_to_token_.size(); }
  [[nodiscard]] std::size_t size() const { return vocab_.size(); }
  [[nodiscard]] std::size_t merge_count() const { return merges_.size(); }
  [[nodiscard]] bool byte_fallback() const { return byte_fallback_; }

  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view token) const {
    const auto found = vocab_.find(token);
    return found == vocab_.end() ? std::nullopt : std::optional(found->second);
  }
  /// The token of an id, or nullptr where the id is not in the vocabulary.
  [[nodiscard]] const std::string* id_to_token(std::int64_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size() || !has_id_[static_cast<std::size_t>(id)]) {
      return nullptr;
    }
    return &id_to_token_[static_cast<std::size_t>(id)];
  }

  /// Appends the ids of one pre-tokenized word (valid UTF-8, in the vocabulary's alphabet).
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
      // Llama-3 style: a word that is itself a token is not split and re-merged.
      if (const auto found = vocab_.find(word); found != vocab_.end()) {
        out.push_back(found->second);
        return;
      }
    }
    if (cache_->find(word, out)) return;
    const std::size_t first = out.size();
    merge_word(word, out);
    cache_->insert(word, std::span<const std::int32_t>(out.data() + first, out.size() - first));
  }

 private:
  struct MergeTarget {
    std::int32_t rank;
    std::int32_t new_id;
  };
  struct Symbol {
    std::int32_t id;
    std::int32_t prev;
    std::int32_t next;
    bool alive;
  };
  struct QueuedMerge {
    std::int32_t rank;
    std::int32_t position;
    std::int32_t new_id;
    // The std heap is a max-heap: "less" means lower priority, i.e. a higher (rank, position).
    friend bool operator<(const QueuedMerge& a, const QueuedMerge& b) {
      return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
    }
  };

  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
  }

  void add_token(const std::string& token, std::int32_t id) {
    vocab_[token] = id;
    if (static_cast<std::size_t>(id) >= id_to_token_.size()) {
      id_to_token_.resize(static_cast<std::size_t>(id) + 1);
      has_id_.resize(static_cast<std::size_t>(id) + 1, false);
    }
    id_to_token_[static_cast<std::size_t>(id)] = token;
    has_id_[static_cast<std::size_t>(id)] = true;
    // Single characters below U+0400 (all of the byte-level alphabet) get a direct table.
    std::size_t pos = 0;
    const char32_t cp = detail::next_code_point(token, pos);
    if (pos == token.size() && cp < small_char_ids_.size()) small_char_ids_[cp] = id;
  }

  void add_merge(std::string_view left, std::string_view right, std::int32_t rank) {
    const auto left_id = vocab_.find(left);
    const auto right_id = vocab_.find(right);
    VERL_CHECK_ARG(left_id != vocab_.end() && right_id != vocab_.end(),
                   "tokenizer.json model.merges[{}]: '{}' or '{}' is not in the vocabulary", rank, left, right);
    std::string merged;
    merged.reserve(left.size() + right.size());
    merged.append(left).append(right);
    const auto merged_id = vocab_.find(merged);
    VERL_CHECK_ARG(merged_id != vocab_.end(), "tokenizer.json model.merges[{}]: the merged token '{}' is not in the vocabulary",
                   rank, merged);
    // A repeated pair keeps its last rank, as tokenizers' map does.
    merges_[pair_key(left_id->second, right_id->second)] = MergeTarget{rank, merged_id->second};
  }

  [[nodiscard]] std::optional<std::int32_t> char_id(std::string_view word, std::size_t begin, std::size_t end) const {
    std::size_t pos = begin;
    const char32_t cp = detail::next_code_point(word, pos);
    if (cp < small_char_ids_.size()) {
      const std::int32_t id = small_char_ids_[cp];
      return id >= 0 ? std::optional(id) : std::nullopt;
    }
    return token_to_id(word.substr(begin, end - begin));
  }

  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
    // Scratch buffers reused across words: no allocation per word once warmed up.
    thread_local std::vector<Symbol> symbols;
    thread_local std::vector<QueuedMerge> queue;
    symbols.clear();
    queue.clear();

    // One symbol per character. A character outside the vocabulary becomes its byte tokens
    // (byte_fallback, when all of them exist), else unk (fused if asked) or, without an unk token,
    // nothing. As in tokenizers, byte tokens do not flush a pending unk: it lands after them, and
    // fuses with a later unk across them.
    bool pending_unk = false;
    auto push_symbol = [&](std::int32_t id) {
      const auto index = static_cast<std::int32_t>(symbols.size());
      symbols.push_back(Symbol{id, index - 1, index + 1, true});
    };
    std::size_t pos = 0;
    while (pos < word.size()) {
      const std::size_t begin = pos;
      pos += detail::utf8_length(static_cast<unsigned char>(word[pos]));
      if (const auto id = char_id(word, begin, pos)) {
        if (pending_unk) push_symbol(*unk_id_);
        pending_unk = false;
        push_symbol(*id);
      } else if (byte_fallback_ && std::all_of(word.begin() + static_cast<std::ptrdiff_t>(begin),
                                               word.begin() + static_cast<std::ptrdiff_t>(pos), [&](char byte) {
                                                 return byte_ids_[static_cast<unsigned char>(byte)] >= 0;
                                               })) {
        for (std::size_t k = begin; k < pos; ++k) push_symbol(byte_ids_[static_cast<unsigned char>(word[k])]);
      } else if (unk_id_) {
        if (pending_unk && !fuse_unk_) push_symbol(*unk_id_);
        pending_unk = true;
      }
    }
    if (pending_unk) push_symbol(*unk_id_);
    if (symbols.empty()) return;
    symbols.back().next = -1;

    auto queue_pair = [&](std::int32_t position) {
      const Symbol& left = symbols[static_cast<std::size_t>(position)];
      if (left.next < 0) return;
      const auto found = merges_.find(pair_key(left.id, symbols[static_cast<std::size_t>(left.next)].id));
      if (found != merges_.end()) {
        queue.push_back(QueuedMerge{found->second.rank, position, found->second.new_id});
        std::push_heap(queue.begin(), queue.end());
      }
    };
    for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(symbols.size()); ++i) queue_pair(i);

    while (!queue.empty()) {
      std::pop_heap(queue.begin(), queue.end());
      const QueuedMerge top = queue.back();
      queue.pop_back();
      Symbol& left = symbols[static_cast<std::size_t>(top.position)];
      if (!left.alive || left.next < 0) continue;
      Symbol& right = symbols[static_cast<std::size_t>(left.next)];
      // Skip entries made stale by an earlier merge of either symbol.
      const auto current = merges_.find(pair_key(left.id, right.id));
      if (current == merges_.end() || current->second.new_id != top.new_id) continue;
      left.id = top.new_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.position;
      if (left.prev >= 0) queue_pair(left.prev);
      queue_pair(top.position);
    }
    for (const Symbol& symbol : symbols) {
      if (symbol.alive) out.push_back(symbol.id);
    }
  }

  detail::StringIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<std::uint64_t, MergeTarget> merges_;
  std::array<std::int32_t, 0x400> small_char_ids_ = [] {
    std::array<std::int32_t, 0x400> ids{};
    ids.fill(-1);
    return ids;
  }();
  std::optional<std::int32_t> unk_id_;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  std::array<std::int32_t, 256> byte_ids_ = [] {  ///< byte_fallback: the id of <0xXX>, or -1
    std::array<std::int32_t, 256> ids{};
    ids.fill(-1);
    return ids;
  }();
  std::shared_ptr<detail::BpeCache> cache_ = std::make_shared<detail::BpeCache>();
};

}  // namespace verl::tokenizer
