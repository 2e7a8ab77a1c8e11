#include "transformer/moe/moe_parameters.h"

#include "absl/strings/str_cat.h"
#include "transformer/llama/llama_parameters.h"
#include "transformer/parameter_adder.h"

namespace trellis {

bool IsMoeLayer(const ModelConfig& config, int64_t layer) {
  return layer >= config.moe_first_dense &&
         (layer - config.moe_first_dense) % config.moe_layer_freq == 0;
}

int64_t MoeLayers(const ModelConfig& config) {
  int64_t n = 0;
  for (int64_t l = 0; l < config.n_layer; ++l) n += IsMoeLayer(config, l);
  return n;
}

int64_t MoeFfnHidden(const ModelConfig& config) {
  return config.moe_ffn_hidden > 0 ? config.moe_ffn_hidden
                                   : config.LlamaFfnHidden();
}

std::string ExpertPrefix(int64_t expert) {
  return absl::StrCat("mlp.experts.", expert, ".");
}

std::string RouterName(int64_t layer) {
  return LlamaLayerName(layer, "mlp.gate.weight");
}

void DeclareMoeParameters(const ModelConfig& config, const ChunkPlan& plan,
                          TpPlace tp, uint64_t seed, Device device, DType dtype,
                          ParameterSet& params) {
  auto mlp = [&](int64_t layer, ParameterAdder& add) {
    if (!IsMoeLayer(config, layer)) {
      AddLlamaMlp(config, layer, "mlp.", config.LlamaFfnHidden(), add);
      return;
    }
    add.Replicated(RouterName(layer), {config.d_model, config.experts},
                   /*decay=*/true, 0.02);
    // This rank's run of experts.
    const int64_t local = config.experts / plan.expert_ranks;
    for (int64_t e = plan.expert_rank * local;
         e < (plan.expert_rank + 1) * local; ++e) {
      AddLlamaMlp(config, layer, ExpertPrefix(e), MoeFfnHidden(config), add);
      if (plan.expert_ranks == 1) continue;
      for (const char* part : {"gate_up_proj.weight", "down_proj.weight"}) {
        params.Find(LlamaLayerName(layer, (ExpertPrefix(e) + part).c_str()))
            ->expert = true;
      }
    }
    if (config.moe_shared_ffn_hidden > 0) {
      AddLlamaMlp(config, layer, kSharedExpertPrefix,
                  config.moe_shared_ffn_hidden, add);
    }
  };
  DeclareLlamaParameters(config, plan, tp, seed, device, dtype, params, mlp);
}

}  // namespace trellis
