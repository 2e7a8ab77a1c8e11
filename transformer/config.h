// GptConfig: the shape of a GPT-2 style model, and the arithmetic on it.
#ifndef TRELLIS_TRANSFORMER_CONFIG_H_
#define TRELLIS_TRANSFORMER_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace trellis {

// The shape options a user sets, each once with its default and its help:
// X(group, type, name, default, help). The tools derive their flags, the
// config they print and the config checkpoints record from this list.
#define TRELLIS_GPT_CONFIG_OPTIONS(X)                          \
  X(Model, int64_t, n_layer, 4, "transformer blocks")          \
  X(Model, int64_t, n_head, 4, "attention heads")              \
  X(Model, int64_t, d_model, 128, "model width (hidden size)") \
  X(Model, int64_t, seq_len, 128,                              \
    "context length: tokens predicted per window (wpe has seq_len rows)")

struct GptConfig {
#define TRELLIS_GPT_CONFIG_FIELD(group, type, name, value, help) \
  type name = value;
  TRELLIS_GPT_CONFIG_OPTIONS(TRELLIS_GPT_CONFIG_FIELD)
#undef TRELLIS_GPT_CONFIG_FIELD
  // From the token file, not a flag.
  int64_t vocab_size = 257;

  int64_t head_dim() const { return d_model / n_head; }
  // Logical parameter count (the tied embedding counted once).
  int64_t NumParameters() const;
  // Training FLOPs per token: 6·N + 6·L·C·T (N parameters; the attention
  // score and value products, 12·L·C·T at full T×T, counted for the causal
  // half that a causal kernel computes).
  double TrainingFlopsPerToken() const;
  // Checks positivity and divisibility (d_model by n_head).
  absl::Status Validate() const;
  std::string DebugString() const;
};

// The vocabulary padded for tp ranks: a multiple of 128·tp when that adds at
// most 1%, else of tp.
int64_t PaddedVocab(int64_t vocab_size, int64_t tp);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_CONFIG_H_
