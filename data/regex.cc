#include "data/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <atomic>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis {

const char kUnicodeWhiteSpaceClass[] =
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

absl::StatusOr<std::string> FromOniguruma(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? std::string(kUnicodeWhiteSpaceClass)
                        : absl::StrCat("[", kUnicodeWhiteSpaceClass, "]");
      } else if (next == 'S') {
        if (in_class) {
          return absl::InvalidArgumentError(
              absl::StrCat("regex '", std::string(pattern),
                           "': \\S inside a character class at offset ", i - 1,
                           " is not supported"));
        }
        out += absl::StrCat("[^", kUnicodeWhiteSpaceClass, "]");
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == '[' && in_class) {
      return absl::InvalidArgumentError(absl::StrCat(
          "regex '", std::string(pattern),
          "': nested character class at offset ", i, " is not supported"));
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  std::string pattern;
  std::atomic<bool> gave_up{false};  // said once per pattern
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::unique_ptr<Code> code) : code_(std::move(code)) {}
Regex::~Regex() = default;

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(
    std::string_view pattern) {
  auto code = std::make_unique<Code>();
  int error = 0;
  PCRE2_SIZE offset = 0;
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                             pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                             &error, &offset, nullptr);
  if (code->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat(
        "regex '", std::string(pattern), "' does not compile at offset ",
        offset, ": ", reinterpret_cast<const char*>(message)));
  }
  code->jit = pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE) == 0;
  code->pattern = std::string(pattern);
  return std::unique_ptr<Regex>(new Regex(std::move(code)));
}

void Regex::ForEachMatch(
    std::string_view text,
    const std::function<void(size_t, size_t)>& on_match) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_->code, nullptr),
      &pcre2_match_data_free);
  TRELLIS_CHECK(data != nullptr) << "out of memory";
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = PCRE2_ERROR_JIT_STACKLIMIT;
    if (code_->jit) {
      rc = pcre2_jit_match(code_->code, subject, text.size(), pos, 0,
                           data.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_JIT,
                       data.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      // A pattern that backtracks catastrophically, such as (a+)+$ on a
      // run of a's, hits PCRE2's match, depth or heap limit: the rest of
      // the text is left unmatched, said once, rather than stopping the
      // program (which one such pattern in a tokenizer.json did).
      if (!code_->gave_up.exchange(true)) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        std::fprintf(stderr,
                     "trellis: regex '%s' gave up at byte %zu of a %zu-byte "
                     "text (%s); the rest of it is left unmatched\n",
                     code_->pattern.c_str(), pos, text.size(),
                     reinterpret_cast<const char*>(message));
      }
      return;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t start = ovector[0], end = ovector[1];
    TRELLIS_CHECK(start >= pos && end >= start && end <= text.size());
    if (end > start) {
      on_match(start, end);
      pos = end;
      continue;
    }
    // An empty match: step over one UTF-8 character and search again.
    pos = start + 1;
    while (pos < text.size() &&
           (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) {
      ++pos;
    }
  }
}

}  // namespace trellis
