// trellis-convert's conversions between checkpoint formats:
//
//   hf       a Hugging Face directory: config.json and model.safetensors,
//            or shards and model.safetensors.index.json (hf_files.h);
//            GPT2LMHeadModel (gpt2_tensors.h), LlamaForCausalLM
//            (llama_tensors.h), Qwen3ForCausalLM and Qwen3MoeForCausalLM
//            (qwen3_tensors.h) or MixtralForCausalLM (moe_tensors.h), in
//            and out
//   llmc     an llm.c model file (gpt2_124M.bin style), GPT-2 only
//   trellis  a trellis save directory (<dir>/step_N/…, `latest`) or one
//            step_N directory
//   shards   (output only) one HDF5 file per (tp, pp) rank of a layout,
//            <dir>/shard_tp<t>_pp<p>.h5, each holding that rank's local
//            tensors (vocabulary padded as in memory) with their ShardSpec
//            as attributes, and <dir>/shards.json indexing them
//
// Every conversion goes through a WholeModel of float32 tensors, which holds
// float16 and bfloat16 inputs exactly; outputs narrow to --dtype rounding to
// nearest even. trellis → trellis keeps the optimizer state unless
// weights_only; every other output is weights only. Inputs are validated
// before anything is written, and outputs appear atomically (temporary name,
// then rename).
//
// Thread safety: Convert is not reentrant on the same output.
#ifndef TRELLIS_TOOLS_CONVERT_CONVERT_H_
#define TRELLIS_TOOLS_CONVERT_CONVERT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "framework/tensor.h"
#include "tools/convert/hf_files.h"

namespace trellis {

struct ConvertOptions {
  std::string input;
  std::string output;
  std::string from;  // hf, llmc, trellis; empty: detected from the input.
  std::string to;    // hf, llmc, trellis, shards.
  // Output element type; empty: the input's when converting back to the
  // format it came from, else float32.
  std::optional<DType> dtype;
  bool weights_only = false;  // trellis → trellis: drop optimizer state.
  // The tokenizer a checkpoint converted from hf or llmc records; empty:
  // the tokenizer.json beside a Llama model's weights when there is one
  // (its name and identity as trellis-preprocess records them for
  // --tokenizer=hf:PATH), else gpt2 (a GPT-2 model's tokenizer.json holds
  // GPT-2's own vocabulary).
  std::string tokenizer;
  // hf output: name prefix (GPT-2 only: "transformer." or "") and whether
  // to write the tied lm_head.weight; unset: as the original hf input had
  // them.
  std::optional<std::string> hf_prefix;
  std::optional<bool> hf_lm_head;
  int64_t padded_vocab = 0;  // llmc output: rows of wte (0: automatic).
  // hf output: the largest safetensors file; above it, shards and an index.
  int64_t max_shard_size = kHfDefaultMaxShardSize;
  // shards output: the layout.
  int64_t tp = 1, pp = 1;
  std::vector<int64_t> pp_layers;
  bool progress = false;  // Draw a progress bar on stderr.
};

struct ConvertSummary {
  std::string from, to;
  std::string output;  // The file or directory written.
  int64_t tensors = 0;
  int64_t bytes = 0;  // Bytes written.
  double seconds = 0;
  std::vector<std::string> notes;  // What was left out or changed.
};

// The model a Hugging Face config.json at `path` describes, read by its
// architecture's reader (gpt2_tensors.h, llama_tensors.h, qwen3_tensors.h,
// moe_tensors.h).
absl::StatusOr<ModelConfig> ReadHfModelConfig(const std::string& path);
// "hf", "llmc" or "trellis", from what `input` holds.
absl::StatusOr<std::string> DetectFormat(const std::string& input);
// "float32", "float16"/"fp16", "bfloat16"/"bf16".
absl::StatusOr<DType> ParseFloatDType(const std::string& name);

absl::StatusOr<ConvertSummary> Convert(const ConvertOptions& options);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CONVERT_CONVERT_H_
