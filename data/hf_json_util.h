// Helpers shared by the files that parse tokenizer.json components
// (hf_components.cc, hf_decoders.cc): error messages, typed fields, and the
// String-or-Regex patterns of Split and Replace. Internal to data/.
//
// Thread safety: Pattern is immutable after Parse.
#ifndef TRELLIS_DATA_HF_JSON_UTIL_H_
#define TRELLIS_DATA_HF_JSON_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "data/regex.h"
#include "framework/status.h"

namespace trellis::hf::internal {

using nlohmann::json;

inline absl::Status Malformed(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.json: ", path, ": ", what));
}

inline absl::StatusOr<std::string> TypeOf(const json& j,
                                          const std::string& path) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Malformed(path, "expected an object with a string \"type\"");
  }
  return j["type"].get<std::string>();
}

template <typename T>
inline absl::StatusOr<T> Field(const json& j, const char* key,
                               const std::string& path, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // get<T>() would cast a float (undefined past T's range) or wrap a
    // wider integer.
    using Limits = std::numeric_limits<T>;
    const bool fits =
        v.is_number_unsigned()
            ? v.get<uint64_t>() <= static_cast<uint64_t>(Limits::max())
            : v.is_number_integer() && v.get<int64_t>() >= Limits::min() &&
                  v.get<int64_t>() <= Limits::max();
    if (!fits) {
      return Malformed(absl::StrCat(path, ".", key),
                       absl::StrCat("is ", v.dump(), ", not an integer in [",
                                    Limits::min(), ", ", Limits::max(), "]"));
    }
    return static_cast<T>(v.is_number_unsigned() ? v.get<uint64_t>()
                                                 : v.get<int64_t>());
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      return Malformed(absl::StrCat(path, ".", key), "has the wrong JSON type");
    }
  }
}

// A Split/Replace pattern: {"String": "..."} or {"Regex": "..."}.
class Pattern {
 public:
  static absl::StatusOr<Pattern> Parse(const json& j, const std::string& path) {
    Pattern p;
    if (j.is_object() && j.contains("String") && j["String"].is_string()) {
      p.literal_ = j["String"].get<std::string>();
      if (p.literal_.empty()) return Malformed(path, "empty String pattern");
      return p;
    }
    if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
      absl::StatusOr<std::string> pcre =
          FromOniguruma(j["Regex"].get<std::string>());
      if (!pcre.ok()) return Malformed(path, pcre.status().message());
      absl::StatusOr<std::unique_ptr<Regex>> regex = Regex::Compile(*pcre);
      if (!regex.ok()) return Malformed(path, regex.status().message());
      p.regex_ = std::shared_ptr<Regex>(std::move(regex).value());
      return p;
    }
    return Malformed(path, "expected {\"String\": ...} or {\"Regex\": ...}");
  }

  // At most how many bytes replacing each match with `content_bytes` bytes
  // makes of each byte of text (matches span at least one byte).
  double ReplaceGrowth(size_t content_bytes) const {
    const double match_bytes = regex_ != nullptr ? 1.0 : literal_.size();
    return std::max(1.0, static_cast<double>(content_bytes) / match_bytes);
  }

  // Calls on_match(start, end) for each match, left to right.
  void ForEachMatch(std::string_view text,
                    const std::function<void(size_t, size_t)>& on_match) const {
    if (regex_ != nullptr) return regex_->ForEachMatch(text, on_match);
    for (size_t pos = text.find(literal_); pos != std::string_view::npos;
         pos = text.find(literal_, pos + literal_.size())) {
      on_match(pos, pos + literal_.size());
    }
  }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

inline std::string ReplaceAll(std::string_view text, const Pattern& pattern,
                              std::string_view content) {
  std::string out;
  size_t last = 0;
  pattern.ForEachMatch(text, [&](size_t start, size_t end) {
    out.append(text.substr(last, start - last));
    out.append(content);
    last = end;
  });
  out.append(text.substr(last));
  return out;
}

// Parses each element of the array j[key] with `parse`, naming its path.
template <typename T, typename ParseOne>
inline absl::StatusOr<std::vector<std::unique_ptr<T>>> ParseList(
    const json& j, const char* key, const std::string& path, ParseOne parse) {
  if (!j.contains(key) || !j[key].is_array()) {
    return Malformed(path, absl::StrCat("expected an array \"", key, "\""));
  }
  std::vector<std::unique_ptr<T>> steps;
  for (size_t i = 0; i < j[key].size(); ++i) {
    TRELLIS_ASSIGN_OR_RETURN(
        std::unique_ptr<T> step,
        parse(j[key][i], absl::StrCat(path, ".", key, "[", i, "]")));
    if (step != nullptr) steps.push_back(std::move(step));
  }
  return steps;
}

// Metaspace's prepend_scheme, or its older add_prefix_space.
inline absl::StatusOr<std::string> MetaspaceScheme(const json& j,
                                                   const std::string& path) {
  if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
    std::string scheme = j["prepend_scheme"].get<std::string>();
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return Malformed(path,
                       absl::StrCat("unknown prepend_scheme '", scheme, "'"));
    }
    return scheme;
  }
  TRELLIS_ASSIGN_OR_RETURN(const bool add,
                           Field<bool>(j, "add_prefix_space", path, true));
  return std::string(add ? "always" : "never");
}

}  // namespace trellis::hf::internal

#endif  // TRELLIS_DATA_HF_JSON_UTIL_H_
