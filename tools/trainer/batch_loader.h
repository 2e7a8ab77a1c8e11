// BatchLoader: a data-parallel rank's microbatches, step by step.
//
// Every rank runs the same sampler (so all agree on the step's global batch
// and on samples consumed); data-parallel rank d takes its contiguous share
// and cuts it into microbatches of micro_batch_size windows. Window w gives
// tokens [start, start + T) as inputs and [start + 1, start + T + 1) as
// targets. Ranks that need no tokens (middle pipeline stages) read nothing.
#ifndef TRELLIS_TOOLS_TRAINER_BATCH_LOADER_H_
#define TRELLIS_TOOLS_TRAINER_BATCH_LOADER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "data/sampler.h"
#include "data/token_dataset.h"
#include "framework/tensor.h"

namespace trellis {

struct MicroBatch {
  Tensor tokens;   // (B, T) int32
  Tensor targets;  // (B, T) int32
};

class BatchLoader {
 public:
  struct Config {
    int64_t seq_len = 0;
    double val_fraction = 0;
    int64_t global_batch = 0;
    int64_t micro_batch = 0;
    uint64_t seed = 0;
    int dp = 1;
    int dp_rank = 0;
    bool reads_tokens = true;  // false on ranks that need no data
  };
  static absl::StatusOr<std::unique_ptr<BatchLoader>> Open(
      const std::string& path, const Config& config);

  const TokenDataset& dataset() const { return dataset_; }
  const TokenWindows& windows() const { return windows_; }
  int64_t samples_consumed() const { return sampler_.samples_consumed(); }
  absl::Status set_samples_consumed(int64_t n) {
    return sampler_.set_samples_consumed(n);
  }
  int64_t epoch() const { return sampler_.epoch(); }

  // This rank's microbatches of the next step (empty tensors when the rank
  // reads no tokens). Advances the sampler.
  absl::StatusOr<std::vector<MicroBatch>> NextStep();
  // Microbatches of windows starting at the given token offsets, each of
  // `window` = T + 1 tokens; the last microbatch may be short of B windows
  // only if `starts` is (callers pass multiples of B).
  absl::StatusOr<std::vector<MicroBatch>> Windows(
      std::span<const int64_t> starts) const;

 private:
  BatchLoader(Config config, TokenDataset dataset, TokenWindows windows,
              TrainSampler sampler)
      : config_(config),
        dataset_(std::move(dataset)),
        windows_(std::move(windows)),
        sampler_(std::move(sampler)) {}

  Config config_;
  TokenDataset dataset_;
  TokenWindows windows_;
  TrainSampler sampler_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_BATCH_LOADER_H_
