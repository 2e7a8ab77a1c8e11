// Shared by the hf tokenizer tests: small hand-written tokenizer.json files
// in the styles of Llama 3 (tiktoken-style split regex, ByteLevel, special
// tokens, ignore_merges) and Llama 2 (Prepend/Replace normalizer, byte
// fallback, Replace/ByteFallback/Fuse/Strip decoder), mixed test texts, and
// the JavaScript reference (tests/data/hf_tokenizer_reference.mjs).
#ifndef TRELLIS_TESTS_DATA_HF_TOKENIZER_TEST_UTIL_H_
#define TRELLIS_TESTS_DATA_HF_TOKENIZER_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/hf_components.h"
#include "data/utf8.h"

namespace trellis::hf_testing {

using nlohmann::json;

inline constexpr char kLlama3Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

inline constexpr const char* kLlama3Specials[] = {
    "<|begin_of_text|>",   "<|end_of_text|>",   "<|reserved_special_token_0|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};

// Adds `merges` ("left right", each side already in `vocab`) and their
// results to a BPE model.
inline void AddMerges(const std::vector<std::string>& merges, json& vocab,
                      json& merge_list) {
  for (const std::string& merge : merges) {
    const size_t space = merge.find(' ');
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    EXPECT_TRUE(vocab.contains(left) && vocab.contains(right)) << merge;
    if (!vocab.contains(left + right)) vocab[left + right] = vocab.size();
    merge_list.push_back(merge);
  }
}

inline json AddedToken(uint32_t id, const std::string& content) {
  return {{"id", id},        {"content", content}, {"single_word", false},
          {"lstrip", false}, {"rstrip", false},    {"normalized", false},
          {"special", true}};
}

inline std::string Llama3StyleJson() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    AppendUtf8(hf::ByteLevelAlphabet()[b], symbol);
    vocab[symbol] = b;
  }
  json merges = json::array();
  AddMerges(
      {"Ġ t", "h e",   "Ġt he", "i n",  "a n",  "Ġ a",  "e r", "o n",   "Ġ o",
       "r e", "Ġ s",   "Ġ w",   "a t",  "e n",  "Ġ b",  "Ġ c", "o u",   "Ġa n",
       "n d", "Ġan d", "Ġ f",   "Ġo f", "in g", "Ġ h",  "Ġ i", "Ġi s",  "e s",
       "l l", "Ġ l",   "o r",   "1 2",  "12 3", "Ċ Ċ",  "Ġ Ġ", "ĠĠ ĠĠ", "' s",
       "T h", "Th e",  "Ã ©",   "Ġ G",  "o d",  "ĠG od"},
      vocab, merges);
  vocab["Ġworld"] = vocab.size();  // reachable only through ignore_merges
  const uint32_t first_special = static_cast<uint32_t>(vocab.size());
  json added = json::array();
  for (uint32_t i = 0; i < std::size(kLlama3Specials); ++i) {
    added.push_back(AddedToken(first_special + i, kLlama3Specials[i]));
  }
  json split = {{"type", "Split"},
                {"pattern", {{"Regex", kLlama3Pattern}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", false}};
  json bos = {{"id", "<|begin_of_text|>"},
              {"ids", {first_special}},
              {"tokens", {"<|begin_of_text|>"}}};
  json template_processing = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens", {{"<|begin_of_text|>", bos}}}};
  json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", added},
               {"normalizer", nullptr},
               {"pre_tokenizer",
                {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}},
               {"post_processor",
                {{"type", "Sequence"},
                 {"processors", {byte_level, template_processing}}}},
               {"decoder", byte_level},
               {"model",
                {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"ignore_merges", true},
                 {"vocab", vocab},
                 {"merges", merges}}}};
  return root.dump(1);
}

inline std::string Llama2StyleJson() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = vocab.size();
  }
  const std::string letters =
      "etaoinshrdlucmfwygpbvkxjqzTAIHGLSW.,;:!?'0123456789";
  vocab["▁"] = vocab.size();
  for (char c : letters) vocab[std::string(1, c)] = vocab.size();
  json merges = json::array();
  AddMerges(
      {"▁ t",   "h e", "▁t he", "i n",  "a n", "▁ a", "e r",   "o n",  "▁ o",
       "r e",   "▁ s", "▁ w",   "a t",  "e n", "▁ b", "o u",   "▁a n", "n d",
       "▁an d", "▁ f", "▁o f",  "in g", "▁ G", "o d", "▁G od", "▁ ▁"},
      vocab, merges);
  json added = json::array();
  added.push_back(AddedToken(0, "<unk>"));
  added.push_back(AddedToken(1, "<s>"));
  added.push_back(AddedToken(2, "</s>"));
  json bos = {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}};
  json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"},
           {"pattern", {{"String", " "}}},
           {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", json::array()},
        {"special_tokens", {{"<s>", bos}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"},
           {"pattern", {{"String", "▁"}}},
           {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  return root.dump(1);
}

// Mixed texts: English, contractions in both cases, numbers, whitespace
// runs, other scripts, emoji, and (when `specials` is given) those special
// tokens spliced in. Avoids U+0085, U+FEFF and U+180E (see
// tokenizer_reference_test.cc).
inline std::vector<std::string> MixedTexts(
    int count, const std::vector<std::string>& specials) {
  static constexpr const char* kFragments[] = {
      "In the beginning God created the heaven and the earth.",
      "It's",
      "IT'S",
      "we've",
      "They'LL",
      "she'd",
      "rock'n'roll",
      " ",
      "  ",
      "    ",
      "\n",
      "\n\n",
      "\t",
      "\r\n",
      " \n ",
      "0",
      "42",
      "123456789",
      "3.14159",
      "1,000,000",
      "x86_64",
      "...",
      "?!",
      "---",
      "(",
      ")",
      "\"",
      ",",
      ";",
      "https://example.org/a?b=c",
      "snake_case",
      "CamelCase",
      "naïve café",
      "Ünïcödé",
      "Привет мир",
      "Γειά",
      "こんにちは",
      "世界",
      "你好，",
      "안녕",
      "مرحبا",
      "हिन्दी",
      "½²",
      "\u00a0",
      "\u3000",
      "—",
      "“quoted”",
      "…",
      "😀",
      "👍🏽",
      "👨‍👩‍👧",
      "€£¥",
      "the world",
      " world",
      "def f(x):\n    return x ** 2\n",
      "aaaaaaaaaaaaaaaa",
      "e\u0301"};
  std::mt19937 rng(20261123);
  std::vector<std::string> texts;
  for (int t = 0; t < count; ++t) {
    std::string text;
    const int pieces = 3 + rng() % 30;
    for (int i = 0; i < pieces; ++i) {
      if (!specials.empty() && rng() % 8 == 0) {
        text += specials[rng() % specials.size()];
      } else {
        text += kFragments[rng() % std::size(kFragments)];
      }
      if (rng() % 3 == 0) text += ' ';
    }
    texts.push_back(std::move(text));
  }
  return texts;
}

// A file of this process's own scratch directory: ctest runs the tests of
// one binary as parallel processes, which must not share file names.
inline std::string WriteTemp(const std::string& name,
                             const std::string& contents) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      ("hf_tokenizer_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

// Runs the JavaScript reference on `texts` with `tokenizer_json` (a path).
// Returns its parsed output, or null with `skip` saying why it cannot run
// here (no node, no npm or no network), or with `error` when it ran and
// failed.
inline json RunReference(const std::string& tokenizer_json,
                         const std::vector<std::string>& texts,
                         std::string& skip, std::string& error) {
  const std::string root = TRELLIS_SOURCE_DIR;
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    skip = "node is not installed; cannot run the tokenizer.json reference";
    return nullptr;
  }
  const std::string package = root + "/third_party_assets/tokenizers-js";
  if (!std::filesystem::exists(package + "/dist/tokenizers.mjs") &&
      std::system(
          ("'" + root + "/scripts/fetch-tokenizers-js.sh' >&2").c_str()) != 0) {
    skip = "scripts/fetch-tokenizers-js.sh failed (no npm or no network)";
    return nullptr;
  }
  const std::string input = WriteTemp("in.json", json(texts).dump());
  const std::string output = input + ".out";
  const std::string command =
      "node '" + root + "/tests/data/hf_tokenizer_reference.mjs' '" + package +
      "' '" + tokenizer_json + "' < '" + input + "' > '" + output + "'";
  if (std::system(command.c_str()) != 0) {
    error = "reference failed: " + command;
    return nullptr;
  }
  std::ifstream in(output, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return json::parse(contents.str());
}

}  // namespace trellis::hf_testing

#endif  // TRELLIS_TESTS_DATA_HF_TOKENIZER_TEST_UTIL_H_
