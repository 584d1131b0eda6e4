// Checkpoints as verl lays them out, written so that a crash never leaves a half-written one:
//
//   <trainer.default_local_dir>/
//     latest_checkpointed_iteration.txt     the step of the newest complete checkpoint
//     global_step_<N>/
//       <role>/model.safetensors            parameters by name (role: actor, critic, ...)
//       <role>/optim.safetensors            AdamW moments (exp_avg.<k>, exp_avg_sq.<k>) and step
//       <role>/extra_state.json             the role's extra state (lr scheduler position, ...)
//       data.json                           the data loader's position (verl's data.pt)
//       trainer_state.json                  global step, RNG states, trainer extras
//
// A checkpoint is written into a temporary folder next to its final place, every file flushed to
// disk, then renamed into place in one step; only then is the tracker file replaced (also
// atomically). trainer.resume_mode follows verl: "auto" resumes from the tracker's checkpoint if
// there is one, "disable" always starts fresh, "resume_path" resumes from
// trainer.resume_from_path (a global_step_<N> folder). max_<role>_ckpt_to_keep keeps the newest
// checkpoints of a role; a step folder left without any role is removed whole.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/dataloader.hpp"
#include "verl/core/file_io.hpp"
#include "verl/model/safetensors.hpp"
#include "verl/optim/adamw.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#endif

namespace verl::trainer {

namespace fs = std::filesystem;

// ---- what a checkpoint holds ------------------------------------------------------------------

/// A float32 tensor to save, by reference (row-major values of the given shape).
struct TensorRef {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<const float> values;
};

/// A loaded float32 tensor.
struct NamedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;

  /// Copies the values into `out`, which must have the saved shape.
  void copy_to(std::span<float> out, std::span<const std::int64_t> expected_shape) const {
    VERL_CHECK_ARG(std::ranges::equal(shape, expected_shape), "checkpoint tensor '{}': expected shape [{}], got [{}]",
                   name, fmt::join(expected_shape, ", "), fmt::join(shape, ", "));
    VERL_CHECK_ARG(out.size() == values.size(), "checkpoint tensor '{}': expected room for {} values, got {}", name,
                   values.size(), out.size());
    std::copy(values.begin(), values.end(), out.begin());
  }
};

/// One role's state to save (actor, critic): parameters, optimizer moments, extras.
struct RoleSnapshot {
  std::vector<TensorRef> model;
  const optim::AdamW::State* optimizer = nullptr;  ///< null: not saved (save_contents without "optimizer")
  nlohmann::json extra = nlohmann::json::object();
};

/// Everything a training step needs to continue exactly.
struct CheckpointSnapshot {
  std::int64_t global_step = 0;
  std::map<std::string, RoleSnapshot> roles;
  std::optional<data::DataLoaderState> data;
  std::map<std::string, std::string> rng;  ///< name -> serialize_rng(engine)
  nlohmann::json extra = nlohmann::json::object();
  /// The controller's own binary state, one file each (separate_async's generations in flight).
  std::map<std::string, std::vector<std::byte>> files;
};

struct LoadedRole {
  std::vector<NamedTensor> model;  ///< in name order
  std::optional<optim::AdamW::State> optimizer;
  nlohmann::json extra = nlohmann::json::object();

  [[nodiscard]] const NamedTensor& tensor(std::string_view name) const {
    for (const auto& t : model)
      if (t.name == name) return t;
    ::verl::detail::throw_invalid_argument("checkpoint: no tensor '{}' ({} tensors saved)", name, model.size());
  }
};

struct LoadedCheckpoint {
  fs::path folder;
  std::int64_t global_step = 0;
  std::map<std::string, LoadedRole> roles;
  std::optional<data::DataLoaderState> data;
  std::map<std::string, std::string> rng;
  nlohmann::json extra = nlohmann::json::object();
  std::map<std::string, std::vector<std::byte>> files;  ///< CheckpointSnapshot::files, sizes checked

  [[nodiscard]] const LoadedRole& role(std::string_view name) const {
    const auto found = roles.find(std::string(name));
    VERL_CHECK_ARG(found != roles.end(), "checkpoint '{}': no role '{}'", folder.string(), name);
    return found->second;
  }
};

// ---- RNG state ----------------------------------------------------------------------------------

/// The full state of a std::mt19937_64 as text (the standard's stream format: portable).
inline std::string serialize_rng(const std::mt19937_64& engine) {
  std::ostringstream out;
  out << engine;
  return out.str();
}

inline void restore_rng(std::string_view text, std::mt19937_64& engine) {
  std::istringstream in{std::string(text)};
  std::mt19937_64 restored;
  in >> restored;
  VERL_CHECK_ARG(!in.fail(), "rng state: expected the text of a std::mt19937_64 state ({} numbers), got {} characters",
                 std::mt19937_64::state_size, text.size());
  engine = restored;
}

// ---- resume modes ---------------------------------------------------------------------------------

enum class ResumeMode { automatic, disable, resume_path };

inline constexpr std::array<std::string_view, 3> resume_mode_names = {"auto", "disable", "resume_path"};

constexpr std::string_view to_string(ResumeMode mode) { return resume_mode_names[static_cast<std::size_t>(mode)]; }

inline ResumeMode parse_resume_mode(std::string_view name) {
  for (std::size_t i = 0; i < resume_mode_names.size(); ++i)
    if (resume_mode_names[i] == name) return static_cast<ResumeMode>(i);
  ::verl::detail::throw_invalid_argument("trainer.resume_mode: expected one of {}, got '{}'",
                                         fmt::join(resume_mode_names, ", "), name);
}

namespace detail {

inline constexpr std::string_view step_prefix = "global_step_";
inline constexpr std::string_view tracker_name = "latest_checkpointed_iteration.txt";
inline constexpr std::string_view trainer_state_name = "trainer_state.json";

/// N from ".../global_step_N" (nullopt for any other name).
inline std::optional<std::int64_t> step_of_folder(const fs::path& folder) {
  const std::string name = folder.filename().string();
  if (!name.starts_with(step_prefix)) return std::nullopt;
  std::int64_t step = 0;
  const char* begin = name.data() + step_prefix.size();
  const char* end = name.data() + name.size();
  const auto [ptr, error] = std::from_chars(begin, end, step);
  if (error != std::errc() || ptr != end || begin == end || step < 0) return std::nullopt;
  return step;
}

inline void fsync_path(const fs::path& path) {
#if defined(__unix__) || defined(__APPLE__)
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
#else
  (void)path;
#endif
}

inline void write_json(const fs::path& path, const nlohmann::json& value) {
  io::write_file_atomically(path, value.dump(2) + "\n");
}

inline nlohmann::json read_json(const fs::path& path) {
  VERL_CHECK_ARG(fs::is_regular_file(path), "checkpoint file '{}': not found", path.string());
  try {
    return nlohmann::json::parse(io::read_text_file(path));
  } catch (const nlohmann::json::exception& error) {
    ::verl::detail::throw_invalid_argument("checkpoint file '{}': invalid JSON ({})", path.string(), error.what());
  }
}

inline std::string optimizer_tensor_name(std::string_view moment, std::size_t index) {
  return fmt::format("{}.{:06d}", moment, index);
}

inline void write_role(const fs::path& folder, const RoleSnapshot& role) {
  fs::create_directories(folder);
  model::SafetensorsWriter weights;
  weights.set_metadata("format", "pt");
  for (const auto& tensor : role.model) weights.add_f32(tensor.name, tensor.shape, tensor.values);
  weights.write(folder / "model.safetensors");
  if (role.optimizer != nullptr) {
    const auto& state = *role.optimizer;
    model::SafetensorsWriter moments;
    moments.set_metadata("optimizer", std::string(optim::AdamW::name));
    moments.set_metadata("step", std::to_string(state.step));
    moments.set_metadata("num_parameters", std::to_string(state.exp_avg.size()));
    for (std::size_t k = 0; k < state.exp_avg.size(); ++k) {
      const auto n = static_cast<std::int64_t>(state.exp_avg[k].size());
      moments.add_f32(optimizer_tensor_name("exp_avg", k), {n}, state.exp_avg[k]);
      moments.add_f32(optimizer_tensor_name("exp_avg_sq", k), {n}, state.exp_avg_sq[k]);
    }
    moments.write(folder / "optim.safetensors");
  }
  write_json(folder / "extra_state.json", role.extra);
}

inline std::int64_t parse_metadata_int(const model::SafetensorsFile& file, std::string_view key) {
  const auto found = file.metadata().find(key);
  VERL_CHECK_ARG(found != file.metadata().end(), "checkpoint file '{}': missing metadata '{}'", file.path().string(), key);
  std::int64_t value = 0;
  const auto [ptr, error] = std::from_chars(found->second.data(), found->second.data() + found->second.size(), value);
  VERL_CHECK_ARG(error == std::errc() && ptr == found->second.data() + found->second.size(),
                 "checkpoint file '{}': metadata '{}' is not an integer: '{}'", file.path().string(), key, found->second);
  return value;
}

inline LoadedRole read_role(const fs::path& folder) {
  LoadedRole role;
  const model::SafetensorsFile weights(folder / "model.safetensors");
  for (const auto& name : weights.names()) {
    const auto view = weights.tensor(name);
    role.model.push_back(NamedTensor{name, std::vector<std::int64_t>(view.shape.begin(), view.shape.end()), view.to_f32()});
  }
  if (fs::exists(folder / "optim.safetensors")) {
    const model::SafetensorsFile moments(folder / "optim.safetensors");
    optim::AdamW::State state;
    state.step = parse_metadata_int(moments, "step");
    const std::int64_t count = parse_metadata_int(moments, "num_parameters");
    for (std::int64_t k = 0; k < count; ++k) {
      state.exp_avg.push_back(moments.tensor(optimizer_tensor_name("exp_avg", static_cast<std::size_t>(k))).to_f32());
      state.exp_avg_sq.push_back(moments.tensor(optimizer_tensor_name("exp_avg_sq", static_cast<std::size_t>(k))).to_f32());
    }
    role.optimizer = std::move(state);
  }
  role.extra = read_json(folder / "extra_state.json");
  return role;
}

}  // namespace detail

/// How many checkpoints of each role to keep (verl's max_actor_ckpt_to_keep,
/// max_critic_ckpt_to_keep); a role without an entry, or with nullopt or a value <= 0, keeps all.
using RetentionPolicy = std::map<std::string, std::optional<std::int64_t>, std::less<>>;

class CheckpointManager {
 public:
  explicit CheckpointManager(fs::path default_local_dir, RetentionPolicy retention = {})
      : root_(std::move(default_local_dir)), retention_(std::move(retention)) {}

  [[nodiscard]] const fs::path& root() const { return root_; }
  [[nodiscard]] fs::path tracker_path() const { return root_ / detail::tracker_name; }
  [[nodiscard]] fs::path folder_for_step(std::int64_t step) const {
    return root_ / fmt::format("{}{}", detail::step_prefix, step);
  }

  /// Writes the checkpoint of `snapshot.global_step` atomically, updates the tracker, then prunes
  /// old checkpoints by the retention policy. Returns the checkpoint's folder.
  fs::path save(const CheckpointSnapshot& snapshot) {
    VERL_CHECK_ARG(snapshot.global_step >= 0, "global_step: expected a step >= 0, got {}", snapshot.global_step);
    fs::create_directories(root_);
    const fs::path target = folder_for_step(snapshot.global_step);
    const fs::path staging = root_ / fmt::format(".{}.tmp.{}", target.filename().string(), process_tag());
    remove_orphans();
    fs::remove_all(staging);
    fs::create_directories(staging);
    try {
      for (const auto& [name, role] : snapshot.roles) {
        VERL_CHECK_ARG(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                       "roles: expected a plain folder name for a role, got '{}'", name);
        detail::write_role(staging / name, role);
        detail::fsync_path(staging / name);
      }
      if (snapshot.data) detail::write_json(staging / "data.json", data::to_json(*snapshot.data));
      nlohmann::json files = nlohmann::json::object();
      for (const auto& [name, bytes] : snapshot.files) {
        VERL_CHECK_ARG(!name.empty() && name.find('/') == std::string::npos && name != "." && name != ".." &&
                           !snapshot.roles.contains(name) && name != "data.json" && name != detail::trainer_state_name,
                       "files: expected a plain file name not used by the checkpoint itself, got '{}'", name);
        io::write_file_atomically(staging / name, std::span<const std::byte>(bytes));
        files[name] = bytes.size();
      }
      nlohmann::json state = {{"global_step", snapshot.global_step},
                              {"rng", snapshot.rng},
                              {"extra", snapshot.extra},
                              {"roles", nlohmann::json::array()}};
      if (!snapshot.files.empty()) state["files"] = std::move(files);
      for (const auto& [name, role] : snapshot.roles) state["roles"].push_back(name);
      // Written last: its presence marks a complete checkpoint.
      detail::write_json(staging / detail::trainer_state_name, state);
      detail::fsync_path(staging);
      // Replace an existing checkpoint of the same step (a re-run after resuming) in two renames.
      if (fs::exists(target)) {
        const fs::path old = root_ / fmt::format(".{}.old.{}", target.filename().string(), process_tag());
        fs::remove_all(old);
        fs::rename(target, old);
        fs::rename(staging, target);
        fs::remove_all(old);
      } else {
        fs::rename(staging, target);
      }
      detail::fsync_path(root_);
    } catch (...) {
      std::error_code ignored;
      fs::remove_all(staging, ignored);
      throw;
    }
    io::write_file_atomically(tracker_path(), std::to_string(snapshot.global_step));
    prune();
    return target;
  }

  /// The step the tracker file names, if any (verl's find_latest_ckpt_path reads the same file).
  [[nodiscard]] std::optional<std::int64_t> latest_step() const {
    if (!fs::exists(tracker_path())) return std::nullopt;
    VERL_CHECK_ARG(fs::is_regular_file(tracker_path()),
                   "checkpoint tracker '{}': expected a file holding a step number, got a folder or special file",
                   tracker_path().string());
    std::string text = io::read_text_file(tracker_path());
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
    std::int64_t step = 0;
    const auto [ptr, error] = std::from_chars(text.data(), text.data() + text.size(), step);
    VERL_CHECK_ARG(error == std::errc() && ptr == text.data() + text.size() && !text.empty(),
                   "checkpoint tracker '{}': expected a step number, got '{}'", tracker_path().string(), text);
    return step;
  }

  /// The checkpoint folder to resume from, following trainer.resume_mode; nullopt means "train
  /// from scratch".
  [[nodiscard]] std::optional<fs::path> resume_folder(ResumeMode mode,
                                                      const std::optional<std::string>& resume_from_path = {}) const {
    switch (mode) {
      case ResumeMode::disable: return std::nullopt;
      case ResumeMode::automatic: {
        const auto step = latest_step();
        if (!step) return std::nullopt;
        const fs::path folder = folder_for_step(*step);
        // verl quietly trains from scratch when the tracked folder is gone; a run that should
        // continue is not restarted without a word.
        VERL_CHECK_ARG(fs::is_directory(folder),
                       "checkpoint tracker '{}' names step {}, but '{}' is missing (an interrupted save may have left "
                       "it as .{}.old.<pid>); restore it, point trainer.resume_mode=resume_path at another checkpoint, "
                       "or remove the tracker to train from scratch",
                       tracker_path().string(), *step, folder.string(), folder.filename().string());
        return folder;
      }
      case ResumeMode::resume_path: {
        VERL_CHECK_ARG(resume_from_path && !resume_from_path->empty(),
                       "trainer.resume_from_path: expected a checkpoint folder with trainer.resume_mode=resume_path, "
                       "got none");
        VERL_CHECK_ARG(resume_from_path->find(detail::step_prefix) != std::string::npos,
                       "trainer.resume_from_path: expected a path naming a global_step_<N> folder, got '{}'",
                       *resume_from_path);
        fs::path folder = *resume_from_path;
        if (folder.is_relative()) folder = fs::current_path() / folder;
        VERL_CHECK_ARG(fs::is_directory(folder), "trainer.resume_from_path: no such folder '{}'", folder.string());
        return folder;
      }
    }
    return std::nullopt;
  }

  /// Reads a checkpoint folder written by save().
  [[nodiscard]] static LoadedCheckpoint load(const fs::path& folder) {
    VERL_CHECK_ARG(fs::is_directory(folder), "checkpoint folder '{}': not found", folder.string());
    const fs::path state_path = folder / detail::trainer_state_name;
    VERL_CHECK_ARG(fs::is_regular_file(state_path),
                   "checkpoint folder '{}': no {} (not a complete verl-cpp checkpoint)", folder.string(),
                   detail::trainer_state_name);
    const nlohmann::json state = detail::read_json(state_path);
    LoadedCheckpoint out;
    out.folder = folder;
    try {
      out.global_step = state.at("global_step").get<std::int64_t>();
      out.rng = state.at("rng").get<std::map<std::string, std::string>>();
      out.extra = state.at("extra");
      for (const auto& name : state.at("roles")) {
        const std::string role = name.get<std::string>();
        // A role pruned by the retention policy is absent; the others must be complete.
        if (fs::is_directory(folder / role)) out.roles.emplace(role, detail::read_role(folder / role));
      }
      if (state.contains("files")) {
        for (const auto& [name, size] : state.at("files").items()) {
          const fs::path path = folder / name;
          VERL_CHECK_ARG(name.find('/') == std::string::npos && fs::is_regular_file(path),
                         "checkpoint folder '{}': file '{}' listed in {} is missing (a damaged checkpoint is not resumed)",
                         folder.string(), name, detail::trainer_state_name);
          const std::string text = io::read_text_file(path);
          VERL_CHECK_ARG(text.size() == size.get<std::size_t>(),
                         "checkpoint file '{}': expected {} bytes, got {} (a damaged checkpoint is not resumed)",
                         path.string(), size.get<std::size_t>(), text.size());
          const auto* begin = reinterpret_cast<const std::byte*>(text.data());
          out.files.emplace(name, std::vector<std::byte>(begin, begin + text.size()));
        }
      }
    } catch (const nlohmann::json::exception& error) {
      ::verl::detail::throw_invalid_argument("checkpoint file '{}': {}", state_path.string(), error.what());
    }
    if (const auto step = detail::step_of_folder(folder)) {
      VERL_CHECK_ARG(*step == out.global_step, "checkpoint folder '{}': names step {} but its state says {}",
                     folder.string(), *step, out.global_step);
    }
    if (fs::exists(folder / "data.json")) out.data = data::data_loader_state_from_json(detail::read_json(folder / "data.json"));
    return out;
  }

  /// Complete checkpoints on disk, oldest first.
  [[nodiscard]] std::vector<std::pair<std::int64_t, fs::path>> checkpoints() const {
    std::vector<std::pair<std::int64_t, fs::path>> out;
    if (!fs::is_directory(root_)) return out;
    for (const auto& entry : fs::directory_iterator(root_)) {
      if (!entry.is_directory()) continue;
      const auto step = detail::step_of_folder(entry.path());
      if (step && fs::is_regular_file(entry.path() / detail::trainer_state_name)) out.emplace_back(*step, entry.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  /// Staging folders (".global_step_N.tmp.<pid>") of processes that are gone, and the ".old."
  /// copies of checkpoints that were replaced: what a killed save leaves behind. An ".old." copy
  /// whose replacement is missing is kept (it is the only copy of that checkpoint).
  void remove_orphans() const {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(root_, error)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name.front() != '.' || !entry.is_directory()) continue;
      for (const std::string_view kind : {std::string_view(".tmp."), std::string_view(".old.")}) {
        const auto at = name.rfind(kind);
        if (at == std::string::npos || at == 0) continue;
        const std::string owner = name.substr(at + kind.size());
        const std::string checkpoint = name.substr(1, at - 1);
        if (owner == process_tag() || process_alive(owner)) continue;
        if (kind == ".old." && !fs::is_directory(root_ / checkpoint)) continue;
        std::error_code ignored;
        fs::remove_all(entry.path(), ignored);
      }
    }
  }

  static bool process_alive(const std::string& pid_text) {
#if defined(__unix__) || defined(__APPLE__)
    long pid = 0;
    const auto [ptr, ec] = std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
    if (ec != std::errc() || ptr != pid_text.data() + pid_text.size() || pid <= 0) return true;  // not ours to judge
    return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
#else
    (void)pid_text;
    return true;
#endif
  }

  static std::string process_tag() {
#if defined(__unix__) || defined(__APPLE__)
    return std::to_string(static_cast<long>(::getpid()));
#else
    return "0";
#endif
  }

  void prune() {
    const auto all = checkpoints();
    for (const auto& [role, limit] : retention_) {
      if (!limit || *limit <= 0) continue;
      std::vector<fs::path> with_role;
      for (const auto& [step, folder] : all)
        if (fs::is_directory(folder / role)) with_role.push_back(folder);
      const auto keep = static_cast<std::size_t>(*limit);
      for (std::size_t i = 0; i + keep < with_role.size(); ++i) fs::remove_all(with_role[i] / role);
    }
    // A step folder whose roles were all pruned holds nothing worth resuming from.
    const auto newest = latest_step();
    for (const auto& [step, folder] : all) {
      if (newest && step == *newest) continue;
      const nlohmann::json state = detail::read_json(folder / detail::trainer_state_name);
      bool any_role = false;
      for (const auto& role : state.value("roles", nlohmann::json::array()))
        any_role = any_role || fs::is_directory(folder / role.get<std::string>());
      if (!any_role && !state.value("roles", nlohmann::json::array()).empty()) fs::remove_all(folder);
    }
  }

  fs::path root_;
  RetentionPolicy retention_;
};

}  // namespace verl::trainer
