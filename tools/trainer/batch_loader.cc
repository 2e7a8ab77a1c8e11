#include "tools/trainer/batch_loader.h"

#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis {

absl::StatusOr<std::unique_ptr<BatchLoader>> BatchLoader::Open(
    const std::string& path, const Config& config) {
  TRELLIS_ASSIGN_OR_RETURN(TokenDataset dataset, TokenDataset::Open(path));
  TRELLIS_ASSIGN_OR_RETURN(
      TokenWindows windows,
      TokenWindows::Make(dataset.num_tokens(), config.seq_len,
                         config.val_fraction));
  absl::StatusOr<TrainSampler> sampler =
      TrainSampler::Make(windows, config.global_batch, config.seed);
  if (!sampler.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", sampler.status().message(),
        "; use a smaller --global_batch_size or --seq_len, or more data"));
  }
  return std::unique_ptr<BatchLoader>(
      new BatchLoader(config, std::move(dataset), std::move(windows),
                      std::move(sampler).value()));
}

absl::StatusOr<std::vector<MicroBatch>> BatchLoader::NextStep() {
  const std::vector<int64_t> batch = sampler_.NextBatch();
  const std::span<const int64_t> share =
      DataParallelShare(batch, config_.dp_rank, config_.dp);
  std::vector<int64_t> starts;
  starts.reserve(share.size());
  for (int64_t w : share) starts.push_back(windows_.WindowStart(w));
  return Windows(starts);
}

absl::StatusOr<std::vector<MicroBatch>> BatchLoader::Windows(
    std::span<const int64_t> starts) const {
  const int64_t b = config_.micro_batch, t = config_.seq_len;
  const int64_t count = static_cast<int64_t>(starts.size());
  std::vector<MicroBatch> out((count + b - 1) / b);
  if (!config_.reads_tokens) return out;
  std::vector<int32_t> window(t + 1);
  for (size_t m = 0; m < out.size(); ++m) {
    const int64_t rows = std::min(b, count - static_cast<int64_t>(m) * b);
    MicroBatch& mb = out[m];
    mb.tokens = Tensor::Empty({rows, t}, DType::kI32);
    mb.targets = Tensor::Empty({rows, t}, DType::kI32);
    for (int64_t r = 0; r < rows; ++r) {
      TRELLIS_RETURN_IF_ERROR(
          dataset_.ReadTokens(starts[m * b + r], t + 1, window.data()));
      std::copy(window.begin(), window.end() - 1,
                mb.tokens.data<int32_t>() + r * t);
      std::copy(window.begin() + 1, window.end(),
                mb.targets.data<int32_t>() + r * t);
    }
  }
  return out;
}

}  // namespace trellis
