// verl_conformance PATH... — runs every golden case (files, or folders of *.json fixtures) through
// the C++ implementation and reports per-family pass/fail counts, the worst error of each failing
// case and a closing "N passed, M failed" line. Exits 1 if any case fails.
// --device cuda (builds with CUDA only) runs the cases through the CUDA kernels; a case without a
// kernel is counted as "unsupported on cuda", apart from passed and failed. Without a usable GPU
// it exits 2 with the reason.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "handlers.hpp"

namespace fs = std::filesystem;
using namespace verl;

namespace {

struct Options {
  std::vector<std::string> paths;
  std::string device = "cpu";
  std::string filter;
  bool verbose = false;
};

void usage(std::ostream& out) {
  out << "usage: verl_conformance [--device cpu|cuda] [--filter SUBSTRING] [--verbose] PATH...\n"
         "  PATH: a golden fixture file (*.json) or a folder of them\n"
         "  --device cuda: the CUDA kernels (builds with CUDA); cases without a kernel are reported\n"
         "                 as unsupported on cuda\n";
}

std::vector<std::string> expand(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    if (fs::is_directory(p)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(p))
        if (entry.is_regular_file() && entry.path().extension() == ".json") found.push_back(entry.path().string());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      throw InvalidArgument(fmt::format("PATH: '{}' is neither a fixture file nor a folder", p));
    }
  }
  return files;
}

bool has_checkable_output(const testing::GoldenCase& c) {
  for (auto it = c.outputs().begin(); it != c.outputs().end(); ++it)
    if (c.output_is_checkable(it.key())) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "verl_conformance: {} needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage(std::cout);
      return 0;
    } else if (a == "--device") {
      opt.device = value("--device");
    } else if (a == "--filter") {
      opt.filter = value("--filter");
    } else if (a == "--verbose" || a == "-v") {
      opt.verbose = true;
    } else if (a.starts_with("--")) {
      fmt::print(stderr, "verl_conformance: unknown option '{}'\n", a);
      usage(std::cerr);
      return 2;
    } else {
      opt.paths.push_back(a);
    }
  }
  if (opt.paths.empty()) {
    usage(std::cerr);
    return 2;
  }
  const bool on_cuda = opt.device == "cuda";
  const auto& cuda = conformance::cuda_support();
  if (opt.device != "cpu" && !(on_cuda && cuda.unavailable_reason != nullptr)) {
    fmt::print(stderr, "verl_conformance: --device {}: this build has only the cpu device\n", opt.device);
    return 2;
  }
  if (on_cuda) {
    if (const std::string why = cuda.unavailable_reason(); !why.empty()) {
      fmt::print(stderr, "verl_conformance: --device cuda: {}\n", why);
      return 2;
    }
  }

  const auto& handlers = on_cuda ? cuda.handlers : conformance::handler_table();
  struct Tally {
    int passed = 0;
    int failed = 0;
    int unsupported = 0;
  };
  std::map<std::string, Tally> per_family;
  int passed = 0, failed = 0, unsupported = 0;

  std::vector<std::string> files;
  try {
    files = expand(opt.paths);
  } catch (const std::exception& e) {
    fmt::print(stderr, "verl_conformance: {}\n", e.what());
    return 2;
  }

  for (const auto& path : files) {
    testing::GoldenFile file;
    try {
      file = testing::GoldenFile::load(path);
    } catch (const std::exception& e) {
      fmt::print(stderr, "verl_conformance: {}: {}\n", path, e.what());
      return 2;
    }
    for (const auto& c : file.cases()) {
      const std::string name = c.name();
      if (!opt.filter.empty() && name.find(opt.filter) == std::string::npos) continue;
      testing::CaseCheck check(c);
      const auto handler = handlers.find(c.fn());
      if (on_cuda) {
        const auto predicate = cuda.supports.find(c.fn());
        const bool has_kernel =
            handler != handlers.end() && (predicate == cuda.supports.end() || predicate->second(c));
        if (!has_kernel) {
          ++per_family[file.family().empty() ? fs::path(path).stem().string() : file.family()].unsupported;
          ++unsupported;
          if (opt.verbose) fmt::print("  {}: unsupported on cuda ({})\n", name, c.fn());
          continue;
        }
      }
      if (handler == handlers.end()) {
        check.fail("", fmt::format("no C++ implementation registered for '{}'", c.fn()));
      } else if (c.raises()) {
        try {
          handler->second(c, check);
          check.fail("", fmt::format("verl raises '{}', the C++ call returned normally", c.raises_message()));
        } catch (const std::exception& e) {
          if (opt.verbose) fmt::print("  {}: raised as expected: {}\n", name, e.what());
        }
      } else {
        try {
          handler->second(c, check);
          if (check.comparisons() == 0 && has_checkable_output(c))
            check.fail("", "the handler compared no outputs");
        } catch (const std::exception& e) {
          check.fail("", fmt::format("unexpected exception: {}", e.what()));
        }
      }
      auto& tally = per_family[file.family().empty() ? fs::path(path).stem().string() : file.family()];
      if (check.passed()) {
        ++tally.passed;
        ++passed;
      } else {
        ++tally.failed;
        ++failed;
        fmt::print("FAIL {}: {}\n", name, check.worst());
      }
    }
  }

  for (const auto& [family, tally] : per_family) {
    if (on_cuda)
      fmt::print("{:<18} {:>5} passed, {:>5} failed, {:>5} unsupported on cuda\n", family, tally.passed, tally.failed,
                 tally.unsupported);
    else
      fmt::print("{:<18} {:>5} passed, {:>5} failed\n", family, tally.passed, tally.failed);
  }
  if (on_cuda)
    fmt::print("{} passed, {} failed, {} unsupported on cuda\n", passed, failed, unsupported);
  else
    fmt::print("{} passed, {} failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
