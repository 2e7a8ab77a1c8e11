// trellis-train: trains a GPT on one rank or, under mpirun/srun, on a
// dp × tp × pp mesh of ranks.
//
//   mpirun -np 8 build/bin/trellis-train --flagfile=configs/tiny.flags
//       --data=data_cache/kjv-byte.h5 --dp=2 --tp=2 --pp=2
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "data/blend.h"
#include "parallel/bootstrap.h"
#include "tools/options/option_flags.h"
#include "tools/options/program_help.h"
#include "tools/plan/cluster.h"
#include "tools/plan/plan_report.h"
#include "tools/plan/planner.h"
#include "tools/trainer/health/stop_signals.h"
#include "tools/trainer/layout_report.h"
#include "tools/trainer/trainer.h"

ABSL_FLAG(std::string, stop_signals, trellis::kDefaultStopSignals,
          "signals that end the run cleanly after the current step, saving "
          "a checkpoint when --save_dir is set");

ABSL_FLAG(bool, plan_only, false,
          "print the planned memory per rank and step time of this layout "
          "(trellis-plan's --explain) and exit before allocating anything");
ABSL_FLAG(std::string, plan_cluster, "",
          "the cluster --plan_only plans for (as trellis-plan's --cluster; "
          "default: cpu on --device=cpu, else h100-sxm-8xN for the ranks)");

namespace trellis {
namespace {

TrainOptions OptionsFromFlags() {
  TrainOptions o;
  ReadModelAndRunFlags(o);
  ReadParallelFlags(o);
  return o;
}

// Every rank's hostname, in world-rank order.
std::vector<std::string> Hostnames(Communicator& world,
                                   const std::string& mine) {
  constexpr int kMax = 64;
  Tensor local = Tensor::Zeros({kMax}, DType::kI32);
  for (int i = 0; i < kMax - 1 && i < static_cast<int>(mine.size()); ++i) {
    local.data<int32_t>()[i] = static_cast<unsigned char>(mine[i]);
  }
  Tensor all = Tensor::Zeros({world.size() * kMax}, DType::kI32);
  world.AllGather(local, all);
  std::vector<std::string> names(world.size());
  for (int r = 0; r < world.size(); ++r) {
    for (int i = 0; i < kMax && all.data<int32_t>()[r * kMax + i] != 0; ++i) {
      names[r].push_back(static_cast<char>(all.data<int32_t>()[r * kMax + i]));
    }
  }
  return names;
}

// --plan_only: this layout's plan, from the flags alone (dp 0: the ranks
// launched). Rank 0 prints it.
absl::Status PlanOnly(const TrainOptions& options, const MpiRuntime& runtime) {
  TrainOptions o = options;
  TRELLIS_ASSIGN_OR_RETURN(TokenFileMetadata data, BlendMetadata(o.data));
  o.model.vocab_size = data.vocab_size;
  const int64_t world =
      o.dp > 0 ? o.dp * o.cp * o.tp * o.pp : runtime.world_size();
  std::string name = absl::GetFlag(FLAGS_plan_cluster);
  if (name.empty()) {
    name = o.device == DeviceType::kCPU
               ? "cpu"
               : absl::StrCat("h100-sxm-8x", (world + 7) / 8);
  }
  TRELLIS_ASSIGN_OR_RETURN(ClusterSpec cluster, LoadCluster(name));
  if (world > cluster.world()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan_only: the layout's ", world, " ranks exceed --plan_cluster=",
        name, "'s ", cluster.world(), " devices"));
  }
  TRELLIS_ASSIGN_OR_RETURN(
      LayoutPlan plan, PlanGivenLayout(o, static_cast<int>(world), cluster));
  if (runtime.world_rank() == 0) {
    std::printf("%s", FormatExplain(plan, cluster).c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// Prints status as trellis-train's error and returns the exit status 1. A
// failure every rank agreed on is printed by rank 0 alone.
int Fail(const absl::Status& status, bool root, bool agreed) {
  if (root || !agreed) {
    std::fprintf(stderr, "trellis-train: error: %s\n",
                 std::string(status.message()).c_str());
  }
  return 1;
}

// The exit status when Trainer::Create failed on some rank, every rank having
// agreed that it did (a collective); nullopt when the trainer was built
// everywhere.
std::optional<int> TrainerFailure(
    const absl::StatusOr<std::unique_ptr<Trainer>>& trainer,
    Communicator& world, bool root) {
  if (absl::IsCancelled(trainer.status())) {
    // Every rank stopped together (Trainer::Create agrees on it).
    if (root) {
      const int signal = StopSignalReceived();
      std::fprintf(stderr, "trellis-train: %s (%s)\n",
                   std::string(trainer.status().message()).c_str(),
                   signal != 0 ? SignalName(signal).c_str()
                               : "a stop signal on another rank");
    }
    return 1;
  }
  const absl::Status built = AgreeOnStatus(world, trainer.status());
  if (built.ok()) return std::nullopt;
  // Configuration errors are the same on every rank: rank 0 reports them.
  // Other failures are reported by the rank they happened on.
  const bool mine = !trainer.ok();
  if (mine && (root || !absl::IsInvalidArgument(trainer.status()))) {
    return Fail(trainer.status(), root, false);
  }
  return root ? Fail(built, root, false) : 1;
}

// Rank 0's account of the run before it starts: the layout over the hosts,
// the configuration and the model.
void PrintRunHeader(const Mesh& mesh, const Trainer& trainer,
                    const std::vector<std::string>& hosts) {
  std::printf("%s", LayoutReport(mesh, trainer.options(), hosts).c_str());
  std::printf("%s", ConfigReport(trainer.options()).c_str());
  std::printf("model: %s, %lld parameters\n",
              trainer.options().model.DebugString().c_str(),
              static_cast<long long>(trainer.options().model.NumParameters()));
  std::fflush(stdout);
}

// Trains to the end (or a stop signal, or giving up) and returns the exit
// status, rank 0 reporting the memory arena's use and how the run ended.
int TrainAndReport(Trainer& trainer, bool root, int world) {
  trainer.set_stop_check([] { return StopSignalReceived() != 0; });
  const absl::StatusOr<Trainer::Outcome> run = trainer.Run();
  if (!run.ok()) {
    // Other ranks may be blocked in a collective: end the whole job.
    Fail(run.status(), root, false);
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (*run == Trainer::Outcome::kGaveUp) {
    // Every rank gave up together (the skip verdicts are agreed).
    return Fail(absl::AbortedError(trainer.give_up_message()), root, true);
  }
  if (root) {
    const MemoryArena::Stats arena = trainer.arena().stats();
    std::printf(
        "memory arena (rank 0): %s reserved, peak %s used; %zu allocations "
        "(%s) did not fit and went to the device allocator\n",
        Readable(trainer.arena().capacity()).c_str(),
        Readable(arena.peak_in_use).c_str(), arena.fallbacks,
        Readable(arena.fallback_bytes).c_str());
  }
  if (*run == Trainer::Outcome::kStopped && root) {
    // The stop is agreed over the ranks; this one may not have had it.
    const int signal = StopSignalReceived();
    if (signal != 0) {
      std::printf("trellis-train: stopped by signal %d after step %lld (%s)\n",
                  signal, static_cast<long long>(trainer.step()),
                  SignalName(signal).c_str());
    } else {
      std::printf(
          "trellis-train: stopped by a stop signal on another rank after "
          "step %lld\n",
          static_cast<long long>(trainer.step()));
    }
  }
  if (!trainer.metrics_failure().empty()) {
    return Fail(
        absl::DataLossError(absl::StrCat("the run trained to the end, but ",
                                         trainer.metrics_failure())),
        root, false);
  }
  return 0;
}

int Main(int argc, char** argv) {
  // First thing: MPI_Init and reading the flags take a while, and a stop
  // signal meanwhile would end the run without a word. The defaults always
  // parse; --stop_signals replaces them below.
  InstallStopSignals(kDefaultStopSignals).IgnoreError();
  MpiRuntime runtime(&argc, &argv);
  absl::SetProgramUsageMessage(
      "trains a GPT; see README.md. Launch under mpirun for dp/tp/pp > 1.");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const bool root = runtime.world_rank() == 0;
  // Every rank sees the same command line, so all agree on this.
  if (positional.size() > 1) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "unexpected argument '", positional[1],
                    "': trellis-train takes only flags (a flagfile goes in "
                    "--flagfile=PATH)")),
                root, true);
  }
  const TrainOptions options = OptionsFromFlags();
  if (absl::GetFlag(FLAGS_plan_only)) {
    const absl::Status planned = PlanOnly(options, runtime);
    return planned.ok() ? 0 : Fail(planned, root, true);
  }
  const absl::Status signals =
      InstallStopSignals(absl::GetFlag(FLAGS_stop_signals));
  if (!signals.ok()) return Fail(signals, root, true);
  // The mesh is validated (and the options resolved) before anything is
  // allocated; every rank reaches the same verdict.
  TrainOptions probe = options;
  const int world = runtime.world_size();
  if (probe.cp > 1 && probe.dp > 0 &&
      probe.dp * probe.cp * probe.tp * probe.pp != world) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "layout dp=", probe.dp, " × cp=", probe.cp,
                    " × tp=", probe.tp, " × pp=", probe.pp, " = ",
                    probe.dp * probe.cp * probe.tp * probe.pp,
                    " does not match the world size ", world, "; launch ",
                    probe.dp * probe.cp * probe.tp * probe.pp,
                    " ranks or choose sizes whose product is ", world)),
                root, true);
  }
  // The mesh's dp axis holds the replicas' cp ranks too (Mesh's comment).
  absl::StatusOr<Mesh> mesh = Mesh::Create(
      world, static_cast<int>(probe.dp * probe.cp), static_cast<int>(probe.tp),
      static_cast<int>(probe.pp), probe.mesh_order);
  if (mesh.ok()) mesh = mesh->WithExpertParallel(static_cast<int>(probe.ep));
  if (mesh.ok()) mesh = mesh->WithContextParallel(static_cast<int>(probe.cp));
  if (!mesh.ok()) return Fail(mesh.status(), root, true);
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(runtime, *mesh);
  if (!context.ok()) return Fail(context.status(), root, true);
  const ProcessGroups& groups = context->groups();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(options, groups, context->coord(), DType::kF32,
                      [] { return StopSignalReceived() != 0; });
  if (const std::optional<int> failed =
          TrainerFailure(trainer, *groups.world, root)) {
    return *failed;
  }
  const std::vector<std::string> hosts =
      Hostnames(*groups.world, runtime.hostname());
  if (root) PrintRunHeader(*mesh, **trainer, hosts);
  return TrainAndReport(**trainer, root, world);
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::Main(argc, argv); }
