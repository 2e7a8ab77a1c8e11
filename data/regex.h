// A compiled PCRE2 pattern that finds every match in UTF-8 text, for the
// pre-tokenizers of the hf tokenizer.
//
// Patterns are compiled with UTF, UCP (Unicode properties for \w, \d, \b)
// and MATCH_INVALID_UTF, JIT-compiled when the platform allows, and fall
// back to the interpreter where the JIT stack runs out. Tokenizer patterns
// are written for Oniguruma (the engine of Hugging Face's tokenizers), whose
// `\s` is Unicode White_Space; FromOniguruma rewrites `\s` and `\S` into that
// explicit class so PCRE2 agrees with it.
//
// Thread safety: immutable after construction (but for the flag that the
// limit warning was printed, which is atomic); ForEachMatch may run on many
// threads at once (match data is per call).
#ifndef TRELLIS_DATA_REGEX_H_
#define TRELLIS_DATA_REGEX_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace trellis {

// Unicode White_Space as the body of a PCRE2 character class (no brackets).
extern const char kUnicodeWhiteSpaceClass[];

// The Oniguruma pattern `pattern` in PCRE2 syntax: `\s` and `\S` become the
// Unicode White_Space class and its complement (inside a bracketed class,
// `\s` becomes the class body; `\S` there is InvalidArgument). Other syntax
// is passed through; PCRE2 and Oniguruma agree on what tokenizers use
// (`\p{L}`, `(?i:...)`, `(?!...)`, `{m,n}`, `\r\n`).
absl::StatusOr<std::string> FromOniguruma(std::string_view pattern);

class Regex {
 public:
  // Compiles a PCRE2 pattern; InvalidArgument names the offset and reason.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(
      std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(start, end) for each non-empty, non-overlapping match of
  // the pattern in `text`, left to right (byte offsets). Invalid UTF-8 bytes
  // are never inside a match. A pattern that backtracks past PCRE2's match
  // limits (catastrophically) ends the matches there, with a line to
  // stderr the first time.
  void ForEachMatch(std::string_view text,
                    const std::function<void(size_t, size_t)>& on_match) const;

 private:
  struct Code;
  explicit Regex(std::unique_ptr<Code> code);
  std::unique_ptr<Code> code_;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_REGEX_H_
