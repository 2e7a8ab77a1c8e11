// trellis-tokenizer-bench: measures one tokenizer's encoding speed on one
// thread (docs/performance.md, "Tokenizers").
//
//   trellis-tokenizer-bench --tokenizer=hf:tokenizer.json --input=book.txt
//
// The whole input (or, with --by_line, each line by itself) is encoded once
// to warm the piece caches, then --passes more times; the report is the
// tokens per second of the timed passes, and whether decoding gives the
// input back.
//
//   trellis-tokenizer-bench --write_gpt2_json=gpt2.json
//
// writes GPT-2's tokenizer as a Hugging Face tokenizer.json (from
// --tokenizer_dir) and exits, so the hf tokenizer can be timed on GPT-2.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "data/gpt2_tokenizer_json.h"
#include "data/tokenizer.h"
#include "framework/status.h"
#include "tools/options/program_help.h"

ABSL_FLAG(std::string, tokenizer, "gpt2",
          "byte, gpt2, hf:PATH/tokenizer.json or sentencepiece:PATH.model");
ABSL_FLAG(std::string, tokenizer_dir, trellis::kDefaultGpt2AssetsDir,
          "directory with GPT-2's encoder.json and vocab.bpe");
ABSL_FLAG(std::string, input, "", "UTF-8 text file to encode");
ABSL_FLAG(int, passes, 3, "timed passes over the input (1 to 100)");
ABSL_FLAG(bool, by_line, false,
          "encode each line (with its newline) by itself instead of the "
          "whole input in one call");
ABSL_FLAG(std::string, write_gpt2_json, "",
          "write GPT-2's tokenizer.json here and exit");

namespace trellis {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

absl::Status WriteGpt2Json(const std::string& path) {
  TRELLIS_ASSIGN_OR_RETURN(
      const std::string json,
      Gpt2TokenizerJson(absl::GetFlag(FLAGS_tokenizer_dir)));
  std::ofstream out(path, std::ios::binary);
  out << json;
  out.close();
  if (!out)
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  std::printf("wrote %s\n", path.c_str());
  return absl::OkStatus();
}

absl::Status Run() {
  if (!absl::GetFlag(FLAGS_write_gpt2_json).empty()) {
    return WriteGpt2Json(absl::GetFlag(FLAGS_write_gpt2_json));
  }
  const int passes = absl::GetFlag(FLAGS_passes);
  if (passes < 1 || passes > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--passes=", passes, " is outside [1, 100]"));
  }
  if (absl::GetFlag(FLAGS_input).empty()) {
    return absl::InvalidArgumentError("give a text file with --input=PATH");
  }
  TRELLIS_ASSIGN_OR_RETURN(const std::string text,
                           ReadFile(absl::GetFlag(FLAGS_input)));
  TRELLIS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                           MakeTokenizer(absl::GetFlag(FLAGS_tokenizer),
                                         absl::GetFlag(FLAGS_tokenizer_dir)));
  std::vector<std::string_view> chunks;
  if (absl::GetFlag(FLAGS_by_line)) {
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = std::min(text.find('\n', pos), text.size() - 1) + 1;
      chunks.push_back(std::string_view(text).substr(pos, end - pos));
      pos = end;
    }
  } else {
    chunks.push_back(text);
  }
  std::vector<uint32_t> ids;
  for (std::string_view chunk : chunks) tokenizer->Encode(chunk, ids);  // warm
  double best = 0;
  double total = 0;
  for (int p = 0; p < passes; ++p) {
    ids.clear();
    const auto start = std::chrono::steady_clock::now();
    for (std::string_view chunk : chunks) tokenizer->Encode(chunk, ids);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    total += seconds;
    best = std::max(best, ids.size() / std::max(seconds, 1e-9));
  }
  TRELLIS_ASSIGN_OR_RETURN(const std::string decoded, tokenizer->Decode(ids));
  std::printf(
      "%s%s: %zu bytes -> %zu tokens; %.3f M tokens/s per thread (mean of "
      "%d passes), best %.3f M; %.2f MB/s; round trip %s\n",
      absl::GetFlag(FLAGS_tokenizer).c_str(),
      absl::GetFlag(FLAGS_by_line) ? " (by line)" : "", text.size(), ids.size(),
      ids.size() * passes / total / 1e6, passes, best / 1e6,
      text.size() * passes / total / 1e6,
      decoded == text ? "exact" : "differs");
  return absl::OkStatus();
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "measures a tokenizer's encoding speed on one thread.\n"
      "  trellis-tokenizer-bench --tokenizer=gpt2 --input=book.txt");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = trellis::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "trellis-tokenizer-bench: error: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
