// The small mixture of experts the transformer tests check by finite
// differences: layer 0 dense, layers 1 and 2 of 4 experts, 2 per token;
// and the router scale that keeps its choices away from ties.
#ifndef TRELLIS_TESTS_TRANSFORMER_SMALL_MOE_H_
#define TRELLIS_TESTS_TRANSFORMER_SMALL_MOE_H_

#include <cstdint>

#include "framework/kernels/elementwise.h"
#include "parallel/parameter.h"
#include "transformer/config.h"
#include "transformer/moe/moe_family.h"
#include "transformer/moe/moe_parameters.h"

namespace trellis::test {

inline ModelConfig SmallMoe() {
  ModelConfig c;
  c.family = moe::kKind;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_kv_heads = 2;
  c.d_model = 16;
  c.seq_len = 5;
  c.vocab_size = 13;
  c.ffn_hidden = 24;
  c.experts = 4;
  c.experts_per_token = 2;
  c.moe_ffn_hidden = 12;
  c.moe_first_dense = 1;
  c.norm_eps = 1e-6;
  c.tie_embeddings = false;
  return c;
}

// Spreads the routers' scores so that no choice sits within a
// finite-difference step of a tie (their N(0, 0.02) start is nearly flat).
inline void WidenRouters(const ModelConfig& c, ParameterSet& params) {
  for (int64_t l = 0; l < c.n_layer; ++l) {
    if (Parameter* router = params.Find(RouterName(l))) {
      Scale(router->value, 60.0);
    }
  }
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TRANSFORMER_SMALL_MOE_H_
