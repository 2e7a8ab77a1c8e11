// Tracing a one-process training run: the flags, the trace file the trainer
// writes, and that tracing changes nothing but timing.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/token_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tools/bubbles/analysis.h"
#include "tools/bubbles/trace_file.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class BubblesTracedTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bubbles_traced_trainer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    data_ = (dir_ / "tokens.h5").string();
    auto writer = TokenDatasetWriter::Create(data_, {"byte", 257, 256});
    ASSERT_TRUE(writer.ok()) << writer.status();
    std::vector<uint32_t> doc;
    for (int i = 0; i < 4000; ++i) doc.push_back(97 + (i * 7) % 26);
    ASSERT_TRUE((*writer)->AppendDocument(doc).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainOptions Options() const {
    TrainOptions o;
    o.model.n_layer = 2;
    o.model.n_head = 2;
    o.model.d_model = 16;
    o.model.seq_len = 16;
    o.data = data_;
    o.micro_batch_size = 2;
    o.global_batch_size = 8;  // 4 microbatches
    o.steps = 4;
    o.warmup_steps = 1;
    o.log_every = 1000;
    return o;
  }

  std::vector<double> Train(const TrainOptions& o) {
    ParallelContext context = ParallelContext::Single();
    auto trainer = Trainer::Create(o, context.groups(), context.coord());
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return {};
    EXPECT_TRUE((*trainer)->Run().ok());
    return (*trainer)->losses();
  }

  fs::path dir_;
  std::string data_;
};

TEST_F(BubblesTracedTrainerTest, TraceFlagsAreChecked) {
  TrainOptions o = Options();
  o.trace_dir = (dir_ / "t").string();
  EXPECT_THAT(std::string(o.Resolve(1, 257).message()),
              HasSubstr("--trace_dir and --trace_steps go together"));
  o.trace_dir.clear();
  o.trace_steps = {2};
  EXPECT_THAT(std::string(o.Resolve(1, 257).message()),
              HasSubstr("--trace_dir and --trace_steps go together"));
  o.trace_dir = (dir_ / "t").string();
  o.trace_steps = {2, 5};
  EXPECT_THAT(std::string(o.Resolve(1, 257).message()),
              HasSubstr("--trace_steps entry 5 is not a step of this run (1 "
                        "to --steps=4)"));
  o.trace_steps = {0};
  EXPECT_FALSE(o.Resolve(1, 257).ok());
  o.trace_steps = {2, 3};
  EXPECT_TRUE(o.Resolve(1, 257).ok());
  EXPECT_THAT(o.ToFlagString(), HasSubstr("--trace_steps=2,3"));
  // An untraced run records its options all the same, tracing off.
  EXPECT_THAT(Options().ToFlagString(), HasSubstr("--trace_dir=\n"));
}

TEST_F(BubblesTracedTrainerTest, TracingChangesNothingButTime) {
  const std::vector<double> plain = Train(Options());
  TrainOptions o = Options();
  o.trace_dir = (dir_ / "trace").string();
  o.trace_steps = {2, 3};
  const std::vector<double> traced = Train(o);
  ASSERT_EQ(plain.size(), 4u);
  EXPECT_EQ(plain, traced);  // bit for bit

  absl::StatusOr<std::vector<RankTrace>> traces = ReadTraceDir(o.trace_dir);
  ASSERT_TRUE(traces.ok()) << traces.status();
  ASSERT_EQ(traces->size(), 1u);
  const RankTrace& t = (*traces)[0];
  EXPECT_EQ(t.schedule, "1f1b");
  EXPECT_EQ(t.microbatches, 4);
  EXPECT_EQ(t.pp, 1);
  // Per step: the step, its phases, and F, B, W of every microbatch.
  std::map<std::string, int> count;
  for (const TracedSpan& s : t.spans) ++count[s.category + "/" + s.name];
  EXPECT_EQ(count["step/step"], 2);
  for (const char* phase : {"data", "pipeline", "grad sync", "optimizer"}) {
    EXPECT_EQ(count[std::string("step/") + phase], 2) << phase;
  }
  for (const char* compute : {"F", "B", "W"}) {
    EXPECT_EQ(count[std::string("compute/") + compute], 2 * 4) << compute;
  }
  for (const TracedSpan& s : t.spans) {
    if (s.category != "compute") continue;
    EXPECT_EQ(s.Arg("stage"), 0);
    EXPECT_EQ(s.Arg("vstage"), 0);
    EXPECT_GE(s.Arg("mb"), 0);
    EXPECT_LT(s.Arg("mb"), 4);
  }
  absl::StatusOr<BubbleReport> report = AnalyzeTraces(*traces);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->steps.size(), 2u);
  EXPECT_EQ(report->steps[0].step, 2);
  EXPECT_EQ(report->steps[1].step, 3);
  for (const StepFigures& f : report->steps) {
    EXPECT_GT(f.whole.busy, 0.0);
    EXPECT_LE(f.whole.busy, f.whole.window + 1e-9);
    EXPECT_LE(f.whole.window, f.step_time + 1e-9);
    EXPECT_EQ(f.theory, 0.0);
  }
}

}  // namespace
}  // namespace trellis
