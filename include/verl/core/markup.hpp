// Escaping text for markup (HTML, XML, SVG): one loop, each caller's table of entities.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace verl {

/// `text` with every character that has an entry in `entities` replaced by its entity.
inline std::string escape_markup(std::string_view text,
                                 std::initializer_list<std::pair<char, std::string_view>> entities) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    bool replaced = false;
    for (const auto& [from, entity] : entities) {
      if (c == from) {
        out += entity;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

}  // namespace verl
