// The decoders of a tokenizer.json (hf_components.h): token strings back to
// text.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_replace.h"
#include "data/hf_components.h"
#include "data/hf_json_util.h"
#include "data/utf8.h"

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

// ---- decoders ----

class DecoderSequence final : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void Apply(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->Apply(tokens);
  }
  double MaxOutputBytes(double bytes) const override {
    for (const auto& step : steps_) bytes = step->MaxOutputBytes(bytes);
    return bytes;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

class ByteLevelDecoder final : public Decoder {
 public:
  void Apply(std::vector<std::string>& tokens) const override {
    const std::vector<char32_t>& alphabet = ByteLevelAlphabet();
    std::vector<int> byte_of(0x144, -1);
    for (int b = 0; b < 256; ++b) byte_of[alphabet[b]] = b;
    for (std::string& token : tokens) {
      std::string bytes;
      bool ok = true;
      for (size_t pos = 0; pos < token.size() && ok;) {
        char32_t c;
        ok = NextUtf8(token, pos, c) && c < byte_of.size() && byte_of[c] >= 0;
        if (ok) bytes.push_back(static_cast<char>(byte_of[c]));
      }
      if (ok) token = std::move(bytes);  // else: kept as it is, like HF
    }
  }
  // Each character becomes at most one byte.
  double MaxOutputBytes(double bytes) const override { return bytes; }
};

class ByteFallbackDecoder final : public Decoder {
 public:
  // Runs of <0xXX> tokens become their bytes when those are valid UTF-8,
  // else one U+FFFD per byte, as Hugging Face's ByteFallback does.
  void Apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_length = 0;
    const auto flush = [&] {
      if (run_length == 0) return;
      if (IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_length; ++i) out.push_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_length = 0;
    };
    for (std::string& token : tokens) {
      const int byte = FallbackByte(token);
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_length;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }
  // A 6-byte <0xXX> becomes its byte or a 3-byte U+FFFD.
  double MaxOutputBytes(double bytes) const override { return bytes; }
};

class FuseDecoder final : public Decoder {
 public:
  void Apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& token : tokens) all += token;
    tokens.assign(1, std::move(all));
  }
  double MaxOutputBytes(double bytes) const override { return bytes; }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void Apply(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::string_view t = token;
      for (int i = 0; i < start_ && t.starts_with(content_); ++i) {
        t.remove_prefix(content_.size());
      }
      for (int i = 0; i < stop_ && t.ends_with(content_); ++i) {
        t.remove_suffix(content_.size());
      }
      token = std::string(t);
    }
  }
  double MaxOutputBytes(double bytes) const override { return bytes; }

 private:
  std::string content_;
  int start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Apply(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      token = ReplaceAll(token, pattern_, content_);
    }
  }
  double MaxOutputBytes(double bytes) const override {
    return bytes * pattern_.ReplaceGrowth(content_.size());
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void Apply(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = absl::StrReplaceAll(tokens[i], {{replacement_, " "}});
      if (i == 0 && strip_first_ && tokens[i].starts_with(' ')) {
        tokens[i].erase(0, 1);
      }
    }
  }
  // Each replacement (never empty: absl skips an empty one) becomes a space.
  double MaxOutputBytes(double bytes) const override { return bytes; }

 private:
  std::string replacement_;
  bool strip_first_;
};

}  // namespace

int FallbackByte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') {
    return -1;
  }
  int value = 0;
  for (char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const json& j,
                                                      const std::string& path) {
  if (j.is_null()) return nullptr;
  TRELLIS_ASSIGN_OR_RETURN(const std::string type, TypeOf(j, path));
  if (type == "Sequence") {
    TRELLIS_ASSIGN_OR_RETURN(
        auto steps, ParseList<Decoder>(j, "decoders", path, ParseDecoder));
    return std::make_unique<DecoderSequence>(std::move(steps));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    TRELLIS_ASSIGN_OR_RETURN(std::string content,
                             Field<std::string>(j, "content", path, " "));
    // Each removal of "" removed nothing: a start of 2^31 - 1 spun that
    // many times for every token.
    if (content.empty()) {
      return Malformed(path + ".content",
                       "is empty; Strip removes a character");
    }
    TRELLIS_ASSIGN_OR_RETURN(const int start, Field<int>(j, "start", path, 0));
    TRELLIS_ASSIGN_OR_RETURN(const int stop, Field<int>(j, "stop", path, 0));
    return std::make_unique<StripDecoder>(std::move(content), start, stop);
  }
  if (type == "Replace") {
    TRELLIS_ASSIGN_OR_RETURN(
        Pattern pattern,
        Pattern::Parse(j.value("pattern", json()), path + ".pattern"));
    TRELLIS_ASSIGN_OR_RETURN(std::string content,
                             Field<std::string>(j, "content", path, ""));
    return std::make_unique<ReplaceDecoder>(std::move(pattern),
                                            std::move(content));
  }
  if (type == "Metaspace") {
    TRELLIS_ASSIGN_OR_RETURN(std::string replacement,
                             Field<std::string>(j, "replacement", path, "▁"));
    TRELLIS_ASSIGN_OR_RETURN(std::string scheme, MetaspaceScheme(j, path));
    return std::make_unique<MetaspaceDecoder>(std::move(replacement),
                                              scheme != "never");
  }
  return Unsupported("decoder", type, path);
}

}  // namespace trellis::hf
