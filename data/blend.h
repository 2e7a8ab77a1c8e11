// Data blends: training on several token files at once, each in proportion
// to its weight (`--data=0.7:web.h5,0.3:code.h5`).
//
// Spec: a comma list of items `weight:path` (weight a positive finite
// number; the weights need not sum to 1, they are normalized) or `path`
// (weight 1). An item whose text before the first ':' is not a number is a
// path. A spec that names an existing file is that one file, so a path
// holding ',' or ':' keeps its meaning. One item is a single source: it keeps
// the single-file sampler (sampler.h), bit for bit, whatever its weight.
//
// Order (BlendSampler, two or more sources): training draws samples one at
// a time, n = 0, 1, 2, ...; sample n comes from the source k that maximizes
// w_k·(n + 1) − c_k, where w_k is its normalized weight and c_k the samples
// it gave so far (the lowest k on a tie). So after any n samples every
// |c_k − w_k·n| < 1: proportions hold in every global batch, not just on
// average. Source k's c-th sample is window permutation_k,e[c mod T_k] of
// its train windows (T_k of them, epoch e = ⌊c / T_k⌋), a Fisher-Yates
// permutation seeded with a mix of (seed, k, e). A global batch of G draws
// is the next G samples, shuffled by a permutation seeded with (seed, the
// batch's first sample), so which rank and microbatch gets which source
// varies. The order depends on the seed, the weights and the sample count
// alone, never on the layout; data-parallel rank d takes the same
// contiguous share as with one file.
//
// State: samples consumed and each source's count c_k. Saving them and
// restoring them gives the same draws from then on.
//
// Thread safety: BlendSampler caches permutations: one thread at a time.
#ifndef TRELLIS_DATA_BLEND_H_
#define TRELLIS_DATA_BLEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/sampler.h"
#include "data/token_dataset.h"

namespace trellis {

struct BlendSource {
  std::string path;
  double weight = 1;  // as given; BlendSampler normalizes
};

// Parses a --data spec. Fails on an empty spec or item, or a weight that is
// not positive and finite.
absl::StatusOr<std::vector<BlendSource>> ParseBlend(const std::string& spec);

// Fails unless `b` was made by the same tokenizer as `a` (name, vocabulary
// size and end-of-text id), naming both files.
absl::Status CheckSameTokenizer(const TokenDataset& a, const TokenDataset& b);

// Opens every source of `spec` and checks they share one tokenizer;
// returns the first one's metadata.
absl::StatusOr<TokenFileMetadata> BlendMetadata(const std::string& spec);

class BlendSampler {
 public:
  // One window of the blend: a train window of source `source`.
  struct Draw {
    int source = 0;
    int64_t window = 0;
    bool operator==(const Draw&) const = default;
  };

  // `weights` and `train_windows` per source (at least two). Fails when a
  // weight is not positive or a source has no train window.
  static absl::StatusOr<BlendSampler> Make(
      const std::vector<double>& weights,
      const std::vector<int64_t>& train_windows, int64_t global_batch,
      uint64_t seed);

  int num_sources() const { return static_cast<int>(weights_.size()); }
  int64_t global_batch() const { return global_batch_; }
  // Normalized: they sum to 1.
  const std::vector<double>& weights() const { return weights_; }
  int64_t samples_consumed() const { return samples_consumed_; }
  // c_k: samples each source gave so far.
  const std::vector<int64_t>& source_samples() const { return counts_; }

  // Resumes from saved counts. Fails unless `samples_consumed` is a
  // non-negative multiple of the global batch, there is one count per
  // source, and the counts are non-negative and sum to it.
  absl::Status Restore(int64_t samples_consumed,
                       const std::vector<int64_t>& source_samples);

  // The next global batch's G draws; advances the state.
  std::vector<Draw> NextBatch();

 private:
  BlendSampler(std::vector<double> weights, std::vector<TrainSampler> sources,
               int64_t global_batch, uint64_t seed);
  // The source of the next sample (the largest deficit).
  int NextSource() const;

  std::vector<double> weights_;
  std::vector<TrainSampler> sources_;  // each with a global batch of 1
  int64_t global_batch_;
  uint64_t seed_;
  int64_t samples_consumed_ = 0;
  std::vector<int64_t> counts_;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_BLEND_H_
