// A traced two-rank CPU run (pp 2, m 8) measured by trellis-bubbles: 1F1B's
// bubble is near the textbook (pp − 1)/(m + pp − 1), and interleaved 1F1B
// (2 virtual stages) and ZB-H1 have smaller ones.
//
// Robust on a busy two-core machine: activations stay small (eager MPI
// messages, so no send waits for the receiver's next MPI call) while compute
// dominates; the three schedules train side by side, one step each in
// turn, so a burst of load hits all of them; the figures are medians over
// the traced steps on which every rank had a core (CPU time of its thread
// near the wall time); ctest runs it alone (RUN_SERIAL). When other
// processes keep taking the cores, the timing checks are skipped, saying
// so; the trace checks always run.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/token_dataset.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/mesh.h"
#include "tools/bubbles/analysis.h"
#include "tools/bubbles/trace_file.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

constexpr int kMicrobatches = 8;
constexpr int kSteps = 13;  // step 1 warms up; 2..13 are traced
// A step counts when every rank's thread ran at least this share of it.
constexpr double kMinCpuShare = 0.8;
constexpr int kMinQuietSteps = 5;

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Collective: a directory made by rank 0, its path known to all.
std::string SharedDir() {
  char path[4096] = {0};
  if (WorldRank() == 0) {
    const std::string pattern =
        (fs::temp_directory_path() / "trellis_bubbles_run_XXXXXX").string();
    std::copy(pattern.begin(), pattern.end(), path);
    if (mkdtemp(path) == nullptr) path[0] = '\0';
  }
  MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

// Rank 0 writes a byte-token file every rank then reads.
void WriteTokens(const std::string& path) {
  if (WorldRank() == 0) {
    auto writer = TokenDatasetWriter::Create(path, {"byte", 257, 256});
    ASSERT_TRUE(writer.ok()) << writer.status();
    std::vector<uint32_t> doc;
    for (int i = 0; i < 20000; ++i) doc.push_back(97 + (i * 11 + i / 7) % 26);
    ASSERT_TRUE((*writer)->AppendDocument(doc).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// 12 blocks 256 wide on windows of 32 tokens, one window per microbatch: a
// microbatch's activation is 32 KiB, a stage's F a few milliseconds.
TrainOptions Options(const std::string& dir, const std::string& schedule,
                     int virtual_stages) {
  TrainOptions o;
  o.model.n_layer = 12;
  o.model.n_head = 4;
  o.model.d_model = 256;
  o.model.seq_len = 32;
  o.data = dir + "/tokens.h5";
  o.micro_batch_size = 1;
  o.global_batch_size = kMicrobatches;
  o.steps = kSteps;
  o.warmup_steps = 1;
  o.log_every = 1000;
  o.pp = 2;
  o.schedule = ParseScheduleKind(schedule).value();
  o.virtual_stages = virtual_stages;
  o.trace_dir = dir + "/" + schedule;
  for (int s = 2; s <= kSteps; ++s) o.trace_steps.push_back(s);
  return o;
}

// Checks what every rank wrote; returns the whole-step bubbles of the steps
// on which every rank had a core (its thread's CPU time at least
// kMinCpuShare of the wall time), and prints every step's.
std::vector<double> QuietBubbles(const std::string& trace_dir,
                                 int virtual_stages) {
  absl::StatusOr<std::vector<RankTrace>> traces = ReadTraceDir(trace_dir);
  EXPECT_TRUE(traces.ok()) << traces.status();
  if (!traces.ok()) return {};
  for (const RankTrace& t : *traces) {
    int compute = 0, named_waits = 0;
    for (const TracedSpan& s : t.spans) {
      compute += s.category == "compute";
      named_waits +=
          s.name.rfind(t.stage == 0 && virtual_stages == 1 ? "wait RecvGrad"
                                                           : "wait RecvAct",
                       0) == 0;
    }
    EXPECT_EQ(compute, (kSteps - 1) * 3 * kMicrobatches * virtual_stages)
        << t.path;
    EXPECT_GT(named_waits, 0) << t.path;
  }
  absl::StatusOr<BubbleReport> report = AnalyzeTraces(*traces);
  EXPECT_TRUE(report.ok()) << report.status();
  if (!report.ok()) return {};
  EXPECT_EQ(report->steps.size(), static_cast<size_t>(kSteps - 1));
  std::vector<double> quiet;
  std::printf("%s: bubble %% (cpu share %%):", trace_dir.c_str());
  for (const StepFigures& f : report->steps) {
    std::printf(" %.1f (%.0f)", 100 * f.whole.bubble, 100 * f.min_cpu_share);
    EXPECT_GT(f.min_cpu_share, 0.0);  // the pipeline span carries cpu_us
    if (f.min_cpu_share >= kMinCpuShare) quiet.push_back(f.whole.bubble);
  }
  std::printf("\n");
  return quiet;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2]
                           : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

TEST(BubblesTracedRunTest, InterleavedAndZeroBubbleShrinkThe1F1BBubble) {
  MpiRuntime runtime(nullptr, nullptr);
  ASSERT_EQ(runtime.world_size(), 2);
  const std::string dir = SharedDir();
  ASSERT_FALSE(dir.empty());
  WriteTokens(dir + "/tokens.h5");
  absl::StatusOr<Mesh> mesh = Mesh::Create(2, 1, 1, 2);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(runtime, *mesh);
  ASSERT_TRUE(context.ok()) << context.status();
  const struct {
    const char* schedule;
    int virtual_stages;
  } runs[] = {{"1f1b", 1}, {"interleaved-1f1b", 2}, {"zb-h1", 1}};
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (const auto& run : runs) {
    auto trainer =
        Trainer::Create(Options(dir, run.schedule, run.virtual_stages),
                        context->groups(), context->coord());
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    trainers.push_back(std::move(*trainer));
  }
  for (int step = 0; step < kSteps; ++step) {
    for (auto& trainer : trainers) ASSERT_TRUE(trainer->Step().ok());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (WorldRank() != 0) return;
  const std::vector<double> one_f_one_b = QuietBubbles(dir + "/1f1b", 1);
  const std::vector<double> interleaved =
      QuietBubbles(dir + "/interleaved-1f1b", 2);
  const std::vector<double> zero_bubble = QuietBubbles(dir + "/zb-h1", 1);
  fs::remove_all(dir);
  for (const auto* quiet : {&one_f_one_b, &interleaved, &zero_bubble}) {
    if (static_cast<int>(quiet->size()) < kMinQuietSteps) {
      GTEST_SKIP() << "other processes took the ranks' cores: fewer than "
                   << kMinQuietSteps << " of " << kSteps - 1
                   << " steps ran with every rank on a core, so their "
                      "bubbles measure the machine, not the schedule";
    }
  }
  const double theory = 1.0 / (kMicrobatches + 1);  // (pp−1)/(m+pp−1)
  std::printf(
      "median bubble: 1f1b %.1f%% (theory %.1f%%), interleaved %.1f%%, "
      "zb-h1 %.1f%%\n",
      100 * Median(one_f_one_b), 100 * theory, 100 * Median(interleaved),
      100 * Median(zero_bubble));
  // The formula takes the stages to cost the same; here the last one also
  // holds the LM head and its loss, so 1F1B measures a few points above it
  // (12-18% on a quiet 2-core machine). A pipeline that serialized its
  // stages would measure about 50%.
  EXPECT_NEAR(Median(one_f_one_b), theory, 0.08);
  EXPECT_LT(Median(interleaved), Median(one_f_one_b));
  EXPECT_LT(Median(zero_bubble), Median(one_f_one_b));
}

}  // namespace
}  // namespace trellis
