// The parameters of the mixture-of-experts family (moe_family.h): Llama's
// (transformer/llama/llama_parameters.h), with a mixture of experts in
// place of the dense MLP in the layers IsMoeLayer names:
//   model.layers.{i}.mlp.gate.weight (C, E)          the router, replicated
//       over tp, N(0, 0.02)
//   model.layers.{i}.mlp.experts.{j}.gate_up_proj.weight (C, 2·Fe)
//   model.layers.{i}.mlp.experts.{j}.down_proj.weight (Fe, C)
// each expert split over tp and initialized as Llama's MLP is (Fe =
// MoeFfnHidden), then, with --moe_shared_ffn_hidden Fs > 0, the shared
// expert every token passes through:
//   model.layers.{i}.mlp.shared_experts.gate_up_proj.weight (C, 2·Fs)
//   model.layers.{i}.mlp.shared_experts.down_proj.weight (Fs, C)
// split and initialized as Llama's MLP, held by every rank (not an
// expert under expert parallelism). Under expert parallelism (plan.expert_ranks
// > 1) a rank declares its own run of E / expert_ranks experts only, marked
// `expert` (parallel/parameter.h); names keep the global expert index. The
// other layers keep Llama's dense MLP of width LlamaFfnHidden. Names follow
// Hugging Face's Qwen3-MoE with the fused projections Llama's use (moe_hf.h
// maps them).
#ifndef TRELLIS_TRANSFORMER_MOE_MOE_PARAMETERS_H_
#define TRELLIS_TRANSFORMER_MOE_MOE_PARAMETERS_H_

#include <cstdint>
#include <string>

#include "parallel/parameter.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"

namespace trellis {

// Whether layer `layer` is a mixture of experts: from --moe_first_dense
// on, every --moe_layer_freq-th layer.
bool IsMoeLayer(const ModelConfig& config, int64_t layer);
// Layers that are.
int64_t MoeLayers(const ModelConfig& config);
// Each expert's width: --moe_ffn_hidden, or the dense MLP's when 0.
int64_t MoeFfnHidden(const ModelConfig& config);
// "model.layers.<layer>.mlp.experts.<expert>." and the router's name.
std::string ExpertPrefix(int64_t expert);
// The shared expert's prefix inside a layer.
inline constexpr char kSharedExpertPrefix[] = "mlp.shared_experts.";
std::string RouterName(int64_t layer);

void DeclareMoeParameters(const ModelConfig& config, const ChunkPlan& plan,
                          TpPlace tp, uint64_t seed, Device device, DType dtype,
                          ParameterSet& params);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_MOE_MOE_PARAMETERS_H_
