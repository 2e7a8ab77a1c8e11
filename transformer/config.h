// ModelConfig: the shape of a model of any family, and the arithmetic on it.
//
// Which layers a model is made of is its family's (transformer/
// model_family.h); the shape options here are the ones every family reads.
#ifndef TRELLIS_TRANSFORMER_CONFIG_H_
#define TRELLIS_TRANSFORMER_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/kernels/rope.h"

namespace trellis {

// A model family, by the name --family takes (model_family.h keeps the
// families: one folder each under transformer/, plus any registered at run
// time). Compared by name.
class ModelFamilyKind {
 public:
  // REQUIRES: `name` outlives every copy (a literal, or a family's own
  // static name).
  constexpr explicit ModelFamilyKind(std::string_view name) : name_(name) {}
  constexpr std::string_view name() const { return name_; }
  friend constexpr bool operator==(ModelFamilyKind a, ModelFamilyKind b) {
    return a.name_ == b.name_;
  }

  // The families trellis ships (transformer/gpt2/, transformer/llama/).
  static const ModelFamilyKind kGpt2;   // LayerNorm, GELU MLP, learned
                                        // positions, tied head
  static const ModelFamilyKind kLlama;  // RMSNorm, SwiGLU MLP, RoPE, GQA

 private:
  std::string_view name_;
};
inline constexpr ModelFamilyKind ModelFamilyKind::kGpt2{"gpt2"};
inline constexpr ModelFamilyKind ModelFamilyKind::kLlama{"llama"};

// "gpt2", "llama", ...
std::string ModelFamilyName(ModelFamilyKind kind);
// The family of that name, if one is known (model_family.cc).
absl::StatusOr<ModelFamilyKind> ParseModelFamily(const std::string& name);

// The shape options a user sets, each once with its default and its help:
// X(group, type, name, default, help). The tools derive their flags, the
// config they print and the config checkpoints record from this list.
// Options whose help starts with a one-word tag ("llama:") belong to the
// families that read that tag (ModelFamily::OptionTags); the others refuse
// values other than their defaults.
#define TRELLIS_MODEL_CONFIG_OPTIONS(X)                                       \
  X(Model, ModelFamilyKind, family, ModelFamilyKind::kGpt2,                   \
    "model family: gpt2 (LayerNorm, GELU MLP, learned positions), llama "     \
    "(RMSNorm, SwiGLU MLP, RoPE, grouped-query attention) or moe (llama's "   \
    "blocks with mixture-of-experts MLPs: Mixtral, Qwen3-MoE)")               \
  X(Model, int64_t, n_layer, 4, "transformer blocks")                         \
  X(Model, int64_t, n_head, 4, "attention heads")                             \
  X(Model, int64_t, d_model, 128, "model width (hidden size)")                \
  X(Model, int64_t, seq_len, 128,                                             \
    "context length: tokens predicted per window (gpt2's wpe has "            \
    "seq_len rows)")                                                          \
  X(Model, int64_t, n_kv_heads, 0,                                            \
    "llama: key/value heads (grouped-query attention); 0 = n_head")           \
  X(Model, int64_t, head_dim, 0,                                              \
    "llama: attention head width; 0 = d_model / n_head (Qwen3: 128 at "       \
    "every width)")                                                           \
  X(Model, bool, qk_norm, false,                                              \
    "llama: RMSNorm of each query and key head before RoPE, with a learned "  \
    "weight per channel (Qwen3)")                                             \
  X(Model, int64_t, ffn_hidden, 0,                                            \
    "llama: MLP hidden width; 0 = 8/3 * d_model * ffn_dim_multiplier "        \
    "rounded up to ffn_multiple_of")                                          \
  X(Model, int64_t, ffn_multiple_of, 256,                                     \
    "llama: the default MLP width is rounded up to a multiple of this")       \
  X(Model, double, ffn_dim_multiplier, 1.0,                                   \
    "llama: scales the default MLP width")                                    \
  X(Model, double, rope_theta, 10000.0, "llama: RoPE base frequency")         \
  X(Model, RopeScalingType, rope_scaling, RopeScalingType::kNone,             \
    "llama: RoPE frequency scaling: none or llama3 (Llama 3.1)")              \
  X(Model, double, rope_factor, 8.0, "llama: llama3 scaling factor")          \
  X(Model, double, rope_low_freq_factor, 1.0,                                 \
    "llama: llama3 scaling low_freq_factor")                                  \
  X(Model, double, rope_high_freq_factor, 4.0,                                \
    "llama: llama3 scaling high_freq_factor")                                 \
  X(Model, int64_t, rope_original_max_positions, 8192,                        \
    "llama: llama3 scaling original_max_position_embeddings")                 \
  X(Model, double, norm_eps, 1e-5,                                            \
    "epsilon of the norms (gpt2 takes only 1e-5)")                            \
  X(Model, bool, tie_embeddings, true,                                        \
    "the LM head reuses the token embedding (gpt2: always; llama may untie: " \
    "a separate lm_head)")                                                    \
  X(Model, int64_t, experts, 8,                                               \
    "moe: routed experts in each mixture-of-experts layer")                   \
  X(Model, int64_t, experts_per_token, 2,                                     \
    "moe: experts each token is routed to (top-k)")                           \
  X(Model, int64_t, moe_ffn_hidden, 0,                                        \
    "moe: each expert's SwiGLU width; 0 = the dense MLP's width")             \
  X(Model, int64_t, moe_first_dense, 0,                                       \
    "moe: leading layers that keep a dense MLP")                              \
  X(Model, int64_t, moe_shared_ffn_hidden, 0,                                 \
    "moe: SwiGLU width of the shared expert every token passes through "      \
    "beside its routed ones (DeepSeek-V3: n_shared_experts x the expert "     \
    "width); 0 = none")                                                       \
  X(Model, int64_t, moe_layer_freq, 1,                                        \
    "moe: after those, every Nth layer is a mixture of experts, the others "  \
    "dense")                                                                  \
  X(Model, bool, moe_sigmoid, false,                                          \
    "moe: sigmoid router scores (DeepSeek-V3) instead of a softmax")          \
  X(Model, bool, moe_norm_topk, true,                                         \
    "moe: divide the chosen experts' scores by their sum")                    \
  X(Model, double, moe_aux_loss_coeff, 0.0,                                   \
    "moe: coefficient of the load-balancing (Switch) loss, per microbatch")   \
  X(Model, double, moe_z_loss_coeff, 0.0,                                     \
    "moe: coefficient of the router z-loss")                                  \
  X(Model, double, moe_bias_update_rate, 0.0,                                 \
    "moe: auxiliary-loss-free balancing (DeepSeek-V3): each step moves a "    \
    "per-expert selection bias this much toward even loads; 0 = no bias")

struct ModelConfig {
#define TRELLIS_MODEL_CONFIG_FIELD(group, type, name, value, help) \
  type name = value;
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_MODEL_CONFIG_FIELD)
#undef TRELLIS_MODEL_CONFIG_FIELD
  // From the token file, not a flag.
  int64_t vocab_size = 257;

  bool operator==(const ModelConfig&) const = default;

  // Each attention head's width: head_dim, or d_model / n_head when 0.
  int64_t HeadDim() const { return head_dim > 0 ? head_dim : d_model / n_head; }
  // The query heads' total width (d_model unless head_dim says otherwise).
  int64_t AttentionWidth() const { return n_head * HeadDim(); }
  // Key/value heads: n_kv_heads, or n_head when it is 0.
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_head; }
  // Llama's MLP width: ffn_hidden, or when 0 Meta's reference rule:
  // int(ffn_dim_multiplier · int(2 · 4 · d_model / 3)) rounded up to a
  // multiple of ffn_multiple_of.
  int64_t LlamaFfnHidden() const;
  // The RoPE scaling the options describe.
  RopeScaling Scaling() const;
  // Logical parameter count (a tied embedding counted once), from the
  // parameters the family declares.
  int64_t NumParameters() const;
  // Training FLOPs per token: 6·N + 6·L·A·T (N the parameters a token
  // reads, ModelFamily::ActiveParameters; A the attention width; the
  // attention score and value products, 12·L·A·T at full T×T, counted for
  // the causal half that a causal kernel computes).
  double TrainingFlopsPerToken() const;
  // Checks positivity, then the family's own rules (its Validate).
  absl::Status Validate() const;
  // "family=gpt2 n_layer=4 ... vocab_size=257": every option the family
  // reads (a GPT-2's omits the Llama-only ones).
  std::string DebugString() const;
};

// The name of the first option of `config` whose help starts with
// `prefix` (e.g. "llama:") and whose value differs from its default, with
// that default as its flag would print it ("rope_theta", "10000"); empty
// names when none does. A family refuses the options of another this way.
struct ChangedOption {
  std::string name;
  std::string default_value;
};
ChangedOption FirstChangedOption(const ModelConfig& config,
                                 const std::string& prefix);

// The vocabulary padded for tp ranks: a multiple of 128·tp when that adds at
// most 1%, else of tp.
int64_t PaddedVocab(int64_t vocab_size, int64_t tp);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_CONFIG_H_
