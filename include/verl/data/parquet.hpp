// Parquet files (verl's own dataset format, e.g. its gsm8k preprocessing's train.parquet) read
// into rows as JSON values, and the one entry point the dataset readers use for any data file:
// `.parquet` goes to Apache Arrow's Parquet reader, `.jsonl` / `.json` to the JSON Lines reader.
//
// Arrow is optional: targets that link verl::parquet (found at configure time: a system Arrow or
// the C++ libraries inside the pyarrow wheel) get VERL_HAS_PARQUET and the reader; without it this
// header still compiles and a .parquet file is an error saying how to get Arrow.
//
// Conversion is generic and recursive: null, bool, integers, floats, strings, lists, structs
// (objects), maps (objects when the keys are strings, else [key, value] pairs) and dictionary-
// encoded columns (their values). Any other type is rejected before the first row is read, naming
// the column and the type, so a bad column never yields half a dataset. Rows are read one row
// group at a time, so a large file is never held whole.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "verl/core/error.hpp"
#include "verl/core/paths.hpp"
#include "verl/data/jsonl.hpp"

#if defined(VERL_HAS_PARQUET)
#include <arrow/array.h>
#include <arrow/io/file.h>
#include <arrow/record_batch.h>
#include <arrow/table.h>
#include <arrow/type.h>
#include <arrow/util/config.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>

#include <memory>
#include <string_view>
#endif

namespace verl::data {

/// Whether this build reads Parquet files (Apache Arrow found at configure time and linked).
inline constexpr bool parquet_supported =
#if defined(VERL_HAS_PARQUET)
    true;
#else
    false;
#endif

#if defined(VERL_HAS_PARQUET)

namespace detail {

// Checks that every (nested) type converts, so the error names the column before any row is used.
inline void check_parquet_type(const arrow::DataType& type, const std::string& column, const std::string& file) {
  switch (type.id()) {
    case arrow::Type::NA:
    case arrow::Type::BOOL:
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::INT64:
    case arrow::Type::UINT8:
    case arrow::Type::UINT16:
    case arrow::Type::UINT32:
    case arrow::Type::UINT64:
    case arrow::Type::FLOAT:
    case arrow::Type::DOUBLE:
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
      return;
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
      check_parquet_type(*type.field(0)->type(), column + "[]", file);
      return;
    case arrow::Type::STRUCT:
      for (const auto& field : type.fields()) check_parquet_type(*field->type(), column + "." + field->name(), file);
      return;
    case arrow::Type::MAP: {
      const auto& map = static_cast<const arrow::MapType&>(type);
      check_parquet_type(*map.key_type(), column + ".<key>", file);
      check_parquet_type(*map.item_type(), column + ".<value>", file);
      return;
    }
    case arrow::Type::DICTIONARY:
      check_parquet_type(*static_cast<const arrow::DictionaryType&>(type).value_type(), column, file);
      return;
    default:
      ::verl::detail::throw_invalid_argument(
          "data file '{}': column '{}' has Arrow type {}, which verl-cpp does not convert (supported: null, bool, "
          "integers, floats, strings, lists, structs, maps, dictionaries)",
          file, column, type.ToString());
  }
}

template <class ArrayType>
const ArrayType& as(const arrow::Array& array) {
  return static_cast<const ArrayType&>(array);
}

// Element `i` of `array` as JSON (types were checked by check_parquet_type).
inline nlohmann::json parquet_value(const arrow::Array& array, std::int64_t i) {
  if (array.IsNull(i)) return nullptr;
  switch (array.type_id()) {
    case arrow::Type::BOOL: return as<arrow::BooleanArray>(array).Value(i);
    case arrow::Type::INT8: return as<arrow::Int8Array>(array).Value(i);
    case arrow::Type::INT16: return as<arrow::Int16Array>(array).Value(i);
    case arrow::Type::INT32: return as<arrow::Int32Array>(array).Value(i);
    case arrow::Type::INT64: return as<arrow::Int64Array>(array).Value(i);
    case arrow::Type::UINT8: return as<arrow::UInt8Array>(array).Value(i);
    case arrow::Type::UINT16: return as<arrow::UInt16Array>(array).Value(i);
    case arrow::Type::UINT32: return as<arrow::UInt32Array>(array).Value(i);
    case arrow::Type::UINT64: return as<arrow::UInt64Array>(array).Value(i);
    case arrow::Type::FLOAT: return as<arrow::FloatArray>(array).Value(i);
    case arrow::Type::DOUBLE: return as<arrow::DoubleArray>(array).Value(i);
    case arrow::Type::STRING: return std::string(as<arrow::StringArray>(array).GetView(i));
    case arrow::Type::LARGE_STRING: return std::string(as<arrow::LargeStringArray>(array).GetView(i));
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST: {
      std::int64_t begin = 0, end = 0;
      std::shared_ptr<arrow::Array> values;
      if (array.type_id() == arrow::Type::LIST) {
        const auto& list = as<arrow::ListArray>(array);
        begin = list.value_offset(i), end = begin + list.value_length(i), values = list.values();
      } else {
        const auto& list = as<arrow::LargeListArray>(array);
        begin = list.value_offset(i), end = begin + list.value_length(i), values = list.values();
      }
      nlohmann::json out = nlohmann::json::array();
      for (std::int64_t k = begin; k < end; ++k) out.push_back(parquet_value(*values, k));
      return out;
    }
    case arrow::Type::STRUCT: {
      const auto& structs = as<arrow::StructArray>(array);
      const auto& fields = structs.struct_type()->fields();
      nlohmann::json out = nlohmann::json::object();
      // field(k) is the child already adjusted for this array's offset.
      for (int k = 0; k < structs.num_fields(); ++k) out[fields[static_cast<std::size_t>(k)]->name()] = parquet_value(*structs.field(k), i);
      return out;
    }
    case arrow::Type::MAP: {
      const auto& map = as<arrow::MapArray>(array);
      const std::int64_t begin = map.value_offset(i), end = begin + map.value_length(i);
      const auto key_type = map.map_type()->key_type()->id();
      const bool string_keys = key_type == arrow::Type::STRING || key_type == arrow::Type::LARGE_STRING;
      nlohmann::json out = string_keys ? nlohmann::json::object() : nlohmann::json::array();
      for (std::int64_t k = begin; k < end; ++k) {
        nlohmann::json key = parquet_value(*map.keys(), k);
        nlohmann::json item = parquet_value(*map.items(), k);
        if (string_keys) {
          out[key.get<std::string>()] = std::move(item);
        } else {
          out.push_back(nlohmann::json::array({std::move(key), std::move(item)}));
        }
      }
      return out;
    }
    case arrow::Type::DICTIONARY: {
      const auto& dictionary = as<arrow::DictionaryArray>(array);
      return parquet_value(*dictionary.dictionary(), dictionary.GetValueIndex(i));
    }
    default:  // unreachable after check_parquet_type; kept so a gap is an error, not a wrong value
      ::verl::detail::throw_invalid_argument("Arrow type {} is not converted", array.type()->ToString());
  }
}

template <class T>
T parquet_unwrap(arrow::Result<T> result, const std::string& file, std::string_view what) {
  if (!result.ok()) {
    ::verl::detail::throw_invalid_argument("data file '{}': {} ({})", file, what, result.status().ToString());
  }
  return std::move(result).ValueOrDie();
}

inline void parquet_check(const arrow::Status& status, const std::string& file, std::string_view what) {
  if (!status.ok()) ::verl::detail::throw_invalid_argument("data file '{}': {} ({})", file, what, status.ToString());
}

}  // namespace detail

/// Calls `on_row(object, location)` for every row of a Parquet file, in order, one JSON object per
/// row keyed by column name; locations read "file[row]" (0-based, as pandas numbers rows).
inline void for_each_parquet_row(const std::filesystem::path& given_path,
                                 const std::function<void(nlohmann::json&&, const SourceLocation&)>& on_row) {
  const std::filesystem::path path = io::expand_user(given_path.string());
  const std::string file = path.string();
  VERL_CHECK_ARG(std::filesystem::is_regular_file(path), "data file '{}': no such file", file);
  std::unique_ptr<parquet::arrow::FileReader> reader;
  try {
    auto input = detail::parquet_unwrap(arrow::io::ReadableFile::Open(file), file, "cannot open");
#if ARROW_VERSION_MAJOR >= 19
    reader = detail::parquet_unwrap(parquet::arrow::OpenFile(input, arrow::default_memory_pool()), file,
                                    "not a readable Parquet file");
#else
    detail::parquet_check(parquet::arrow::OpenFile(input, arrow::default_memory_pool(), &reader), file,
                          "not a readable Parquet file");
#endif
  } catch (const parquet::ParquetException& error) {  // some footer errors are thrown, not returned
    ::verl::detail::throw_invalid_argument("data file '{}': not a readable Parquet file ({})", file, error.what());
  }
  std::shared_ptr<arrow::Schema> schema;
  detail::parquet_check(reader->GetSchema(&schema), file, "cannot read the schema");
  for (const auto& field : schema->fields()) detail::check_parquet_type(*field->type(), field->name(), file);

  std::int64_t row = 0;
  for (int group = 0; group < reader->num_row_groups(); ++group) {
    std::shared_ptr<arrow::Table> table;
    try {
#if ARROW_VERSION_MAJOR >= 24
      table = detail::parquet_unwrap(reader->ReadRowGroup(group), file, "cannot read a row group");
#else
      detail::parquet_check(reader->ReadRowGroup(group, &table), file, "cannot read a row group");
#endif
    } catch (const parquet::ParquetException& error) {
      ::verl::detail::throw_invalid_argument("data file '{}': cannot read row group {} ({})", file, group, error.what());
    }
    arrow::TableBatchReader batches(*table);
    while (true) {
      std::shared_ptr<arrow::RecordBatch> batch;
      detail::parquet_check(batches.ReadNext(&batch), file, "cannot read a record batch");
      if (!batch) break;
      for (std::int64_t i = 0; i < batch->num_rows(); ++i, ++row) {
        nlohmann::json value = nlohmann::json::object();
        for (int c = 0; c < batch->num_columns(); ++c) value[batch->column_name(c)] = detail::parquet_value(*batch->column(c), i);
        on_row(std::move(value), SourceLocation{file + "[" + std::to_string(row) + "]", 0});
      }
    }
  }
}

#endif  // VERL_HAS_PARQUET

/// Every row of a dataset file, by its extension: `.parquet` through Apache Arrow (when this build
/// has it), `.jsonl` / `.json` as JSON Lines. What the RL dataset reads for data.train_files and
/// data.val_files.
inline void for_each_dataset_row(const std::filesystem::path& given_path,
                                 const std::function<void(nlohmann::json&&, const SourceLocation&)>& on_row) {
  const std::filesystem::path path = io::expand_user(given_path.string());
  if (path.extension() == ".parquet") {
#if defined(VERL_HAS_PARQUET)
    for_each_parquet_row(path, on_row);
    return;
#else
    ::verl::detail::throw_invalid_argument(
        "data file '{}': reading Parquet needs Apache Arrow (not found at configure time); convert it to JSON Lines "
        "(pandas.read_parquet(path).to_json(out, orient='records', lines=True)) or install pyarrow / libarrow-dev "
        "and re-run cmake",
        path.string());
#endif
  }
  for_each_json_row(path, on_row);
}

}  // namespace verl::data
