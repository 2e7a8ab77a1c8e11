// What the planner's validation tests share: the CPU cluster measured on
// every rank at once with its links over MPI, a layout run for a few steps
// (median step time, arena peak), and the table of predicted against
// measured they print.
#ifndef TRELLIS_TESTS_PLAN_MPI_PLAN_RUN_UTIL_H_
#define TRELLIS_TESTS_PLAN_MPI_PLAN_RUN_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/plan/cluster.h"
#include "tools/plan/link_measure.h"
#include "tools/plan/pass_measure.h"
#include "tools/plan/planner.h"

namespace trellis::plantest {

inline double Mean(double mine) {
  double sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / mpitest::WorldSize();
}

inline double Max(double mine) {
  double out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// Every rank measures at once (each sees its share of the cores), as
// trellis-plan's cpu preset does; the rates are their means, the kernel
// cost table rank 0's. The split backward is measured on `shape`'s own
// blocks, the links over MPI itself (loopback, as the runs use it).
inline ClusterSpec MeasuredCluster(const MpiRuntime& runtime,
                                   const TrainOptions& shape) {
  MPI_Barrier(MPI_COMM_WORLD);
  ClusterSpec c = MeasureCpuCluster();
  c.peak_flops = Mean(c.peak_flops);
  c.attention_efficiency = Mean(c.attention_efficiency);
  c.memory_bandwidth = Mean(c.memory_bandwidth);
  c.split_backward_ratio = Mean(MeasurePassTimes(shape, 9).SplitRatio());
  const int world = mpitest::WorldSize();
  absl::StatusOr<Mesh> mesh = Mesh::Create(world, world, 1, 1);
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(runtime, *mesh);
  EXPECT_TRUE(context.ok()) << context.status();
  if (context.ok()) c.intra = MeasureLink(*context->groups().world);
  c.inter = c.intra;
  c.source = absl::StrFormat(
      "%s; MPI loopback measured: %.1f us per hop, %.2f GB/s; split backward "
      "of the model's blocks %.3f of the fused one",
      c.source, c.intra.latency * 1e6, c.intra.bandwidth / 1e9,
      c.split_backward_ratio);
  return c;
}

struct Figures {
  std::string what;
  double predicted_ms = 0, measured_ms = 0;
  double untabled_ms = 0;  // predicted without the kernel cost table; 0: not
  double planned_bytes = 0, arena_peak_bytes = 0;
};

// Runs `o` (dp·cp·tp·pp = the world) for `warmup` + `timed` steps: the
// median of the timed steps (the slowest rank's each) and the arena peak
// (largest over ranks).
inline Figures Measure(const TrainOptions& o, const MpiRuntime& runtime,
                       int warmup, int timed) {
  Figures f;
  absl::StatusOr<Mesh> mesh = Mesh::Create(
      mpitest::WorldSize(), static_cast<int>(o.gradient_replicas()),
      static_cast<int>(o.tp), static_cast<int>(o.pp));
  if (mesh.ok()) mesh = mesh->WithContextParallel(static_cast<int>(o.cp));
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(runtime, *mesh);
  EXPECT_TRUE(context.ok()) << context.status();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(o, context->groups(), context->coord());
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return f;
  std::vector<double> ms;
  for (int s = 0; s < warmup + timed; ++s) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE((*trainer)->Step().ok());
    const double t = Max(std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - start)
                             .count());
    if (s >= warmup) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  f.measured_ms = ms[ms.size() / 2];
  f.arena_peak_bytes =
      Max(static_cast<double>((*trainer)->arena().stats().peak_in_use));
  return f;
}

// The plan of `o` on the world's ranks: its step and its memory without
// the checkpoint term (these runs save none).
inline void Predict(TrainOptions o, const ClusterSpec& cluster, Figures& f) {
  o.model.vocab_size = mpitest::kByteVocab.vocab_size;
  absl::StatusOr<LayoutPlan> plan =
      PlanGivenLayout(o, mpitest::WorldSize(), cluster);
  ASSERT_TRUE(plan.ok()) << plan.status();
  f.predicted_ms = plan->step.step * 1e3;
  MemoryPlan steps = plan->memory;
  steps.checkpoint = 0;
  f.planned_bytes = static_cast<double>(steps.total());
}

// The step-time tolerance to check, or 0: TRELLIS_PLAN_TIME_TOLERANCE when
// set and the load average does not exceed the cores. *status says which.
inline double TimeTolerance(std::string* status) {
  double load[1] = {0};
  const bool loaded =
      getloadavg(load, 1) == 1 && load[0] > std::thread::hardware_concurrency();
  const char* env = std::getenv("TRELLIS_PLAN_TIME_TOLERANCE");
  const double tolerance = env != nullptr ? std::atof(env) : 0;
  *status = absl::StrFormat(
      "load average %.1f on %d cores: step times %s", load[0],
      std::thread::hardware_concurrency(),
      tolerance > 0 && !loaded
          ? absl::StrFormat("checked to %.0f%%", 100 * tolerance)
      : tolerance > 0
          ? std::string("reported, not checked (loaded)")
          : std::string("reported (set TRELLIS_PLAN_TIME_TOLERANCE to check)"));
  return loaded ? 0 : tolerance;
}

// The table of every row, and the worst errors; with `untabled`, a column
// of the prediction without the kernel cost table and its error.
inline std::string Table(const std::vector<Figures>& rows,
                         const ClusterSpec& cluster, int timed,
                         bool untabled = false) {
  std::string table = absl::StrFormat(
      "cluster: %s\n\n| layout | predicted ms | measured ms (median of %d) | "
      "error | planned memory | arena peak | error |%s\n"
      "|---|---|---|---|---|---|---|%s\n",
      cluster.source, timed,
      untabled ? " without the table ms | its error |" : "",
      untabled ? "---|---|" : "");
  double worst_time = 0, worst_memory = 0;
  for (const Figures& f : rows) {
    const double time = f.predicted_ms / f.measured_ms - 1;
    const double memory = f.planned_bytes / f.arena_peak_bytes - 1;
    worst_time = std::max(worst_time, std::abs(time));
    worst_memory = std::max(worst_memory, std::abs(memory));
    absl::StrAppendFormat(
        &table, "| %s | %.1f | %.1f | %+.1f%% | %s | %s | %+.2f%% |", f.what,
        f.predicted_ms, f.measured_ms, 100 * time,
        Readable(static_cast<size_t>(f.planned_bytes)),
        Readable(static_cast<size_t>(f.arena_peak_bytes)), 100 * memory);
    if (untabled) {
      absl::StrAppendFormat(&table, " %.1f | %+.1f%% |", f.untabled_ms,
                            100 * (f.untabled_ms / f.measured_ms - 1));
    }
    table += "\n";
  }
  absl::StrAppendFormat(&table,
                        "\nworst step-time error %.1f%%, worst memory error "
                        "%.2f%% (%zu layouts)\n",
                        100 * worst_time, 100 * worst_memory, rows.size());
  return table;
}

}  // namespace trellis::plantest

#endif  // TRELLIS_TESTS_PLAN_MPI_PLAN_RUN_UTIL_H_
