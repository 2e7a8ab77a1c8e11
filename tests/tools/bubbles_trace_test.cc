// trellis-bubbles on traces: exact figures from hand-made traces, and a
// clear error for every kind of bad trace directory.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "framework/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/bubbles/analysis.h"
#include "tools/bubbles/report.h"
#include "tools/bubbles/trace_file.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

struct Span {
  const char* name;
  const char* category;
  double start_ms, end_ms;
  TraceArgs args = {};
};

// A recorder of rank `rank` of a pp = 2, m = 1, 1f1b run on 2 ranks.
TraceRecorder MakeRecorder(int rank, const std::string& schedule = "1f1b") {
  TraceRecorder recorder(rank);
  recorder.SetMetadata("rank", rank);
  recorder.SetMetadata("world", 2);
  recorder.SetMetadata("dp", 1);
  recorder.SetMetadata("tp", 1);
  recorder.SetMetadata("pp", 2);
  recorder.SetMetadata("stage", rank);
  recorder.SetMetadata("schedule", schedule);
  recorder.SetMetadata("virtual_stages", 1);
  recorder.SetMetadata("microbatches", 1);
  recorder.set_active(true);
  return recorder;
}

void Add(TraceRecorder& recorder, const Span& s) {
  const Clock::time_point t0 = recorder.origin();
  auto at = [&](double ms) {
    return t0 + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double, std::milli>(ms));
  };
  recorder.AddSpan(s.name, s.category, 1, at(s.start_ms), at(s.end_ms), s.args);
}

// Step `step` shifted by `offset` ms: stage 0 runs F, waits 40 ms for the
// gradient, runs B and W; stage 1 waits 10 ms for the activation, then
// runs F, B, W. The pipeline window is [10, 90] ms.
void AddStep(TraceRecorder& r0, TraceRecorder& r1, int64_t step, double offset,
             double stretch = 1.0) {
  auto add = [&](TraceRecorder& r, const char* name, const char* cat,
                 double start, double end, TraceArgs args = {}) {
    Add(r, Span{name, cat, offset + start * stretch, offset + end * stretch,
                std::move(args)});
  };
  add(r0, "step", "step", 0, 100, {{"step", step}});
  add(r0, "pipeline", "step", 10, 90,
      {{"cpu_us", static_cast<int64_t>(60000 * stretch)}});
  add(r0, "F", "compute", 10, 20, {{"mb", 0}, {"vstage", 0}});
  add(r0, "SendAct", "pp", 20, 20);
  add(r0, "wait RecvGrad0", "pp", 20, 60, {{"mb", 0}});
  add(r0, "B", "compute", 60, 70, {{"mb", 0}, {"vstage", 0}});
  add(r0, "W", "compute", 70, 80, {{"mb", 0}, {"vstage", 0}});
  add(r0, "wait all_reduce", "dp", 90, 95);
  add(r1, "step", "step", 0, 100, {{"step", step}});
  add(r1, "pipeline", "step", 10, 85,
      {{"cpu_us", static_cast<int64_t>(75000 * stretch)}});
  add(r1, "wait RecvAct0", "pp", 10, 20, {{"mb", 0}});
  add(r1, "F", "compute", 20, 30, {{"mb", 0}, {"vstage", 0}});
  add(r1, "B", "compute", 30, 40, {{"mb", 0}, {"vstage", 0}});
  add(r1, "W", "compute", 40, 50, {{"mb", 0}, {"vstage", 0}});
}

class BubblesTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bubbles_trace_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(int rank) const {
    return (dir_ / TraceFileName(rank)).string();
  }
  void WriteBoth(TraceRecorder& r0, TraceRecorder& r1) {
    ASSERT_TRUE(r0.Write(Path(0)).ok());
    ASSERT_TRUE(r1.Write(Path(1)).ok());
  }
  void WriteText(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  }
  std::string DirError() {
    absl::StatusOr<std::vector<RankTrace>> traces = ReadTraceDir(dir_.string());
    if (traces.ok()) {
      absl::StatusOr<BubbleReport> report = AnalyzeTraces(*traces);
      return report.ok() ? "" : std::string(report.status().message());
    }
    return std::string(traces.status().message());
  }

  fs::path dir_;
};

TEST_F(BubblesTraceTest, MeasuresHandMadeStep) {
  TraceRecorder r0 = MakeRecorder(0), r1 = MakeRecorder(1);
  AddStep(r0, r1, 5, 0.0);
  WriteBoth(r0, r1);
  absl::StatusOr<std::vector<RankTrace>> traces = ReadTraceDir(dir_.string());
  ASSERT_TRUE(traces.ok()) << traces.status();
  absl::StatusOr<BubbleReport> r = AnalyzeTraces(*traces);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), 1u);
  EXPECT_FALSE(r->median.has_value());
  const StepFigures& f = r->steps[0];
  EXPECT_EQ(f.step, 5);
  EXPECT_NEAR(f.step_time, 100.0, 1e-6);
  ASSERT_EQ(f.stages.size(), 2u);
  // Window [10, 90]: both stages compute 30 of its 80 ms.
  for (const StageFigures& s : f.stages) {
    EXPECT_NEAR(s.window, 80.0, 1e-6);
    EXPECT_NEAR(s.busy, 30.0, 1e-6);
    EXPECT_NEAR(s.idle, 50.0, 1e-6);
    EXPECT_NEAR(s.bubble, 50.0 / 80.0, 1e-9);
  }
  EXPECT_NEAR(f.stages[0].recv_wait, 40.0, 1e-6);
  EXPECT_NEAR(f.stages[1].recv_wait, 10.0, 1e-6);
  EXPECT_NEAR(f.stages[0].dp, 5.0, 1e-6);
  EXPECT_NEAR(f.stages[1].dp, 0.0, 1e-6);
  EXPECT_NEAR(f.whole.recv_wait, 25.0, 1e-6);
  // Rank 0 ran 60 of its 80 pipeline ms, rank 1 all its 75.
  EXPECT_NEAR(f.stages[0].cpu_share, 0.75, 1e-9);
  EXPECT_NEAR(f.stages[1].cpu_share, 1.0, 1e-9);
  EXPECT_NEAR(f.min_cpu_share, 0.75, 1e-9);
  EXPECT_EQ(f.whole.ranks, 2);
  EXPECT_NEAR(f.cost_forward, 10.0, 1e-6);
  EXPECT_NEAR(f.cost_backward_weight, 10.0, 1e-6);
  // 1F1B on 2 stages, 1 microbatch: theory 1/2; planned with F = B = W:
  // makespan 5 units, 3 busy on each stage.
  EXPECT_DOUBLE_EQ(f.theory, 0.5);
  EXPECT_NEAR(f.planned, 0.4, 1e-9);
  // The timeline: stage 0's F at 0 ms in the window, its wait below it.
  ASSERT_EQ(f.timeline.rows.size(), 2u);
  ASSERT_EQ(f.timeline.rows[0].compute.size(), 3u);
  EXPECT_NEAR(f.timeline.rows[0].compute[0].start, 0.0, 1e-6);
  EXPECT_EQ(f.timeline.rows[0].compute[1].type, ActionType::kBackwardInput);
  ASSERT_EQ(f.timeline.rows[0].waits.size(), 1u);
  EXPECT_NEAR(f.timeline.rows[0].waits[0].second, 50.0, 1e-6);
  EXPECT_NEAR(f.timeline.end, 80.0, 1e-6);
  EXPECT_THAT(FormatReport(*r), HasSubstr("step 5: 100.00 ms; bubble 62.5%"));
}

TEST_F(BubblesTraceTest, NamesTheRankThatComputedLongest) {
  TraceRecorder r0 = MakeRecorder(0), r1 = MakeRecorder(1);
  AddStep(r0, r1, 3, 0.0);
  // Rank 1 computes 20 ms more inside the window: 50 ms against rank 0's 30.
  Add(r1, Span{"F", "compute", 55, 75, {{"mb", 0}, {"vstage", 0}}});
  WriteBoth(r0, r1);
  absl::StatusOr<std::vector<RankTrace>> traces = ReadTraceDir(dir_.string());
  ASSERT_TRUE(traces.ok()) << traces.status();
  absl::StatusOr<BubbleReport> r = AnalyzeTraces(*traces);
  ASSERT_TRUE(r.ok()) << r.status();
  const StepFigures& f = r->steps[0];
  EXPECT_EQ(f.slowest_rank, 1);
  EXPECT_NEAR(f.slowest_busy, 50.0, 1e-6);
  EXPECT_NEAR(f.median_busy, 40.0, 1e-6);  // of 30 and 50
  EXPECT_THAT(FormatReport(*r),
              HasSubstr("rank skew: rank 1 computes 50.00 ms, the median "
                        "rank 40.00 ms (1.25x)"));
  EXPECT_EQ(ReportToJson(*r)["steps"][0]["slowest_rank"], 1);
}

TEST_F(BubblesTraceTest, MedianOverSteps) {
  TraceRecorder r0 = MakeRecorder(0), r1 = MakeRecorder(1);
  AddStep(r0, r1, 5, 0.0);
  AddStep(r0, r1, 6, 200.0, 2.0);  // everything twice as long
  AddStep(r0, r1, 7, 500.0, 3.0);
  WriteBoth(r0, r1);
  absl::StatusOr<std::vector<RankTrace>> traces = ReadTraceDir(dir_.string());
  ASSERT_TRUE(traces.ok()) << traces.status();
  absl::StatusOr<BubbleReport> r = AnalyzeTraces(*traces);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), 3u);
  ASSERT_TRUE(r->median.has_value());
  EXPECT_NEAR(r->steps[1].step_time, 200.0, 1e-6);
  EXPECT_NEAR(r->median->step_time, 200.0, 1e-6);
  EXPECT_NEAR(r->median->whole.busy, 60.0, 1e-6);
  EXPECT_NEAR(r->median->whole.bubble, 50.0 / 80.0, 1e-9);
  const nlohmann::json j = ReportToJson(*r);
  EXPECT_EQ(j["steps"].size(), 3u);
  EXPECT_EQ(j["steps"][2]["step"], 7);
  EXPECT_NEAR(j["median"]["whole"]["busy"].get<double>(), 60.0, 1e-6);
  EXPECT_NEAR(j["steps"][0]["stages"][0]["recv_wait"].get<double>(), 40.0,
              1e-6);
}

TEST_F(BubblesTraceTest, TruncatedFileIsAClearError) {
  TraceRecorder r0 = MakeRecorder(0), r1 = MakeRecorder(1);
  AddStep(r0, r1, 5, 0.0);
  WriteBoth(r0, r1);
  fs::resize_file(Path(1), fs::file_size(Path(1)) / 2);
  const std::string error = DirError();
  EXPECT_THAT(error, HasSubstr(TraceFileName(1)));
  EXPECT_THAT(error, HasSubstr("not valid JSON, perhaps truncated"));
  EXPECT_THAT(error, HasSubstr("rerun the traced steps"));
}

TEST_F(BubblesTraceTest, MalformedFilesAreClearErrors) {
  TraceRecorder r1 = MakeRecorder(1);
  AddStep(r1, r1, 5, 0.0);
  ASSERT_TRUE(r1.Write(Path(1)).ok());
  const struct {
    std::string text;
    std::string error;
  } cases[] = {
      {"", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {R"({"traceEvents": []})", "not a trellis trace"},
      {R"({"otherData": {"format": 7}})", "not a trellis trace"},
      {R"({"otherData": {"format": "trellis-trace", "version": 2}})",
       "otherData.version is not 1"},
      {R"({"otherData": {"format": "trellis-trace", "version": 1}})",
       "otherData has no integer \"world\""},
  };
  for (const auto& c : cases) {
    WriteText(Path(0), c.text);
    EXPECT_THAT(DirError(), HasSubstr(c.error)) << c.text;
    EXPECT_THAT(DirError(), HasSubstr(TraceFileName(0))) << c.text;
  }
  // A valid header with bad events.
  TraceRecorder r0 = MakeRecorder(0);
  nlohmann::json doc = r0.ToJson();
  doc["traceEvents"] = 5;
  WriteText(Path(0), doc.dump());
  EXPECT_THAT(DirError(), HasSubstr("has no \"traceEvents\" array"));
  doc["traceEvents"] = {{{"name", "F"}, {"cat", "compute"}, {"ph", "X"}}};
  WriteText(Path(0), doc.dump());
  EXPECT_THAT(DirError(),
              HasSubstr("event 0 (\"F\") needs numeric \"ts\" and \"dur\""));
  doc["otherData"]["stage"] = 3;
  WriteText(Path(0), doc.dump());
  EXPECT_THAT(DirError(), HasSubstr("otherData is inconsistent"));
}

TEST_F(BubblesTraceTest, MissingAndForeignRanksAreClearErrors) {
  EXPECT_THAT(DirError(), HasSubstr("holds no trace files"));
  TraceRecorder r0 = MakeRecorder(0), r1 = MakeRecorder(1);
  AddStep(r0, r1, 5, 0.0);
  ASSERT_TRUE(r0.Write(Path(0)).ok());
  EXPECT_THAT(DirError(), HasSubstr("lacks the traces of rank(s) 1 of 2"));
  TraceRecorder other = MakeRecorder(1, "gpipe");
  AddStep(r0, other, 5, 0.0);
  ASSERT_TRUE(other.Write(Path(1)).ok());
  EXPECT_THAT(DirError(), HasSubstr("is not from the run of"));
  EXPECT_THAT(ReadTraceDir((dir_ / "nowhere").string()).status().message(),
              HasSubstr("is not a directory"));
}

TEST_F(BubblesTraceTest, StepMissingOnOneRankIsAClearError) {
  TraceRecorder r0 = MakeRecorder(0), r1 = MakeRecorder(1);
  TraceRecorder unused = MakeRecorder(1);
  AddStep(r0, r1, 5, 0.0);
  AddStep(r0, unused, 6, 200.0);
  WriteBoth(r0, r1);
  EXPECT_THAT(DirError(), HasSubstr("has no span of step 6"));
}

}  // namespace
}  // namespace trellis
