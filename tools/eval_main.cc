// trellis-eval: the mean next-token cross-entropy of a checkpoint on a token
// file.
//
// The rule: the file's token stream is cut, from its start, into
// consecutive non-overlapping windows of seq_len + 1 tokens (a last partial
// window is dropped); each window predicts its last seq_len tokens from the
// ones before. eval_loss is the mean over all predicted tokens of the first
// --max_windows windows (all windows when 0). It prints `eval_loss <value>`
// and one JSON line. Under mpirun it evaluates in any --dp/--tp/--pp layout
// and gives the same value, running forward-only pipeline schedules with
// no optimizer state or gradients (tools/trainer/evaluator.h). A loss that
// is NaN or infinite exits 1.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "parallel/bootstrap.h"
#include "tools/trainer/evaluator.h"
#include "tools/trainer/option_flags.h"
#include "tools/trainer/program_help.h"

ABSL_FLAG(std::string, load, "",
          "checkpoint directory (a step_* directory, or a save directory "
          "whose `latest` names one)");
ABSL_FLAG(std::string, data, "", "token file made by trellis-preprocess");
ABSL_FLAG(int64_t, max_windows, 0, "windows to evaluate (0: all)");
ABSL_FLAG(int64_t, micro_batch_size, 4, "windows per forward pass");
// The layout and device flags are trellis-train's (ReadParallelFlags).

namespace trellis {
namespace {

absl::StatusOr<double> Evaluate(const MpiRuntime& runtime, int64_t* windows) {
  const std::string load = absl::GetFlag(FLAGS_load);
  if (load.empty()) {
    return absl::InvalidArgumentError("--load is required: a checkpoint");
  }
  TRELLIS_ASSIGN_OR_RETURN(std::string dir, ResolveResume(load, ""));
  TrainOptions o;
  ReadParallelFlags(o);
  o.data = absl::GetFlag(FLAGS_data);
  o.val_fraction = 0;
  o.micro_batch_size = absl::GetFlag(FLAGS_micro_batch_size);
  o.eval_every = 0;
  o.steps = 1;
  // pp microbatches per data-parallel rank per step: enough to fill the
  // pipeline (and a multiple of pp, as interleaved schedules need).
  const int64_t dp =
      o.dp > 0 ? o.dp
               : runtime.world_size() / std::max<int64_t>(1, o.tp * o.pp);
  o.global_batch_size = o.micro_batch_size * dp * std::max<int64_t>(1, o.pp);
  TRELLIS_ASSIGN_OR_RETURN(
      Mesh mesh, Mesh::Create(runtime.world_size(), static_cast<int>(o.dp),
                              static_cast<int>(o.tp), static_cast<int>(o.pp),
                              o.mesh_order));
  TRELLIS_ASSIGN_OR_RETURN(ParallelContext context,
                           ParallelContext::Create(runtime, mesh));
  TRELLIS_ASSIGN_OR_RETURN(
      std::unique_ptr<Evaluator> evaluator,
      Evaluator::Create(o, context.groups(), context.coord(), dir));
  TRELLIS_ASSIGN_OR_RETURN(TokenDataset data, TokenDataset::Open(o.data));
  const int64_t window = evaluator->options().model.seq_len + 1;
  int64_t n = data.num_tokens() / window;
  const int64_t max_windows = absl::GetFlag(FLAGS_max_windows);
  if (max_windows > 0) n = std::min(n, max_windows);
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        o.data, " holds fewer than seq_len + 1 = ", window, " tokens"));
  }
  std::vector<int64_t> starts(n);
  for (int64_t i = 0; i < n; ++i) starts[i] = i * window;
  *windows = n;
  return evaluator->Evaluate(starts);
}

// The trainer's checks name its own flags; eval's user knows these by
// eval's names (--load for the checkpoint; the batch follows from
// --micro_batch_size).
std::string InEvalTerms(absl::string_view message) {
  return absl::StrReplaceAll(
      message,
      {{"--resume", "--load"}, {"--global_batch_size", "--micro_batch_size"}});
}

int Main(int argc, char** argv) {
  MpiRuntime runtime(&argc, &argv);
  absl::SetProgramUsageMessage(
      "trellis-eval --load CKPT --data FILE.h5 [--max_windows N]");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  int64_t windows = 0;
  const absl::StatusOr<double> loss =
      positional.size() > 1
          ? absl::InvalidArgumentError(absl::StrCat(
                "unexpected argument '", positional[1],
                "': trellis-eval takes only flags (the checkpoint goes in "
                "--load, the data in --data)"))
          : Evaluate(runtime, &windows);
  if (!loss.ok()) {
    std::fprintf(stderr, "trellis-eval: error: %s\n",
                 InEvalTerms(loss.status().message()).c_str());
    if (runtime.world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (runtime.world_rank() == 0) {
    std::printf("eval_loss %.6f\n", *loss);
    const nlohmann::json j = {{"eval_loss", *loss},
                              {"windows", windows},
                              {"checkpoint", absl::GetFlag(FLAGS_load)},
                              {"data", absl::GetFlag(FLAGS_data)}};
    std::printf("%s\n", j.dump().c_str());
  }
  if (!std::isfinite(*loss)) {
    // Every rank holds the same reduced loss, so all exit together.
    if (runtime.world_rank() == 0) {
      std::fprintf(stderr,
                   "trellis-eval: error: the loss is %f, not finite; the "
                   "weights or the data hold NaN or infinity\n",
                   *loss);
    }
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::Main(argc, argv); }
