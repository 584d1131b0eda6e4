// The GGUF container and its dequantization: metadata of every type, tensor infos, values equal
// bit for bit to the `gguf` package's dequantize (fixtures by tools/scripts/make_gguf_fixtures.py),
// and bad input (truncations, corrupt bytes, lying offsets, unknown types, wrong metadata types)
// rejected with errors that name what is wrong.
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

#include "../support/error_message.hpp"
#include "verl/model/gguf.hpp"

using namespace verl;
using namespace verl::model;
using verl::test_support::message_of;
namespace fs = std::filesystem;

namespace {

const fs::path data_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "gguf";

std::vector<std::byte> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

/// Writes GGUF headers byte by byte, for inputs the gguf package would not write.
struct HeaderBuilder {
  std::vector<std::byte> bytes;

  template <class T>
  HeaderBuilder& put(T value) {
    const auto at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &value, sizeof(T));
    return *this;
  }
  HeaderBuilder& string(std::string_view text) {
    put<std::uint64_t>(text.size());
    for (const char c : text) bytes.push_back(static_cast<std::byte>(c));
    return *this;
  }
  HeaderBuilder& start(std::uint64_t tensors, std::uint64_t keys, std::uint32_t version = 3) {
    bytes.clear();
    for (const char c : std::string_view("GGUF")) bytes.push_back(static_cast<std::byte>(c));
    return put<std::uint32_t>(version).put<std::uint64_t>(tensors).put<std::uint64_t>(keys);
  }
  HeaderBuilder& tensor(std::string_view name, std::vector<std::uint64_t> dims, std::uint32_t type, std::uint64_t offset) {
    string(name).put<std::uint32_t>(static_cast<std::uint32_t>(dims.size()));
    for (const auto dim : dims) put<std::uint64_t>(dim);
    return put<std::uint32_t>(type).put<std::uint64_t>(offset);
  }
  HeaderBuilder& pad_and_data(std::size_t data_bytes, std::size_t alignment = 32) {
    bytes.resize((bytes.size() + alignment - 1) / alignment * alignment + data_bytes, std::byte{0x3c});
    return *this;
  }
  [[nodiscard]] std::string error() const {
    return message_of<InvalidArgument>([&] { (void)GgufFile::from_bytes(bytes, "crafted.gguf"); });
  }
};

}  // namespace

TEST(Gguf, ReadsMetadataOfEveryType) {
  const GgufFile file(data_dir / "metadata.gguf");
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 64u);
  EXPECT_EQ(file.data_offset() % 64, 0u);
  EXPECT_EQ(file.require_string("general.architecture"), "test");
  EXPECT_EQ(file.require_uint("test.u8"), 200u);
  EXPECT_EQ(file.find("test.u8")->type, GgufValueType::uint8);
  EXPECT_EQ(std::get<std::int64_t>(file.find("test.i8")->data), -100);
  EXPECT_EQ(file.require_uint("test.u16"), 60000u);
  EXPECT_EQ(std::get<std::int64_t>(file.find("test.i16")->data), -30000);
  EXPECT_EQ(file.require_uint("test.u32"), 4000000000u);
  EXPECT_EQ(std::get<std::int64_t>(file.find("test.i32")->data), -2000000000);
  EXPECT_EQ(static_cast<float>(file.require_float("test.f32")), 0.1f);
  EXPECT_EQ(file.optional_bool("test.bool"), true);
  EXPECT_EQ(file.require_string("test.string"), "h\xC3\xA9llo GGUF");
  EXPECT_EQ(file.require_uint("test.u64"), (std::uint64_t{1} << 63) + 5);
  EXPECT_EQ(std::get<std::int64_t>(file.find("test.i64")->data), -(std::int64_t{1} << 62));
  EXPECT_EQ(file.require_float("test.f64"), -1.5e300);
  EXPECT_EQ(file.require_int_array("test.array_i32"), (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(file.find("test.array_f32")->type_name(), "ARRAY of FLOAT32");
  EXPECT_EQ(file.require_string_array("test.array_string"), (std::vector<std::string_view>{"a", "", "bc"}));
  const auto& nested = std::get<std::vector<GgufValue>>(file.find("test.array_nested")->data);
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[1].element_type, GgufValueType::int32);
  EXPECT_EQ(std::get<std::vector<GgufValue>>(nested[1].data).size(), 1u);

  ASSERT_EQ(file.size(), 2u);
  const GgufTensorInfo& small = file.tensor("small.f32");
  EXPECT_EQ(small.dims, (std::vector<std::uint64_t>{3, 2}));
  EXPECT_EQ(small.torch_shape(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(file.dequantize("small.f32"), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(file.tensor("small.q8_0").type, GgmlType::Q8_0);
  EXPECT_EQ(file.tensor("small.q8_0").size_bytes, 2u * 34u);
  EXPECT_EQ(file.tensor("small.q8_0").offset % 64, 0u);
}

TEST(Gguf, MetadataOfTheWrongTypeNamesTheKey) {
  const GgufFile file(data_dir / "metadata.gguf");
  auto message = message_of<InvalidArgument>([&] { (void)file.require_uint("test.string"); });
  EXPECT_TRUE(contains(message, "key 'test.string': expected an unsigned integer, got STRING")) << message;
  message = message_of<InvalidArgument>([&] { (void)file.require_uint("test.i8"); });
  EXPECT_TRUE(contains(message, "key 'test.i8': expected a non-negative integer, got -100")) << message;
  message = message_of<InvalidArgument>([&] { (void)file.require_float("test.u32"); });
  EXPECT_TRUE(contains(message, "key 'test.u32': expected FLOAT32 or FLOAT64, got UINT32")) << message;
  message = message_of<InvalidArgument>([&] { (void)file.require_string_array("test.array_i32"); });
  EXPECT_TRUE(contains(message, "expected ARRAY of STRING, got ARRAY of INT32")) << message;
  message = message_of<InvalidArgument>([&] { (void)file.require_uint("llama.block_count"); });
  EXPECT_TRUE(contains(message, "missing metadata key 'llama.block_count'")) << message;
  message = message_of<InvalidArgument>([&] { (void)file.tensor("nope"); });
  EXPECT_TRUE(contains(message, "tensor 'nope': not found")) << message;
}

TEST(Gguf, DequantizesBitForBitLikeTheGgufPackage) {
  const GgufFile file(data_dir / "quants.gguf");
  const auto expected_bytes = read_bytes(data_dir / "quants_expected.bin");
  std::ifstream index_file(data_dir / "quants.json");
  const auto index = nlohmann::json::parse(index_file);
  ASSERT_EQ(index.size(), file.size());
  std::set<std::string> types;
  for (const auto& entry : index) {
    const auto name = entry["name"].get<std::string>();
    const GgufTensorInfo& info = file.tensor(name);
    EXPECT_EQ(ggml_type_name(info.type), entry["type"].get<std::string>()) << name;
    EXPECT_EQ(info.torch_shape(), entry["shape"].get<std::vector<std::int64_t>>()) << name;
    const std::vector<float> values = file.dequantize(name);
    const auto offset = entry["offset"].get<std::size_t>();
    ASSERT_LE((offset + values.size()) * 4, expected_bytes.size()) << name;
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::uint32_t expected = 0;
      std::memcpy(&expected, expected_bytes.data() + (offset + i) * 4, 4);
      if (std::bit_cast<std::uint32_t>(values[i]) != expected) {
        if (mismatches++ < 3) {
          ADD_FAILURE() << name << "[" << i << "]: got " << values[i] << ", expected " << std::bit_cast<float>(expected);
        }
      }
    }
    EXPECT_EQ(mismatches, 0u) << name;
    types.insert(entry["type"].get<std::string>());
  }
  // Every type the loader reads is covered.
  for (const auto type : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}) {
    EXPECT_TRUE(types.contains(type)) << type;
  }
}

TEST(Gguf, UnsupportedButKnownTypesAreNamedWhenDequantized) {
  HeaderBuilder header;
  header.start(1, 0).tensor("blk.0.ffn_up.weight", {256, 1}, 10 /* Q2_K */, 0).pad_and_data(84);
  const auto file = GgufFile::from_bytes(header.bytes, "q2k.gguf");
  const auto message = message_of<NotImplemented>([&] { (void)file.dequantize("blk.0.ffn_up.weight"); });
  EXPECT_TRUE(contains(message, "tensor 'blk.0.ffn_up.weight': type Q2_K cannot be converted")) << message;
}

TEST(Gguf, CraftedHeadersAreRejectedByName) {
  HeaderBuilder header;
  auto expect_error = [&](std::string_view part) {
    const auto message = header.error();
    EXPECT_TRUE(contains(message, part)) << message;
    EXPECT_TRUE(contains(message, "crafted.gguf")) << message;
  };
  header.start(0, 0);
  header.bytes[0] = std::byte{'X'};
  expect_error("expected the magic 'GGUF'");
  header.start(0, 0, 1);
  expect_error("version: expected 2 or 3, got 1");
  header.start(0, 0, 0x03000000);
  expect_error("big-endian");
  header.start(0, 0, 2);
  EXPECT_NO_THROW((void)GgufFile::from_bytes(header.bytes));  // version 2: same layout
  header.start(0, ~std::uint64_t{0});
  expect_error("metadata count");
  header.start(~std::uint64_t{0} / 2, 0);
  expect_error("tensor count");
  header.start(0, 1).string("general.alignment").put<std::uint32_t>(8).string("32");
  expect_error("key 'general.alignment': expected UINT32, got STRING");
  header.start(0, 1).string("general.alignment").put<std::uint32_t>(4).put<std::uint32_t>(48);
  expect_error("key 'general.alignment': expected a power of two, got 48");
  header.start(0, 1).string("k").put<std::uint32_t>(13).put<std::uint8_t>(0);
  expect_error("key 'k': unknown value type id 13");
  header.start(0, 1).string("k").put<std::uint32_t>(9).put<std::uint32_t>(4).put<std::uint64_t>(1'000'000'000);
  expect_error("key 'k': an array of 1000000000 UINT32 values cannot fit");
  header.start(0, 1).string("k").put<std::uint32_t>(7).put<std::uint8_t>(2);
  expect_error("key 'k': expected a BOOL of 0 or 1, got 2");
  header.start(0, 1).string("k").put<std::uint32_t>(8).put<std::uint64_t>(~std::uint64_t{0});
  expect_error("k: a string of 18446744073709551615 bytes");
  header.start(0, 2).string("k").put<std::uint32_t>(0).put<std::uint8_t>(1).string("k").put<std::uint32_t>(0).put<std::uint8_t>(1);
  expect_error("key 'k': appears twice");
  // Arrays nested past the depth limit.
  header.start(0, 1).string("deep").put<std::uint32_t>(9);
  for (int level = 0; level < 20; ++level) header.put<std::uint32_t>(9).put<std::uint64_t>(1);
  expect_error("key 'deep': arrays nested deeper than 8");

  header.start(1, 0).tensor("t", {4}, 99, 0).pad_and_data(16);
  expect_error("tensor 't': unknown ggml type id 99");
  header.start(1, 0).tensor("t", {4}, 4, 0).pad_and_data(16);
  expect_error("tensor 't': unknown ggml type id 4");  // retired by ggml
  header.start(1, 0).tensor("t", {16}, 8 /* Q8_0 */, 0).pad_and_data(34);
  expect_error("tensor 't': first dimension 16 is not a multiple of Q8_0's block of 32 values");
  header.start(1, 0).tensor("t", {1, 2, 3, 4, 5}, 0, 0).pad_and_data(480);
  expect_error("tensor 't': expected 1 to 4 dimensions, got 5");
  header.start(1, 0).tensor("t", {std::uint64_t{1} << 40, std::uint64_t{1} << 30}, 0, 0).pad_and_data(16);
  expect_error("tensor 't': dimension 1 = 1073741824 is zero or makes the element count overflow");
  header.start(1, 0).tensor("t", {0}, 0, 0).pad_and_data(16);
  expect_error("dimension 0 = 0");
  header.start(1, 0).tensor("t", {4}, 0, 8).pad_and_data(64);
  expect_error("tensor 't': offset 8 is not a multiple of the alignment 32");
  header.start(1, 0).tensor("t", {8}, 0, 32).pad_and_data(40);
  expect_error("tensor 't': [8] 32 bytes at data offset 32 end past the data section's 40 bytes");
  header.start(1, 0).tensor("t", {8}, 0, 0).pad_and_data(16);
  expect_error("end past the data section");
  header.start(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad_and_data(64);
  expect_error("tensor 'b': bytes [32, 64) overlap tensor 'a' at [0, 64)");
  header.start(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).pad_and_data(64);
  expect_error("tensor 'a': appears twice");
  header.start(1, 0).tensor("t", {8}, 0, 0);  // no padding, no data
  expect_error("truncated");
}

TEST(Gguf, EveryTruncationIsRejected) {
  const auto bytes = read_bytes(data_dir / "metadata.gguf");
  const GgufFile good = GgufFile::from_bytes(bytes);
  std::size_t data_end = 0;  // the writer pads the file past its last tensor; that padding is optional
  for (const auto& info : good.tensors()) {
    data_end = std::max<std::size_t>(data_end, good.data_offset() + info.offset + info.size_bytes);
  }
  ASSERT_LE(data_end, bytes.size());
  for (std::size_t length = 0; length < data_end; ++length) {
    std::vector<std::byte> truncated(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(length));
    EXPECT_THROW((void)GgufFile::from_bytes(std::move(truncated)), InvalidArgument) << "length " << length;
  }
  for (std::size_t length = data_end; length <= bytes.size(); ++length) {
    std::vector<std::byte> padded_less(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(length));
    EXPECT_NO_THROW((void)GgufFile::from_bytes(std::move(padded_less))) << "length " << length;
  }
}

TEST(Gguf, CorruptedBytesNeverCrash) {
  const auto bytes = read_bytes(data_dir / "metadata.gguf");
  const GgufFile good = GgufFile::from_bytes(bytes);
  const auto header_end = static_cast<std::size_t>(good.data_offset());
  std::mt19937 rng(11);
  const unsigned char replacements[] = {0x00, 0x01, 0x02, 0x07, 0x08, 0x09, 0x0c, 0x0d, 0x1f, 0x20, 0x7f, 0x80, 0xfe, 0xff};
  std::size_t accepted = 0, rejected = 0;
  auto try_open = [&](std::vector<std::byte> image) {
    try {
      const auto file = GgufFile::from_bytes(std::move(image));
      // Whatever survives validation must be fully readable.
      for (const auto& info : file.tensors()) {
        try {
          (void)file.dequantize(info.name);
        } catch (const NotImplemented&) {  // a type id changed into another known type
        }
      }
      for (const auto& [key, value] : file.metadata()) (void)value.type_name();
      ++accepted;
    } catch (const InvalidArgument&) {
      ++rejected;
    }
  };
  for (std::size_t at = 0; at < header_end; ++at) {
    for (const unsigned char value : replacements) {
      auto image = bytes;
      image[at] = static_cast<std::byte>(value);
      try_open(std::move(image));
    }
  }
  for (int trial = 0; trial < 3000; ++trial) {
    auto image = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) image[rng() % image.size()] = static_cast<std::byte>(rng() % 256);
    try_open(std::move(image));
  }
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(accepted, 0u);  // e.g. a changed character in a string, or data bytes
}

TEST(Gguf, DequantizeToF32ChecksSizes) {
  std::vector<std::byte> block(34);
  std::vector<float> out(16);
  auto message = message_of<InvalidArgument>([&] { dequantize_to_f32(GgmlType::Q8_0, block, out); });
  EXPECT_TRUE(contains(message, "expected a multiple of Q8_0's block of 32 values, got 16")) << message;
  out.resize(64);
  message = message_of<InvalidArgument>([&] { dequantize_to_f32(GgmlType::Q8_0, block, out); });
  EXPECT_TRUE(contains(message, "64 values of Q8_0 take 68 bytes, got 34")) << message;
  EXPECT_FALSE(ggml_type_traits_of(5).has_value());
  EXPECT_EQ(ggml_type_traits_of(14)->name, "Q6_K");
}
