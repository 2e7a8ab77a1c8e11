// trellis-convert: checkpoints between Hugging Face (GPT-2 and Llama),
// llm.c (GPT-2) and trellis (docs/checkpoint-format.md).
//
//   trellis-convert --input=gpt2-hf/ --to=trellis --output=ckpt/
//   trellis-convert --input=ckpt/ --to=hf --output=gpt2-hf-again/
//   trellis-convert --input=Llama-3.2-1B/ --to=trellis --output=llama/
//   trellis-convert --input=llama/ --to=hf --output=llama-hf/
//       --dtype=bfloat16 --max_shard_size=2GB
//   trellis-convert --input=gpt2_124M.bin --to=trellis --output=ckpt/
//   trellis-convert --input=ckpt/ --to=llmc --output=gpt2_124M.bin
//   trellis-convert --input=ckpt/ --to=trellis --output=small/
//       --dtype=bfloat16 --weights_only
//   trellis-convert --input=ckpt/ --to=shards --output=shards/ --tp=2 --pp=2
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/convert/convert.h"
#include "tools/options/program_help.h"

ABSL_FLAG(std::string, input, "",
          "a Hugging Face directory (config.json + model.safetensors or "
          "model.safetensors.index.json), an "
          "llm.c .bin file, or a trellis checkpoint (save dir or step_* dir)");
ABSL_FLAG(std::string, output, "",
          "hf: a directory; llmc: a file; trellis: a save directory (the "
          "checkpoint goes to <output>/step_N); shards: a directory");
ABSL_FLAG(std::string, from, "", "hf, llmc or trellis (default: detected)");
ABSL_FLAG(std::string, to, "trellis", "hf, llmc, trellis or shards");
ABSL_FLAG(std::string, dtype, "",
          "output weights: float32, float16 or bfloat16 (default: the "
          "input's when converting back to its own format, else float32)");
ABSL_FLAG(bool, weights_only, false,
          "trellis to trellis: drop the optimizer state");
ABSL_FLAG(std::string, tokenizer, "",
          "tokenizer recorded in a checkpoint converted from hf or llmc "
          "(empty: the tokenizer.json beside a Llama model's weights, else "
          "gpt2)");
ABSL_FLAG(std::string, hf_prefix, "auto",
          "hf output: tensor name prefix, e.g. 'transformer.' or '' (auto: "
          "as the original hf input had it, else none)");
ABSL_FLAG(std::string, hf_lm_head, "auto",
          "hf output: also write the tied lm_head.weight: true, false or "
          "auto (as the original hf input had it)");
ABSL_FLAG(int64_t, padded_vocab, 0,
          "llmc output: rows of wte (0: as the original llm.c input, else "
          "the vocabulary rounded up to a multiple of 128)");
ABSL_FLAG(std::string, max_shard_size, "5GB",
          "hf output: the largest safetensors file (5GB, 500MB, 2GiB or "
          "bytes); a larger model is sharded with model.safetensors."
          "index.json");
ABSL_FLAG(int64_t, tp, 1, "shards output: tensor-parallel size");
ABSL_FLAG(int64_t, pp, 1, "shards output: pipeline-parallel size");
ABSL_FLAG(std::vector<std::string>, pp_layers, {},
          "shards output: layers per stage (default: even)");
ABSL_FLAG(std::string, progress, "auto",
          "progress bar on stderr: true, false or auto (when a terminal)");

namespace trellis {
namespace {

absl::StatusOr<ConvertOptions> OptionsFromFlags() {
  ConvertOptions o;
  o.input = absl::GetFlag(FLAGS_input);
  o.output = absl::GetFlag(FLAGS_output);
  o.from = absl::GetFlag(FLAGS_from);
  o.to = absl::GetFlag(FLAGS_to);
  if (o.input.empty() || o.output.empty()) {
    return absl::InvalidArgumentError(
        "--input and --output are required; see --help");
  }
  if (!absl::GetFlag(FLAGS_dtype).empty()) {
    TRELLIS_ASSIGN_OR_RETURN(o.dtype,
                             ParseFloatDType(absl::GetFlag(FLAGS_dtype)));
  }
  o.weights_only = absl::GetFlag(FLAGS_weights_only);
  o.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  if (absl::GetFlag(FLAGS_hf_prefix) != "auto") {
    o.hf_prefix = absl::GetFlag(FLAGS_hf_prefix);
  }
  const std::string lm_head = absl::GetFlag(FLAGS_hf_lm_head);
  if (lm_head == "true" || lm_head == "false") {
    o.hf_lm_head = lm_head == "true";
  } else if (lm_head != "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--hf_lm_head=", lm_head, " is not one of true, false, auto"));
  }
  o.padded_vocab = absl::GetFlag(FLAGS_padded_vocab);
  absl::StatusOr<int64_t> shard_size =
      ParseByteSize(absl::GetFlag(FLAGS_max_shard_size));
  if (!shard_size.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_shard_size: ", shard_size.status().message()));
  }
  o.max_shard_size = *shard_size;
  o.tp = absl::GetFlag(FLAGS_tp);
  o.pp = absl::GetFlag(FLAGS_pp);
  for (const std::string& s : absl::GetFlag(FLAGS_pp_layers)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--pp_layers entry '", s, "' is not a number; e.g. --pp_layers=3,5"));
    }
    o.pp_layers.push_back(n);
  }
  const std::string progress = absl::GetFlag(FLAGS_progress);
  o.progress = progress == "true" || (progress == "auto" && ::isatty(2));
  return o;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "converts GPT-2 and Llama checkpoints: trellis-convert --input IN --to "
      "hf|llmc|trellis|shards --output OUT");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  absl::StatusOr<ConvertOptions> options =
      positional.size() > 1
          ? absl::InvalidArgumentError(absl::StrCat(
                "unexpected argument '", positional[1],
                "': trellis-convert takes only flags (files go in --input "
                "and --output, a flagfile in --flagfile=PATH)"))
          : OptionsFromFlags();
  absl::StatusOr<ConvertSummary> summary =
      options.ok() ? Convert(*options) : options.status();
  if (!summary.ok()) {
    std::fprintf(stderr, "trellis-convert: error: %s\n",
                 std::string(summary.status().message()).c_str());
    return 1;
  }
  const ConvertSummary& s = *summary;
  for (const std::string& note : s.notes) {
    std::fprintf(stderr, "trellis-convert: note: %s\n", note.c_str());
  }
  std::printf(
      "trellis-convert: %s -> %s: %lld tensors, %.1f MB in %.2f s (%.0f "
      "MB/s); wrote %s\n",
      s.from.c_str(), s.to.c_str(), static_cast<long long>(s.tensors),
      s.bytes / 1e6, s.seconds, s.bytes / 1e6 / std::max(s.seconds, 1e-9),
      s.output.c_str());
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::Main(argc, argv); }
