// A traced two-rank CPU run (pp 2, m 8) measured by trellis-bubbles: 1F1B's
// bubble is near the textbook (pp − 1)/(m + pp − 1), and interleaved 1F1B
// (2 virtual stages) and ZB-H1 have smaller ones.
//
// Robust on a busy two-core machine: activations stay small (eager MPI
// messages, so no send waits for the receiver's next MPI call) while compute
// dominates; the three schedules train side by side, one step each in
// turn, so a burst of load hits all of them; and the figures are medians
// over 12 traced steps; ctest runs it alone (RUN_SERIAL).
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
  o.schedule = schedule;
  o.virtual_stages = virtual_stages;
  o.trace_dir = dir + "/" + schedule;
  for (int s = 2; s <= kSteps; ++s) o.trace_steps.push_back(s);
  return o;
}

// Checks what every rank wrote, and returns the median whole-step bubble.
double MedianBubble(const std::string& trace_dir, int virtual_stages) {
  absl::StatusOr<std::vector<RankTrace>> traces = ReadTraceDir(trace_dir);
  EXPECT_TRUE(traces.ok()) << traces.status();
  if (!traces.ok()) return -1;
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
  if (!report.ok() || !report->median) return -1;
  EXPECT_EQ(report->steps.size(), static_cast<size_t>(kSteps - 1));
  std::printf("%s:", trace_dir.c_str());
  for (const StepFigures& f : report->steps) {
    std::printf(" %.1f", 100 * f.whole.bubble);
  }
  std::printf("\n");
  return report->median->whole.bubble;
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
  if (WorldRank() == 0) {
    const double one_f_one_b = MedianBubble(dir + "/1f1b", 1);
    const double interleaved = MedianBubble(dir + "/interleaved-1f1b", 2);
    const double zero_bubble = MedianBubble(dir + "/zb-h1", 1);
    const double theory = 1.0 / (kMicrobatches + 1);  // (pp−1)/(m+pp−1)
    std::printf(
        "median bubble: 1f1b %.1f%% (theory %.1f%%), interleaved "
        "%.1f%%, zb-h1 %.1f%%\n",
        100 * one_f_one_b, 100 * theory, 100 * interleaved, 100 * zero_bubble);
    EXPECT_NEAR(one_f_one_b, theory, 0.05);
    EXPECT_LT(interleaved, one_f_one_b);
    EXPECT_LT(zero_bubble, one_f_one_b);
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace trellis
