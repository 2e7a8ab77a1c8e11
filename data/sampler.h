// Windows over a token stream, the train/validation split, and the order in
// which training visits the windows (docs/data-format.md).
//
// Windows: with sequence length T, window w holds tokens [w*T, w*T + T + 1):
// T inputs and, shifted by one, T targets. Consecutive windows share one
// token (the last target of w is the first input of w + 1). A stream of N
// tokens has W = (N - 1) / T windows.
//
// Split: the validation windows are the last V = max(1, round(f * W))
// windows for val_fraction f > 0 (none for f == 0). The train windows are
// [0, W - V - 1) when V > 0: the window just before the validation ones is
// dropped, so no token is in both a train and a validation window. With
// f == 0 every window trains.
//
// Order: epoch e visits the train windows in a permutation drawn by
// Fisher-Yates from std::mt19937_64 seeded with a mix of (seed, e). A global
// batch of G windows takes the next G entries of the permutation; when fewer
// than G remain the rest of the epoch is skipped and the batch starts epoch
// e + 1. So an epoch has B = floor(train_windows / G) batches, and the batch
// after `samples_consumed` samples (a multiple of G) is entries
// [s % (B*G), s % (B*G) + G) of epoch s / (B*G)'s permutation. The whole
// state is `samples_consumed`: saving it and starting again from it gives
// the same batches.
//
// Data parallelism: rank d of dp takes the contiguous block
// [d*G/dp, (d+1)*G/dp) of each global batch.
//
// Thread safety: TokenWindows is immutable. TrainSampler caches the current
// epoch's permutation, so even its const methods must not run on two
// threads at once.
#ifndef TRELLIS_DATA_SAMPLER_H_
#define TRELLIS_DATA_SAMPLER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis {

class TokenWindows {
 public:
  // Fails when seq_len < 1, val_fraction is outside [0, 1), or the tokens
  // leave no train window.
  static absl::StatusOr<TokenWindows> Make(int64_t num_tokens, int64_t seq_len,
                                           double val_fraction);

  int64_t num_tokens() const { return num_tokens_; }
  int64_t seq_len() const { return seq_len_; }
  // seq_len + 1.
  int64_t window_tokens() const { return seq_len_ + 1; }
  int64_t num_windows() const { return num_windows_; }
  // Train windows are [0, num_train_windows()).
  int64_t num_train_windows() const { return num_train_; }
  // Validation windows are [val_begin(), num_windows()).
  int64_t num_val_windows() const { return num_windows_ - val_begin_; }
  int64_t val_begin() const { return val_begin_; }
  // The i-th validation window. REQUIRES: 0 <= i < num_val_windows().
  int64_t ValWindow(int64_t i) const;
  // The index of window w's first token. REQUIRES: 0 <= w < num_windows().
  int64_t WindowStart(int64_t window) const;

 private:
  TokenWindows() = default;
  int64_t num_tokens_ = 0;
  int64_t seq_len_ = 1;
  int64_t num_windows_ = 0;
  int64_t num_train_ = 0;
  int64_t val_begin_ = 0;
};

class TrainSampler {
 public:
  // Fails when there are fewer train windows than one global batch.
  static absl::StatusOr<TrainSampler> Make(const TokenWindows& windows,
                                           int64_t global_batch, uint64_t seed);
  // The same over `num_train_windows` windows [0, n) (blend.h draws each
  // source's windows through one with a global batch of 1).
  static absl::StatusOr<TrainSampler> Make(int64_t num_train_windows,
                                           int64_t global_batch, uint64_t seed);

  int64_t global_batch() const { return global_batch_; }
  int64_t num_train_windows() const { return num_train_; }
  int64_t batches_per_epoch() const { return num_train_ / global_batch_; }
  int64_t samples_per_epoch() const {
    return batches_per_epoch() * global_batch_;
  }

  int64_t samples_consumed() const { return samples_consumed_; }
  // Resumes from a saved count. Fails unless it is a non-negative multiple
  // of global_batch() (resume with the global batch the run started with).
  absl::Status set_samples_consumed(int64_t samples_consumed);
  // The epoch of the next batch.
  int64_t epoch() const { return samples_consumed_ / samples_per_epoch(); }

  // The next global batch's G window indices; advances samples_consumed by G.
  std::vector<int64_t> NextBatch();
  // The global batch that follows `samples_consumed` samples (a multiple of
  // G); changes no state other than the cache.
  std::vector<int64_t> BatchAt(int64_t samples_consumed) const;
  // Epoch e's order of the train windows: a permutation of
  // [0, num_train_windows()).
  std::vector<int64_t> EpochPermutation(int64_t epoch) const;

 private:
  TrainSampler(int64_t num_train, int64_t global_batch, uint64_t seed)
      : num_train_(num_train), global_batch_(global_batch), seed_(seed) {}
  const std::vector<int64_t>& CachedPermutation(int64_t epoch) const;

  int64_t num_train_;
  int64_t global_batch_;
  uint64_t seed_;
  int64_t samples_consumed_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_permutation_;
};

// Rank `dp_rank` of `dp_size`'s share of a global batch: the block
// [d*G/dp, (d+1)*G/dp). REQUIRES: 0 <= dp_rank < dp_size.
std::span<const int64_t> DataParallelShare(std::span<const int64_t> batch,
                                           int dp_rank, int dp_size);

}  // namespace trellis

#endif  // TRELLIS_DATA_SAMPLER_H_
