#include "transformer/gpt2/gpt2_family.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "transformer/gpt2/gelu_mlp.h"
#include "transformer/gpt2/gpt2_hf.h"
#include "transformer/gpt2/gpt2_parameters.h"
#include "transformer/norms.h"

namespace trellis {
namespace gpt2 {
namespace {

class Gpt2 : public ModelFamily {
 public:
  ModelFamilyKind kind() const override { return ModelFamilyKind::kGpt2; }

  absl::Status Validate(const ModelConfig& config) const override {
    if (config.d_model % config.n_head != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--d_model=", config.d_model, " is not divisible by --n_head=",
          config.n_head, "; choose d_model a multiple of n_head"));
    }
    // Llama's options, and the ones GPT-2 fixes (its LayerNorm kernel
    // takes no eps; its head is always the tied wte).
    ChangedOption changed = FirstChangedOption(config, "llama:");
    const ModelConfig defaults;
    if (config.norm_eps != defaults.norm_eps) changed = {"norm_eps", "1e-05"};
    if (!config.tie_embeddings) changed = {"tie_embeddings", "true"};
    if (!changed.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", changed.name,
          " does not apply to --family=gpt2 (it takes only ",
          changed.default_value, "); drop the flag or use --family=llama"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckTensorParallel(const ModelConfig& config,
                                   int64_t tp) const override {
    // Heads split over tp (c_attn's columns), and with them the MLP's 4·C.
    if (config.n_head % tp != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--n_head=", config.n_head, " is not divisible by --tp=", tp,
          "; choose tp dividing the head count"));
    }
    return absl::OkStatus();
  }

  std::string TiedEmbedding(const ModelConfig&) const override { return "wte"; }

  void DeclareParameters(const ModelConfig& config, const ChunkPlan& plan,
                         TpPlace tp, uint64_t seed, Device device, DType dtype,
                         ParameterSet& params) const override {
    DeclareGptParameters(config, plan, tp, seed, device, dtype, params);
  }

  BlockParts NewBlockParts(const ModelConfig& config, int64_t layer, TpPlace tp,
                           const ParameterSet& params) const override {
    TRELLIS_CHECK_EQ(config.n_head % tp.size, 0);
    auto p = [&](const char* suffix) -> Parameter& {
      return params.Get(LayerParameterName(layer, suffix));
    };
    BlockParts parts;
    parts.attention = {.qkv_weight = &p("attn.c_attn.weight"),
                       .qkv_bias = &p("attn.c_attn.bias"),
                       .out_weight = &p("attn.c_proj.weight"),
                       .out_bias = &p("attn.c_proj.bias"),
                       .heads = config.n_head / tp.size,
                       .kv_heads = config.n_head / tp.size,
                       .head_dim = config.HeadDim()};
    parts.norm1 = NewLayerNorm(p("ln_1.weight"), p("ln_1.bias"));
    parts.norm2 = NewLayerNorm(p("ln_2.weight"), p("ln_2.bias"));
    parts.mlp = NewGeluMlp(4 * config.d_model / tp.size, p("mlp.c_fc.weight"),
                           p("mlp.c_fc.bias"), p("mlp.c_proj.weight"),
                           p("mlp.c_proj.bias"));
    return parts;
  }

  ChunkEnds Ends(const ModelConfig&, const ChunkPlan& plan,
                 const ParameterSet& params) const override {
    ChunkEnds ends;
    if (plan.has_embedding) {
      ends.embedding = &params.Get("wte");
      ends.positions = &params.Get("wpe");
    }
    if (plan.has_head) {
      ends.norm =
          NewLayerNorm(params.Get("ln_f.weight"), params.Get("ln_f.bias"));
      ends.head = &params.Get("wte");
    }
    return ends;
  }

  std::vector<HfTensorMapping> HfTensors(
      const ModelConfig& config) const override {
    return Gpt2HfTensors(config);
  }
};

}  // namespace

const ModelFamily& Family() {
  static const Gpt2 family;
  return family;
}

}  // namespace gpt2
}  // namespace trellis
