// Choosing the next token from a model's logits: greedy, or sampling with
// a temperature, top-k and top-p (nucleus) filtering, from a seeded
// counter-based RNG.
//
// The distribution (NextTokenDistribution) is
//   p = softmax(logits / temperature), in float64;
//   top_k > 0: only the k most likely tokens stay;
//   top_p < 1: of those, renormalized, only the smallest set of most
//              likely tokens whose probabilities sum to at least top_p
//              stays (at least one);
//   renormalized over what stays.
// "Most likely" orders by logit, ties by the lower id. temperature 0 is
// greedy: the most likely token, with probability 1 (so is top_k 1).
//
// The draw of step s is a pure function of (seed, s) (framework/rng.h), so
// the same seed gives the same tokens on every rank and every run.
//
// Thread safety: the functions are pure.
#ifndef TRELLIS_TOOLS_GENERATE_SAMPLER_H_
#define TRELLIS_TOOLS_GENERATE_SAMPLER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace trellis {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // in (0, 1]; 1: no limit
  uint64_t seed = 0;
};

// InvalidArgument naming the flag for temperature < 0 or not finite,
// top_k < 0, top_p outside (0, 1].
absl::Status ValidateSampling(const SamplingOptions& options);

// The probability of each id (logits.size() of them) under `options`.
// REQUIRES: ValidateSampling(options) is OK; logits non-empty.
std::vector<double> NextTokenDistribution(std::span<const float> logits,
                                          const SamplingOptions& options);

// The token of step `step` (0 for the first new token): the argmax when
// greedy, else a draw from NextTokenDistribution with the uniform
// UniformAt(seed, stream of "generate", step).
int32_t SampleToken(std::span<const float> logits,
                    const SamplingOptions& options, uint64_t step);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_GENERATE_SAMPLER_H_
