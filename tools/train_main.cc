// trellis-train: trains a GPT on one rank or, under mpirun/srun, on a
// dp × tp × pp mesh of ranks.
//
//   mpirun -np 8 build/bin/trellis-train --flagfile=configs/tiny.flags
//       --data=data_cache/kjv-byte.h5 --dp=2 --tp=2 --pp=2
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "parallel/bootstrap.h"
#include "tools/trainer/layout_report.h"
#include "tools/trainer/stop_signals.h"
#include "tools/trainer/trainer.h"

ABSL_FLAG(int64_t, n_layer, 4, "transformer blocks");
ABSL_FLAG(int64_t, n_head, 4, "attention heads");
ABSL_FLAG(int64_t, d_model, 128, "model width");
ABSL_FLAG(int64_t, seq_len, 128, "context length (tokens per window - 1)");
ABSL_FLAG(std::string, data, "", "token file made by trellis-preprocess");
ABSL_FLAG(double, val_fraction, 0.02, "share of windows held out");
ABSL_FLAG(int64_t, micro_batch_size, 4, "windows per microbatch");
ABSL_FLAG(int64_t, global_batch_size, 32, "windows per optimizer step");
ABSL_FLAG(int64_t, steps, 300, "optimizer steps");
ABSL_FLAG(double, lr, 2e-3, "peak learning rate");
ABSL_FLAG(double, min_lr, 2e-4, "learning rate at the end of cosine decay");
ABSL_FLAG(int64_t, warmup_steps, 30, "linear warmup steps");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW weight decay (2-D weights)");
ABSL_FLAG(double, grad_clip, 1.0, "global gradient norm clip (0: off)");
ABSL_FLAG(uint64_t, seed, 1337, "initialization and data order seed");
ABSL_FLAG(std::string, save_dir, "", "checkpoint directory");
ABSL_FLAG(int64_t, save_every, 0, "steps between checkpoints (0: at end)");
ABSL_FLAG(std::string, resume, "",
          "checkpoint directory to resume from, or 'auto' (latest in "
          "--save_dir if any)");
ABSL_FLAG(int64_t, keep_checkpoints, 0, "keep only the newest N (0: all)");
ABSL_FLAG(int64_t, eval_every, 50, "steps between validations (0: never)");
ABSL_FLAG(int64_t, eval_windows, 64, "validation windows per evaluation");
ABSL_FLAG(int64_t, log_every, 1, "steps between log lines");
ABSL_FLAG(std::string, metrics_file, "", "JSON Lines metrics output");
ABSL_FLAG(int64_t, dp, 0, "data-parallel size (0: world / (tp·pp))");
ABSL_FLAG(int64_t, tp, 1, "tensor-parallel size");
ABSL_FLAG(int64_t, pp, 1, "pipeline-parallel size");
ABSL_FLAG(std::string, mesh_order, "tp-dp-pp", "mesh axes, fastest first");
ABSL_FLAG(std::string, schedule, "1f1b",
          "pipeline schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1");
ABSL_FLAG(int64_t, virtual_stages, 1,
          "model chunks per stage (interleaved-1f1b)");
ABSL_FLAG(std::vector<std::string>, pp_layers, {},
          "layers per pipeline stage, e.g. 3,5,5,3 (default: even)");
ABSL_FLAG(double, dp_bucket_mb, 25.0, "data-parallel bucket size in MiB");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32, or bf16 (CUDA: bfloat16 weights and activations, float32 "
          "master weights, gradients and moments)");
ABSL_FLAG(std::string, recompute, "none",
          "activation recomputation in backward: none, selective (attention "
          "and GELU inputs) or full (each block from its input)");
ABSL_FLAG(std::string, attention, "cudnn",
          "CUDA attention kernels: cudnn (cuDNN's fused attention where a "
          "plan builds, else mma with a note), mma (tensor cores) or simt; "
          "ignored on CPU");
ABSL_FLAG(int64_t, loss_chunk_rows, 1024,
          "rows of the LM head's logits formed at once (0: a whole "
          "microbatch); bounds the head's memory, not its result");
ABSL_FLAG(std::string, gpu_comm, "nccl",
          "GPU collectives: nccl (one GPU per rank) or host (staged through "
          "host memory over MPI; ranks may share a GPU)");
ABSL_FLAG(double, memory_budget_gb, 0,
          "GiB the run may allocate on its device (0: the device's free "
          "memory, or physical memory on CPU)");
ABSL_FLAG(std::string, trace_dir, "",
          "write Chrome traces of --trace_steps here, one file per rank "
          "(read them with trellis-bubbles)");
ABSL_FLAG(std::vector<std::string>, trace_steps, {},
          "steps to trace, e.g. 5,6 (1-based, as logged)");
ABSL_FLAG(std::string, stop_signals, "USR1,TERM",
          "signals that end the run cleanly after the current step, saving "
          "a checkpoint when --save_dir is set");

namespace trellis {
namespace {

absl::StatusOr<TrainOptions> OptionsFromFlags() {
  TrainOptions o;
  o.model.n_layer = absl::GetFlag(FLAGS_n_layer);
  o.model.n_head = absl::GetFlag(FLAGS_n_head);
  o.model.d_model = absl::GetFlag(FLAGS_d_model);
  o.model.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.data = absl::GetFlag(FLAGS_data);
  o.val_fraction = absl::GetFlag(FLAGS_val_fraction);
  o.micro_batch_size = absl::GetFlag(FLAGS_micro_batch_size);
  o.global_batch_size = absl::GetFlag(FLAGS_global_batch_size);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.min_lr = absl::GetFlag(FLAGS_min_lr);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.grad_clip = absl::GetFlag(FLAGS_grad_clip);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.save_dir = absl::GetFlag(FLAGS_save_dir);
  o.save_every = absl::GetFlag(FLAGS_save_every);
  o.resume = absl::GetFlag(FLAGS_resume);
  o.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_windows = absl::GetFlag(FLAGS_eval_windows);
  o.log_every = absl::GetFlag(FLAGS_log_every);
  o.metrics_file = absl::GetFlag(FLAGS_metrics_file);
  o.dp = absl::GetFlag(FLAGS_dp);
  o.tp = absl::GetFlag(FLAGS_tp);
  o.pp = absl::GetFlag(FLAGS_pp);
  o.mesh_order = absl::GetFlag(FLAGS_mesh_order);
  o.schedule = absl::GetFlag(FLAGS_schedule);
  o.virtual_stages = absl::GetFlag(FLAGS_virtual_stages);
  o.dp_bucket_mb = absl::GetFlag(FLAGS_dp_bucket_mb);
  o.device = absl::GetFlag(FLAGS_device);
  o.precision = absl::GetFlag(FLAGS_precision);
  o.recompute = absl::GetFlag(FLAGS_recompute);
  o.attention = absl::GetFlag(FLAGS_attention);
  o.loss_chunk_rows = absl::GetFlag(FLAGS_loss_chunk_rows);
  o.gpu_comm = absl::GetFlag(FLAGS_gpu_comm);
  o.memory_budget_gb = absl::GetFlag(FLAGS_memory_budget_gb);
  for (const std::string& s : absl::GetFlag(FLAGS_pp_layers)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--pp_layers entry '", s, "' is not a number; e.g. --pp_layers=3,5"));
    }
    o.pp_layers.push_back(n);
  }
  o.trace_dir = absl::GetFlag(FLAGS_trace_dir);
  for (const std::string& s : absl::GetFlag(FLAGS_trace_steps)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--trace_steps entry '", s, "' is not a step number; e.g. 5,6"));
    }
    o.trace_steps.push_back(n);
  }
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

int Main(int argc, char** argv) {
  MpiRuntime runtime(&argc, &argv);
  absl::SetProgramUsageMessage(
      "trains a GPT; see README.md. Launch under mpirun for dp/tp/pp > 1.");
  absl::ParseCommandLine(argc, argv);
  const bool root = runtime.world_rank() == 0;
  auto fail = [&](const absl::Status& status, bool agreed) {
    if (root || !agreed) {
      std::fprintf(stderr, "trellis-train: error: %s\n",
                   std::string(status.message()).c_str());
    }
    return 1;
  };
  absl::StatusOr<TrainOptions> options = OptionsFromFlags();
  if (!options.ok()) return fail(options.status(), true);
  const absl::Status signals =
      InstallStopSignals(absl::GetFlag(FLAGS_stop_signals));
  if (!signals.ok()) return fail(signals, true);
  // The mesh is validated (and the options resolved) before anything is
  // allocated; every rank reaches the same verdict.
  TrainOptions probe = *options;
  const int world = runtime.world_size();
  absl::StatusOr<Mesh> mesh = Mesh::Create(
      world, static_cast<int>(probe.dp), static_cast<int>(probe.tp),
      static_cast<int>(probe.pp), probe.mesh_order);
  if (!mesh.ok()) return fail(mesh.status(), true);
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(runtime, *mesh);
  if (!context.ok()) return fail(context.status(), true);
  const ProcessGroups& groups = context->groups();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(*options, groups, context->coord());
  const absl::Status built = AgreeOnStatus(*groups.world, trainer.status());
  if (!built.ok()) {
    // Configuration errors are the same on every rank: rank 0 reports them.
    // Other failures are reported by the rank they happened on.
    const bool mine = !trainer.ok();
    if (mine && (root || !absl::IsInvalidArgument(trainer.status()))) {
      return fail(trainer.status(), false);
    }
    return root ? fail(built, false) : 1;
  }
  const std::vector<std::string> hosts =
      Hostnames(*groups.world, runtime.hostname());
  if (root) {
    std::printf("%s",
                LayoutReport(*mesh, (*trainer)->options(), hosts).c_str());
    std::printf(
        "model: %s, %lld parameters\n",
        (*trainer)->options().model.DebugString().c_str(),
        static_cast<long long>((*trainer)->options().model.NumParameters()));
    std::fflush(stdout);
  }
  (*trainer)->set_stop_check([] { return StopSignalReceived() != 0; });
  const absl::StatusOr<Trainer::Outcome> run = (*trainer)->Run();
  if (!run.ok()) {
    // Other ranks may be blocked in a collective: end the whole job.
    fail(run.status(), false);
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (root) {
    const MemoryArena::Stats arena = (*trainer)->arena().stats();
    std::printf(
        "memory arena (rank 0): %s reserved, peak %s used; %zu allocations "
        "(%s) did not fit and went to the device allocator\n",
        Readable((*trainer)->arena().capacity()).c_str(),
        Readable(arena.peak_in_use).c_str(), arena.fallbacks,
        Readable(arena.fallback_bytes).c_str());
  }
  if (*run == Trainer::Outcome::kStopped && root) {
    std::printf("trellis-train: stopped by signal %d after step %lld\n",
                StopSignalReceived(),
                static_cast<long long>((*trainer)->step()));
  }
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::Main(argc, argv); }
