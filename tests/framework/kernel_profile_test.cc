// The kernel profiler on the CPU: which calls it records under which name,
// that nested public kernels count once, that it is off unless a profiler
// is alive, and that its times are the calls' wall times.
#include "framework/kernel_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/matmul.h"

namespace trellis {
namespace {

// A public kernel built like those of framework/kernels/: it opens with
// TRELLIS_CUDA_DISPATCH and calls two other public kernels.
void OuterKernel(const Tensor& a, Tensor& out) {
  TRELLIS_CUDA_DISPATCH(cuda::Add(a, a, out), &a, &out);
  Add(a, a, out);
  Scale(out, 0.5);
}

std::map<std::string, int64_t> Calls(const std::vector<KernelTime>& times) {
  std::map<std::string, int64_t> calls;
  for (const KernelTime& t : times) calls[t.name] = t.calls;
  return calls;
}

Tensor Filled(Shape shape, double value) {
  Tensor t = Tensor::Empty(std::move(shape), DType::kF32);
  t.Fill(value);
  return t;
}

TEST(KernelProfileTest, OffByDefault) {
  EXPECT_EQ(KernelProfiler::Active(), nullptr);
  Tensor a = Filled({4, 4}, 1), out = Filled({4, 4}, 0);
  Add(a, a, out);  // nothing to record it
  {
    KernelProfiler profiler;
    EXPECT_EQ(KernelProfiler::Active(), &profiler);
    EXPECT_TRUE(profiler.Report().empty());  // the call above left no trace
  }
  EXPECT_EQ(KernelProfiler::Active(), nullptr);
  Add(a, a, out);
  KernelProfiler later;
  EXPECT_TRUE(later.Report().empty());
}

TEST(KernelProfileTest, NamesAndCallsOfAKnownSequence) {
  Tensor a = Filled({8, 16}, 1), b = Filled({8, 16}, 2);
  Tensor out = Filled({8, 16}, 0);
  Tensor w = Filled({16, 4}, 0.5), y = Filled({8, 4}, 0);
  KernelProfiler profiler;
  for (int i = 0; i < 3; ++i) Add(a, b, out);
  Scale(out, 2);
  Scale(out, 0.5);
  MatmulForward(a, w, Tensor(), y);
  EXPECT_DOUBLE_EQ(Sum(out), 8 * 16 * 3.0);  // the kernels really ran
  const std::map<std::string, int64_t> expected = {
      {"Add", 3}, {"Scale", 2}, {"MatmulForward", 1}, {"Sum", 1}};
  EXPECT_EQ(Calls(profiler.Report()), expected);
  // A report does not reset: later calls add to the same totals.
  Add(a, b, out);
  EXPECT_EQ(Calls(profiler.Report())["Add"], 4);
}

TEST(KernelProfileTest, NestedKernelsCountOnceUnderTheOutermost) {
  Tensor a = Filled({8, 8}, 3), out = Filled({8, 8}, 0);
  KernelProfiler profiler;
  OuterKernel(a, out);
  OuterKernel(a, out);
  EXPECT_EQ(out.data<float>()[0], 3.0f);  // (3 + 3) / 2
  Add(a, a, out);  // at the top level again, so it counts
  const std::map<std::string, int64_t> expected = {{"OuterKernel", 2},
                                                   {"Add", 1}};
  EXPECT_EQ(Calls(profiler.Report()), expected);
}

TEST(KernelProfileTest, TimesAreTheCallsWallTime) {
  Tensor x = Filled({256, 256}, 0.25), w = Filled({256, 256}, 0.5);
  Tensor y = Filled({256, 256}, 0);
  KernelProfiler profiler;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) MatmulForward(x, w, Tensor(), y);
  const double wall_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  const std::vector<KernelTime> times = profiler.Report();
  ASSERT_EQ(times.size(), 1u);
  EXPECT_EQ(times[0].name, "MatmulForward");
  EXPECT_EQ(times[0].calls, 20);
  // The loop does nothing but the calls: their times are nearly all of it,
  // and never more.
  EXPECT_LE(times[0].ms, wall_ms);
  EXPECT_GE(times[0].ms, 0.5 * wall_ms);
}

TEST(KernelProfileTest, ResetForgetsAndAddRecordsCallerTimedWork) {
  Tensor a = Filled({4}, 1), out = Filled({4}, 0);
  KernelProfiler profiler;
  Add(a, a, out);
  profiler.Reset();
  EXPECT_TRUE(profiler.Report().empty());
  profiler.Add("comm:tp", 2.5);
  profiler.Add("comm:tp", 1.5);
  const std::vector<KernelTime> times = profiler.Report();
  ASSERT_EQ(times.size(), 1u);
  EXPECT_EQ(times[0].name, "comm:tp");
  EXPECT_EQ(times[0].calls, 2);
  EXPECT_DOUBLE_EQ(times[0].ms, 4.0);
}

TEST(KernelProfileTest, CountsCallsFromSeveralThreads) {
  KernelProfiler profiler;
  const auto work = [] {
    Tensor a = Filled({16}, 1), out = Filled({16}, 0);
    for (int i = 0; i < 500; ++i) OuterKernel(a, out);
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  // Nesting is tracked per thread: neither thread's Add or Scale counts.
  const std::map<std::string, int64_t> expected = {{"OuterKernel", 1000}};
  EXPECT_EQ(Calls(profiler.Report()), expected);
}

TEST(KernelProfileTest, ReportIsLargestFirstAndTableShowsShares) {
  KernelProfiler profiler;
  profiler.Add("small", 1.0);
  profiler.Add("large", 2.0);
  profiler.Add("large", 1.0);
  const std::vector<KernelTime> times = profiler.Report();
  ASSERT_EQ(times.size(), 2u);
  EXPECT_EQ(times[0].name, "large");
  EXPECT_EQ(times[1].name, "small");
  EXPECT_EQ(FormatKernelTimes(times),
            "kernel    calls     total ms   share\n"
            "large         2        3.000   75.0%\n"
            "small         1        1.000   25.0%\n"
            "total         3        4.000  100.0%\n");
}

TEST(KernelProfileDeathTest, OnlyOneProfilerAtATime) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  KernelProfiler profiler;
  EXPECT_DEATH(KernelProfiler second, "already active");
}

}  // namespace
}  // namespace trellis
