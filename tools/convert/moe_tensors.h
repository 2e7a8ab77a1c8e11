// Hugging Face's MixtralForCausalLM and trellis's mixture of experts
// (transformer/moe/), tensor by tensor.
//
// config.json ↔ ModelConfig (family moe): Llama's keys (llama_tensors.h)
// and
//   num_local_experts → experts, num_experts_per_tok → experts_per_token,
//   intermediate_size → moe_ffn_hidden (and ffn_hidden: Mixtral has no
//   dense layer), router_aux_loss_coef → moe_aux_loss_coeff when
//   output_router_logits is true (HF adds the loss only then; else 0).
// Mixtral's routing is trellis's with every layer a mixture
// (moe_first_dense 0, moe_layer_freq 1), softmax scores and the top-k
// renormalized (moe_norm_topk). Refused, in one line naming the key and its
// value: a sliding_window shorter than max_position_embeddings,
// router_jitter_noise other than 0, and Llama's refusals. Writing refuses a
// model Mixtral cannot express, naming the option (--moe_first_dense,
// --moe_layer_freq, --moe_sigmoid, --moe_norm_topk).
//
// Tensors: Llama's attention, norms, embedding and head, and per layer
//   block_sparse_moe.gate.weight (E, C)       = router (C, E)ᵀ
//   block_sparse_moe.experts.{j}.w1.weight    = gate rows of gate_up_proj
//   block_sparse_moe.experts.{j}.w3.weight    = up rows of gate_up_proj
//   block_sparse_moe.experts.{j}.w2.weight    = down_projᵀ
// (transformers 5 fuses each layer's experts when it loads them; these are
// the names the published checkpoints hold and from_pretrained reads).
//
// Thread safety: pure functions over values.
#ifndef TRELLIS_TOOLS_CONVERT_MOE_TENSORS_H_
#define TRELLIS_TOOLS_CONVERT_MOE_TENSORS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/convert/hf_files.h"
#include "transformer/config.h"
#include "transformer/hf_mapping.h"

namespace trellis {

// Reads config.json at `path` (whose model_type is mixtral).
absl::StatusOr<ModelConfig> ReadHfMixtralConfig(const std::string& path);
// OK when MixtralForCausalLM computes what `config` does.
absl::Status CheckMixtralShape(const ModelConfig& config);
// The config.json MixtralForCausalLM.from_pretrained reads for `config`.
std::string HfMixtralConfigJson(const ModelConfig& config, DType dtype,
                                const std::string& tokenizer,
                                const HfSpecialTokens& special);
// The family's table (moe_hf.h) in Mixtral's names.
std::vector<HfTensorMapping> MixtralHfTensors(const ModelConfig& config);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CONVERT_MOE_TENSORS_H_
