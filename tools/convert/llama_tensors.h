// Hugging Face's LlamaForCausalLM and trellis's Llama, tensor by tensor.
//
// config.json ↔ ModelConfig (family llama):
//   hidden_size → d_model, num_attention_heads → n_head,
//   num_hidden_layers → n_layer, num_key_value_heads → n_kv_heads (absent:
//   n_head), intermediate_size → ffn_hidden, max_position_embeddings →
//   seq_len (absent: 2048), rms_norm_eps → norm_eps (absent: 1e-6),
//   rope_theta (absent: 10000), rope_scaling null, {"rope_type": "default"}
//   or {"rope_type" (or "type"): "llama3", factor, low_freq_factor,
//   high_freq_factor, original_max_position_embeddings},
//   tie_word_embeddings → tie_embeddings (absent: false), vocab_size.
// The absent-key defaults are LlamaConfig's. Refused, in one line naming
// the key and its value: a hidden_act other than silu, attention or MLP
// biases, other rope_scaling types, num_key_value_heads not dividing
// num_attention_heads. head_dim (absent: hidden_size /
// num_attention_heads) → head_dim when it differs.
//
// Tensors (HF nn.Linear weights are (out, in); trellis stores (in, out),
// see transformer/llama_parameters.h):
//   model.embed_tokens.weight, model.norm.weight, lm_head.weight and the
//   norms of each layer: unchanged
//   self_attn.qkv_proj.weight = [q_proj; k_proj; v_proj]ᵀ
//   self_attn.o_proj.weight   = o_proj.weightᵀ
//   mlp.gate_up_proj.weight   = [gate_proj; up_proj]ᵀ
//   mlp.down_proj.weight      = down_proj.weightᵀ
// RoPE: trellis's kernel pairs channel i with i + D/2 in every head
// (rotate-half, framework/kernels/rope.h), which is the order HF's q_proj
// and k_proj rows already have, so the permutation between the two layouts
// is the identity and rows keep their order both ways. A checkpoint in
// Meta's interleaved layout must be converted to HF's first.
//
// A tied model's file may still hold lm_head.weight (it must equal the
// embedding; recorded so the way back writes it again); rotary_emb.inv_freq
// buffers are skipped with a note; any other tensor is an error.
//
// Thread safety: pure functions over values.
#ifndef TRELLIS_TOOLS_CONVERT_LLAMA_TENSORS_H_
#define TRELLIS_TOOLS_CONVERT_LLAMA_TENSORS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/convert/gpt2_tensors.h"
#include "tools/convert/hf_files.h"
#include "transformer/config.h"
#include "transformer/hf_mapping.h"

namespace trellis {

// Reads config.json at `path` (whose model_type is llama).
absl::StatusOr<ModelConfig> ReadHfLlamaConfig(const std::string& path);
// The config.json LlamaForCausalLM.from_pretrained reads for `config`,
// with those of `special`'s bos_token_id and eos_token_id that are known.
std::string HfLlamaConfigJson(const ModelConfig& config, DType dtype,
                              const std::string& tokenizer,
                              const HfSpecialTokens& special);

// The model's tensors from `files`, float32 in trellis's parameter order
// (ModelTensorShapes). Errors name the file and the tensor.
absl::StatusOr<WholeModel> ReadHfLlamaModel(const HfSafetensors& files,
                                            const ModelConfig& config,
                                            const ProgressFn& progress);
// The same for any model built on Llama's blocks whose HF names are
// `mappings` (a mixture of experts: moe_tensors.h); `architecture` (e.g.
// "MixtralForCausalLM") names it in errors.
absl::StatusOr<WholeModel> ReadHfLlamaBlocksModel(
    const HfSafetensors& files, const ModelConfig& config,
    const std::vector<HfTensorMapping>& mappings,
    const std::string& architecture, const ProgressFn& progress);

// The HF tensors of `model` in `dtype` (kF32, kF16 or kBF16), in
// LlamaForCausalLM's state-dict order, made on demand; lm_head.weight for a
// tied model too when `lm_head`.
absl::StatusOr<std::vector<HfOutputTensor>> HfLlamaTensors(
    const WholeModel& model, DType dtype, bool lm_head);
// The same through `mappings`: each layer's rows in table order with its
// norms last, as HF's state dicts of Llama-like models list them.
absl::StatusOr<std::vector<HfOutputTensor>> HfLlamaBlocksTensors(
    const WholeModel& model, const std::vector<HfTensorMapping>& mappings,
    DType dtype, bool lm_head);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CONVERT_LLAMA_TENSORS_H_
