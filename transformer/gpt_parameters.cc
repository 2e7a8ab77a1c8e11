#include "transformer/gpt_parameters.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "framework/rng.h"

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
  Parameter& Split(const std::string& name, Shape shape, int dim,
                   int64_t groups, double init_std) {
    const bool decay = shape.size() == 2;
    return Add(
        name, ShardSpec::Split(std::move(shape), dim, tp.size, tp.rank, groups),
        decay, init_std, 0.0);
  }
};

void AddLayer(const GptConfig& config, int64_t layer, Adder& add) {
  const int64_t c = config.d_model;
  const double std = 0.02;
  const double proj_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  auto name = [&](const char* suffix) {
    return LayerParameterName(layer, suffix);
  };
  add.Replicated(name("ln_1.weight"), {c}, false, 0, 1.0);
  add.Replicated(name("ln_1.bias"), {c}, false, 0);
  add.Split(name("attn.c_attn.weight"), {c, 3 * c}, 1, 3, std);
  add.Split(name("attn.c_attn.bias"), {3 * c}, 0, 3, 0);
  add.Split(name("attn.c_proj.weight"), {c, c}, 0, 1, proj_std);
  add.Replicated(name("attn.c_proj.bias"), {c}, false, 0);
  add.Replicated(name("ln_2.weight"), {c}, false, 0, 1.0);
  add.Replicated(name("ln_2.bias"), {c}, false, 0);
  add.Split(name("mlp.c_fc.weight"), {c, 4 * c}, 1, 1, std);
  add.Split(name("mlp.c_fc.bias"), {4 * c}, 0, 1, 0);
  add.Split(name("mlp.c_proj.weight"), {4 * c, c}, 0, 1, proj_std);
  add.Replicated(name("mlp.c_proj.bias"), {c}, false, 0);
}

}  // namespace

std::string LayerParameterName(int64_t layer, const char* suffix) {
  return absl::StrCat("h.", layer, ".", suffix);
}

void DeclareGptParameters(const GptConfig& config, const ChunkPlan& plan,
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

void AddGptParameters(const GptConfig& config, const ChunkPlan& plan,
                      TpPlace tp, uint64_t seed, Device device, DType dtype,
                      ParameterSet& params) {
  DeclareGptParameters(config, plan, tp, seed, device, dtype, params);
  params.Materialize(/*grads=*/true);
}

}  // namespace trellis
