// Blends: the --data spec, proportions over many draws, determinism, the
// layout-free order, resuming from saved counts, and mixed tokenizers.
#include "data/blend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "data/token_dataset.h"

namespace trellis {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ParseBlendTest, SinglePathAndWeightedItems) {
  absl::StatusOr<std::vector<BlendSource>> one = ParseBlend("data/web.h5");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].path, "data/web.h5");
  EXPECT_EQ((*one)[0].weight, 1.0);

  absl::StatusOr<std::vector<BlendSource>> two =
      ParseBlend("0.7:web.h5,0.3:dir/code:v2.h5,plain.h5");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 3u);
  EXPECT_EQ((*two)[0].path, "web.h5");
  EXPECT_EQ((*two)[0].weight, 0.7);
  EXPECT_EQ((*two)[1].path, "dir/code:v2.h5");
  EXPECT_EQ((*two)[1].weight, 0.3);
  EXPECT_EQ((*two)[2].path, "plain.h5");
  EXPECT_EQ((*two)[2].weight, 1.0);
  // A prefix that is no number belongs to the path.
  EXPECT_EQ(ParseBlend("run:1.h5")->at(0).path, "run:1.h5");
  // An existing file is one source whatever its name holds.
  const std::string odd =
      (std::filesystem::path(::testing::TempDir()) / "0.5:odd,name.h5")
          .string();
  std::ofstream(odd) << "x";
  absl::StatusOr<std::vector<BlendSource>> file = ParseBlend(odd);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->size(), 1u);
  EXPECT_EQ((*file)[0].path, odd);
  std::filesystem::remove(odd);

  for (const char* bad : {"", "a.h5,", "0:a.h5,1:b.h5", "-1:a.h5", "inf:a.h5",
                          "nan:a.h5", "0.5:"}) {
    EXPECT_FALSE(ParseBlend(bad).ok()) << bad;
  }
  // No --data at all says what to give, not that an item is empty.
  EXPECT_THAT(std::string(ParseBlend("").status().message()),
              testing::HasSubstr("--data is required"));
}

BlendSampler MakeSampler(std::vector<double> weights,
                         std::vector<int64_t> windows, int64_t global_batch,
                         uint64_t seed) {
  absl::StatusOr<BlendSampler> sampler =
      BlendSampler::Make(weights, windows, global_batch, seed);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return *std::move(sampler);
}

// After every batch, each source's count is within 1 of its share of the
// samples (the largest-deficit rule), so over 100k draws the proportions
// are exact to 1e-5.
TEST(BlendSamplerTest, ProportionsFollowTheWeights) {
  const std::vector<std::vector<double>> cases = {
      {0.7, 0.3}, {1, 1, 1}, {5, 2, 0.5, 0.01}, {0.999, 0.001}};
  for (const std::vector<double>& weights : cases) {
    const std::vector<int64_t> windows(weights.size(), 997);
    BlendSampler sampler = MakeSampler(weights, windows, 32, 7);
    double total = 0;
    for (double w : weights) total += w;
    std::vector<int64_t> counts(weights.size(), 0);
    for (int step = 0; step < 3125; ++step) {
      for (const BlendSampler::Draw& draw : sampler.NextBatch()) {
        ASSERT_GE(draw.window, 0);
        ASSERT_LT(draw.window, 997);
        ++counts[draw.source];
      }
      const double n = 32.0 * (step + 1);
      for (size_t k = 0; k < weights.size(); ++k) {
        ASSERT_LT(std::abs(counts[k] - n * weights[k] / total), 1.0 + 1e-9)
            << "source " << k << " after step " << step;
        ASSERT_EQ(counts[k], sampler.source_samples()[k]);
      }
    }
    for (size_t k = 0; k < weights.size(); ++k) {
      EXPECT_NEAR(counts[k] / 100000.0, weights[k] / total, 1e-5);
    }
  }
}

// Weights whose sum overflows a double (1e308 + 1e308) were normalized to
// 0 and drawn equally: the shares must follow the weights; a weight too
// small beside the largest to be drawn at all is refused.
TEST(BlendSamplerTest, HugeWeightsKeepTheirProportions) {
  BlendSampler sampler = MakeSampler({1e308, 1e308, 1}, {97, 97, 97}, 64, 3);
  EXPECT_DOUBLE_EQ(sampler.weights()[0], 0.5);
  EXPECT_DOUBLE_EQ(sampler.weights()[1], 0.5);
  std::vector<int64_t> counts(3, 0);
  for (int step = 0; step < 10; ++step) {
    for (const BlendSampler::Draw& draw : sampler.NextBatch()) {
      ++counts[draw.source];
    }
  }
  EXPECT_EQ(counts[0], 320);
  EXPECT_EQ(counts[1], 320);
  EXPECT_EQ(counts[2], 0);
  const absl::StatusOr<BlendSampler> extreme =
      BlendSampler::Make({1e308, 1e-300}, {97, 97}, 64, 3);
  ASSERT_FALSE(extreme.ok());
  EXPECT_THAT(std::string(extreme.status().message()),
              testing::HasSubstr("too small"));
}

// Each source's windows come in epochs: every train window once per epoch.
TEST(BlendSamplerTest, EachSourceCoversItsWindowsEachEpoch) {
  BlendSampler sampler = MakeSampler({0.75, 0.25}, {30, 10}, 8, 1);
  std::vector<std::multiset<int64_t>> seen(2);
  for (int step = 0; step < 5; ++step) {  // 30 + 10 draws: one epoch each
    for (const BlendSampler::Draw& draw : sampler.NextBatch()) {
      seen[draw.source].insert(draw.window);
    }
  }
  for (int k = 0; k < 2; ++k) {
    const int64_t n = k == 0 ? 30 : 10;
    EXPECT_EQ(static_cast<int64_t>(seen[k].size()), n);
    for (int64_t w = 0; w < n; ++w) EXPECT_EQ(seen[k].count(w), 1u) << w;
  }
}

TEST(BlendSamplerTest, DeterministicAndSeedDependent) {
  BlendSampler a = MakeSampler({0.6, 0.4}, {500, 300}, 16, 99);
  BlendSampler b = MakeSampler({0.6, 0.4}, {500, 300}, 16, 99);
  BlendSampler c = MakeSampler({0.6, 0.4}, {500, 300}, 16, 100);
  bool differs = false;
  for (int step = 0; step < 50; ++step) {
    const std::vector<BlendSampler::Draw> x = a.NextBatch();
    ASSERT_EQ(x, b.NextBatch()) << step;
    differs |= x != c.NextBatch();
  }
  EXPECT_TRUE(differs);
}

// Every dp layout's shares, put back together, are the global batch the
// single-process run draws; so the order never depends on the layout.
TEST(BlendSamplerTest, SameSequenceUnderEveryDataParallelLayout) {
  BlendSampler reference = MakeSampler({0.5, 0.3, 0.2}, {200, 150, 90}, 24, 5);
  std::vector<std::vector<BlendSampler::Draw>> want;
  for (int step = 0; step < 40; ++step) want.push_back(reference.NextBatch());
  for (int dp : {2, 3, 4, 8}) {
    std::vector<BlendSampler> ranks;
    for (int d = 0; d < dp; ++d) {
      ranks.push_back(MakeSampler({0.5, 0.3, 0.2}, {200, 150, 90}, 24, 5));
    }
    for (int step = 0; step < 40; ++step) {
      std::vector<BlendSampler::Draw> joined;
      for (int d = 0; d < dp; ++d) {
        const std::vector<BlendSampler::Draw> batch = ranks[d].NextBatch();
        const int64_t begin = d * 24 / dp, end = (d + 1) * 24 / dp;
        joined.insert(joined.end(), batch.begin() + begin, batch.begin() + end);
      }
      ASSERT_EQ(joined, want[step]) << "dp " << dp << " step " << step;
    }
  }
}

TEST(BlendSamplerTest, RestoreFromSavedCountsContinuesExactly) {
  BlendSampler whole = MakeSampler({0.7, 0.3}, {101, 37}, 12, 3);
  for (int step = 0; step < 17; ++step) whole.NextBatch();
  const int64_t consumed = whole.samples_consumed();
  const std::vector<int64_t> counts = whole.source_samples();
  EXPECT_EQ(consumed, 17 * 12);

  BlendSampler resumed = MakeSampler({0.7, 0.3}, {101, 37}, 12, 3);
  ASSERT_TRUE(resumed.Restore(consumed, counts).ok());
  for (int step = 0; step < 30; ++step) {
    ASSERT_EQ(resumed.NextBatch(), whole.NextBatch()) << step;
  }
  EXPECT_FALSE(resumed.Restore(13, {13, 0}).ok());  // not a batch multiple
  EXPECT_FALSE(resumed.Restore(24, {24}).ok());     // another source count
  EXPECT_FALSE(resumed.Restore(24, {20, 5}).ok());  // counts do not add up
  EXPECT_THAT(resumed.Restore(24, {1, 2, 21}).message(),
              HasSubstr("resume with the --data the run started with"));
}

TEST(BlendSamplerTest, RefusesASourceWithoutWindows) {
  EXPECT_FALSE(BlendSampler::Make({1, 1}, {10, 0}, 4, 1).ok());
  EXPECT_FALSE(BlendSampler::Make({1, 1}, {10, 10}, 0, 1).ok());
}

std::string WriteFile(const std::string& name,
                      const TokenFileMetadata& metadata) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / name).string();
  auto writer = TokenDatasetWriter::Create(path, metadata);
  EXPECT_TRUE(writer.ok());
  EXPECT_TRUE((*writer)->AppendDocument(std::vector<uint32_t>{1, 2, 3}).ok());
  EXPECT_TRUE((*writer)->Finish().ok());
  return path;
}

TEST(BlendMetadataTest, MixedTokenizersAreAnErrorNamingBothFiles) {
  const std::string a = WriteFile("blend_a.h5", {"byte", 257, 256});
  const std::string b = WriteFile("blend_b.h5", {"byte", 257, 256});
  const std::string c = WriteFile("blend_c.h5", {"gpt2", 50257, 50256});
  const std::string d = WriteFile("blend_d.h5", {"other", 257, 256});
  absl::StatusOr<TokenFileMetadata> same =
      BlendMetadata("0.5:" + a + ",0.5:" + b);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->vocab_size, 257);
  for (const std::string& other : {c, d}) {
    absl::StatusOr<TokenFileMetadata> mixed =
        BlendMetadata("0.5:" + a + ",0.5:" + other);
    EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(mixed.status().message(),
                AllOf(HasSubstr(a), HasSubstr(other), HasSubstr("tokenizer")));
  }
}

}  // namespace
}  // namespace trellis
