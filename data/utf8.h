// Minimal UTF-8 helpers shared by the tokenizers and their tests.
//
// Decoding is strict (RFC 3629): overlong forms, surrogates (U+D800..DFFF)
// and code points above U+10FFFF are invalid.
//
// Thread safety: pure functions.
#ifndef TRELLIS_DATA_UTF8_H_
#define TRELLIS_DATA_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace trellis {

// Appends the UTF-8 form of `code_point` to `out`.
// REQUIRES: code_point <= 0x10FFFF and is not a surrogate.
void AppendUtf8(char32_t code_point, std::string& out);

// Decodes the code point that starts at `pos` in `text` into `code_point`
// and advances `pos` past it. On an invalid or truncated sequence returns
// false and advances `pos` by one byte.
// REQUIRES: pos < text.size().
bool NextUtf8(std::string_view text, size_t& pos, char32_t& code_point);

// True when all of `text` is valid UTF-8.
bool IsValidUtf8(std::string_view text);

// The offset of the first byte of `text` that does not start a valid UTF-8
// sequence, or std::string_view::npos when all of it is valid. ASCII runs
// are checked eight bytes at a time.
size_t FirstInvalidUtf8(std::string_view text);

}  // namespace trellis

#endif  // TRELLIS_DATA_UTF8_H_
