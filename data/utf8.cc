#include "data/utf8.h"

#include <cstdint>
#include <cstring>

#include "framework/status.h"

namespace trellis {

void AppendUtf8(char32_t code_point, std::string& out) {
  TRELLIS_CHECK(code_point <= 0x10FFFF &&
                (code_point < 0xD800 || code_point > 0xDFFF))
      << "not a Unicode scalar value: " << static_cast<uint32_t>(code_point);
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

bool NextUtf8(std::string_view text, size_t& pos, char32_t& code_point) {
  const auto byte = [&](size_t i) {
    return static_cast<unsigned char>(text[i]);
  };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) {
    code_point = lead;
    ++pos;
    return true;
  }
  size_t length;
  char32_t min_value;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    min_value = 0x80;
    code_point = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    min_value = 0x800;
    code_point = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    min_value = 0x10000;
    code_point = lead & 0x07;
  } else {
    ++pos;
    return false;
  }
  if (text.size() - pos < length) {
    ++pos;
    return false;
  }
  for (size_t i = 1; i < length; ++i) {
    const unsigned char next = byte(pos + i);
    if ((next & 0xC0) != 0x80) {
      ++pos;
      return false;
    }
    code_point = (code_point << 6) | (next & 0x3F);
  }
  if (code_point < min_value || code_point > 0x10FFFF ||
      (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    ++pos;
    return false;
  }
  pos += length;
  return true;
}

bool IsValidUtf8(std::string_view text) {
  return FirstInvalidUtf8(text) == std::string_view::npos;
}

size_t FirstInvalidUtf8(std::string_view text) {
  constexpr uint64_t kHighBits = 0x8080808080808080ull;
  size_t pos = 0;
  char32_t code_point;
  while (pos < text.size()) {
    uint64_t word;
    if (text.size() - pos >= sizeof(word)) {
      std::memcpy(&word, text.data() + pos, sizeof(word));
      if ((word & kHighBits) == 0) {
        pos += sizeof(word);
        continue;
      }
    }
    const size_t at = pos;
    if (!NextUtf8(text, pos, code_point)) return at;
  }
  return std::string_view::npos;
}

}  // namespace trellis
