#include "transformer/gpt2/gpt2_parameters.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "transformer/parameter_adder.h"

namespace trellis {
namespace {

using Adder = ParameterAdder;

void AddLayer(const ModelConfig& config, int64_t layer, Adder& add) {
  const int64_t c = config.d_model;
  const double std = 0.02;
  const double proj_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  auto name = [&](const char* suffix) {
    return LayerParameterName(layer, suffix);
  };
  add.Replicated(name("ln_1.weight"), {c}, false, 0, 1.0);
  add.Replicated(name("ln_1.bias"), {c}, false, 0);
  // c_attn's columns are [Q | K | V]: each rank takes its heads from each.
  add.Column(name("attn.c_attn"), c, 3 * c, 3, std);
  add.Row(name("attn.c_proj"), c, c, proj_std);
  add.Replicated(name("ln_2.weight"), {c}, false, 0, 1.0);
  add.Replicated(name("ln_2.bias"), {c}, false, 0);
  add.Column(name("mlp.c_fc"), c, 4 * c, 1, std);
  add.Row(name("mlp.c_proj"), 4 * c, c, proj_std);
}

}  // namespace

std::string LayerParameterName(int64_t layer, const char* suffix) {
  return absl::StrCat("h.", layer, ".", suffix);
}

void DeclareGptParameters(const ModelConfig& config, const ChunkPlan& plan,
                          TpPlace tp, uint64_t seed, Device device, DType dtype,
                          ParameterSet& params) {
  Adder add{params, tp, seed, device, dtype};
  const int64_t c = config.d_model;
  if ((plan.has_embedding || plan.has_head) && !params.Find("wte")) {
    Parameter& wte = add.Vocab("wte", config.vocab_size, c, 0.02);
    // The tied embedding counts once: where the embedding lookup lives.
    wte.primary = plan.has_embedding;
  } else if (plan.has_embedding) {
    params.Find("wte")->primary = true;
  }
  if (plan.has_embedding) {
    add.Replicated("wpe", {config.seq_len, c}, /*decay=*/true, 0.02);
  }
  for (int64_t l = plan.first_layer; l < plan.first_layer + plan.num_layers;
       ++l) {
    AddLayer(config, l, add);
  }
  if (plan.has_head) {
    add.Replicated("ln_f.weight", {c}, false, 0, 1.0);
    add.Replicated("ln_f.bias", {c}, false, 0);
  }
}

}  // namespace trellis
