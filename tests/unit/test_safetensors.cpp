#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "verl/model/safetensors.hpp"

using namespace verl;
using namespace verl::model;
namespace fs = std::filesystem;

namespace {

const fs::path data_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "safetensors";

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::vector<std::byte> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

/// A file image from a header text and `data_size` data bytes.
std::vector<std::byte> make_file(const std::string& header, std::size_t data_size) {
  std::vector<std::byte> out(8 + header.size() + data_size, std::byte{0});
  const std::uint64_t length = header.size();
  std::memcpy(out.data(), &length, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

/// Runs `open` and returns the error message; fails the test when nothing is thrown.
template <class F>
std::string error_of(F&& open) {
  try {
    open();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected verl::InvalidArgument";
  return {};
}

std::string open_error(const std::string& header, std::size_t data_size) {
  return error_of([&] { (void)SafetensorsFile::from_bytes(make_file(header, data_size), "crafted.safetensors"); });
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("verl_safetensors_" + std::to_string(std::random_device{}()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

TEST(Safetensors, ReadsEveryDtypeWrittenByThePythonPackage) {
  const SafetensorsFile file(data_dir / "all_dtypes.safetensors");
  const auto expected = read_json(data_dir / "all_dtypes.expected.json");
  EXPECT_EQ(file.size(), expected["tensors"].size());
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (const auto& [name, want] : expected["tensors"].items()) {
    SCOPED_TRACE(name);
    const TensorView tensor = file.tensor(name);
    EXPECT_EQ(dtype_name(tensor.dtype), want["dtype"].get<std::string>());
    EXPECT_EQ(std::vector<std::int64_t>(tensor.shape.begin(), tensor.shape.end()),
              want["shape"].get<std::vector<std::int64_t>>());
    if (want.contains("f32_bits")) {
      const auto values = tensor.to_f32();
      const auto bits = want["f32_bits"].get<std::vector<std::uint32_t>>();
      ASSERT_EQ(values.size(), bits.size());
      for (std::size_t i = 0; i < bits.size(); ++i) {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(values[i]), bits[i]) << "element " << i;
      }
    } else {
      EXPECT_EQ(tensor.to_i64(), want["ints"].get<std::vector<std::int64_t>>());
      // Integers also widen to float.
      const auto values = tensor.to_f32();
      const auto ints = want["ints"].get<std::vector<std::int64_t>>();
      for (std::size_t i = 0; i < ints.size(); ++i) EXPECT_EQ(values[i], static_cast<float>(ints[i]));
    }
  }
}

TEST(Safetensors, MatrixAndVectorViewsCheckRankAndShape) {
  const SafetensorsFile file(data_dir / "all_dtypes.safetensors");
  const MatrixF matrix = file.matrix_f32("f32.matrix");
  EXPECT_EQ(matrix.rows(), 3);
  EXPECT_EQ(matrix.cols(), 4);
  const auto flat = file.tensor("f32.matrix").to_f32();
  EXPECT_EQ(matrix(1, 2), flat[1 * 4 + 2]);  // row-major like torch
  EXPECT_EQ(file.vector_f32("f64.vector").size(), 5);
  EXPECT_EQ(file.matrix_f32("empty").rows(), 0);

  const auto rank_error = error_of([&] { (void)file.matrix_f32("rank3"); });
  EXPECT_TRUE(contains(rank_error, "rank3")) << rank_error;
  EXPECT_TRUE(contains(rank_error, "[2, 3, 4]")) << rank_error;
  const auto shape_error = error_of([&] { (void)file.matrix_f32("f32.matrix", 4, 3); });
  EXPECT_TRUE(contains(shape_error, "expected shape [4, 3], got [3, 4]")) << shape_error;
  EXPECT_TRUE(contains(shape_error, "all_dtypes.safetensors")) << shape_error;
  const auto dtype_error = error_of([&] { file.tensor("f16.matrix").require_dtype(DType::F32); });
  EXPECT_TRUE(contains(dtype_error, "expected dtype F32, got F16")) << dtype_error;
  EXPECT_THROW((void)file.tensor("f32.matrix").to_i64(), InvalidArgument);
}

TEST(Safetensors, MissingTensorNamesFileAndTensor) {
  const SafetensorsFile file(data_dir / "all_dtypes.safetensors");
  const auto message = error_of([&] { (void)file.tensor("model.layers.0.self_attn.q_proj.weight"); });
  EXPECT_TRUE(contains(message, "model.layers.0.self_attn.q_proj.weight")) << message;
  EXPECT_TRUE(contains(message, "all_dtypes.safetensors")) << message;
  EXPECT_FALSE(file.contains("nope"));
  EXPECT_TRUE(file.contains("scalar"));
}

TEST(Safetensors, MissingFileIsAnInvalidArgument) {
  const auto message = error_of([] { (void)SafetensorsFile("/nonexistent/dir/model.safetensors"); });
  EXPECT_TRUE(contains(message, "/nonexistent/dir/model.safetensors")) << message;
  const auto folder_message = error_of([] { (void)SafetensorsCheckpoint(fs::temp_directory_path()); });
  EXPECT_TRUE(contains(folder_message, "model.safetensors")) << folder_message;
}

TEST(Safetensors, CraftedHeadersAreRejectedWithClearMessages) {
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW((void)SafetensorsFile::from_bytes(make_file(good, 8)));

  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2),
                       "unknown dtype 'F8_E4M3'"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                       "shape [3] of F32 needs 12 bytes"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                     "b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                  8),
                       "overlap"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "hole"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12),
                       "data section has 12"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
                       "run past the data section"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8), "end before"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4), "data_offsets"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "'dtype'"));
  EXPECT_TRUE(contains(open_error(R"({"__metadata__":{"k":1}})", 0), "__metadata__['k']"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                     "a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                  8),
                       "appears twice"));
  EXPECT_TRUE(contains(open_error("[1, 2]", 0), "expected a JSON object"));
  EXPECT_TRUE(contains(open_error("{\"a\": ", 0), "not valid JSON"));
  EXPECT_TRUE(contains(open_error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],
                                     "data_offsets":[0,4]}})",
                                  4),
                       "too many"));

  // Header length past the end of the file.
  auto bytes = make_file(good, 8);
  const std::uint64_t huge = 1'000'000;
  std::memcpy(bytes.data(), &huge, 8);
  const auto message = error_of([&] { (void)SafetensorsFile::from_bytes(bytes, "long.safetensors"); });
  EXPECT_TRUE(contains(message, "header length 1000000 runs past the end")) << message;
  EXPECT_TRUE(contains(message, "long.safetensors")) << message;
  EXPECT_TRUE(contains(error_of([] { (void)SafetensorsFile::from_bytes(std::vector<std::byte>(5)); }), "truncated"));
}

TEST(Safetensors, EveryTruncationIsRejected) {
  const auto bytes = read_bytes(data_dir / "all_dtypes.safetensors");
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    std::vector<std::byte> truncated(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(length));
    EXPECT_THROW((void)SafetensorsFile::from_bytes(std::move(truncated)), InvalidArgument) << "length " << length;
  }
  EXPECT_NO_THROW((void)SafetensorsFile::from_bytes(bytes));
}

TEST(Safetensors, CorruptedBytesNeverCrash) {
  const auto bytes = read_bytes(data_dir / "all_dtypes.safetensors");
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  std::mt19937 rng(7);
  const unsigned char replacements[] = {0x00, '"', '{', '}', '[', ']', ',', ':', '9', '-', 'e', 0xff, 0x80, ' '};
  std::size_t accepted = 0, rejected = 0;
  auto try_open = [&](std::vector<std::byte> image) {
    try {
      const auto file = SafetensorsFile::from_bytes(std::move(image));
      // Whatever survives validation must be fully readable.
      for (const auto& name : file.names()) (void)file.tensor(name).to_f32();
      ++accepted;
    } catch (const InvalidArgument&) {
      ++rejected;
    }
  };
  for (std::size_t at = 0; at < 8 + header_length; ++at) {
    for (const unsigned char value : replacements) {
      auto image = bytes;
      image[at] = static_cast<std::byte>(value);
      try_open(std::move(image));
    }
  }
  // Random multi-byte corruption anywhere in the file.
  for (int trial = 0; trial < 2000; ++trial) {
    auto image = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) image[rng() % image.size()] = static_cast<std::byte>(rng() % 256);
    try_open(std::move(image));
  }
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(accepted, 0u);  // e.g. a digit changed inside metadata, or data bytes
}

TEST(Safetensors, HalfFloatConversionsRoundToNearestEven) {
  using namespace verl;
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(float_to_f16_bits(0x1p-24f), 0x0001);   // smallest subnormal
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float widened = f16_bits_to_float(static_cast<std::uint16_t>(bits));
    if (std::isnan(widened)) continue;
    EXPECT_EQ(float_to_f16_bits(widened), bits) << bits;  // exact widening round-trips
    EXPECT_EQ(float_to_bf16_bits(bf16_bits_to_float(static_cast<std::uint16_t>(bits))), bits) << bits;
  }
}

TEST(Safetensors, WriterRoundTripsEveryFloatDtypeAndIntegers) {
  TempDir temp;
  MatrixF values(2, 3);
  values << 1.0f, -2.5f, 0.1f, 3.0e-6f, 65504.0f, -0.0f;
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  writer.add_matrix("w.f32", values);
  writer.add_matrix("w.f64", values, DType::F64);
  writer.add_matrix("w.f16", values, DType::F16);
  writer.add_matrix("w.bf16", values, DType::BF16);
  writer.add_vector("b", VectorF::LinSpaced(4, 0.0f, 3.0f));
  const std::vector<std::int64_t> ids = {1, -2, 1LL << 40};
  writer.add_i64("ids", {3}, ids);
  const auto path = temp.path() / "out.safetensors";
  writer.write(path);

  const SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.matrix_f32("w.f32"), values);
  EXPECT_EQ(file.matrix_f32("w.f64"), values);
  for (Index i = 0; i < values.size(); ++i) {
    EXPECT_EQ(file.matrix_f32("w.f16").data()[i],
              verl::f16_bits_to_float(verl::float_to_f16_bits(values.data()[i])));
    EXPECT_EQ(file.matrix_f32("w.bf16").data()[i],
              verl::bf16_bits_to_float(verl::float_to_bf16_bits(values.data()[i])));
  }
  EXPECT_EQ(file.vector_f32("b"), VectorF::LinSpaced(4, 0.0f, 3.0f));
  EXPECT_EQ(file.tensor("ids").to_i64(), ids);
  // The image in memory is what was written, and data is 8-byte aligned.
  EXPECT_EQ(writer.serialize(), read_bytes(path));
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, writer.serialize().data(), 8);
  EXPECT_EQ(header_length % 8, 0u);
  // No temporary file is left beside the target.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(temp.path())) ++files;
  EXPECT_EQ(files, 1u);
}

TEST(Safetensors, WriterRejectsBadTensors) {
  SafetensorsWriter writer;
  writer.add_f32("x", {2}, std::vector<float>{1, 2});
  EXPECT_THROW(writer.add_f32("x", {2}, std::vector<float>{1, 2}), InvalidArgument);
  EXPECT_THROW(writer.add_f32("y", {3}, std::vector<float>{1, 2}), InvalidArgument);
  EXPECT_THROW(writer.add_f32("__metadata__", {1}, std::vector<float>{1}), InvalidArgument);
  EXPECT_THROW(writer.add_f32("z", {1}, std::vector<float>{1}, DType::I32), InvalidArgument);
  const std::vector<std::byte> three(3);
  EXPECT_THROW(writer.add("w", DType::F32, {1}, three), InvalidArgument);
}

TEST(Safetensors, OverwritingIsAtomicAndReadersKeepTheirMapping) {
  TempDir temp;
  const auto path = temp.path() / "model.safetensors";
  SafetensorsWriter first;
  first.add_f32("x", {2}, std::vector<float>{1, 2});
  first.write(path);
  const SafetensorsFile reader(path);
  SafetensorsWriter second;
  second.add_f32("x", {3}, std::vector<float>{4, 5, 6});
  second.write(path);
  // The old mapping still shows the old file; a fresh open sees the new one.
  EXPECT_EQ(reader.tensor("x").to_f32(), (std::vector<float>{1, 2}));
  EXPECT_EQ(SafetensorsFile(path).tensor("x").to_f32(), (std::vector<float>{4, 5, 6}));
}

TEST(Safetensors, ReadsAShardedCheckpointWrittenInPython) {
  const SafetensorsCheckpoint checkpoint(data_dir / "sharded");
  const auto expected = read_json(data_dir / "sharded.expected.json");
  EXPECT_EQ(checkpoint.shard_count(), 2u);
  EXPECT_EQ(checkpoint.size(), expected.size());
  for (const auto& [name, want] : expected.items()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(checkpoint.file_of(name).filename().string(), want["file"].get<std::string>());
    const auto values = checkpoint.tensor(name).to_f32();
    const auto bits = want["f32_bits"].get<std::vector<std::uint32_t>>();
    ASSERT_EQ(values.size(), bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) EXPECT_EQ(std::bit_cast<std::uint32_t>(values[i]), bits[i]);
  }
  EXPECT_EQ(checkpoint.matrix_f32("lm_head.weight", 6, 4).rows(), 6);
  const auto message = error_of([&] { (void)checkpoint.tensor("model.layers.1.mlp.up_proj.weight"); });
  EXPECT_TRUE(contains(message, "model.layers.1.mlp.up_proj.weight")) << message;
  EXPECT_TRUE(contains(message, "model.safetensors.index.json")) << message;
}

TEST(Safetensors, WritesAndReadsShardedCheckpoints) {
  TempDir temp;
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  for (int layer = 0; layer < 5; ++layer) {
    writer.add_matrix("model.layers." + std::to_string(layer) + ".weight", MatrixF::Constant(4, 4, float(layer)));
  }
  const auto written = writer.write_sharded(temp.path() / "sharded", 2 * 64);  // two 64-byte tensors per shard
  ASSERT_EQ(written.size(), 4u);  // three shards and the index
  EXPECT_EQ(written[0].filename(), "model-00001-of-00003.safetensors");
  EXPECT_EQ(written.back().filename(), "model.safetensors.index.json");
  const auto index = read_json(written.back());
  EXPECT_EQ(index["metadata"]["total_size"].get<std::uint64_t>(), 5u * 64u);
  const SafetensorsCheckpoint checkpoint(temp.path() / "sharded");
  EXPECT_EQ(checkpoint.shard_count(), 3u);
  for (int layer = 0; layer < 5; ++layer) {
    EXPECT_EQ(checkpoint.matrix_f32("model.layers." + std::to_string(layer) + ".weight"),
              MatrixF::Constant(4, 4, float(layer)));
  }
  // Everything fits: a single model.safetensors, no index.
  const auto single = writer.write_sharded(temp.path() / "single", 1 << 20);
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(single[0].filename(), "model.safetensors");
  EXPECT_EQ(SafetensorsCheckpoint(temp.path() / "single").size(), 5u);
  // Re-saved unsharded over the sharded folder: the single file wins (as in transformers), not
  // the stale index and its shards.
  SafetensorsWriter newer;
  newer.add_matrix("model.layers.0.weight", MatrixF::Constant(4, 4, 7.0f));
  (void)newer.write_sharded(temp.path() / "sharded", 1 << 20);
  const SafetensorsCheckpoint resaved(temp.path() / "sharded");
  EXPECT_EQ(resaved.shard_count(), 1u);
  EXPECT_EQ(resaved.size(), 1u);
  EXPECT_EQ(resaved.matrix_f32("model.layers.0.weight"), MatrixF::Constant(4, 4, 7.0f));
}

TEST(Safetensors, BadIndexFilesAreRejected) {
  TempDir temp;
  SafetensorsWriter writer;
  writer.add_f32("a", {1}, std::vector<float>{1});
  writer.write(temp.path() / "shard.safetensors");
  auto write_index = [&](const nlohmann::json& index) {
    std::ofstream(temp.path() / "model.safetensors.index.json") << index.dump();
  };
  write_index({{"weight_map", {{"a", "shard.safetensors"}, {"b", "shard.safetensors"}}}});
  auto message = error_of([&] { (void)SafetensorsCheckpoint(temp.path()); });
  EXPECT_TRUE(contains(message, "tensor 'b'")) << message;
  write_index({{"weight_map", {{"a", "../shard.safetensors"}}}});
  message = error_of([&] { (void)SafetensorsCheckpoint(temp.path()); });
  EXPECT_TRUE(contains(message, "same folder")) << message;
  write_index({{"weight_map", {{"a", "missing.safetensors"}}}});
  message = error_of([&] { (void)SafetensorsCheckpoint(temp.path()); });
  EXPECT_TRUE(contains(message, "missing.safetensors")) << message;
  write_index({{"metadata", {}}});
  message = error_of([&] { (void)SafetensorsCheckpoint(temp.path()); });
  EXPECT_TRUE(contains(message, "weight_map")) << message;
}
