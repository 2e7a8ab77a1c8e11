#include "data/jsonl_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/utf8.h"
#include "framework/status.h"
#include "nlohmann/json.hpp"

namespace trellis {
namespace {

constexpr size_t kBlockBytes = size_t{1} << 20;

bool IsBlankLine(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
  });
}

}  // namespace

bool IsJsonlPath(const std::string& path) {
  return absl::EndsWith(StripCompressionSuffix(path), ".jsonl");
}

absl::StatusOr<std::string> JsonlText(std::string_view line,
                                      const std::string& key) {
  const size_t bad = FirstInvalidUtf8(line);
  if (bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid UTF-8 at byte ", bad + 1));
  }
  // (The JSON parser would take a NUL for the end of its input and drop
  // the rest of the line; JSON has no raw NUL.)
  const size_t nul = line.find('\0');
  if (nul != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("not valid JSON (a NUL byte at byte ", nul + 1, ")"));
  }
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not valid JSON (at byte ", e.byte, ")"));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a JSON ", json.type_name(), ", not an object"));
  }
  const auto it = json.find(key);
  if (it == json.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no key \"", key, "\" (choose the key with --json_key)"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", key, "\" is a JSON ", it->type_name(), ", not a string"));
  }
  return std::move(it->get_ref<std::string&>());
}

JsonlReader::JsonlReader(std::unique_ptr<CompressedReader> input,
                         std::string key, size_t max_line_bytes)
    : input_(std::move(input)),
      key_(std::move(key)),
      block_(kBlockBytes),
      max_line_bytes_(max_line_bytes) {}

absl::StatusOr<bool> JsonlReader::SkipRestOfLine() {
  while (true) {
    if (block_pos_ == block_end_) {
      if (at_end_) return false;
      TRELLIS_ASSIGN_OR_RETURN(block_end_,
                               input_->Read(block_.data(), block_.size()));
      block_pos_ = 0;
      if (block_end_ == 0) {
        at_end_ = true;
        return false;
      }
    }
    const char* begin = block_.data() + block_pos_;
    const size_t left = block_end_ - block_pos_;
    const char* newline =
        static_cast<const char*>(std::memchr(begin, '\n', left));
    if (newline != nullptr) {
      block_pos_ += newline - begin + 1;
      return true;
    }
    block_pos_ = block_end_;
  }
}

absl::StatusOr<bool> JsonlReader::NextLine() {
  line_.clear();
  overlong_ = false;
  if (skip_rest_) {
    skip_rest_ = false;
    TRELLIS_ASSIGN_OR_RETURN(const bool more, SkipRestOfLine());
    if (!more) return false;
  }
  bool any = false;
  while (true) {
    if (block_pos_ == block_end_) {
      if (at_end_) return any;
      TRELLIS_ASSIGN_OR_RETURN(block_end_,
                               input_->Read(block_.data(), block_.size()));
      block_pos_ = 0;
      if (block_end_ == 0) {
        at_end_ = true;
        // A last line without "\n" still counts.
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        return any;
      }
    }
    any = true;
    const char* begin = block_.data() + block_pos_;
    const size_t left = block_end_ - block_pos_;
    const char* newline =
        static_cast<const char*>(std::memchr(begin, '\n', left));
    const size_t take = newline != nullptr ? newline - begin : left;
    if (line_.size() + take > max_line_bytes_) {
      // Refused now; the next call skips the rest of it.
      block_pos_ += take;
      if (newline != nullptr) {
        ++block_pos_;
      } else {
        skip_rest_ = true;
      }
      line_.clear();
      overlong_ = true;
      return true;
    }
    line_.append(begin, take);
    block_pos_ += take;
    if (newline != nullptr) {
      ++block_pos_;
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      return true;
    }
  }
}

absl::StatusOr<bool> JsonlReader::Next(std::string& text) {
  while (true) {
    TRELLIS_ASSIGN_OR_RETURN(const bool more, NextLine());
    if (!more) return false;
    ++line_number_;
    if (overlong_) {
      return absl::InvalidArgumentError(absl::StrCat(
          input_->path(), ":", line_number_, ": longer than ", max_line_bytes_,
          " bytes (a JSON Lines record ends with a newline)"));
    }
    if (IsBlankLine(line_)) continue;
    absl::StatusOr<std::string> value = JsonlText(line_, key_);
    if (!value.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          input_->path(), ":", line_number_, ": ", value.status().message()));
    }
    text = *std::move(value);
    return true;
  }
}

}  // namespace trellis
