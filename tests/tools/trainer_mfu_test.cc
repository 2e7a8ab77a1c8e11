// Every step reports its model FLOP rate and MFU: the model's FLOPs per
// token (ModelConfig::TrainingFlopsPerToken) times the step's tokens over the
// step's time, against --peak_tflops per rank, or on the CPU a GEMM
// measured at start; and the GPU peak table names the boards it knows.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "parallel/bootstrap.h"
#include "tests/tools/tools_test_util.h"
#include "tools/trainer/health/metrics.h"
#include "tools/trainer/health/peak_flops.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

class TrainerMfuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    data_ = dir_ + "/tokens.h5";
    test::WriteTokenFile(data_, test::kByteVocab, 20000);
  }

  StepMetrics OneStep(const TrainOptions& o) {
    const std::unique_ptr<Trainer> trainer = test::MakeTrainer(o, context_);
    if (trainer == nullptr) return {};
    absl::StatusOr<StepMetrics> m = trainer->Step();
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : StepMetrics{};
  }

  ParallelContext context_ = ParallelContext::Single();
  std::string dir_, data_;
};

TEST_F(TrainerMfuTest, AGivenPeakDividesTheModelRate) {
  TrainOptions o = test::TinyOptions(data_);
  o.peak_tflops = 0.002;  // 2 GFLOP/s per rank
  const StepMetrics m = OneStep(o);
  o.model.vocab_size = test::kByteVocab.vocab_size;
  const double flops = o.model.TrainingFlopsPerToken() *
                       static_cast<double>(o.global_batch_size) *
                       static_cast<double>(o.model.seq_len);
  ASSERT_GT(m.ms, 0);
  EXPECT_NEAR(m.model_tflops, flops / (m.ms / 1e3) / 1e12,
              1e-9 * m.model_tflops);
  EXPECT_NEAR(m.mfu, m.model_tflops / 0.002, 1e-9 * m.mfu);
  EXPECT_NE(FormatLogLine(m, 10).find("mfu "), std::string::npos);
  EXPECT_NE(FormatLogLine(m, 10).find("TFLOP/s"), std::string::npos);
}

TEST_F(TrainerMfuTest, TheCpuIsMeasuredAgainstAGemmAtStart) {
  const PeakFlops peak = PeakFlopsOf(Device::Cpu(), 0);
  EXPECT_GT(peak.flops_per_s, 1e8);  // any CPU of this century
  EXPECT_NE(peak.what.find("sgemm"), std::string::npos) << peak.what;
  const StepMetrics m = OneStep(test::TinyOptions(data_));
  EXPECT_GT(m.mfu, 0);
  EXPECT_TRUE(std::isfinite(m.mfu));
}

TEST(PeakFlopsTest, KnowsTheDenseBf16PeakOfHopperAndAmpereBoards) {
  EXPECT_EQ(KnownPeakTflops("NVIDIA H100 80GB HBM3"), 989);
  EXPECT_EQ(KnownPeakTflops("NVIDIA H100 PCIe"), 756);
  EXPECT_EQ(KnownPeakTflops("NVIDIA H200"), 989);
  EXPECT_EQ(KnownPeakTflops("NVIDIA A100-SXM4-80GB"), 312);
  EXPECT_EQ(KnownPeakTflops("NVIDIA H100 NVL"), std::nullopt);
  EXPECT_EQ(KnownPeakTflops("NVIDIA GeForce RTX 4090"), std::nullopt);
  EXPECT_EQ(PeakFlopsOf(Device::Cpu(), 5).flops_per_s, 5e12);
}

}  // namespace
}  // namespace trellis
