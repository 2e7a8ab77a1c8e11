#include "transformer/llama/llama_family.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "framework/kernels/rope.h"
#include "transformer/llama/llama_hf.h"
#include "transformer/llama/llama_parameters.h"
#include "transformer/llama/rope_positions.h"
#include "transformer/llama/swiglu_mlp.h"
#include "transformer/norms.h"

namespace trellis {
namespace llama {
namespace {

// The widest MLP: ModelConfig::Validate's bound on widths (config.cc).
constexpr int64_t kMaxFfnWidth = int64_t{1} << 20;

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

}  // namespace

absl::Status ValidateLlamaConfig(const ModelConfig& c) {
  if (c.head_dim < 0 || (c.head_dim > 0 && c.head_dim % 2 != 0)) {
    return Bad(absl::StrCat("--head_dim=", c.head_dim,
                            " must be an even head width for RoPE (0: "
                            "d_model / n_head)"));
  }
  if (c.head_dim == 0 && (c.d_model % c.n_head != 0 || c.HeadDim() % 2 != 0)) {
    return Bad(absl::StrCat("--d_model=", c.d_model, " / --n_head=", c.n_head,
                            " must be an even whole head size for RoPE; "
                            "choose d_model a multiple of 2 * n_head, or "
                            "set --head_dim"));
  }
  if (c.AttentionWidth() > kMaxFfnWidth) {
    return Bad(absl::StrCat("--n_head=", c.n_head, " heads of ", c.HeadDim(),
                            " exceed the ", kMaxFfnWidth,
                            " attention width trellis builds; choose fewer "
                            "or narrower heads"));
  }
  if (c.n_kv_heads < 0 || c.n_head % c.kv_heads() != 0) {
    return Bad(absl::StrCat("--n_kv_heads=", c.n_kv_heads,
                            " does not divide --n_head=", c.n_head,
                            "; choose a divisor of the head count (0: all)"));
  }
  // (The multiplier is bounded before LlamaFfnHidden converts its
  // product to an integer.)
  if (c.ffn_hidden < 0 || c.ffn_multiple_of < 1 ||
      !(c.ffn_dim_multiplier > 0 && c.ffn_dim_multiplier <= 64) ||
      c.LlamaFfnHidden() < 1 || c.LlamaFfnHidden() > kMaxFfnWidth) {
    return Bad(absl::StrCat("the MLP width is not between 1 and ", kMaxFfnWidth,
                            " (--ffn_hidden=", c.ffn_hidden,
                            " --ffn_multiple_of=", c.ffn_multiple_of,
                            " --ffn_dim_multiplier=", c.ffn_dim_multiplier,
                            "); set --ffn_hidden to a positive width"));
  }
  if (c.norm_eps <= 0) {
    return Bad(absl::StrCat("--norm_eps=", c.norm_eps,
                            " must be positive (Llama 3: 1e-5)"));
  }
  const absl::StatusOr<std::vector<double>> freqs =
      RopeInverseFrequencies(c.HeadDim(), c.rope_theta, c.Scaling());
  if (!freqs.ok()) {
    return Bad(
        absl::StrCat("the RoPE options (--rope_theta, --rope_*) are "
                     "invalid: ",
                     freqs.status().message()));
  }
  return absl::OkStatus();
}

absl::Status CheckLlamaAttentionTp(const ModelConfig& c, int64_t tp) {
  // Query heads split over tp; key/value heads split too, or replicated
  // over tp / n_kv_heads ranks each when tp exceeds them (qkv_proj's
  // blocks).
  const int64_t kv = c.kv_heads();
  if (c.n_head % tp != 0) {
    return Bad(absl::StrCat("--tp=", tp, " does not divide --n_head=", c.n_head,
                            "; choose tp dividing the head count"));
  }
  if (kv % tp != 0 && tp % kv != 0) {
    return Bad(absl::StrCat(
        "--tp=", tp, " and --n_kv_heads=", kv,
        ": tp must divide the key/value heads or be a multiple of them "
        "(each head then replicated over tp / n_kv_heads ranks); choose tp "
        "dividing ",
        kv, " or a multiple of ", kv));
  }
  return absl::OkStatus();
}

BlockParts LlamaBlockParts(const ModelConfig& c, int64_t layer, TpPlace tp,
                           const ParameterSet& params) {
  TRELLIS_CHECK(CheckLlamaAttentionTp(c, tp.size).ok());
  auto p = [&](const char* suffix) -> Parameter& {
    return params.Get(LlamaLayerName(layer, suffix));
  };
  const int64_t heads = c.n_head / tp.size;
  const int64_t kv_heads = LlamaLocalKvHeads(c, tp.size);
  BlockParts parts;
  parts.attention = {.qkv_weight = &p("self_attn.qkv_proj.weight"),
                     .out_weight = &p("self_attn.o_proj.weight"),
                     .heads = heads,
                     .kv_heads = kv_heads,
                     .head_dim = c.HeadDim()};
  // The fused projection's split must be the one the math assumes.
  TRELLIS_CHECK_EQ(parts.attention.qkv_weight->spec.groups, 3);
  parts.norm1 = NewRmsNorm(p("input_layernorm.weight"), c.norm_eps);
  parts.norm2 = NewRmsNorm(p("post_attention_layernorm.weight"), c.norm_eps);
  parts.positions =
      NewRopePositions(heads, kv_heads, c.HeadDim(), c.rope_theta, c.Scaling());
  if (c.qk_norm) {
    parts.qk_norm = std::make_shared<QkNorm>(
        p("self_attn.q_norm.weight"), p("self_attn.k_norm.weight"), heads,
        kv_heads, c.HeadDim(), c.norm_eps);
  }
  return parts;
}

std::shared_ptr<const BlockMlp> LlamaDenseMlp(int64_t width, int64_t layer,
                                              const std::string& prefix,
                                              const ParameterSet& params) {
  const std::string name = LlamaLayerName(layer, prefix.c_str());
  return NewSwiGluMlp(width, params.Get(name + "gate_up_proj.weight"),
                      params.Get(name + "down_proj.weight"));
}

ChunkEnds LlamaEnds(const ModelConfig& c, const ChunkPlan& plan,
                    const ParameterSet& params) {
  ChunkEnds ends;
  if (plan.has_embedding) ends.embedding = &params.Get(kLlamaEmbedding);
  if (plan.has_head) {
    ends.norm = NewRmsNorm(params.Get(kLlamaNorm), c.norm_eps);
    ends.head = &params.Get(c.tie_embeddings ? kLlamaEmbedding : kLlamaHead);
  }
  return ends;
}

namespace {

class Llama : public ModelFamily {
 public:
  ModelFamilyKind kind() const override { return ModelFamilyKind::kLlama; }
  std::vector<std::string> OptionTags() const override { return {"llama:"}; }

  absl::Status Validate(const ModelConfig& c) const override {
    return ValidateLlamaConfig(c);
  }

  absl::Status CheckTensorParallel(const ModelConfig& c,
                                   int64_t tp) const override {
    // The attention's heads, and the MLP's width (gate_up_proj's).
    if (absl::Status heads = CheckLlamaAttentionTp(c, tp); !heads.ok()) {
      return heads;
    }
    if (c.LlamaFfnHidden() % tp != 0) {
      return Bad(absl::StrCat("--tp=", tp, " does not divide the MLP width ",
                              c.LlamaFfnHidden(),
                              "; choose tp dividing it or set --ffn_hidden"));
    }
    return absl::OkStatus();
  }

  std::string TiedEmbedding(const ModelConfig& c) const override {
    return c.tie_embeddings ? kLlamaEmbedding : "";
  }

  void DeclareParameters(const ModelConfig& config, const ChunkPlan& plan,
                         TpPlace tp, uint64_t seed, Device device, DType dtype,
                         ParameterSet& params) const override {
    DeclareLlamaParameters(config, plan, tp, seed, device, dtype, params);
  }

  BlockParts NewBlockParts(const ModelConfig& c, int64_t layer, TpPlace tp,
                           const ParameterSet& params) const override {
    TRELLIS_CHECK(CheckTensorParallel(c, tp.size).ok());
    BlockParts parts = LlamaBlockParts(c, layer, tp, params);
    parts.mlp =
        LlamaDenseMlp(c.LlamaFfnHidden() / tp.size, layer, "mlp.", params);
    return parts;
  }

  ChunkEnds Ends(const ModelConfig& c, const ChunkPlan& plan,
                 const ParameterSet& params) const override {
    return LlamaEnds(c, plan, params);
  }

  std::vector<HfTensorMapping> HfTensors(
      const ModelConfig& config) const override {
    return LlamaHfTensors(config);
  }
};

}  // namespace

const ModelFamily& Family() {
  static const Llama family;
  return family;
}

}  // namespace llama
}  // namespace trellis
