#include "transformer/gpt_parameters.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "framework/rng.h"
#include "parallel/tensor_parallel.h"

namespace trellis {
namespace {

struct Adder {
  ParameterSet& params;
  TpPlace tp;
  uint64_t seed;
  Device device;
  DType dtype;

  Parameter& Add(const std::string& name, ShardSpec spec, bool decay,
                 double init_std, double init_const) {
    const uint64_t stream = HashName(name);
    const uint64_t s = seed;
    Parameter& p = params.Declare(
        name, std::move(spec), decay, device, dtype, [=](int64_t i) {
          return init_std > 0 ? init_std * NormalAt(s, stream, i) : init_const;
        });
    // Replicated tensors count once in the gradient norm: on tp rank 0.
    p.primary = !p.spec.replicated() || tp.rank == 0;
    return p;
  }
  Parameter& Replicated(const std::string& name, Shape shape, bool decay,
                        double init_std, double init_const = 0.0) {
    return Add(name, ShardSpec::Replicated(std::move(shape)), decay, init_std,
               init_const);
  }
  // The linear layers' parameters, split as their layers state.
  void Column(const std::string& prefix, int64_t in, int64_t out,
              int64_t groups, double init_std) {
    Add(prefix + ".weight",
        ColumnParallelLinear::WeightSpec(in, out, tp.size, tp.rank, groups),
        /*decay=*/true, init_std, 0.0);
    Add(prefix + ".bias",
        ColumnParallelLinear::BiasSpec(out, tp.size, tp.rank, groups),
        /*decay=*/false, 0, 0.0);
  }
  void Row(const std::string& prefix, int64_t in, int64_t out,
           double init_std) {
    Add(prefix + ".weight",
        RowParallelLinear::WeightSpec(in, out, tp.size, tp.rank),
        /*decay=*/true, init_std, 0.0);
    Add(prefix + ".bias", RowParallelLinear::BiasSpec(out), /*decay=*/false, 0,
        0.0);
  }
};

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
    Parameter& wte =
        add.Add("wte",
                ShardSpec::Split({config.vocab_size, c}, 0, tp.size, tp.rank, 1,
                                 PaddedVocab(config.vocab_size, tp.size)),
                /*decay=*/true, 0.02, 0);
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
