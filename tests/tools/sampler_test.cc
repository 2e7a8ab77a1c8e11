// The next-token sampler: flag checks, greedy choices, the distributions
// top-k and top-p leave on fixed logits, and draws that follow them.
#include "tools/generate/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/rng.h"

namespace trellis {
namespace {

// Logits whose softmax is exactly `p` (up to rounding).
std::vector<float> LogitsOf(const std::vector<double>& p) {
  std::vector<float> logits;
  for (double x : p) logits.push_back(static_cast<float>(std::log(x)));
  return logits;
}

SamplingOptions Options(double temperature, int64_t top_k, double top_p,
                        uint64_t seed = 0) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  o.seed = seed;
  return o;
}

TEST(SamplerTest, RejectsBadOptionsNamingTheFlag) {
  EXPECT_TRUE(ValidateSampling(Options(1, 0, 1)).ok());
  EXPECT_TRUE(ValidateSampling(Options(0, 5, 0.5)).ok());
  for (double p : {0.0, -0.1, 1.5, std::nan("")}) {
    const absl::Status s = ValidateSampling(Options(1, 0, p));
    EXPECT_FALSE(s.ok()) << p;
    EXPECT_THAT(s.message(), ::testing::HasSubstr("--top_p="));
  }
  EXPECT_THAT(ValidateSampling(Options(-1, 0, 1)).message(),
              ::testing::HasSubstr("--temperature="));
  EXPECT_THAT(ValidateSampling(Options(INFINITY, 0, 1)).message(),
              ::testing::HasSubstr("--temperature="));
  EXPECT_THAT(ValidateSampling(Options(1, -1, 1)).message(),
              ::testing::HasSubstr("--top_k="));
}

TEST(SamplerTest, GreedyTakesTheLargestLogitAndTheLowerIdOnTies) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  for (uint64_t step = 0; step < 20; ++step) {
    EXPECT_EQ(SampleToken(logits, Options(0, 0, 1), step), 1);
    EXPECT_EQ(SampleToken(logits, Options(1.5, 1, 0.9, step), step), 1);
  }
  EXPECT_THAT(NextTokenDistribution(logits, Options(0, 0, 1)),
              ::testing::ElementsAre(0, 1, 0, 0, 0));
}

TEST(SamplerTest, TopKOneEqualsGreedyOnRandomLogits) {
  for (uint64_t trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(300);
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = static_cast<float>(3 * NormalAt(7, trial, i));
    }
    EXPECT_EQ(SampleToken(logits, Options(0.8, 1, 1, trial), trial),
              SampleToken(logits, Options(0, 0, 1), trial));
  }
}

TEST(SamplerTest, FullDistributionIsTheSoftmaxAtTheTemperature) {
  const std::vector<double> p = {0.5, 0.25, 0.15, 0.1};
  const std::vector<double> q =
      NextTokenDistribution(LogitsOf(p), Options(1, 0, 1));
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(q[i], p[i], 1e-7);
  // Temperature 2: probabilities proportional to sqrt(p).
  const std::vector<double> t =
      NextTokenDistribution(LogitsOf(p), Options(2, 0, 1));
  double z = 0;
  for (double x : p) z += std::sqrt(x);
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_NEAR(t[i], std::sqrt(p[i]) / z, 1e-7);
  }
}

TEST(SamplerTest, TopKAndTopPKeepTheMostLikelyAndRenormalize) {
  const std::vector<float> logits = LogitsOf({0.1, 0.5, 0.15, 0.25});
  auto expect = [&](const SamplingOptions& o, std::vector<double> want) {
    const std::vector<double> got = NextTokenDistribution(logits, o);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-7)
          << "id " << i << " top_k " << o.top_k << " top_p " << o.top_p;
    }
  };
  // Two most likely: ids 1 (0.5) and 3 (0.25).
  expect(Options(1, 2, 1), {0, 2.0 / 3, 0, 1.0 / 3});
  // 0.5 < 0.7 <= 0.75: the same two.
  expect(Options(1, 0, 0.7), {0, 2.0 / 3, 0, 1.0 / 3});
  // 0.4 <= 0.5: the most likely alone.
  expect(Options(1, 0, 0.4), {0, 1, 0, 0});
  // 0.75 < 0.85 <= 0.9: three.
  expect(Options(1, 0, 0.85), {0, 0.5 / 0.9, 0.15 / 0.9, 0.25 / 0.9});
  // top_k first, then top_p of what it keeps, renormalized: k 3 keeps 0.9
  // of the mass, in which 0.5 and 0.25 make 0.83 >= 0.8: two stay (of the
  // unrenormalized mass they would make 0.75 < 0.8, and three would).
  expect(Options(1, 3, 0.8), {0, 2.0 / 3, 0, 1.0 / 3});
  // top_k larger than the vocabulary keeps everything.
  expect(Options(1, 10, 1), {0.1, 0.5, 0.15, 0.25});
}

TEST(SamplerTest, DrawsFollowTheDistributionAndStayInsideIt) {
  const std::vector<float> logits = LogitsOf({0.1, 0.5, 0.15, 0.25});
  for (const SamplingOptions& o :
       {Options(1, 0, 1, 11), Options(1, 0, 0.85, 12),
        Options(0.7, 2, 1, 13)}) {
    const std::vector<double> p = NextTokenDistribution(logits, o);
    std::vector<double> counts(logits.size(), 0);
    const int draws = 40000;
    for (int step = 0; step < draws; ++step) {
      counts[SampleToken(logits, o, step)] += 1;
    }
    for (size_t i = 0; i < p.size(); ++i) {
      // Binomial standard deviation is below 0.0025 here: 4 of them.
      EXPECT_NEAR(counts[i] / draws, p[i], 0.01) << "id " << i;
      if (p[i] == 0) {
        EXPECT_EQ(counts[i], 0) << "id " << i;
      }
    }
  }
}

TEST(SamplerTest, SameSeedSameTokensOtherSeedOtherTokens) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = static_cast<float>(NormalAt(3, 0, i));
  }
  auto draw = [&](uint64_t seed) {
    std::vector<int32_t> tokens;
    for (uint64_t step = 0; step < 64; ++step) {
      tokens.push_back(SampleToken(logits, Options(1, 0, 0.95, seed), step));
    }
    return tokens;
  };
  EXPECT_EQ(draw(5), draw(5));
  EXPECT_NE(draw(5), draw(6));
}

}  // namespace
}  // namespace trellis
