// ModelConfig: the shape of a model of any family, and the arithmetic on it.
//
// Which layers a model is made of is its family's (transformer/
// model_family.h); the shape options here are the ones every family reads.
#ifndef TRELLIS_TRANSFORMER_CONFIG_H_
#define TRELLIS_TRANSFORMER_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis {

// The model families trellis builds (see model_family.h).
enum class ModelFamilyKind {
  kGpt2,  // pre-LN GPT-2: LayerNorm, GELU MLP, learned positions, tied head
};
// "gpt2".
const char* ModelFamilyName(ModelFamilyKind kind);
absl::StatusOr<ModelFamilyKind> ParseModelFamily(const std::string& name);

// The shape options a user sets, each once with its default and its help:
// X(group, type, name, default, help). The tools derive their flags, the
// config they print and the config checkpoints record from this list.
#define TRELLIS_MODEL_CONFIG_OPTIONS(X)                            \
  X(Model, ModelFamilyKind, family, ModelFamilyKind::kGpt2,        \
    "model family: gpt2 (LayerNorm, GELU MLP, learned positions)") \
  X(Model, int64_t, n_layer, 4, "transformer blocks")              \
  X(Model, int64_t, n_head, 4, "attention heads")                  \
  X(Model, int64_t, d_model, 128, "model width (hidden size)")     \
  X(Model, int64_t, seq_len, 128,                                  \
    "context length: tokens predicted per window (gpt2's wpe has " \
    "seq_len rows)")

struct ModelConfig {
#define TRELLIS_MODEL_CONFIG_FIELD(group, type, name, value, help) \
  type name = value;
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_MODEL_CONFIG_FIELD)
#undef TRELLIS_MODEL_CONFIG_FIELD
  // From the token file, not a flag.
  int64_t vocab_size = 257;

  bool operator==(const ModelConfig&) const = default;

  int64_t head_dim() const { return d_model / n_head; }
  // Logical parameter count (a tied embedding counted once), from the
  // parameters the family declares.
  int64_t NumParameters() const;
  // Training FLOPs per token: 6·N + 6·L·C·T (N parameters; the attention
  // score and value products, 12·L·C·T at full T×T, counted for the causal
  // half that a causal kernel computes).
  double TrainingFlopsPerToken() const;
  // Checks positivity, then the family's own rules (its Validate).
  absl::Status Validate() const;
  // "family=gpt2 n_layer=4 ... vocab_size=257": every option.
  std::string DebugString() const;
};

// The vocabulary padded for tp ranks: a multiple of 128·tp when that adds at
// most 1%, else of tp.
int64_t PaddedVocab(int64_t vocab_size, int64_t tp);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_CONFIG_H_
