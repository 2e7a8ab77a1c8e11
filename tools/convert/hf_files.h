// The files of a Hugging Face model directory, whatever the family:
//
//   config.json                        the model's shape; model_type (and
//                                      architectures) name its family
//   model.safetensors                  every tensor, or, sharded,
//   model-0000k-of-0000n.safetensors   the tensors split over n files and
//   model.safetensors.index.json       {"metadata": {"total_size": bytes},
//                                       "weight_map": {tensor: file}}
//
// HfSafetensors reads either layout as one set of named tensors; the index
// must name files of the same directory, and every tensor it maps must be
// in the file it names. WriteHfSafetensors writes one file, or shards of at
// most max_shard_size bytes each (a tensor larger than that alone in its
// shard) with the index, as save_pretrained does; each tensor is made when
// its shard is written, so at most one shard of output is in memory.
//
// Thread safety: an HfSafetensors may be read from several threads at once
// (as SafetensorsReader); the functions are pure but for the files they
// write.
#ifndef TRELLIS_TOOLS_CONVERT_HF_FILES_H_
#define TRELLIS_TOOLS_CONVERT_HF_FILES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "framework/safetensors.h"
#include "framework/tensor.h"
#include "transformer/config.h"

namespace trellis {

inline constexpr char kHfIndexFile[] = "model.safetensors.index.json";
inline constexpr char kHfSingleFile[] = "model.safetensors";
// save_pretrained's default limit: "5GB".
inline constexpr int64_t kHfDefaultMaxShardSize = 5'000'000'000;

// The family config.json at `path` describes: model_type "gpt2" (or no
// model_type, as old GPT-2 configs), "llama" (LlamaForCausalLM) or "qwen3"
// (Qwen3ForCausalLM): the llama family; "mixtral" (MixtralForCausalLM) or
// "qwen3_moe" (Qwen3MoeForCausalLM): the moe family; else InvalidArgument
// naming the key and its value.
absl::StatusOr<ModelFamilyKind> HfModelFamily(const std::string& path);

// The architecture config.json at `path` names: its trellis family and
// its model_type ("gpt2", "llama", "qwen3", "mixtral", "qwen3_moe") and
// class name (e.g. "Qwen3ForCausalLM"); errors as HfModelFamily's.
struct HfArchitecture {
  ModelFamilyKind family;
  std::string model_type;
  std::string name;
};
absl::StatusOr<HfArchitecture> ReadHfArchitecture(const std::string& path);

class HfSafetensors {
 public:
  // `input`: a model directory, its model.safetensors or its index file.
  static absl::StatusOr<HfSafetensors> Open(const std::string& input);

  // The directory (config.json lives there).
  const std::string& dir() const { return dir_; }
  // The single file, or the index: what messages name.
  const std::string& path() const { return path_; }
  // Every tensor name, file by file in data order.
  std::vector<std::string> names() const;
  const SafetensorsEntry* Find(const std::string& name) const;
  // Tensor `name` of float32, float16 or bfloat16 and shape `shape`, in its
  // stored dtype; errors name path() and the tensor (missing, other dtype,
  // other shape).
  absl::StatusOr<Tensor> Read(const std::string& name,
                              const Shape& shape) const;

 private:
  HfSafetensors() = default;
  absl::Status OpenIndex(const std::string& index);

  std::string dir_, path_;
  std::vector<SafetensorsReader> files_;
  std::map<std::string, size_t> where_;  // Tensor → files_ index.
};

// An output tensor: its name, shape and dtype, and how to make it.
struct HfOutputTensor {
  std::string name;
  Shape shape;
  DType dtype;
  std::function<Tensor()> make;
  int64_t nbytes() const { return NumElements(shape) * DTypeSize(dtype); }
};

// Writes `tensors` into directory `dir` (which exists) in order: one
// model.safetensors when their bytes total at most `max_shard_size`, else
// shards and the index. Removes the other layout's stale files. Calls
// `progress(done, total, bytes)` after each tensor. Returns the bytes of
// tensor data written.
absl::StatusOr<int64_t> WriteHfSafetensors(
    const std::string& dir, const std::vector<HfOutputTensor>& tensors,
    int64_t max_shard_size,
    const std::function<void(int64_t, int64_t, int64_t)>& progress);

// The special token ids a config.json names (bos_token_id, eos_token_id),
// where the model's tokenizer knows them.
struct HfSpecialTokens {
  std::optional<int64_t> bos, eos;
};
// The special tokens of tokenizer `spec` (a --tokenizer spec; "" when
// unknown), recorded in a checkpoint as `identity` (kind "" when it was
// not): eos is its end-of-text, bos the token its documents start with
// (Tokenizer::bos_token: Llama 3's <|begin_of_text|>). The spec's
// files are read when they are there and match `identity`; otherwise eos
// is the recorded end-of-text, or GPT-2's 50256 for spec "gpt2", and bos
// is unknown. A gpt2-family model without a bos takes eos for both, as
// GPT-2's own config.json does. Ids outside [0, vocab_size) are left out.
HfSpecialTokens HfSpecialTokensOf(const std::string& spec,
                                  const TokenizerIdentity& identity,
                                  ModelFamilyKind family, int64_t vocab_size);

// "5GB" (10⁹), "500MB", "64KB", "2GiB" (2³⁰), "512MiB", "8KiB" or a byte
// count; InvalidArgument naming the text otherwise or when not positive.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CONVERT_HF_FILES_H_
