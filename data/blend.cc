#include "data/blend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "framework/rng.h"
#include "framework/status.h"

namespace trellis {
namespace {

// Salts keep the per-source and per-batch streams apart from each other and
// from the single-file sampler's.
constexpr uint64_t kSourceSalt = 0x626c656e64535243ull;
constexpr uint64_t kBatchSalt = 0x626c656e64424154ull;

// `text` as a positive finite weight, or nullopt when it is no number.
std::optional<double> ParseWeight(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

absl::StatusOr<std::vector<BlendSource>> ParseBlend(const std::string& spec) {
  if (spec.empty()) {
    return absl::InvalidArgumentError(
        "--data is required: a token file made by trellis-preprocess, or "
        "weight:path,weight:path to blend several");
  }
  std::error_code error;
  if (std::filesystem::is_regular_file(spec, error)) {
    return std::vector<BlendSource>{{spec, 1.0}};
  }
  std::vector<BlendSource> sources;
  for (absl::string_view item_view : absl::StrSplit(spec, ',')) {
    const std::string item(item_view);
    if (item.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--data=", spec,
          " has an empty item; give files as weight:path,weight:path"));
    }
    BlendSource source{item, 1.0};
    const size_t colon = item.find(':');
    if (colon != std::string::npos) {
      const std::optional<double> weight = ParseWeight(item.substr(0, colon));
      if (weight.has_value()) {
        if (!(std::isfinite(*weight) && *weight > 0)) {
          return absl::InvalidArgumentError(
              absl::StrCat("--data item ", item,
                           ": the weight must be positive and "
                           "finite"));
        }
        source = {item.substr(colon + 1), *weight};
        if (source.path.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("--data item ", item, " names no file"));
        }
      }
    }
    sources.push_back(std::move(source));
  }
  return sources;
}

absl::Status CheckSameTokenizer(const TokenDataset& a, const TokenDataset& b) {
  const TokenFileMetadata& x = a.metadata();
  const TokenFileMetadata& y = b.metadata();
  // Files that record their tokenizer file's hash must agree on it too.
  const bool same_file = x.tokenizer_sha256.empty() ||
                         y.tokenizer_sha256.empty() ||
                         x.tokenizer_sha256 == y.tokenizer_sha256;
  if (x.tokenizer == y.tokenizer && x.vocab_size == y.vocab_size &&
      x.eot_token == y.eot_token && same_file) {
    return absl::OkStatus();
  }
  auto describe = [](const TokenDataset& d) {
    return absl::StrCat(d.path(), " (tokenizer ",
                        d.tokenizer_identity().ToString(), ")");
  };
  return absl::InvalidArgumentError(absl::StrCat(
      "one --data blend mixes tokenizers: ", describe(a), " and ", describe(b),
      "; preprocess every file of a blend with the same --tokenizer"));
}

absl::StatusOr<TokenFileMetadata> BlendMetadata(const std::string& spec) {
  TRELLIS_ASSIGN_OR_RETURN(std::vector<BlendSource> sources, ParseBlend(spec));
  TRELLIS_ASSIGN_OR_RETURN(TokenDataset first,
                           TokenDataset::Open(sources[0].path));
  for (size_t i = 1; i < sources.size(); ++i) {
    TRELLIS_ASSIGN_OR_RETURN(TokenDataset other,
                             TokenDataset::Open(sources[i].path));
    TRELLIS_RETURN_IF_ERROR(CheckSameTokenizer(first, other));
  }
  return first.metadata();
}

// ---------------------------------------------------------------- sampler

BlendSampler::BlendSampler(std::vector<double> weights,
                           std::vector<TrainSampler> sources,
                           int64_t global_batch, uint64_t seed)
    : weights_(std::move(weights)),
      sources_(std::move(sources)),
      global_batch_(global_batch),
      seed_(seed),
      counts_(weights_.size(), 0) {}

absl::StatusOr<BlendSampler> BlendSampler::Make(
    const std::vector<double>& weights,
    const std::vector<int64_t>& train_windows, int64_t global_batch,
    uint64_t seed) {
  TRELLIS_CHECK(weights.size() == train_windows.size() && weights.size() >= 2)
      << weights.size() << " weights, " << train_windows.size() << " sources";
  if (global_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the global batch must be at least 1, not ", global_batch));
  }
  for (const double w : weights) {
    if (!(std::isfinite(w) && w > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("blend weight ", w, " is not positive and finite"));
    }
  }
  // Scaled by the largest first, so that the sum cannot overflow
  // (1e308 + 1e308 is infinite, and every share would be 0).
  const double largest = *std::max_element(weights.begin(), weights.end());
  double total = 0;
  for (const double w : weights) total += w / largest;
  std::vector<double> normalized;
  std::vector<TrainSampler> sources;
  for (size_t k = 0; k < weights.size(); ++k) {
    normalized.push_back(weights[k] / largest / total);
    if (!(normalized.back() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blend weight ", weights[k], " is too small beside ", largest,
          " to ever be drawn; give weights within a factor of 1e300"));
    }
    const uint64_t source_seed = SplitMix64(seed ^ SplitMix64(kSourceSalt + k));
    TRELLIS_ASSIGN_OR_RETURN(
        TrainSampler sampler,
        TrainSampler::Make(train_windows[k], 1, source_seed));
    sources.push_back(std::move(sampler));
  }
  return BlendSampler(std::move(normalized), std::move(sources), global_batch,
                      seed);
}

absl::Status BlendSampler::Restore(int64_t samples_consumed,
                                   const std::vector<int64_t>& source_samples) {
  if (samples_consumed < 0 || samples_consumed % global_batch_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "samples consumed ", samples_consumed,
        " is not a non-negative multiple of the global batch ", global_batch_,
        "; resume with the global batch the run started with"));
  }
  if (source_samples.size() != counts_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint's data state has ", source_samples.size(),
                     " sources but --data blends ", counts_.size(),
                     "; resume with the --data the run started with"));
  }
  int64_t sum = 0;
  for (int64_t c : source_samples) {
    if (c < 0) return absl::InvalidArgumentError("a negative source count");
    sum += c;
  }
  if (sum != samples_consumed) {
    return absl::InvalidArgumentError(
        absl::StrCat("the sources' sample counts add up to ", sum,
                     ", not to the ", samples_consumed, " samples consumed"));
  }
  samples_consumed_ = samples_consumed;
  counts_ = source_samples;
  return absl::OkStatus();
}

int BlendSampler::NextSource() const {
  const double next = static_cast<double>(samples_consumed_ + 1);
  int best = 0;
  double best_deficit = -1e300;
  for (int k = 0; k < num_sources(); ++k) {
    const double deficit = weights_[k] * next - static_cast<double>(counts_[k]);
    if (deficit > best_deficit) {
      best = k;
      best_deficit = deficit;
    }
  }
  return best;
}

std::vector<BlendSampler::Draw> BlendSampler::NextBatch() {
  const int64_t first = samples_consumed_;
  std::vector<Draw> batch;
  batch.reserve(global_batch_);
  for (int64_t i = 0; i < global_batch_; ++i) {
    const int k = NextSource();
    const std::vector<int64_t> one = sources_[k].BatchAt(counts_[k]);
    batch.push_back({k, one[0]});
    ++counts_[k];
    ++samples_consumed_;
  }
  std::mt19937_64 rng(SplitMix64(
      seed_ ^ SplitMix64(kBatchSalt ^ static_cast<uint64_t>(first))));
  std::shuffle(batch.begin(), batch.end(), rng);
  return batch;
}

}  // namespace trellis
