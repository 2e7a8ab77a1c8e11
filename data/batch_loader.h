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
//
// Documents (--document_mask, --eod_mask_loss): a document starts at a
// window's first token and right after each end-of-text (EOT) input token,
// as the token file lays documents out (each ends with its EOT). With
// document_mask every microbatch carries doc_start: for each input position
// the position in the window where its document starts (attention.h). With
// eod_mask_loss it carries loss_weight: 0 where the input token is EOT (the
// position that would predict the next document's first token), else
// G·T / N, where N counts the weighted positions of the whole global batch
// (G windows of T). So the usual per-microbatch mean, scaled by 1/m and
// averaged over dp, is the mean over the global batch's counted tokens,
// whatever the layout. Ranks read the whole global batch's inputs to count
// N. Evaluation windows (Windows) carry doc_start but no loss weight.
//
// Prefetch: NextStep returns the step's batch and starts reading the next
// one on a background thread while the step runs. The sampler runs ahead by
// that one batch, but samples_consumed() and source_samples() report the
// batches NextStep returned, so checkpoints and Restore are exact.
//
// Thread safety: one thread calls the public methods; the background read
// touches only the token files (HDF5 serializes calls) and its own result.
#ifndef TRELLIS_DATA_BATCH_LOADER_H_
#define TRELLIS_DATA_BATCH_LOADER_H_

#include <atomic>
#include <cstdint>
#include <future>
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
  // (B, T) int32, with document masking: where each input's document starts
  // in its window. Undefined otherwise.
  Tensor doc_start;
  // (B, T) float32, with EOT loss masking: each target's loss weight (see
  // the top). Undefined otherwise.
  Tensor loss_weight;
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
    bool reads_tokens = true;    // false on ranks that need no data
    bool document_mask = false;  // fill MicroBatch::doc_start
    bool eod_mask_loss = false;  // fill MicroBatch::loss_weight
    bool prefetch = true;        // read the next step in the background
  };
  ~BatchLoader();
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

  // Samples of the batches NextStep returned so far.
  int64_t samples_consumed() const { return consumed_.samples; }
  // Samples each source gave so far; empty for a single file.
  std::vector<int64_t> source_samples() const { return consumed_.sources; }
  // Resumes the data order. A blend needs one count per source (as
  // source_samples() gave them); a single file takes none.
  absl::Status Restore(int64_t samples_consumed,
                       const std::vector<int64_t>& source_samples);

  // This rank's microbatches of the next step (empty tensors when the rank
  // reads no tokens). Advances the sampler.
  absl::StatusOr<std::vector<MicroBatch>> NextStep();
  // Global batches read so far in which no position counts toward the loss
  // (--eod_mask_loss over inputs that are all end-of-text).
  int64_t uncounted_batches() const { return uncounted_batches_.load(); }
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
  // The sampler's state after a batch.
  struct Consumed {
    int64_t samples = 0;
    std::vector<int64_t> sources;  // per source; empty for one file
  };
  // A step's batch: read (or being read) and the state after it.
  struct Pending {
    std::future<absl::StatusOr<std::vector<MicroBatch>>> batch;
    Consumed after;
  };
  BatchLoader(Config config, std::vector<Source> sources)
      : config_(config), sources_(std::move(sources)) {}
  // Counted by ReadStep, which may run on the prefetch thread.
  mutable std::atomic<int64_t> uncounted_batches_{0};
  Consumed SamplerState() const;
  // Draws the next global batch and starts reading this rank's share
  // (in the background when config_.prefetch).
  Pending Launch();
  // Reads this rank's `mine` windows of a global batch `all` (for the EOT
  // count); `all` may be empty without loss masking.
  absl::StatusOr<std::vector<MicroBatch>> ReadStep(std::vector<WindowRef> all,
                                                   int64_t first,
                                                   int64_t count) const;
  // The T + 1 tokens of each window of `refs`, one after another.
  absl::StatusOr<std::vector<int32_t>> ReadTokens(
      std::span<const WindowRef> refs) const;
  // Microbatches of `count` windows (T + 1 tokens each, one after another
  // in `tokens`); a `weight` fills loss weights: 0 at EOT inputs, else
  // *weight.
  std::vector<MicroBatch> Build(const int32_t* tokens, int64_t count,
                                std::optional<float> weight) const;

  Config config_;
  std::vector<Source> sources_;
  std::optional<TrainSampler> sampler_;  // one source
  std::optional<BlendSampler> blend_;    // two or more
  Consumed consumed_;
  std::optional<Pending> pending_;  // the next step's batch
};

}  // namespace trellis

#endif  // TRELLIS_DATA_BATCH_LOADER_H_
