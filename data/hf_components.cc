#include "data/hf_components.h"

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "data/hf_json_util.h"
#include "data/regex.h"
#include "data/utf8.h"
#include "framework/status.h"

namespace trellis::hf {
namespace {

using internal::Field;
using internal::json;
using internal::Malformed;
using internal::MetaspaceScheme;
using internal::ParseList;
using internal::Pattern;
using internal::ReplaceAll;
using internal::TypeOf;

// Files have a few; 10,000 steps overflowed the stack.
constexpr size_t kMaxPreTokenizerSteps = 64;

std::string Gpt2Pattern() {
  const std::string ws = kUnicodeWhiteSpaceClass;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + ws +
         "\\p{L}\\p{N}]+|[" + ws + "]+(?![^" + ws + "])|[" + ws + "]+";
}

// ---- normalizers ----

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void Apply(std::string& text) const override {
    for (const auto& step : steps_) step->Apply(text);
  }
  double MaxOutputBytes(double bytes) const override {
    for (const auto& step : steps_) bytes = step->MaxOutputBytes(bytes);
    return bytes;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void Apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }
  double MaxOutputBytes(double bytes) const override {
    return bytes + static_cast<double>(prefix_.size());
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Apply(std::string& text) const override {
    text = ReplaceAll(text, pattern_, content_);
  }
  double MaxOutputBytes(double bytes) const override {
    return bytes * pattern_.ReplaceGrowth(content_.size());
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// ---- pre-tokenizers ----

class PreTokenizerSequence final : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> s)
      : steps_(std::move(s)) {}
  void Split(std::string_view text, bool first,
             const PieceSink& emit) const override {
    Run(0, text, first, emit);
  }
  bool byte_level() const override {
    for (const auto& step : steps_) {
      if (step->byte_level()) return true;
    }
    return false;
  }
  std::vector<std::unique_ptr<PreTokenizer>> TakeSteps() && {
    return std::move(steps_);
  }

 private:
  void Run(size_t step, std::string_view text, bool first,
           const PieceSink& emit) const {
    if (step == steps_.size()) return emit(text);
    bool piece_first = first;
    steps_[step]->Split(text, first, [&](std::string_view piece) {
      Run(step + 1, piece, piece_first, emit);
      piece_first = false;
    });
  }
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

enum class Behavior {
  kIsolated,
  kRemoved,
  kMergedWithPrevious,
  kMergedWithNext
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void Split(std::string_view text, bool,
             const PieceSink& emit) const override {
    // Spans covering `text`: (start, end, is a match).
    struct Span {
      size_t start, end;
      bool match;
    };
    std::vector<Span> spans;
    size_t last = 0;
    pattern_.ForEachMatch(text, [&](size_t start, size_t end) {
      if (start > last) spans.push_back({last, start, invert_});
      spans.push_back({start, end, !invert_});
      last = end;
    });
    if (last < text.size()) spans.push_back({last, text.size(), invert_});
    size_t piece_start = 0;  // MergedWith*: the open piece
    for (size_t i = 0; i < spans.size(); ++i) {
      const Span& s = spans[i];
      const auto view = [&](size_t a, size_t b) {
        return text.substr(a, b - a);
      };
      switch (behavior_) {
        case Behavior::kIsolated:
          emit(view(s.start, s.end));
          break;
        case Behavior::kRemoved:
          if (!s.match) emit(view(s.start, s.end));
          break;
        case Behavior::kMergedWithPrevious:
          if (s.match || i + 1 == spans.size()) {
            emit(view(piece_start, s.end));
            piece_start = s.end;
          }
          break;
        case Behavior::kMergedWithNext:
          if (s.match && s.start > piece_start) {
            emit(view(piece_start, s.start));
            piece_start = s.start;
          }
          if (i + 1 == spans.size()) emit(view(piece_start, s.end));
          break;
      }
    }
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void Split(std::string_view text, bool,
             const PieceSink& emit) const override {
    std::string prefixed;
    if (add_prefix_space_ && !text.starts_with(' ')) {
      prefixed.reserve(text.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(text);
      text = prefixed;
    }
    if (regex_ == nullptr) return emit(text);
    size_t last = 0;
    regex_->ForEachMatch(text, [&](size_t start, size_t end) {
      // Bytes the pattern skipped are invalid UTF-8: a piece of their own.
      if (start > last) emit(text.substr(last, start - last));
      emit(text.substr(start, end - start));
      last = end;
    });
    if (last < text.size()) emit(text.substr(last));
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, std::string scheme, bool split)
      : replacement_(std::move(replacement)),
        scheme_(std::move(scheme)),
        split_(split) {}
  void Split(std::string_view text, bool first,
             const PieceSink& emit) const override {
    std::string s = absl::StrReplaceAll(
        absl::string_view(text.data(), text.size()), {{" ", replacement_}});
    const bool prepend = scheme_ == "always" || (scheme_ == "first" && first);
    if (prepend && !s.starts_with(replacement_)) s.insert(0, replacement_);
    if (!split_) return emit(s);
    std::string_view rest = s;
    while (!rest.empty()) {
      const size_t next = rest.find(replacement_, 1);
      emit(rest.substr(0, next));
      if (next == std::string_view::npos) break;
      rest.remove_prefix(next);
    }
  }

 private:
  std::string replacement_;
  std::string scheme_;
  bool split_;
};

}  // namespace

absl::Status Unsupported(absl::string_view component, absl::string_view type,
                         const std::string& path) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", component,
                                                 " type '", type, "' at ", path,
                                                 " is not supported"));
}

const std::vector<char32_t>& ByteLevelAlphabet() {
  static const std::vector<char32_t>* const table = [] {
    auto* t = new std::vector<char32_t>(256);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      (*t)[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return *table;
}

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(
    const json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  TRELLIS_ASSIGN_OR_RETURN(const std::string type, TypeOf(j, path));
  if (type == "Sequence") {
    TRELLIS_ASSIGN_OR_RETURN(
        auto steps,
        ParseList<Normalizer>(j, "normalizers", path, ParseNormalizer));
    return std::make_unique<NormalizerSequence>(std::move(steps));
  }
  if (type == "Prepend") {
    TRELLIS_ASSIGN_OR_RETURN(std::string prefix,
                             Field<std::string>(j, "prepend", path, ""));
    return std::make_unique<Prepend>(std::move(prefix));
  }
  if (type == "Replace") {
    TRELLIS_ASSIGN_OR_RETURN(
        Pattern pattern,
        Pattern::Parse(j.value("pattern", json()), path + ".pattern"));
    TRELLIS_ASSIGN_OR_RETURN(std::string content,
                             Field<std::string>(j, "content", path, ""));
    return std::make_unique<ReplaceNormalizer>(std::move(pattern),
                                               std::move(content));
  }
  return Unsupported("normalizer", type, path);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(
    const json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  TRELLIS_ASSIGN_OR_RETURN(const std::string type, TypeOf(j, path));
  if (type == "Sequence") {
    TRELLIS_ASSIGN_OR_RETURN(
        auto parsed,
        ParseList<PreTokenizer>(j, "pretokenizers", path, ParsePreTokenizer));
    // A Sequence runs its steps by recursion, a level each; one inside it
    // runs as its own steps in its place (already flattened when parsed).
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (std::unique_ptr<PreTokenizer>& step : parsed) {
      if (auto* inner = dynamic_cast<PreTokenizerSequence*>(step.get())) {
        for (auto& inner_step : std::move(*inner).TakeSteps()) {
          steps.push_back(std::move(inner_step));
        }
      } else {
        steps.push_back(std::move(step));
      }
    }
    if (steps.size() > kMaxPreTokenizerSteps) {
      return Malformed(path, absl::StrCat("runs ", steps.size(),
                                          " pre-tokenizers; trellis runs at "
                                          "most ",
                                          kMaxPreTokenizerSteps));
    }
    return std::make_unique<PreTokenizerSequence>(std::move(steps));
  }
  if (type == "ByteLevel") {
    TRELLIS_ASSIGN_OR_RETURN(const bool prefix,
                             Field<bool>(j, "add_prefix_space", path, true));
    TRELLIS_ASSIGN_OR_RETURN(const bool use_regex,
                             Field<bool>(j, "use_regex", path, true));
    std::unique_ptr<Regex> regex;
    if (use_regex) {
      TRELLIS_ASSIGN_OR_RETURN(regex, Regex::Compile(Gpt2Pattern()));
    }
    return std::make_unique<ByteLevelPreTokenizer>(prefix, std::move(regex));
  }
  if (type == "Split") {
    TRELLIS_ASSIGN_OR_RETURN(
        Pattern pattern,
        Pattern::Parse(j.value("pattern", json()), path + ".pattern"));
    TRELLIS_ASSIGN_OR_RETURN(const std::string behavior,
                             Field<std::string>(j, "behavior", path, ""));
    TRELLIS_ASSIGN_OR_RETURN(const bool invert,
                             Field<bool>(j, "invert", path, false));
    Behavior b;
    if (behavior == "Isolated") {
      b = Behavior::kIsolated;
    } else if (behavior == "Removed") {
      b = Behavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      b = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      b = Behavior::kMergedWithNext;
    } else {
      return Unsupported("Split behavior", behavior, path + ".behavior");
    }
    return std::make_unique<SplitPreTokenizer>(std::move(pattern), b, invert);
  }
  if (type == "Metaspace") {
    TRELLIS_ASSIGN_OR_RETURN(std::string replacement,
                             Field<std::string>(j, "replacement", path, "▁"));
    TRELLIS_ASSIGN_OR_RETURN(std::string scheme, MetaspaceScheme(j, path));
    TRELLIS_ASSIGN_OR_RETURN(const bool split,
                             Field<bool>(j, "split", path, true));
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement),
                                                   std::move(scheme), split);
  }
  return Unsupported("pre_tokenizer", type, path);
}

namespace {

// A post-processor's token id: an unsigned JSON integer of 32 bits, never
// a float or a wider number cast into one.
absl::StatusOr<uint32_t> TokenId(const json& j, const std::string& path) {
  if (!j.is_number_unsigned() || j.get<uint64_t>() > UINT32_MAX) {
    return Malformed(path, absl::StrCat("token id ", j.dump(),
                                        " is not an unsigned 32-bit integer"));
  }
  return static_cast<uint32_t>(j.get<uint64_t>());
}

absl::StatusOr<std::vector<uint32_t>> TemplateIds(const json& j,
                                                  const json& special,
                                                  const std::string& path) {
  const std::string name = j["SpecialToken"].value("id", "");
  if (!special.is_object() || !special.contains(name) ||
      !special[name].contains("ids") || !special[name]["ids"].is_array()) {
    return Malformed(path, absl::StrCat("special token '", name,
                                        "' is not in special_tokens"));
  }
  std::vector<uint32_t> ids;
  for (const json& id : special[name]["ids"]) {
    TRELLIS_ASSIGN_OR_RETURN(const uint32_t value, TokenId(id, path));
    ids.push_back(value);
  }
  return ids;
}

absl::StatusOr<SpecialTokenTemplate> ParseTemplate(const json& j,
                                                   const std::string& path) {
  SpecialTokenTemplate result;
  const json single = j.value("single", json());
  if (!single.is_array()) return Malformed(path, "expected a \"single\" array");
  bool after_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string item = absl::StrCat(path, ".single[", i, "]");
    if (single[i].contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    if (!single[i].contains("SpecialToken")) {
      return Malformed(item, "expected Sequence or SpecialToken");
    }
    TRELLIS_ASSIGN_OR_RETURN(
        std::vector<uint32_t> ids,
        TemplateIds(single[i], j.value("special_tokens", json()), item));
    auto& side = after_sequence ? result.suffix : result.prefix;
    side.insert(side.end(), ids.begin(), ids.end());
  }
  return result;
}

}  // namespace

absl::StatusOr<SpecialTokenTemplate> ParsePostProcessor(
    const json& j, const std::string& path) {
  if (j.is_null()) return SpecialTokenTemplate();
  TRELLIS_ASSIGN_OR_RETURN(const std::string type, TypeOf(j, path));
  if (type == "ByteLevel") return SpecialTokenTemplate();
  if (type == "TemplateProcessing") return ParseTemplate(j, path);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2) {
        return Malformed(path, "expected \"cls\" and \"sep\" as [token, id]");
      }
    }
    TRELLIS_ASSIGN_OR_RETURN(const uint32_t cls,
                             TokenId(j["cls"][1], path + ".cls"));
    TRELLIS_ASSIGN_OR_RETURN(const uint32_t sep,
                             TokenId(j["sep"][1], path + ".sep"));
    return SpecialTokenTemplate{{cls}, {sep}};
  }
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return Malformed(path, "expected an array \"processors\"");
    }
    // Each processor wraps the result of the ones before it.
    SpecialTokenTemplate result;
    for (size_t i = 0; i < j["processors"].size(); ++i) {
      TRELLIS_ASSIGN_OR_RETURN(
          SpecialTokenTemplate t,
          ParsePostProcessor(j["processors"][i],
                             absl::StrCat(path, ".processors[", i, "]")));
      result.prefix.insert(result.prefix.begin(), t.prefix.begin(),
                           t.prefix.end());
      result.suffix.insert(result.suffix.end(), t.suffix.begin(),
                           t.suffix.end());
    }
    return result;
  }
  return Unsupported("post_processor", type, path);
}

}  // namespace trellis::hf
