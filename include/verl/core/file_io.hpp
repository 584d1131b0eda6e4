// Whole-file reads (memory-mapped where the OS allows) and atomic whole-file writes for
// checkpoints: a reader never sees a half-written file, because the bytes go to a temporary
// file in the same folder that is flushed and then renamed over the target.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define VERL_MODEL_HAS_POSIX_IO 1
#else
#include <cstdio>
#include <fstream>
#define VERL_MODEL_HAS_POSIX_IO 0
#endif

namespace verl::io {

/// Read-only bytes of a whole file: a private memory map on POSIX systems, else one read into
/// memory. Move-only; the bytes live as long as the object.
class MappedFile {
 public:
  MappedFile() = default;

  explicit MappedFile(const std::filesystem::path& path) : path_(path) {
#if VERL_MODEL_HAS_POSIX_IO
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      throw_open_error(path, error);
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd);
      ::verl::detail::throw_invalid_argument("path: expected a regular file, got '{}'", path.string());
    }
    size_ = static_cast<std::size_t>(info.st_size);
    if (size_ > 0) {
      void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (address == MAP_FAILED) {
        // Some file systems cannot map; fall back to reading the file once.
        owned_.resize(size_);
        std::size_t done = 0;
        while (done < size_) {
          const ssize_t got = ::read(fd, owned_.data() + done, size_ - done);
          if (got <= 0) {
            ::close(fd);
            throw std::system_error(errno, std::generic_category(), "reading " + path.string());
          }
          done += static_cast<std::size_t>(got);
        }
        data_ = owned_.data();
      } else {
        mapping_ = address;
        data_ = static_cast<const std::byte*>(address);
      }
    }
    ::close(fd);
#else
    std::ifstream in(path, std::ios::binary);
    if (!in) ::verl::detail::throw_invalid_argument("path: cannot open '{}' for reading", path.string());
    in.seekg(0, std::ios::end);
    size_ = static_cast<std::size_t>(in.tellg());
    in.seekg(0);
    owned_.resize(size_);
    in.read(reinterpret_cast<char*>(owned_.data()), static_cast<std::streamsize>(size_));
    data_ = owned_.data();
#endif
  }

  /// Wraps bytes already in memory (tests, in-memory checkpoints).
  MappedFile(std::vector<std::byte> bytes, std::filesystem::path name)
      : path_(std::move(name)), owned_(std::move(bytes)) {
    data_ = owned_.data();
    size_ = owned_.size();
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept { swap(other); }
  MappedFile& operator=(MappedFile&& other) noexcept {
    if (this != &other) {
      release();
      swap(other);
    }
    return *this;
  }
  ~MappedFile() { release(); }

  [[nodiscard]] std::span<const std::byte> bytes() const { return {data_, size_}; }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  [[noreturn]] static void throw_open_error(const std::filesystem::path& path, int error) {
    ::verl::detail::throw_invalid_argument("path: cannot open '{}' for reading ({})", path.string(), std::strerror(error));
  }

  void swap(MappedFile& other) noexcept {
    std::swap(path_, other.path_);
    std::swap(owned_, other.owned_);
    std::swap(mapping_, other.mapping_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    // A vector's buffer survives the swap, so data_ stays valid for either kind of storage.
  }

  void release() noexcept {
#if VERL_MODEL_HAS_POSIX_IO
    if (mapping_ != nullptr) ::munmap(mapping_, size_);
#endif
    mapping_ = nullptr;
    data_ = nullptr;
    size_ = 0;
    owned_.clear();
  }

  std::filesystem::path path_;
  std::vector<std::byte> owned_;
  void* mapping_ = nullptr;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Writes `chunks` (in order) to `target` atomically: temporary file in the same folder, flush to
/// disk, rename over the target, flush the folder entry. On failure the target is untouched.
inline void write_file_atomically(const std::filesystem::path& target,
                                  std::span<const std::span<const std::byte>> chunks) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path folder = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  const std::filesystem::path temporary =
      folder / fmt::format(".{}.tmp.{}.{}", target.filename().string(),
#if VERL_MODEL_HAS_POSIX_IO
                           static_cast<long>(::getpid()),
#else
                           0L,
#endif
                           counter.fetch_add(1));
#if VERL_MODEL_HAS_POSIX_IO
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw std::system_error(errno, std::generic_category(), "creating " + temporary.string());
  }
  auto fail = [&](const char* what) {
    const int error = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    throw std::system_error(error, std::generic_category(), fmt::format("{} {}", what, temporary.string()));
  };
  for (const auto chunk : chunks) {
    std::size_t done = 0;
    while (done < chunk.size()) {
      const ssize_t wrote = ::write(fd, chunk.data() + done, chunk.size() - done);
      if (wrote < 0) {
        if (errno == EINTR) continue;
        fail("writing");
      }
      done += static_cast<std::size_t>(wrote);
    }
  }
  if (::fsync(fd) != 0) fail("flushing");
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw std::system_error(error, std::generic_category(), "closing " + temporary.string());
  }
  if (::rename(temporary.c_str(), target.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw std::system_error(error, std::generic_category(), "renaming onto " + target.string());
  }
  // Make the rename itself durable.
  const int folder_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder_fd >= 0) {
    ::fsync(folder_fd);
    ::close(folder_fd);
  }
#else
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    for (const auto chunk : chunks) out.write(reinterpret_cast<const char*>(chunk.data()), chunk.size());
    out.flush();
    if (!out) throw std::system_error(std::make_error_code(std::errc::io_error), "writing " + temporary.string());
  }
  std::error_code ec;
  std::filesystem::rename(temporary, target, ec);
  if (ec) {
    std::filesystem::remove(temporary);
    throw std::system_error(ec, "renaming onto " + target.string());
  }
#endif
}

inline void write_file_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes) {
  const std::span<const std::byte> chunks[] = {bytes};
  write_file_atomically(target, chunks);
}

inline void write_file_atomically(const std::filesystem::path& target, std::string_view text) {
  write_file_atomically(target, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

/// Reads a whole (small) text file, e.g. a JSON config.
inline std::string read_text_file(const std::filesystem::path& path) {
  MappedFile file(path);
  const auto bytes = file.bytes();
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace verl::io
