// Hugging Face's Qwen3ForCausalLM and Qwen3MoeForCausalLM and trellis's
// llama and moe families with Qwen3's attention (qk_norm, head_dim).
//
// Qwen3 (model_type "qwen3") is Llama's config (llama_tensors.h) with a
// per-head RMSNorm of q and k: qk_norm true, head_dim as config.json gives
// it; use_sliding_window true is refused. Tensors: Llama's, and each
// layer's self_attn.q_norm.weight and self_attn.k_norm.weight (D) as they
// are.
//
// Qwen3-MoE (model_type "qwen3_moe") adds, to Qwen3's keys:
//   num_experts → experts, num_experts_per_tok → experts_per_token,
//   moe_intermediate_size → moe_ffn_hidden, intermediate_size → ffn_hidden
//   (the dense layers'), norm_topk_prob → moe_norm_topk (absent: false),
//   router_aux_loss_coef → moe_aux_loss_coeff when output_router_logits.
// Its layers are experts where (layer + 1) % decoder_sparse_step == 0 and
// the layer is not in mlp_only_layers; trellis's rule (moe_first_dense K,
// then every moe_layer_freq-th) must give the same set, else the keys are
// refused by name. Written back as decoder_sparse_step 1 and the dense
// layers in mlp_only_layers. Tensors: the moe family's own names
// (transformer/moe/moe_hf.h: mlp.gate, mlp.experts.{j}.gate_proj, up_proj,
// down_proj) with Qwen3's attention.
//
// Thread safety: pure functions over values.
#ifndef TRELLIS_TOOLS_CONVERT_QWEN3_TENSORS_H_
#define TRELLIS_TOOLS_CONVERT_QWEN3_TENSORS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/convert/hf_files.h"
#include "transformer/config.h"

namespace trellis {

// Reads config.json at `path` (model_type qwen3, or qwen3_moe).
absl::StatusOr<ModelConfig> ReadHfQwen3Config(const std::string& path);
absl::StatusOr<ModelConfig> ReadHfQwen3MoeConfig(const std::string& path);
// The config.json Qwen3ForCausalLM (a llama-family config with qk_norm) or
// Qwen3MoeForCausalLM (moe family) from_pretrained reads for `config`.
std::string HfQwen3ConfigJson(const ModelConfig& config, DType dtype,
                              const std::string& tokenizer,
                              const HfSpecialTokens& special);
// OK when Qwen3MoeForCausalLM computes what `config` does (qk_norm, a
// softmax router).
absl::Status CheckQwen3Shape(const ModelConfig& config);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CONVERT_QWEN3_TENSORS_H_
