// trellis-eval: the mean next-token cross-entropy of a checkpoint on a token
// file, or on each file of a blend.
//
// The rule: the file's token stream is cut, from its start, into
// consecutive non-overlapping windows of seq_len + 1 tokens (a last partial
// window is dropped); each window predicts its last seq_len tokens from the
// ones before. seq_len is the checkpoint's, or --seq_len to evaluate at
// another context length: any for rotary-position models (Llama), at most
// the learned positions for GPT-2. eval_loss is the mean over all predicted
// tokens of the first
// --max_windows windows (all windows when 0). It prints `eval_loss <value>`
// and one JSON line. A blend (--data=0.7:a.h5,0.3:b.h5) scores each file so;
// eval_loss is then their weighted mean, printed with each file's loss as
// the trainer prints val_loss, and the JSON line adds `eval_loss_by_source`
// {path: loss} and `windows_by_source`. Under mpirun it
// evaluates in any --dp/--tp/--pp layout and gives the same values, running
// forward-only pipeline schedules with no optimizer state or gradients
// (tools/trainer/evaluator.h). A loss that is NaN or infinite exits 1.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "parallel/bootstrap.h"
#include "tools/options/option_flags.h"
#include "tools/options/program_help.h"
#include "tools/trainer/evaluator.h"

ABSL_FLAG(std::string, load, "",
          "checkpoint directory (a step_* directory, or a save directory "
          "whose `latest` names one)");
ABSL_FLAG(std::string, data, "",
          "token file made by trellis-preprocess, or a blend "
          "weight:path,... whose files are scored one by one");
ABSL_FLAG(int64_t, max_windows, 0,
          "windows to evaluate from each file (0: all)");
ABSL_FLAG(int64_t, micro_batch_size, 4, "windows per forward pass");
ABSL_FLAG(int64_t, seq_len, 0,
          "context length to evaluate at (0: the checkpoint's); a model with "
          "rotary positions (llama) takes any, GPT-2 at most its learned "
          "positions (wpe rows)");
// The layout and device flags are trellis-train's (ReadParallelFlags).

namespace trellis {
namespace {

absl::StatusOr<StreamEval> Evaluate(const MpiRuntime& runtime) {
  const std::string load = absl::GetFlag(FLAGS_load);
  if (load.empty()) {
    return absl::InvalidArgumentError("--load is required: a checkpoint");
  }
  if (absl::GetFlag(FLAGS_max_windows) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_windows=", absl::GetFlag(FLAGS_max_windows),
                     " must be at least 0 (0: every window)"));
  }
  TRELLIS_ASSIGN_OR_RETURN(std::string dir, ResolveResume(load, "", "--load"));
  TrainOptions o;
  ReadParallelFlags(o);
  o.data = absl::GetFlag(FLAGS_data);
  o.val_fraction = 0;
  o.micro_batch_size = absl::GetFlag(FLAGS_micro_batch_size);
  o.eval_every = 0;
  o.steps = 1;
  // pp microbatches per data-parallel rank per step: enough to fill the
  // pipeline (and a multiple of pp, as interleaved schedules need).
  const int64_t dp = o.dp > 0 ? o.dp
                              : runtime.world_size() /
                                    std::max<int64_t>(1, o.cp * o.tp * o.pp);
  o.global_batch_size = o.micro_batch_size * dp * std::max<int64_t>(1, o.pp);
  TRELLIS_ASSIGN_OR_RETURN(
      Mesh base,
      Mesh::Create(runtime.world_size(), static_cast<int>(o.dp * o.cp),
                   static_cast<int>(o.tp), static_cast<int>(o.pp),
                   o.mesh_order));
  TRELLIS_ASSIGN_OR_RETURN(Mesh experts,
                           base.WithExpertParallel(static_cast<int>(o.ep)));
  TRELLIS_ASSIGN_OR_RETURN(Mesh mesh,
                           experts.WithContextParallel(static_cast<int>(o.cp)));
  TRELLIS_ASSIGN_OR_RETURN(ParallelContext context,
                           ParallelContext::Create(runtime, mesh));
  TRELLIS_ASSIGN_OR_RETURN(
      std::unique_ptr<Evaluator> evaluator,
      Evaluator::Create(o, context.groups(), context.coord(), dir, DType::kF32,
                        absl::GetFlag(FLAGS_seq_len)));
  return evaluator->EvaluateStreams(absl::GetFlag(FLAGS_max_windows));
}

// `eval_loss <total>`, for a blend followed by each file's loss as the
// trainer prints val_loss (`eval_loss 2.1 (a.h5 2.0, b.h5 2.3)`), then the
// JSON line.
void PrintResult(const StreamEval& result) {
  std::string line = absl::StrFormat("eval_loss %.6f", result.loss);
  nlohmann::json j = {{"eval_loss", result.loss},
                      {"windows", result.windows},
                      {"checkpoint", absl::GetFlag(FLAGS_load)},
                      {"data", absl::GetFlag(FLAGS_data)}};
  if (result.sources.size() > 1) {
    for (size_t i = 0; i < result.sources.size(); ++i) {
      const SourceEval& s = result.sources[i];
      absl::StrAppend(&line, i == 0 ? " (" : ", ", s.path,
                      absl::StrFormat(" %.6f", s.loss),
                      i + 1 == result.sources.size() ? ")" : "");
      j["eval_loss_by_source"][s.path] = s.loss;
      j["windows_by_source"][s.path] = s.windows;
    }
  }
  std::printf("%s\n%s\n", line.c_str(), j.dump().c_str());
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
      "trellis-eval --load CKPT --data FILE.h5|W:A.h5,W:B.h5,... "
      "[--max_windows N --seq_len T]");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const absl::StatusOr<StreamEval> result =
      positional.size() > 1
          ? absl::InvalidArgumentError(absl::StrCat(
                "unexpected argument '", positional[1],
                "': trellis-eval takes only flags (the checkpoint goes in "
                "--load, the data in --data)"))
          : Evaluate(runtime);
  if (!result.ok()) {
    std::fprintf(stderr, "trellis-eval: error: %s\n",
                 InEvalTerms(result.status().message()).c_str());
    if (runtime.world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (runtime.world_rank() == 0) PrintResult(*result);
  const double loss = result->loss;
  if (!std::isfinite(loss)) {
    // Every rank holds the same reduced loss, so all exit together.
    if (runtime.world_rank() == 0) {
      std::fprintf(stderr,
                   "trellis-eval: error: the loss is %f, not finite; the "
                   "weights or the data hold NaN or infinity\n",
                   loss);
    }
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::Main(argc, argv); }
