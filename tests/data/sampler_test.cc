#include "data/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

namespace trellis {
namespace {

using ::testing::HasSubstr;

TEST(TokenWindowsTest, CountsAndStarts) {
  // 101 tokens, T = 10: windows [0, 11), [10, 21), ..., [90, 101).
  auto windows = TokenWindows::Make(101, 10, 0.0);
  ASSERT_TRUE(windows.ok()) << windows.status();
  EXPECT_EQ(windows->num_windows(), 10);
  EXPECT_EQ(windows->num_train_windows(), 10);
  EXPECT_EQ(windows->num_val_windows(), 0);
  EXPECT_EQ(windows->window_tokens(), 11);
  EXPECT_EQ(windows->WindowStart(9) + windows->window_tokens(), 101);
  // One token fewer loses the last window.
  EXPECT_EQ(TokenWindows::Make(100, 10, 0.0)->num_windows(), 9);
}

TEST(TokenWindowsTest, ValidationIsTheTailWithNoSharedToken) {
  for (int64_t num_tokens : {101, 1000, 4097, 12345}) {
    for (double fraction : {0.001, 0.05, 0.1, 0.5}) {
      for (int64_t seq_len : {1, 7, 16}) {
        auto windows = TokenWindows::Make(num_tokens, seq_len, fraction);
        if (!windows.ok()) continue;
        const int64_t w = windows->num_windows();
        const int64_t v = windows->num_val_windows();
        EXPECT_GE(v, 1);
        EXPECT_EQ(v, std::max<int64_t>(1, std::llround(fraction * w)));
        EXPECT_EQ(windows->val_begin(), w - v);
        EXPECT_EQ(windows->ValWindow(v - 1), w - 1);
        // The last train token comes before the first validation token.
        const int64_t last_train = windows->num_train_windows() - 1;
        const int64_t train_end =
            windows->WindowStart(last_train) + windows->window_tokens();
        EXPECT_LE(train_end, windows->WindowStart(windows->ValWindow(0)))
            << num_tokens << " " << fraction << " " << seq_len;
        EXPECT_EQ(windows->num_train_windows() + 1 + v, w);
      }
    }
  }
}

TEST(TokenWindowsTest, Errors) {
  EXPECT_FALSE(TokenWindows::Make(100, 0, 0.0).ok());
  EXPECT_FALSE(TokenWindows::Make(100, 10, 1.0).ok());
  EXPECT_FALSE(TokenWindows::Make(100, 10, -0.1).ok());
  auto too_few = TokenWindows::Make(10, 10, 0.0);
  EXPECT_THAT(too_few.status().message(), HasSubstr("none is left to train"));
  // Two windows: one validates, one is dropped, none trains.
  EXPECT_FALSE(TokenWindows::Make(21, 10, 0.1).ok());
  EXPECT_TRUE(TokenWindows::Make(31, 10, 0.1).ok());
}

TrainSampler MakeSampler(int64_t train_windows, int64_t global_batch,
                         uint64_t seed) {
  auto windows = TokenWindows::Make(train_windows * 4 + 1, 4, 0.0);
  EXPECT_TRUE(windows.ok());
  auto sampler = TrainSampler::Make(*windows, global_batch, seed);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return *std::move(sampler);
}

TEST(TrainSamplerTest, EachEpochCoversEveryWindowOnceInANewOrder) {
  TrainSampler sampler = MakeSampler(103, 10, 42);
  EXPECT_EQ(sampler.batches_per_epoch(), 10);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order = sampler.EpochPermutation(epoch);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(103);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  // Batches walk the permutation; the last 3 windows of each epoch are
  // skipped and batch 10 starts epoch 1.
  for (int64_t step = 0; step < 25; ++step) {
    EXPECT_EQ(sampler.epoch(), step / 10);
    std::vector<int64_t> batch = sampler.NextBatch();
    const std::vector<int64_t>& order = orders[step / 10];
    const int64_t offset = (step % 10) * 10;
    EXPECT_EQ(batch, std::vector<int64_t>(order.begin() + offset,
                                          order.begin() + offset + 10));
  }
  EXPECT_EQ(sampler.samples_consumed(), 250);
  // Within an epoch no window repeats.
  TrainSampler fresh = MakeSampler(103, 10, 42);
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 10; ++step) {
    for (int64_t w : fresh.NextBatch()) EXPECT_TRUE(seen.insert(w).second);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(TrainSamplerTest, SeedChangesTheOrderAndIsDeterministic) {
  EXPECT_EQ(MakeSampler(50, 5, 1).EpochPermutation(0),
            MakeSampler(50, 5, 1).EpochPermutation(0));
  EXPECT_NE(MakeSampler(50, 5, 1).EpochPermutation(0),
            MakeSampler(50, 5, 2).EpochPermutation(0));
}

TEST(TrainSamplerTest, ResumeFromSamplesConsumedGivesTheSameSequence) {
  TrainSampler uninterrupted = MakeSampler(37, 4, 7);
  std::vector<std::vector<int64_t>> expected;
  for (int step = 0; step < 30; ++step) {
    expected.push_back(uninterrupted.NextBatch());
  }
  for (int stop : {0, 1, 8, 9, 17}) {
    TrainSampler first = MakeSampler(37, 4, 7);
    for (int step = 0; step < stop; ++step) first.NextBatch();
    const int64_t saved = first.samples_consumed();
    TrainSampler resumed = MakeSampler(37, 4, 7);
    ASSERT_TRUE(resumed.set_samples_consumed(saved).ok());
    for (int step = stop; step < 30; ++step) {
      EXPECT_EQ(resumed.NextBatch(), expected[step]) << "resumed at " << stop;
    }
  }
  TrainSampler other = MakeSampler(37, 4, 7);
  EXPECT_THAT(other.set_samples_consumed(6).message(),
              HasSubstr("not a non-negative multiple of the global batch 4"));
}

TEST(TrainSamplerTest, TooFewWindowsForOneBatch) {
  auto windows = TokenWindows::Make(41, 4, 0.0);  // 10 windows
  ASSERT_TRUE(windows.ok());
  EXPECT_TRUE(TrainSampler::Make(*windows, 10, 0).ok());
  auto sampler = TrainSampler::Make(*windows, 11, 0);
  ASSERT_FALSE(sampler.ok());
  EXPECT_THAT(sampler.status().message(),
              HasSubstr("only 10 training windows"));
  EXPECT_THAT(sampler.status().message(), HasSubstr("needs 11"));
}

TEST(TrainSamplerTest, ValidationWindowsNeverTrain) {
  auto windows = TokenWindows::Make(10001, 16, 0.1);
  ASSERT_TRUE(windows.ok());
  auto sampler = TrainSampler::Make(*windows, 8, 3);
  ASSERT_TRUE(sampler.ok());
  for (int step = 0; step < 200; ++step) {
    for (int64_t w : sampler->NextBatch()) {
      EXPECT_LT(w, windows->num_train_windows());
    }
  }
}

TEST(DataParallelShareTest, BlocksPartitionTheBatch) {
  for (int64_t g : {1, 6, 8, 12, 13}) {
    std::vector<int64_t> batch(g);
    std::iota(batch.begin(), batch.end(), 100);
    for (int dp : {1, 2, 3, 4}) {
      if (dp > g) continue;
      std::vector<int64_t> joined;
      for (int d = 0; d < dp; ++d) {
        std::span<const int64_t> share = DataParallelShare(batch, d, dp);
        EXPECT_EQ(share.data(), batch.data() + d * g / dp);
        EXPECT_EQ(static_cast<int64_t>(share.size()),
                  (d + 1) * g / dp - d * g / dp);
        joined.insert(joined.end(), share.begin(), share.end());
      }
      EXPECT_EQ(joined, batch) << "G " << g << " dp " << dp;
    }
  }
}

}  // namespace
}  // namespace trellis
