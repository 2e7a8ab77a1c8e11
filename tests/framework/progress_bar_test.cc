// ProgressBar draws nothing for a job done within a second, then its
// figures (a count with its unit, or megabytes and the rate for bytes),
// the percentage and the estimate, ending the line on the last update.
#include "framework/progress_bar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace trellis {
namespace {

using ::testing::HasSubstr;
using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;

TEST(ProgressBarTest, QuickJobsDrawNothing) {
  CaptureStderr();
  ProgressBar bar("planning", "layouts");
  for (int i = 1; i <= 3; ++i) bar.Update(i, 3);
  EXPECT_EQ(GetCapturedStderr(), "");
}

TEST(ProgressBarTest, LongJobsShowTheCountAndEndTheLine) {
  CaptureStderr();
  ProgressBar bar("planning", "layouts");
  bar.Update(1, 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  bar.Update(2, 4);
  bar.Update(4, 4, "detail");
  const std::string out = GetCapturedStderr();
  EXPECT_THAT(out, HasSubstr("planning ["));
  EXPECT_THAT(out, HasSubstr("2/4 layouts  50.0%"));
  EXPECT_THAT(out, HasSubstr("4/4 layouts  100.0%  ETA 0:00  detail"));
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
}

TEST(ProgressBarTest, BytesShowMegabytesAndTheRate) {
  CaptureStderr();
  ProgressBar bar("reading", "bytes");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  bar.Update(2'000'000, 4'000'000);
  bar.Update(4'000'000, 4'000'000);
  const std::string out = GetCapturedStderr();
  EXPECT_THAT(out, HasSubstr("2.0/4.0 MB"));
  EXPECT_THAT(out, HasSubstr("MB/s"));
  EXPECT_THAT(out, HasSubstr("4.0/4.0 MB"));
}

TEST(ProgressBarTest, DisabledBarsDrawNothing) {
  CaptureStderr();
  ProgressBar bar("writing", "tensors", /*enabled=*/false);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  bar.Update(1, 1);
  EXPECT_EQ(GetCapturedStderr(), "");
}

}  // namespace
}  // namespace trellis
