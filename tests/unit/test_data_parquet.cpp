// Parquet datasets (verl's own format) through Apache Arrow, when this build has it: the rows and
// RLHFDataset samples of tests/data/datasets/parquet_rows.parquet equal those of the same rows as
// JSON Lines (tools/scripts/make_parquet_golden.py writes both), and bad files give errors naming
// the file, column and type. Without Arrow the Parquet cases skip, and the error that tells the
// user how to get Arrow is checked instead.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/data/parquet.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/tokenizer/char_tokenizer.hpp"

using namespace verl;
using namespace verl::data;
namespace fs = std::filesystem;

namespace {

const fs::path datasets = fs::path(VERL_GOLDEN_DIR) / ".." / "datasets";
constexpr const char* no_arrow = "Apache Arrow not found at configure time (install pyarrow or libarrow-dev, re-run cmake)";

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

std::vector<nlohmann::json> read_rows(const fs::path& path) {
  std::vector<nlohmann::json> rows;
  for_each_dataset_row(path, [&](nlohmann::json&& row, const SourceLocation&) { rows.push_back(std::move(row)); });
  return rows;
}

fs::path write_file(const std::string& name, const std::string& bytes) {
  const fs::path path = fs::temp_directory_path() / ("verl_test_data_parquet_" + name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST(Parquet, RowsEqualTheSameRowsAsJsonLines) {
  if (!parquet_supported) GTEST_SKIP() << no_arrow;
  const auto parquet = read_rows(datasets / "parquet_rows.parquet");
  const auto jsonl = read_rows(datasets / "parquet_rows.jsonl");
  ASSERT_EQ(parquet.size(), 5u);  // three row groups of at most two rows
  ASSERT_EQ(parquet.size(), jsonl.size());
  for (std::size_t i = 0; i < parquet.size(); ++i) EXPECT_EQ(parquet[i], jsonl[i]) << "row " << i;
  // Types as Arrow gives them: int64 beyond int32, a null in a float column, a map as an object,
  // a dictionary-encoded string as its value, a nested list of structs.
  EXPECT_EQ(parquet[4]["num_steps"].get<std::int64_t>(), 1000000000004);
  EXPECT_TRUE(parquet[2]["difficulty"].is_null());
  EXPECT_DOUBLE_EQ(parquet[3]["difficulty"].get<double>(), 1.0);
  EXPECT_EQ(parquet[0]["tags"], (nlohmann::json{{"arith", 0}, {"words", 20}}));
  EXPECT_EQ(parquet[3]["data_source"], "openai/gsm8k");
  ASSERT_EQ(parquet[1]["prompt"].size(), 2u);
  EXPECT_EQ(parquet[1]["prompt"][0]["role"], "system");
  EXPECT_EQ(parquet[1]["extra_info"]["index"], 1);
}

TEST(Parquet, DatasetSamplesEqualThoseFromJsonLines) {
  if (!parquet_supported) GTEST_SKIP() << no_arrow;
  RLHFDatasetOptions options;
  options.max_prompt_length = 512;
  options.max_samples = 4;  // a seeded random choice: the same rows from either file
  const fs::path parquet_files[] = {datasets / "parquet_rows.parquet"};
  const fs::path jsonl_files[] = {datasets / "parquet_rows.jsonl"};
  const auto from_parquet = RLHFDataset::load(parquet_files, ascii(), tokenizer::ChatMLTemplate{}, options);
  const auto from_jsonl = RLHFDataset::load(jsonl_files, ascii(), tokenizer::ChatMLTemplate{}, options);
  ASSERT_EQ(from_parquet.size(), 4);
  ASSERT_EQ(from_parquet.size(), from_jsonl.size());
  for (std::int64_t i = 0; i < from_parquet.size(); ++i) {
    EXPECT_EQ(from_parquet[i].row, from_jsonl[i].row) << "sample " << i;
    EXPECT_EQ(from_parquet[i].prompt_ids, from_jsonl[i].prompt_ids) << "sample " << i;
  }
  EXPECT_EQ(from_parquet[0].row.ground_truth_text(), from_parquet[0].row.extra_info["answer"].get<std::string>());
  // Rows are named by their 0-based position, as pandas numbers them.
  const std::string source = from_parquet[0].source.to_string();
  EXPECT_EQ(source.rfind((datasets / "parquet_rows.parquet").string() + "[", 0), 0u) << source;

  const std::vector<std::int64_t> indices = {0, 1, 2, 3};
  const DataProto a = from_parquet.collate(indices, /*pad_token_id=*/0);
  const DataProto b = from_jsonl.collate(indices, /*pad_token_id=*/0);
  EXPECT_EQ(a.tensor<std::int64_t>("input_ids"), b.tensor<std::int64_t>("input_ids"));
  EXPECT_EQ(a.non_tensor<nlohmann::json>("reward_model"), b.non_tensor<nlohmann::json>("reward_model"));
  EXPECT_EQ(a.non_tensor<nlohmann::json>("num_steps"), b.non_tensor<nlohmann::json>("num_steps"));
}

TEST(Parquet, CorruptMissingAndUnsupportedFilesAreClearErrors) {
  if (!parquet_supported) GTEST_SKIP() << no_arrow;
  const fs::path garbage = write_file("garbage.parquet", "PAR1 this is not a Parquet file");
  std::string error = error_of([&] { read_rows(garbage); });
  EXPECT_NE(error.find("data file '" + garbage.string() + "': not a readable Parquet file"), std::string::npos) << error;

  // The real file cut in half: its footer (the schema and row-group index) is gone.
  std::ifstream in(datasets / "parquet_rows.parquet", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const fs::path truncated = write_file("truncated.parquet", bytes.substr(0, bytes.size() / 2));
  error = error_of([&] { read_rows(truncated); });
  EXPECT_NE(error.find("data file '" + truncated.string() + "': not a readable Parquet file"), std::string::npos) << error;
  fs::remove(garbage);
  fs::remove(truncated);

  error = error_of([&] { read_rows(datasets / "missing.parquet"); });
  EXPECT_NE(error.find("missing.parquet': no such file"), std::string::npos) << error;

  // Rejected by name before any row is used.
  int rows_seen = 0;
  error = error_of([&] {
    for_each_dataset_row(datasets / "parquet_unsupported.parquet",
                         [&](nlohmann::json&&, const SourceLocation&) { ++rows_seen; });
  });
  EXPECT_NE(error.find("parquet_unsupported.parquet': column 'extra_info.created' has Arrow type timestamp[us]"),
            std::string::npos)
      << error;
  EXPECT_EQ(rows_seen, 0);
}

TEST(Parquet, WithoutArrowTheErrorSaysHowToGetIt) {
  if (parquet_supported) GTEST_SKIP() << "this build reads Parquet";
  const std::string error = error_of([&] { read_rows(datasets / "parquet_rows.parquet"); });
  EXPECT_NE(error.find("reading Parquet needs Apache Arrow (not found at configure time)"), std::string::npos) << error;
  EXPECT_NE(error.find("pyarrow"), std::string::npos) << error;
}

TEST(Parquet, JsonFilesStillGoToTheJsonLinesReader) {
  const auto rows = read_rows(datasets / "parquet_rows.jsonl");
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[2]["reward_model"]["ground_truth"], "5");
  const std::string error = error_of([&] { read_rows(datasets / "bad_json.jsonl"); });
  EXPECT_NE(error.find("bad_json.jsonl:3: invalid JSON"), std::string::npos) << error;
}
