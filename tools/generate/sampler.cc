#include "tools/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "framework/rng.h"
#include "framework/status.h"

namespace trellis {
namespace {

// The most likely id: the largest logit, ties to the lower id.
int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

bool Greedy(const SamplingOptions& o) {
  return o.temperature == 0 || o.top_k == 1;
}

}  // namespace

absl::Status ValidateSampling(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--temperature=", o.temperature,
        " must be a finite number >= 0 (0: greedy, 1: the model's own "
        "distribution)"));
  }
  if (o.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--top_k=", o.top_k, " must be >= 0 (0: no limit, 1: greedy)"));
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--top_p=", o.top_p, " must be in (0, 1] (1: no limit, e.g. 0.9)"));
  }
  return absl::OkStatus();
}

std::vector<double> NextTokenDistribution(std::span<const float> logits,
                                          const SamplingOptions& o) {
  TRELLIS_CHECK(!logits.empty());
  const size_t v = logits.size();
  std::vector<double> p(v, 0.0);
  if (Greedy(o)) {
    p[Argmax(logits)] = 1.0;
    return p;
  }
  const double max = logits[Argmax(logits)];
  double sum = 0;
  for (size_t i = 0; i < v; ++i) {
    p[i] = std::exp((static_cast<double>(logits[i]) - max) / o.temperature);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  if (o.top_k == 0 && o.top_p >= 1) return p;
  // Ids from most to least likely (ties: lower id first).
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  const size_t k = o.top_k > 0 ? std::min<size_t>(o.top_k, v) : v;
  auto likelier = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), likelier);
  size_t keep = k;
  if (o.top_p < 1) {
    // Nucleus of the top-k distribution (renormalized), as Hugging Face's
    // samplers chain them.
    double top_k_mass = 0;
    for (size_t i = 0; i < k; ++i) top_k_mass += p[order[i]];
    double cumulative = 0;
    for (size_t i = 0; i < k; ++i) {
      cumulative += p[order[i]] / top_k_mass;
      if (cumulative >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::vector<double> kept(v, 0.0);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[order[i]];
  for (size_t i = 0; i < keep; ++i) kept[order[i]] = p[order[i]] / total;
  return kept;
}

int32_t SampleToken(std::span<const float> logits, const SamplingOptions& o,
                    uint64_t step) {
  if (Greedy(o)) return Argmax(logits);
  const std::vector<double> p = NextTokenDistribution(logits, o);
  const double u = UniformAt(o.seed, HashName("generate"), step);
  double cumulative = 0;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    last = static_cast<int32_t>(i);
    cumulative += p[i];
    if (u < cumulative) return last;
  }
  return last;  // u beyond the rounded total: the last token that stays.
}

}  // namespace trellis
