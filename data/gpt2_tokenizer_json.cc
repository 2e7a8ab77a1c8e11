#include "data/gpt2_tokenizer_json.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trellis {
namespace {

using nlohmann::json;

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        path.string(), " not found; run scripts/fetch-gpt2-assets.sh"));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

json ByteLevel(bool add_prefix_space, bool trim_offsets) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", true}};
}

}  // namespace

absl::StatusOr<std::string> Gpt2TokenizerJson(const std::string& assets_dir) {
  const std::filesystem::path dir(assets_dir);
  absl::StatusOr<std::string> encoder_text = ReadFile(dir / "encoder.json");
  if (!encoder_text.ok()) return encoder_text.status();
  absl::StatusOr<std::string> merges_text = ReadFile(dir / "vocab.bpe");
  if (!merges_text.ok()) return merges_text.status();
  json vocab;
  try {
    vocab = json::parse(*encoder_text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        (dir / "encoder.json").string(), " is not JSON: ", e.what()));
  }
  const auto eot = vocab.find("<|endoftext|>");
  if (!vocab.is_object() || eot == vocab.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        (dir / "encoder.json").string(), " has no <|endoftext|> token"));
  }
  json merges = json::array();
  std::string_view rest = *merges_text;
  for (bool first = true; !rest.empty(); first = false) {
    const size_t newline = std::min(rest.find('\n'), rest.size());
    std::string_view line = rest.substr(0, newline);
    rest.remove_prefix(std::min(newline + 1, rest.size()));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (first && line.starts_with("#version"))) continue;
    merges.push_back(std::string(line));
  }
  json added = json::array();
  added.push_back({{"id", *eot},
                   {"content", "<|endoftext|>"},
                   {"single_word", false},
                   {"lstrip", false},
                   {"rstrip", false},
                   {"normalized", true},
                   {"special", true}});
  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", std::move(added)},
               {"normalizer", nullptr},
               {"pre_tokenizer", ByteLevel(false, true)},
               {"post_processor", ByteLevel(true, false)},
               {"decoder", ByteLevel(true, true)},
               {"model", std::move(model)}};
  return root.dump();
}

}  // namespace trellis
