#include "data/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "framework/rng.h"
#include "framework/status.h"

namespace trellis {
namespace {

// Uniform in [0, n) without modulo bias. REQUIRES: n > 0.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  // Values below `threshold` would make some residues more likely.
  const uint64_t threshold = (0 - n) % n;
  uint64_t x = rng();
  while (x < threshold) x = rng();
  return x % n;
}

}  // namespace

// ---------------------------------------------------------------- windows

absl::StatusOr<TokenWindows> TokenWindows::Make(int64_t num_tokens,
                                                int64_t seq_len,
                                                double val_fraction) {
  if (seq_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len must be at least 1, not ", seq_len));
  }
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction must be in [0, 1), not ", val_fraction));
  }
  TokenWindows windows;
  windows.num_tokens_ = num_tokens;
  windows.seq_len_ = seq_len;
  windows.num_windows_ = num_tokens > 0 ? (num_tokens - 1) / seq_len : 0;
  const int64_t w = windows.num_windows_;
  int64_t num_val = 0;
  if (val_fraction > 0.0) {
    num_val = std::max<int64_t>(
        1, static_cast<int64_t>(std::llround(val_fraction * w)));
  }
  // One window between train and validation is dropped so they share no
  // token.
  windows.num_train_ = num_val > 0 ? w - num_val - 1 : w;
  windows.val_begin_ = w - num_val;
  if (windows.num_train_ < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data has ", num_tokens, " tokens: ", w,
        " windows of seq_len + 1 = ", seq_len + 1, " tokens, of which ",
        num_val, " validate (val_fraction ", val_fraction,
        ") and none is left to train on; use more data, a shorter seq_len or "
        "a smaller val_fraction"));
  }
  return windows;
}

int64_t TokenWindows::ValWindow(int64_t i) const {
  TRELLIS_CHECK(i >= 0 && i < num_val_windows())
      << "validation window " << i << " of " << num_val_windows();
  return val_begin_ + i;
}

int64_t TokenWindows::WindowStart(int64_t window) const {
  TRELLIS_CHECK(window >= 0 && window < num_windows_)
      << "window " << window << " of " << num_windows_;
  return window * seq_len_;
}

// ---------------------------------------------------------------- sampler

absl::StatusOr<TrainSampler> TrainSampler::Make(const TokenWindows& windows,
                                                int64_t global_batch,
                                                uint64_t seed) {
  if (global_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the global batch must be at least 1, not ", global_batch));
  }
  if (windows.num_train_windows() < global_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data has only ", windows.num_train_windows(),
        " training windows (", windows.num_tokens(), " tokens, seq_len ",
        windows.seq_len(), ", ", windows.num_val_windows(),
        " validation windows) but one global batch needs ", global_batch,
        "; use more data or a smaller global batch or seq_len"));
  }
  return TrainSampler(windows.num_train_windows(), global_batch, seed);
}

absl::StatusOr<TrainSampler> TrainSampler::Make(int64_t num_train_windows,
                                                int64_t global_batch,
                                                uint64_t seed) {
  if (global_batch < 1 || num_train_windows < global_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat(num_train_windows, " training windows cannot give ",
                     "global batches of ", global_batch));
  }
  return TrainSampler(num_train_windows, global_batch, seed);
}

absl::Status TrainSampler::set_samples_consumed(int64_t samples_consumed) {
  if (samples_consumed < 0 || samples_consumed % global_batch_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "samples consumed ", samples_consumed,
        " is not a non-negative multiple of the global batch ", global_batch_,
        "; resume with the global batch the run started with"));
  }
  samples_consumed_ = samples_consumed;
  return absl::OkStatus();
}

std::vector<int64_t> TrainSampler::EpochPermutation(int64_t epoch) const {
  TRELLIS_CHECK_GE(epoch, 0);
  std::vector<int64_t> order(num_train_);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 rng(
      SplitMix64(seed_ ^ SplitMix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = num_train_ - 1; i > 0; --i) {
    const int64_t j =
        static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  return order;
}

const std::vector<int64_t>& TrainSampler::CachedPermutation(
    int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    cached_permutation_ = EpochPermutation(epoch);
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

std::vector<int64_t> TrainSampler::BatchAt(int64_t samples_consumed) const {
  TRELLIS_CHECK(samples_consumed >= 0 && samples_consumed % global_batch_ == 0)
      << "samples consumed " << samples_consumed << " with global batch "
      << global_batch_;
  const int64_t per_epoch = samples_per_epoch();
  const std::vector<int64_t>& order =
      CachedPermutation(samples_consumed / per_epoch);
  const int64_t offset = samples_consumed % per_epoch;
  return std::vector<int64_t>(order.begin() + offset,
                              order.begin() + offset + global_batch_);
}

std::vector<int64_t> TrainSampler::NextBatch() {
  std::vector<int64_t> batch = BatchAt(samples_consumed_);
  samples_consumed_ += global_batch_;
  return batch;
}

std::span<const int64_t> DataParallelShare(std::span<const int64_t> batch,
                                           int dp_rank, int dp_size) {
  TRELLIS_CHECK(dp_size > 0 && dp_rank >= 0 && dp_rank < dp_size)
      << "data-parallel rank " << dp_rank << " of " << dp_size;
  const int64_t g = static_cast<int64_t>(batch.size());
  const int64_t begin = dp_rank * g / dp_size;
  const int64_t end = (dp_rank + 1) * g / dp_size;
  return batch.subspan(begin, end - begin);
}

}  // namespace trellis
