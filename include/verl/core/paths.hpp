// Paths as verl's Python code takes them: a leading "~" is the home folder (os.path.expanduser).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace verl::io {

inline std::filesystem::path expand_user(std::string path) {
  if (!path.empty() && path[0] == '~' && (path.size() == 1 || path[1] == '/')) {
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') path = std::string(home) + path.substr(1);
  }
  return path;
}

}  // namespace verl::io
