// trellis-checkpoint_bench: checkpoint save and load throughput of a model
// (weights and AdamW moments) on one rank, against the disk.
//
//   trellis-checkpoint_bench --flagfile=configs/gpt2-350m.flags --dir=/scratch
//
// It builds the model's parameters (initialized, no training) and moments,
// saves a checkpoint into --dir (the same code path trellis-train takes,
// fsync included), evicts the files from the page cache
// (posix_fadvise DONTNEED), loads it back (twice), checks the values, and
// prints the bytes and GB/s of each, then one JSON line. Compare with `dd` of
// the same size on the same disk (docs/performance.md, "Checkpoint I/O").
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "tools/trainer/checkpoint.h"
#include "tools/trainer/optimizer.h"
#include "tools/trainer/program_help.h"
#include "transformer/gpt_parameters.h"

ABSL_FLAG(int64_t, n_layer, 24, "transformer blocks");
ABSL_FLAG(int64_t, n_head, 16, "attention heads");
ABSL_FLAG(int64_t, d_model, 1024, "model width");
ABSL_FLAG(int64_t, seq_len, 1024, "context length");
ABSL_FLAG(int64_t, vocab_size, 50257, "vocabulary size");
ABSL_FLAG(std::string, dir, "", "where to write (a scratch directory)");
ABSL_FLAG(bool, keep, false, "keep the checkpoint afterwards");
ABSL_FLAG(bool, load_only, false,
          "load the checkpoint a run with --keep left, without saving");
// Flags of the preset flagfiles that do not matter here.
ABSL_FLAG(int64_t, micro_batch_size, 0, "ignored");
ABSL_FLAG(int64_t, global_batch_size, 0, "ignored");
ABSL_FLAG(int64_t, steps, 0, "ignored");
ABSL_FLAG(double, lr, 0, "ignored");
ABSL_FLAG(double, min_lr, 0, "ignored");
ABSL_FLAG(int64_t, warmup_steps, 0, "ignored");
ABSL_FLAG(double, weight_decay, 0, "ignored");
ABSL_FLAG(double, grad_clip, 0, "ignored");
ABSL_FLAG(int64_t, eval_every, 0, "ignored");
ABSL_FLAG(int64_t, eval_windows, 0, "ignored");
ABSL_FLAG(int64_t, log_every, 0, "ignored");
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

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "trellis-checkpoint_bench --dir=SCRATCH [--flagfile=configs/...]");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) {
    std::fprintf(stderr, "trellis-checkpoint_bench: --dir is required\n");
    return 1;
  }
  GptConfig config;
  config.n_layer = absl::GetFlag(FLAGS_n_layer);
  config.n_head = absl::GetFlag(FLAGS_n_head);
  config.d_model = absl::GetFlag(FLAGS_d_model);
  config.seq_len = absl::GetFlag(FLAGS_seq_len);
  config.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  auto start = Clock::now();
  ParameterSet params;
  AddGptParameters(config, ChunkPlan{0, config.n_layer, true, true}, TpPlace{},
                   1337, Device::Cpu(), DType::kF32, params);
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
  const fs::path save_dir = fs::path(dir) / "checkpoint_bench";
  const bool load_only = absl::GetFlag(FLAGS_load_only);
  if (!load_only) fs::remove_all(save_dir);
  start = Clock::now();
  absl::Status saved = load_only
                           ? absl::OkStatus()
                           : SaveCheckpoint(save_dir.string(), state, params,
                                            &optimizer, world, true);
  const double save_s = Since(start);
  if (!saved.ok()) {
    std::fprintf(stderr, "save failed: %s\n", saved.ToString().c_str());
    return 1;
  }
  const fs::path step = save_dir / CheckpointName(1);
  int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(step)) bytes += e.file_size();
  // Twice: the first load after a save may find colder caches below the
  // file system (a virtual disk's host) than the second.
  double load_s[2] = {0, 0};
  for (double& seconds : load_s) {
    EvictFromCache(step);
    Clear(params, optimizer);
    start = Clock::now();
    const absl::Status loaded =
        LoadCheckpoint(step.string(), params, &optimizer);
    seconds = Since(start);
    const bool same =
        loaded.ok() &&
        std::memcmp(probe.raw(),
                    params.Find("h.0.mlp.c_fc.weight")->value.raw(),
                    probe.nbytes()) == 0 &&
        std::memcmp(probe_v.raw(),
                    optimizer.exp_avg_sq(params.all().size() - 3).raw(),
                    probe_v.nbytes()) == 0 &&
        optimizer.step() == 1;
    if (!same) {
      std::fprintf(stderr, "load failed or read wrong values: %s\n",
                   loaded.ToString().c_str());
      return 1;
    }
  }
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
  if (!absl::GetFlag(FLAGS_keep) && !load_only) fs::remove_all(save_dir);
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::Main(argc, argv); }
