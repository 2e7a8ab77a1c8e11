// A whole GPT-2 model in memory, by logical tensor name, and its mapping to
// and from Hugging Face's and llm.c's files.
//
// Logical names and shapes are trellis's (transformer/gpt2/gpt2_parameters.h):
// Hugging Face GPT-2 state-dict names with `wte` and `wpe` for the two
// embeddings, Conv1D weights (in, out), the vocabulary unpadded. Hugging
// Face tensors are read and written through the family's mapping table
// (transformer/gpt2/gpt2_hf.h, tools/convert/hf_tensors.h); llm.c's
// through the llm.c table in gpt2_tensors.cc.
//
//   Hugging Face        logical               llm.c
//   wte.weight          wte (V, C)            wte (Vp, C), rows ≥ V padding
//   wpe.weight          wpe (T, C)            wpe (maxT, C)
//   h.i.ln_1.weight     h.i.ln_1.weight (C)   ln1w[i]
//   h.i.attn.c_attn.*   (C, 3C), (3C)         qkvw[i]ᵀ (3C, C), qkvb[i]
//   h.i.attn.c_proj.*   (C, C), (C)           attprojw[i]ᵀ, attprojb[i]
//   h.i.ln_2.*                                ln2w[i], ln2b[i]
//   h.i.mlp.c_fc.*      (C, 4C), (4C)         fcw[i]ᵀ (4C, C), fcb[i]
//   h.i.mlp.c_proj.*    (4C, C), (C)          fcprojw[i]ᵀ (C, 4C), fcprojb[i]
//   ln_f.*                                    lnfw, lnfb
//
// Hugging Face names may carry the prefix "transformer." (GPT2LMHeadModel);
// lm_head.weight is the tied wte, present or absent; h.i.attn.bias and
// h.i.attn.masked_bias are buffers, not weights. Transposes and dtype
// changes between float32, float16 and bfloat16 are exact in the widening
// direction, so conversions round-trip bit for bit.
//
// Thread safety: pure functions over values.
#ifndef TRELLIS_TOOLS_CONVERT_GPT2_TENSORS_H_
#define TRELLIS_TOOLS_CONVERT_GPT2_TENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/safetensors.h"
#include "framework/tensor.h"
#include "tools/convert/hf_files.h"
#include "tools/convert/llmc.h"
#include "transformer/config.h"

namespace trellis {

struct LogicalTensor {
  std::string name;
  Shape shape;
};

// Every logical tensor of the model, in model order (wte, wpe, h.0.*, …,
// ln_f.*).
std::vector<LogicalTensor> GptLogicalTensors(const ModelConfig& config);

// A model held whole: float32 CPU tensors in GptLogicalTensors order.
struct WholeModel {
  ModelConfig config;
  std::vector<std::pair<std::string, Tensor>> tensors;
  DType source_dtype = DType::kF32;  // What the input stored.
  // Facts about the input a conversion back may reproduce (prefix,
  // lm_head, padded_vocab, ...).
  std::map<std::string, std::string> source;
  // What the conversion left out or changed, for the user (one line each).
  std::vector<std::string> notes;

  const Tensor* Find(const std::string& name) const;
  int64_t NumBytes() const;  // As float32.
};

// Called after each tensor handled: (done, total, bytes so far).
using ProgressFn = std::function<void(int64_t, int64_t, int64_t)>;

// ---- Hugging Face

// Reads config.json (n_layer, n_head, n_embd, n_positions or n_ctx,
// vocab_size), refusing settings trellis's GPT-2 does not compute
// (activation, LayerNorm epsilon, n_inner, untied embeddings).
absl::StatusOr<ModelConfig> ReadHfConfig(const std::string& path);
// The config.json of a model, as GPT2LMHeadModel's save_pretrained writes.
// bos_token_id and eos_token_id are those of `special` that are known.
std::string HfConfigJson(const ModelConfig& config, DType dtype,
                         const std::string& tokenizer,
                         const HfSpecialTokens& special);

// Reads the safetensors (one file or shards) of the model `config`
// describes. Errors name the file (or index) and the tensor (missing, wrong
// shape, wrong dtype, unknown tensor, lm_head.weight that differs from wte).
absl::StatusOr<WholeModel> ReadHfModel(const HfSafetensors& file,
                                       const ModelConfig& config,
                                       const ProgressFn& progress);
// The Hugging Face tensors of `model` in `dtype` (kF32, kF16 or kBF16),
// names prefixed by `prefix`, with lm_head.weight when `lm_head`, made on
// demand (WriteHfSafetensors writes them).
absl::StatusOr<std::vector<HfOutputTensor>> HfGpt2Tensors(
    const WholeModel& model, DType dtype, const std::string& prefix,
    bool lm_head);

// ---- llm.c

absl::StatusOr<WholeModel> ReadLlmcModel(const LlmcReader& file,
                                         const ProgressFn& progress);
// The header and the 16 tensors of `model` as an llm.c file of `dtype`
// (kF32 or kBF16) with `padded_vocab` rows of wte (≥ V; 0: V rounded up to
// a multiple of 128).
absl::StatusOr<std::pair<LlmcHeader, std::vector<Tensor>>> LlmcFor(
    const WholeModel& model, DType dtype, int64_t padded_vocab);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CONVERT_GPT2_TENSORS_H_
