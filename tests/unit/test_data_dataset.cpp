// verl-schema datasets from JSON Lines: parsing, errors naming file and line, max_samples,
// filtering and truncation, collation into a DataProto, and the resumable data loader.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "verl/data/dataloader.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/tokenizer/char_tokenizer.hpp"

using namespace verl;
using namespace verl::data;
namespace fs = std::filesystem;

namespace {

const fs::path datasets = fs::path(VERL_GOLDEN_DIR) / ".." / "datasets";

const tokenizer::CharTokenizer& ascii() {
  static const tokenizer::CharTokenizer tokenizer = tokenizer::CharTokenizer::printable_ascii();
  return tokenizer;
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(RLHFRow, ParsesVerlSchema) {
  const fs::path files[] = {datasets / "gsm8k_tiny.jsonl"};
  RLHFDatasetOptions options;
  options.max_prompt_length = 4096;
  const auto dataset = RLHFDataset::load(files, ascii(), tokenizer::ChatMLTemplate{}, options);
  ASSERT_EQ(dataset.size(), 5);
  const RLHFRow& row = dataset[0].row;
  EXPECT_EQ(row.data_source, "openai/gsm8k");
  ASSERT_EQ(row.prompt.size(), 1u);
  EXPECT_EQ(row.prompt[0].role, "user");
  EXPECT_EQ(row.ability, "math");
  EXPECT_EQ(row.reward_model.style, "rule");
  EXPECT_EQ(row.ground_truth_text(), "72");
  EXPECT_EQ(row.extra_info["split"], "train");
  EXPECT_EQ(dataset[3].row.index(), 3);
  // The chat template's text, tokenized character by character.
  const std::string text = tokenizer::ChatMLTemplate{}.render(row.prompt, true);
  EXPECT_EQ(dataset[0].prompt_ids, ascii().encode(text, false));
  EXPECT_EQ(dataset[0].source.to_string(), (datasets / "gsm8k_tiny.jsonl").string() + ":1");
  EXPECT_EQ(to_json(row)["reward_model"]["ground_truth"], "72");
}

TEST(RLHFRow, ErrorsNameFileLineAndField) {
  RLHFDatasetOptions options;
  const fs::path bad_json[] = {datasets / "bad_json.jsonl"};
  EXPECT_NE(error_of([&] { RLHFDataset::load(bad_json, ascii(), ContentOnlyFormatter{}, options); })
                .find("bad_json.jsonl:3: invalid JSON"),
            std::string::npos);
  const fs::path bad_prompt[] = {datasets / "bad_prompt.jsonl"};
  EXPECT_NE(error_of([&] { RLHFDataset::load(bad_prompt, ascii(), ContentOnlyFormatter{}, options); })
                .find("bad_prompt.jsonl:2: field 'prompt': expected a list of {role, content} messages, got string"),
            std::string::npos);
  const fs::path parquet[] = {datasets / "train.parquet"};
  EXPECT_NE(error_of([&] { RLHFDataset::load(parquet, ascii(), ContentOnlyFormatter{}, options); }).find("Apache Arrow"),
            std::string::npos);
  const fs::path missing[] = {datasets / "missing.jsonl"};
  EXPECT_NE(error_of([&] { RLHFDataset::load(missing, ascii(), ContentOnlyFormatter{}, options); }).find("no such file"),
            std::string::npos);
  const auto where = SourceLocation{"f.jsonl", 7};
  EXPECT_EQ(error_of([&] { parse_rlhf_row(nlohmann::json{{"prompt", nlohmann::json::array()}}, where); }),
            "f.jsonl:7: missing field 'data_source'");
  EXPECT_EQ(error_of([&] {
              parse_rlhf_row(nlohmann::json::parse(R"({"data_source":"x","prompt":[{"role":"user","content":[1]}]})"),
                             where);
            }),
            "f.jsonl:7: prompt[0].content: expected a string, got array (multimodal content is not supported by "
            "verl-cpp yet)");
  EXPECT_EQ(error_of([&] { parse_rlhf_row(nlohmann::json::parse(R"({"data_source":"x"})"), where, "question"); }),
            "f.jsonl:7: missing field 'question' (data.prompt_key)");
}

TEST(RLHFDataset, HomeFolderInPaths) {
  const char* old_home = std::getenv("HOME");
  const std::string saved = old_home != nullptr ? old_home : "";
  ::setenv("HOME", datasets.string().c_str(), 1);
  const fs::path files[] = {"~/gsm8k_tiny.jsonl"};
  RLHFDatasetOptions options;
  options.max_prompt_length = 4096;
  const auto dataset = RLHFDataset::load(files, ascii(), ContentOnlyFormatter{}, options);
  ::setenv("HOME", saved.c_str(), 1);
  EXPECT_EQ(dataset.size(), 5);
}

TEST(RLHFDataset, JsonArrayFilesAndExtraColumns) {
  const fs::path files[] = {datasets / "array.json", datasets / "arithmetic_tiny.jsonl"};
  RLHFDatasetOptions options;
  options.max_prompt_length = 4096;
  options.add_special_tokens = true;
  const auto dataset = RLHFDataset::load(files, ascii(), ContentOnlyFormatter{}, options);
  ASSERT_EQ(dataset.size(), 12);
  EXPECT_EQ(dataset[2].row.ground_truth_text(), "4");  // numeric ground truths keep their JSON text
  EXPECT_EQ(dataset[2].row.other_columns["difficulty"], 0);
  EXPECT_EQ(dataset[2].prompt_ids.front(), tokenizer::CharTokenizer::bos_id);
  EXPECT_EQ(dataset[7].source.line, 7u);  // the blank line after the fifth row still counts
}

TEST(RLHFDataset, FilterAndTruncateOverlongPrompts) {
  const fs::path files[] = {datasets / "arithmetic_tiny.jsonl"};
  RLHFDatasetOptions options;
  options.max_prompt_length = 5;  // "1+3=" is 4 characters, "10+21=" is 6
  options.filter_overlong_prompts = true;
  const auto filtered = RLHFDataset::load(files, ascii(), ContentOnlyFormatter{}, options);
  EXPECT_EQ(filtered.size() + filtered.filtered_count(), 10);
  for (const auto& sample : filtered.samples()) EXPECT_LE(sample.prompt_ids.size(), 5u);

  options.filter_overlong_prompts = false;
  options.truncation = Truncation::error;
  EXPECT_NE(error_of([&] { RLHFDataset::load(files, ascii(), ContentOnlyFormatter{}, options); })
                .find("arithmetic_tiny.jsonl:11: prompt: 6 tokens is longer than max_prompt_length=5"),
            std::string::npos);

  const std::vector<int> ids = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(truncate(std::span<const int>(ids), 4, Truncation::left), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(truncate(std::span<const int>(ids), 4, Truncation::right), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(truncate(std::span<const int>(ids), 5, Truncation::middle), (std::vector<int>{1, 2, 5, 6, 7}));
  EXPECT_EQ(truncate(std::span<const int>(ids), 9, Truncation::error), ids);
  EXPECT_EQ(parse_truncation("middle"), Truncation::middle);
  EXPECT_EQ(error_of([] { parse_truncation("center"); }),
            "truncation: expected one of error, left, right, middle, got 'center'");
}

TEST(RLHFDataset, MaxSamplesChoosesBySeed) {
  const fs::path files[] = {datasets / "arithmetic_tiny.jsonl"};
  RLHFDatasetOptions options;
  options.max_prompt_length = 64;
  options.max_samples = 4;
  options.shuffle = false;
  const auto first = RLHFDataset::load(files, ascii(), ContentOnlyFormatter{}, options);
  ASSERT_EQ(first.size(), 4);
  EXPECT_EQ(first[3].row.index(), 3);
  options.shuffle = true;
  options.seed = 7;
  const auto a = RLHFDataset::load(files, ascii(), ContentOnlyFormatter{}, options);
  const auto b = RLHFDataset::load(files, ascii(), ContentOnlyFormatter{}, options);
  std::set<std::int64_t> chosen;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i].row, b[i].row);
    chosen.insert(a[i].row.index());
  }
  EXPECT_EQ(chosen.size(), 4u);
}

TEST(RLHFDataset, CollatesLeftPaddedPrompts) {
  const fs::path files[] = {datasets / "arithmetic_tiny.jsonl"};
  RLHFDatasetOptions options;
  options.max_prompt_length = 8;
  const auto dataset = RLHFDataset::load(files, ascii(), ContentOnlyFormatter{}, options);
  const std::int64_t picks[] = {0, 9};
  const DataProto batch = dataset.collate(picks, tokenizer::CharTokenizer::pad_id);
  ASSERT_EQ(batch.size(), 2);
  const auto& input_ids = batch.tensor<std::int64_t>("input_ids");
  const auto& mask = batch.tensor<std::int64_t>("attention_mask");
  const auto& positions = batch.tensor<std::int64_t>("position_ids");
  ASSERT_EQ(input_ids.cols(), 8);
  // "1+3=" is 4 tokens: 4 pads on the left.
  EXPECT_EQ(mask.row(0).sum(), 4);
  EXPECT_EQ(input_ids(0, 0), tokenizer::CharTokenizer::pad_id);
  EXPECT_EQ(input_ids(0, 4), ascii().encode("1", false)[0]);
  EXPECT_EQ(positions(0, 4), 0);
  EXPECT_EQ(positions(0, 7), 3);
  EXPECT_EQ(mask.row(1).sum(), 6);  // "10+21="
  EXPECT_EQ(batch.non_tensor<std::string>("data_source")[1], "arithmetic");
  EXPECT_EQ(batch.non_tensor<std::int64_t>("index")[1], 9);
  EXPECT_EQ(batch.non_tensor<nlohmann::json>("reward_model")[1]["ground_truth"], 31);
  EXPECT_EQ(batch.non_tensor<nlohmann::json>("raw_prompt")[0][0]["content"], "1+3=");
  EXPECT_EQ(batch.non_tensor<nlohmann::json>("difficulty")[1], 0);
}

TEST(DataLoader, EpochsShuffleAndDropLast) {
  DataLoader loader(10, {.batch_size = 4, .shuffle = true, .seed = 42, .drop_last = true});
  EXPECT_EQ(loader.num_batches(), 2);
  std::vector<std::int64_t> seen;
  while (auto batch = loader.next()) {
    EXPECT_EQ(batch->size(), 4u);
    seen.insert(seen.end(), batch->begin(), batch->end());
  }
  EXPECT_EQ(loader.epoch(), 1);
  const auto first_epoch = loader.order_of_epoch(0);
  EXPECT_EQ(seen, std::vector<std::int64_t>(first_epoch.begin(), first_epoch.begin() + 8));
  EXPECT_NE(loader.order_of_epoch(0), loader.order_of_epoch(1));  // a new permutation every epoch
  auto all = loader.order_of_epoch(1);
  std::sort(all.begin(), all.end());
  for (std::int64_t i = 0; i < 10; ++i) EXPECT_EQ(all[static_cast<std::size_t>(i)], i);

  DataLoader validation(10, {.batch_size = 4, .shuffle = false, .drop_last = false});
  EXPECT_EQ(validation.num_batches(), 3);
  (void)validation.next();
  (void)validation.next();
  EXPECT_EQ(*validation.next(), (std::vector<std::int64_t>{8, 9}));
  EXPECT_FALSE(validation.next().has_value());
}

TEST(DataLoader, ResumesTheSameSequence) {
  const DataLoaderOptions options{.batch_size = 3, .shuffle = true, .seed = 5, .drop_last = true};
  DataLoader straight(20, options);
  std::vector<std::vector<std::int64_t>> expected;
  for (int epoch = 0; epoch < 3; ++epoch)
    while (auto batch = straight.next()) expected.push_back(*batch);

  DataLoader first(20, options);
  std::vector<std::vector<std::int64_t>> got;
  for (int k = 0; k < 8; ++k) {
    auto batch = first.next();
    if (!batch) batch = first.next();
    got.push_back(*batch);
  }
  const nlohmann::json saved = to_json(first.state());
  DataLoader resumed(20, options);
  resumed.load_state(data_loader_state_from_json(saved));
  while (got.size() < expected.size()) {
    auto batch = resumed.next();
    if (!batch) batch = resumed.next();
    got.push_back(*batch);
  }
  EXPECT_EQ(got, expected);

  DataLoader other_seed(20, {.batch_size = 3, .shuffle = true, .seed = 6, .drop_last = true});
  EXPECT_THROW(other_seed.load_state(first.state()), InvalidArgument);
  DataLoader other_size(21, options);
  EXPECT_THROW(other_size.load_state(first.state()), InvalidArgument);
  EXPECT_THROW(DataLoader(5, {.batch_size = 0}), InvalidArgument);
}

TEST(RandomPermutation, IsPortableAndUnbiasedEnough) {
  auto engine = seeded_engine(123, 0);
  const auto p = random_permutation(8, engine);
  auto engine2 = seeded_engine(123, 0);
  EXPECT_EQ(p, random_permutation(8, engine2));
  // Every position takes every value about equally often.
  std::vector<int> counts(4 * 4, 0);
  auto e = seeded_engine(1, 2);
  for (int trial = 0; trial < 40000; ++trial) {
    const auto q = random_permutation(4, e);
    for (int i = 0; i < 4; ++i) ++counts[static_cast<std::size_t>(i * 4 + q[static_cast<std::size_t>(i)])];
  }
  for (const int c : counts) EXPECT_NEAR(c, 10000, 500);
}
