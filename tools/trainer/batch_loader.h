// BatchLoader: a data-parallel rank's microbatches, step by step, from one
// token file or a blend of several (data/blend.h).
//
// Every rank runs the same sampler (so all agree on the step's global batch
// and on samples consumed); data-parallel rank d takes its contiguous share
// and cuts it into microbatches of micro_batch_size windows. Window w gives
// tokens [start, start + T) as inputs and [start + 1, start + T + 1) as
// targets. Ranks that need no tokens (middle pipeline stages) read nothing.
//
// One source (`--data=file.h5`): TrainSampler over its train windows, as
// always. Several (`--data=0.7:a.h5,0.3:b.h5`): BlendSampler, each source
// split into train and validation windows on its own; every source must
// share one tokenizer. A microbatch may hold windows of several sources.
#ifndef TRELLIS_TOOLS_TRAINER_BATCH_LOADER_H_
#define TRELLIS_TOOLS_TRAINER_BATCH_LOADER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/blend.h"
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
  // `data`: a --data spec (blend.h): one path, or weight:path items.
  static absl::StatusOr<std::unique_ptr<BatchLoader>> Open(
      const std::string& data, const Config& config);

  int num_sources() const { return static_cast<int>(sources_.size()); }
  // Source i's file, its windows, and its normalized weight (1 alone).
  const TokenDataset& dataset(int source = 0) const {
    return sources_[source].dataset;
  }
  const TokenWindows& windows(int source = 0) const {
    return sources_[source].windows;
  }
  double weight(int source) const {
    return blend_ ? blend_->weights()[source] : 1.0;
  }

  int64_t samples_consumed() const {
    return blend_ ? blend_->samples_consumed() : sampler_->samples_consumed();
  }
  // Samples each source gave so far; empty for a single file.
  std::vector<int64_t> source_samples() const {
    return blend_ ? blend_->source_samples() : std::vector<int64_t>();
  }
  // Resumes the data order. A blend needs one count per source (as
  // source_samples() gave them); a single file takes none.
  absl::Status Restore(int64_t samples_consumed,
                       const std::vector<int64_t>& source_samples);

  // This rank's microbatches of the next step (empty tensors when the rank
  // reads no tokens). Advances the sampler.
  absl::StatusOr<std::vector<MicroBatch>> NextStep();
  // Microbatches of windows of `source` starting at the given token
  // offsets, each of `window` = T + 1 tokens; the last microbatch may be
  // short of B windows only if `starts` is (callers pass multiples of B).
  absl::StatusOr<std::vector<MicroBatch>> Windows(
      std::span<const int64_t> starts, int source = 0) const;

 private:
  struct Source {
    TokenDataset dataset;
    TokenWindows windows;
  };
  // A window to read: its source and first token.
  struct WindowRef {
    int source = 0;
    int64_t start = 0;
  };
  BatchLoader(Config config, std::vector<Source> sources)
      : config_(config), sources_(std::move(sources)) {}
  absl::StatusOr<std::vector<MicroBatch>> Read(
      std::span<const WindowRef> refs) const;

  Config config_;
  std::vector<Source> sources_;
  std::optional<TrainSampler> sampler_;  // one source
  std::optional<BlendSampler> blend_;    // two or more
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_BATCH_LOADER_H_
