#include "tools/trainer/batch_loader.h"

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
  return loader;
}

absl::Status BatchLoader::Restore(int64_t samples_consumed,
                                  const std::vector<int64_t>& source_samples) {
  if (blend_) return blend_->Restore(samples_consumed, source_samples);
  if (!source_samples.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint was written by a run on a blend of ",
        source_samples.size(),
        " files but --data names one; resume with the --data the run "
        "started with"));
  }
  return sampler_->set_samples_consumed(samples_consumed);
}

absl::StatusOr<std::vector<MicroBatch>> BatchLoader::NextStep() {
  std::vector<WindowRef> refs;
  if (blend_) {
    const std::vector<BlendSampler::Draw> batch = blend_->NextBatch();
    const int64_t g = static_cast<int64_t>(batch.size());
    const int64_t begin = config_.dp_rank * g / config_.dp;
    const int64_t end = (config_.dp_rank + 1) * g / config_.dp;
    for (int64_t i = begin; i < end; ++i) {
      const BlendSampler::Draw& draw = batch[i];
      refs.push_back({draw.source,
                      sources_[draw.source].windows.WindowStart(draw.window)});
    }
  } else {
    const std::vector<int64_t> batch = sampler_->NextBatch();
    for (int64_t w : DataParallelShare(batch, config_.dp_rank, config_.dp)) {
      refs.push_back({0, sources_[0].windows.WindowStart(w)});
    }
  }
  return Read(refs);
}

absl::StatusOr<std::vector<MicroBatch>> BatchLoader::Windows(
    std::span<const int64_t> starts, int source) const {
  TRELLIS_CHECK(source >= 0 && source < num_sources())
      << "source " << source << " of " << num_sources();
  std::vector<WindowRef> refs;
  refs.reserve(starts.size());
  for (int64_t start : starts) refs.push_back({source, start});
  return Read(refs);
}

absl::StatusOr<std::vector<MicroBatch>> BatchLoader::Read(
    std::span<const WindowRef> refs) const {
  const int64_t b = config_.micro_batch, t = config_.seq_len;
  const int64_t count = static_cast<int64_t>(refs.size());
  std::vector<MicroBatch> out((count + b - 1) / b);
  if (!config_.reads_tokens) return out;
  std::vector<int32_t> window(t + 1);
  for (size_t m = 0; m < out.size(); ++m) {
    const int64_t rows = std::min(b, count - static_cast<int64_t>(m) * b);
    MicroBatch& mb = out[m];
    mb.tokens = Tensor::Empty({rows, t}, DType::kI32);
    mb.targets = Tensor::Empty({rows, t}, DType::kI32);
    for (int64_t r = 0; r < rows; ++r) {
      const WindowRef& ref = refs[m * b + r];
      TRELLIS_RETURN_IF_ERROR(sources_[ref.source].dataset.ReadTokens(
          ref.start, t + 1, window.data()));
      std::copy(window.begin(), window.end() - 1,
                mb.tokens.data<int32_t>() + r * t);
      std::copy(window.begin() + 1, window.end(),
                mb.targets.data<int32_t>() + r * t);
    }
  }
  return out;
}

}  // namespace trellis
