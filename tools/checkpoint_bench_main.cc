// trellis-checkpoint-bench: checkpoint save and load throughput of a model
// (weights and AdamW moments) on one rank, against the disk.
//
//   trellis-checkpoint-bench --flagfile=configs/gpt2-350m.flags --dir=/scratch
//
// It builds the model's parameters (initialized, no training) and moments,
// saves a checkpoint into --dir (the same code path trellis-train takes,
// fsync included), evicts the files from the page cache
// (posix_fadvise DONTNEED), loads it back (twice), checks the values, and
// prints the bytes and GB/s of each, then one JSON line. Compare with `dd` of
// the same size on the same disk (docs/performance.md, "Checkpoint I/O").
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "framework/status.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/options/options.h"
#include "tools/options/program_help.h"
#include "tools/trainer/optim/optimizer.h"
#include "transformer/gpt2/gpt2_parameters.h"
#include "transformer/model_family.h"

ABSL_FLAG(int64_t, n_layer, 24, "transformer blocks");
ABSL_FLAG(int64_t, n_head, 16, "attention heads");
ABSL_FLAG(int64_t, d_model, 1024, "model width");
ABSL_FLAG(int64_t, seq_len, 1024, "context length");
ABSL_FLAG(int64_t, vocab_size, 50257, "vocabulary size");
ABSL_FLAG(std::string, dir, "", "where to write (a scratch directory)");
ABSL_FLAG(bool, keep, false, "keep the checkpoint afterwards");
ABSL_FLAG(bool, load_only, false,
          "load the checkpoint a run with --keep left, without saving");
// Flags of the preset flagfiles that do not matter here; checked like
// trellis-train's all the same, so a bad preset shows here too.
ABSL_FLAG(int64_t, micro_batch_size, 4, "ignored");
ABSL_FLAG(int64_t, global_batch_size, 32, "ignored");
ABSL_FLAG(int64_t, steps, 300, "ignored");
ABSL_FLAG(double, lr, 2e-3, "ignored");
ABSL_FLAG(double, min_lr, 2e-4, "ignored");
ABSL_FLAG(int64_t, warmup_steps, 30, "ignored");
ABSL_FLAG(double, weight_decay, 0.1, "ignored");
ABSL_FLAG(double, grad_clip, 1.0, "ignored");
ABSL_FLAG(int64_t, eval_every, 50, "ignored");
ABSL_FLAG(int64_t, eval_windows, 64, "ignored");
ABSL_FLAG(int64_t, log_every, 1, "ignored");
ABSL_FLAG(int64_t, save_every, 0, "ignored");

namespace trellis {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Drops the files' pages from the page cache, so loading reads the disk.
void EvictFromCache(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const int fd = ::open(entry.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Moments that differ from the weights and from zero.
void FillMoments(const ParameterSet& params, Optimizer& optimizer) {
  for (size_t i = 0; i < params.all().size(); ++i) {
    const float* w = params.all()[i]->value.data<float>();
    float* m = optimizer.exp_avg(i).data<float>();
    float* v = optimizer.exp_avg_sq(i).data<float>();
    for (int64_t j = 0; j < params.all()[i]->numel(); ++j) {
      m[j] = 0.5f * w[j];
      v[j] = w[j] * w[j] + 1e-6f;
    }
  }
}

// Zeroes everything, so a load that skips a tensor shows.
void Clear(const ParameterSet& params, Optimizer& optimizer) {
  for (size_t i = 0; i < params.all().size(); ++i) {
    params.all()[i]->value.Zero();
    optimizer.exp_avg(i).Zero();
    optimizer.exp_avg_sq(i).Zero();
  }
}

// The model the flags describe, every flag checked as trellis-train checks
// it (a model too large to index is refused, not built).
absl::StatusOr<ModelConfig> ReadConfig() {
  TrainOptions o;
  o.data = "checkpoint-bench";  // no data file: only the checks matter
  o.model.n_layer = absl::GetFlag(FLAGS_n_layer);
  o.model.n_head = absl::GetFlag(FLAGS_n_head);
  o.model.d_model = absl::GetFlag(FLAGS_d_model);
  o.model.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.micro_batch_size = absl::GetFlag(FLAGS_micro_batch_size);
  o.global_batch_size = absl::GetFlag(FLAGS_global_batch_size);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.min_lr = absl::GetFlag(FLAGS_min_lr);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.grad_clip = absl::GetFlag(FLAGS_grad_clip);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_windows = absl::GetFlag(FLAGS_eval_windows);
  o.log_every = absl::GetFlag(FLAGS_log_every);
  o.save_every = absl::GetFlag(FLAGS_save_every);
  const int64_t vocab = absl::GetFlag(FLAGS_vocab_size);
  if (vocab < 2 || vocab > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vocab_size=", vocab,
                     " is outside [2, 2^31); give the data's "
                     "vocabulary, e.g. 50257"));
  }
  TRELLIS_RETURN_IF_ERROR(o.Resolve(/*world=*/1, vocab));
  // Weights and two moments in float32 must fit in memory (estimated in
  // double, so no size overflows).
  const double d = static_cast<double>(o.model.d_model);
  const double parameters =
      12.0 * static_cast<double>(o.model.n_layer) * d * d +
      static_cast<double>(o.model.vocab_size + o.model.seq_len) * d;
  const double need = 3 * 4 * parameters;
  const double have = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                      static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (need > have) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model %s needs about %.3g GB for weights and moments, more than "
        "this machine's %.3g GB; choose smaller sizes",
        o.model.DebugString(), need / 1e9, have / 1e9));
  }
  return o.model;
}

// Checks --dir before the model is built: the save directory can be
// created (or, with --load_only, holds a checkpoint).
absl::Status CheckDir(const fs::path& save_dir, bool load_only) {
  std::error_code error;
  if (load_only) {
    if (!fs::is_directory(save_dir / CheckpointName(1), error)) {
      return absl::NotFoundError(absl::StrCat("--load_only: no checkpoint in ",
                                              save_dir.string(),
                                              "; run once with --keep first"));
    }
    return absl::OkStatus();
  }
  fs::create_directories(save_dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("--dir=", save_dir.parent_path().string(),
                     ": cannot create ", save_dir.string(), ": ",
                     error.message(), "; give a writable scratch directory"));
  }
  return absl::OkStatus();
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "trellis-checkpoint-bench: error: %s\n",
               std::string(status.message()).c_str());
  return 1;
}

// Loads the checkpoint at step from disk (its pages evicted) into cleared
// params and optimizer and returns the seconds it took, after checking that
// the probes (a weight and the moment exp_avg_sq of the third parameter from
// the end) and the step came back as saved.
absl::StatusOr<double> TimeLoad(const fs::path& step, ParameterSet& params,
                                Optimizer& optimizer, const Tensor& probe,
                                const Tensor& probe_v) {
  EvictFromCache(step);
  Clear(params, optimizer);
  const auto start = Clock::now();
  const absl::Status loaded = LoadCheckpoint(step.string(), params, &optimizer);
  const double seconds = Since(start);
  const bool same =
      loaded.ok() &&
      std::memcmp(probe.raw(), params.Find("h.0.mlp.c_fc.weight")->value.raw(),
                  probe.nbytes()) == 0 &&
      std::memcmp(probe_v.raw(),
                  optimizer.exp_avg_sq(params.all().size() - 3).raw(),
                  probe_v.nbytes()) == 0 &&
      optimizer.step() == 1;
  if (!same) {
    return loaded.ok() ? absl::DataLossError(
                             "the loaded checkpoint holds other values "
                             "than were saved")
                       : loaded;
  }
  return seconds;
}

// Prints the bytes and GB/s of the save and of each load, then the same as
// one JSON line.
void PrintThroughput(const ModelConfig& config, int64_t bytes, double save_s,
                     const double (&load_s)[2]) {
  const double gb = bytes / 1e9;
  std::printf("save: %.2f GB in %.2f s = %.2f GB/s (fsync included)\n", gb,
              save_s, gb / save_s);
  for (int i = 0; i < 2; ++i) {
    std::printf("load %d: %.2f GB in %.2f s = %.2f GB/s (page cache evicted)\n",
                i + 1, gb, load_s[i], gb / load_s[i]);
  }
  const nlohmann::json j = {
      {"parameters", config.NumParameters()},
      {"bytes", bytes},
      {"save_s", save_s},
      {"load_s", {load_s[0], load_s[1]}},
      {"save_gb_per_s", gb / save_s},
      {"load_gb_per_s", {gb / load_s[0], gb / load_s[1]}}};
  std::printf("%s\n", j.dump().c_str());
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "trellis-checkpoint-bench --dir=SCRATCH [--flagfile=configs/...]");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", rest[1],
                     "' (a flagfile goes in --flagfile=PATH)")));
  }
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--dir is required: a scratch directory to write the checkpoint to"));
  }
  const absl::StatusOr<ModelConfig> checked = ReadConfig();
  if (!checked.ok()) return Fail(checked.status());
  const ModelConfig config = *checked;
  const fs::path save_dir = fs::path(dir) / "checkpoint_bench";
  const bool load_only = absl::GetFlag(FLAGS_load_only);
  if (const absl::Status status = CheckDir(save_dir, load_only); !status.ok()) {
    return Fail(status);
  }
  auto start = Clock::now();
  ParameterSet params;
  AddModelParameters(config, ChunkPlan{0, config.n_layer, true, true},
                     TpPlace{}, 1337, Device::Cpu(), DType::kF32, params);
  // Gradients play no part: free them, so memory holds what a checkpoint
  // holds and the page cache keeps its room.
  for (Parameter* p : params.all()) p->grad = Tensor();
  Optimizer optimizer(OptimizerConfig{}, params);
  FillMoments(params, optimizer);
  optimizer.set_step(1);
  const Tensor probe = params.Find("h.0.mlp.c_fc.weight")->value.Clone();
  const Tensor probe_v = optimizer.exp_avg_sq(params.all().size() - 3).Clone();
  std::printf("model: %s, %lld parameters, built in %.1f s\n",
              config.DebugString().c_str(),
              static_cast<long long>(config.NumParameters()), Since(start));

  TrainingState state;
  state.step = 1;
  state.model = config;
  SelfCommunicator world("world");
  if (!load_only) fs::remove_all(save_dir);
  start = Clock::now();
  absl::Status saved = load_only
                           ? absl::OkStatus()
                           : SaveCheckpoint(save_dir.string(), state, params,
                                            &optimizer, world, true);
  const double save_s = Since(start);
  if (!saved.ok()) {
    return Fail(saved);
  }
  const fs::path step = save_dir / CheckpointName(1);
  int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(step)) bytes += e.file_size();
  // Twice: the first load after a save may find colder caches below the
  // file system (a virtual disk's host) than the second.
  double load_s[2] = {0, 0};
  for (double& seconds : load_s) {
    const absl::StatusOr<double> timed =
        TimeLoad(step, params, optimizer, probe, probe_v);
    if (!timed.ok()) return Fail(timed.status());
    seconds = *timed;
  }
  PrintThroughput(config, bytes, save_s, load_s);
  if (!absl::GetFlag(FLAGS_keep) && !load_only) fs::remove_all(save_dir);
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::Main(argc, argv); }
