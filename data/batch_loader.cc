#include "data/batch_loader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis {

absl::StatusOr<std::unique_ptr<BatchLoader>> BatchLoader::Open(
    const std::string& data, const Config& config) {
  TRELLIS_ASSIGN_OR_RETURN(const std::vector<BlendSource> blend,
                           ParseBlend(data));
  std::vector<Source> sources;
  std::vector<double> weights;
  std::vector<int64_t> train_windows;
  for (const BlendSource& source : blend) {
    TRELLIS_ASSIGN_OR_RETURN(TokenDataset dataset,
                             TokenDataset::Open(source.path));
    if (!sources.empty()) {
      TRELLIS_RETURN_IF_ERROR(CheckSameTokenizer(sources[0].dataset, dataset));
    }
    absl::StatusOr<TokenWindows> windows = TokenWindows::Make(
        dataset.num_tokens(), config.seq_len, config.val_fraction);
    if (!windows.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source.path, ": ", windows.status().message()));
    }
    weights.push_back(source.weight);
    train_windows.push_back(windows->num_train_windows());
    sources.push_back({std::move(dataset), *std::move(windows)});
  }
  std::unique_ptr<BatchLoader> loader(
      new BatchLoader(config, std::move(sources)));
  if (blend.size() == 1) {
    absl::StatusOr<TrainSampler> sampler = TrainSampler::Make(
        loader->sources_[0].windows, config.global_batch, config.seed);
    if (!sampler.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          blend[0].path, ": ", sampler.status().message(),
          "; use a smaller --global_batch_size or --seq_len, or more data"));
    }
    loader->sampler_ = *std::move(sampler);
  } else {
    TRELLIS_ASSIGN_OR_RETURN(
        BlendSampler sampler,
        BlendSampler::Make(weights, train_windows, config.global_batch,
                           config.seed));
    loader->blend_ = std::move(sampler);
  }
  loader->consumed_ = loader->SamplerState();
  return loader;
}

BatchLoader::~BatchLoader() {
  // A read in flight uses this loader: let it finish.
  if (pending_) pending_->batch.wait();
}

BatchLoader::Consumed BatchLoader::SamplerState() const {
  if (blend_) return {blend_->samples_consumed(), blend_->source_samples()};
  return {sampler_->samples_consumed(), {}};
}

absl::Status BatchLoader::Restore(int64_t samples_consumed,
                                  const std::vector<int64_t>& source_samples) {
  if (pending_) {
    pending_->batch.wait();
    pending_.reset();
  }
  absl::Status status;
  if (blend_) {
    status = blend_->Restore(samples_consumed, source_samples);
  } else if (!source_samples.empty()) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint was written by a run on a blend of ",
        source_samples.size(),
        " files but --data names one; resume with the --data the run "
        "started with"));
  } else {
    status = sampler_->set_samples_consumed(samples_consumed);
  }
  consumed_ = SamplerState();
  return status;
}

BatchLoader::Pending BatchLoader::Launch() {
  std::vector<WindowRef> all;
  if (blend_) {
    for (const BlendSampler::Draw& draw : blend_->NextBatch()) {
      all.push_back({draw.source,
                     sources_[draw.source].windows.WindowStart(draw.window)});
    }
  } else {
    for (int64_t w : sampler_->NextBatch()) {
      all.push_back({0, sources_[0].windows.WindowStart(w)});
    }
  }
  // Rank d's contiguous share [d·G/dp, (d+1)·G/dp), as DataParallelShare.
  const int64_t g = static_cast<int64_t>(all.size());
  const int64_t first = config_.dp_rank * g / config_.dp;
  const int64_t count = (config_.dp_rank + 1) * g / config_.dp - first;
  Pending pending;
  pending.after = SamplerState();
  const auto policy =
      config_.prefetch ? std::launch::async : std::launch::deferred;
  pending.batch =
      std::async(policy, [this, all = std::move(all), first, count]() mutable {
        return ReadStep(std::move(all), first, count);
      });
  return pending;
}

absl::StatusOr<std::vector<MicroBatch>> BatchLoader::NextStep() {
  if (!pending_) pending_ = Launch();
  absl::StatusOr<std::vector<MicroBatch>> batch = pending_->batch.get();
  consumed_ = std::move(pending_->after);
  // The next step's batch is read while this one trains.
  pending_ = Launch();
  return batch;
}

absl::StatusOr<std::vector<MicroBatch>> BatchLoader::ReadStep(
    std::vector<WindowRef> all, int64_t first, int64_t count) const {
  if (!config_.reads_tokens) {
    return std::vector<MicroBatch>((count + config_.micro_batch - 1) /
                                   config_.micro_batch);
  }
  const int64_t w = config_.seq_len + 1;
  if (!config_.eod_mask_loss) {
    const std::span<const WindowRef> mine(all.data() + first, count);
    TRELLIS_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens,
                             ReadTokens(mine));
    return Build(tokens.data(), count, 0.0);
  }
  // The whole global batch's inputs, to count its loss-bearing positions.
  TRELLIS_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, ReadTokens(all));
  const int32_t eot = static_cast<int32_t>(sources_[0].dataset.eot_token());
  int64_t counted = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    counted += std::count_if(tokens.begin() + i * w,
                             tokens.begin() + i * w + config_.seq_len,
                             [eot](int32_t t) { return t != eot; });
  }
  const double positions =
      static_cast<double>(all.size()) * static_cast<double>(config_.seq_len);
  // Every input EOT: nothing counts (weights 0; loss and gradients 0).
  if (counted == 0) uncounted_batches_.fetch_add(1);
  const double weight = counted > 0 ? positions / counted : 0.0;
  return Build(tokens.data() + first * w, count, static_cast<float>(weight));
}

absl::StatusOr<std::vector<MicroBatch>> BatchLoader::Windows(
    std::span<const int64_t> starts, int source) const {
  TRELLIS_CHECK(source >= 0 && source < num_sources())
      << "source " << source << " of " << num_sources();
  std::vector<WindowRef> refs;
  refs.reserve(starts.size());
  for (int64_t start : starts) refs.push_back({source, start});
  const int64_t count = static_cast<int64_t>(refs.size());
  if (!config_.reads_tokens) {
    return std::vector<MicroBatch>((count + config_.micro_batch - 1) /
                                   config_.micro_batch);
  }
  TRELLIS_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, ReadTokens(refs));
  return Build(tokens.data(), count, 0.0);
}

absl::StatusOr<std::vector<int32_t>> BatchLoader::ReadTokens(
    std::span<const WindowRef> refs) const {
  const int64_t w = config_.seq_len + 1;
  std::vector<int32_t> tokens(refs.size() * w);
  for (size_t i = 0; i < refs.size(); ++i) {
    TRELLIS_RETURN_IF_ERROR(sources_[refs[i].source].dataset.ReadTokens(
        refs[i].start, w, tokens.data() + i * w));
  }
  return tokens;
}

std::vector<MicroBatch> BatchLoader::Build(const int32_t* tokens, int64_t count,
                                           std::optional<float> weight) const {
  const int64_t b = config_.micro_batch, t = config_.seq_len;
  const int32_t eot = static_cast<int32_t>(sources_[0].dataset.eot_token());
  std::vector<MicroBatch> out((count + b - 1) / b);
  for (size_t m = 0; m < out.size(); ++m) {
    const int64_t rows = std::min(b, count - static_cast<int64_t>(m) * b);
    MicroBatch& mb = out[m];
    mb.tokens = Tensor::Empty({rows, t}, DType::kI32);
    mb.targets = Tensor::Empty({rows, t}, DType::kI32);
    if (config_.document_mask) {
      mb.doc_start = Tensor::Empty({rows, t}, DType::kI32);
    }
    if (weight) {
      mb.loss_weight = Tensor::Empty({rows, t}, DType::kF32);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t* window = tokens + (m * b + r) * (t + 1);
      std::copy(window, window + t, mb.tokens.data<int32_t>() + r * t);
      std::copy(window + 1, window + t + 1, mb.targets.data<int32_t>() + r * t);
      if (mb.doc_start.defined()) {
        int32_t* start = mb.doc_start.data<int32_t>() + r * t;
        start[0] = 0;
        for (int64_t i = 1; i < t; ++i) {
          start[i] =
              window[i - 1] == eot ? static_cast<int32_t>(i) : start[i - 1];
        }
      }
      if (mb.loss_weight.defined()) {
        float* row = mb.loss_weight.data<float>() + r * t;
        for (int64_t i = 0; i < t; ++i) {
          row[i] = window[i] == eot ? 0.0f : *weight;
        }
      }
    }
  }
  return out;
}

}  // namespace trellis
