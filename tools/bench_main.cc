// trellis-bench: the speed of a training step against the machine's GEMM
// rate, measured in one run.
//
// It first times a large single-precision GEMM (the peak a step's matrix
// products could reach), then trains the given model on synthetic tokens on
// one rank and reports tokens/s, the model FLOP rate, and their ratio.
// Model FLOPs per token are 6·N + 6·L·C·T (GptConfig::TrainingFlopsPerToken).
// Use OPENBLAS_NUM_THREADS=1 for single-thread figures.
#include <cblas.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "data/token_dataset.h"
#include "framework/rng.h"
#include "parallel/bootstrap.h"
#include "tools/trainer/trainer.h"

ABSL_FLAG(int64_t, n_layer, 6, "transformer blocks");
ABSL_FLAG(int64_t, n_head, 6, "attention heads");
ABSL_FLAG(int64_t, d_model, 384, "model width");
ABSL_FLAG(int64_t, seq_len, 256, "context length");
ABSL_FLAG(int64_t, vocab_size, 257, "synthetic vocabulary size");
ABSL_FLAG(int64_t, micro_batch_size, 4, "windows per microbatch");
ABSL_FLAG(int64_t, global_batch_size, 8, "windows per step");
ABSL_FLAG(int64_t, steps, 5, "timed steps");
ABSL_FLAG(int64_t, warmup, 2, "untimed steps first");
ABSL_FLAG(int64_t, gemm_size, 2048, "M = N = K of the reference GEMM");

namespace trellis {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds used by this process: on a shared machine this counts the
// work done, not the time spent waiting for a core.
double CpuSeconds() {
  timespec t = {};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

struct Rate {
  double wall = 0;  // GFLOP/s over wall time
  double cpu = 0;   // GFLOP/s over process CPU time
};

// Best of several runs of an n×n×n sgemm.
Rate SgemmGflops(int n) {
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(UniformAt(1, 1, i) - 0.5);
    b[i] = static_cast<float>(UniformAt(1, 2, i) - 0.5);
  }
  double wall = 1e30, cpu = 1e30;
  for (int run = 0; run < 5; ++run) {
    const auto start = Clock::now();
    const double cpu_start = CpuSeconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
                a.data(), n, b.data(), n, 0.0f, c.data(), n);
    cpu = std::min(cpu, CpuSeconds() - cpu_start);
    wall = std::min(wall, Seconds(start));
  }
  const double flops = 2.0 * n * n * n / 1e9;
  return Rate{flops / wall, flops / cpu};
}

absl::StatusOr<std::string> SyntheticData(int64_t vocab, int64_t tokens) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "trellis-bench-tokens.h5")
          .string();
  TRELLIS_ASSIGN_OR_RETURN(
      auto writer, TokenDatasetWriter::Create(
                       path, TokenFileMetadata{"synthetic", vocab, vocab - 1}));
  std::vector<uint32_t> doc(tokens);
  for (int64_t i = 0; i < tokens; ++i) {
    doc[i] = static_cast<uint32_t>(RandomBits(7, 7, i) % (vocab - 1));
  }
  TRELLIS_RETURN_IF_ERROR(writer->AppendDocument(doc));
  TRELLIS_RETURN_IF_ERROR(writer->Finish());
  return path;
}

absl::Status Bench() {
  TrainOptions o;
  o.model.n_layer = absl::GetFlag(FLAGS_n_layer);
  o.model.n_head = absl::GetFlag(FLAGS_n_head);
  o.model.d_model = absl::GetFlag(FLAGS_d_model);
  o.model.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.micro_batch_size = absl::GetFlag(FLAGS_micro_batch_size);
  o.global_batch_size = absl::GetFlag(FLAGS_global_batch_size);
  const int64_t timed = absl::GetFlag(FLAGS_steps);
  const int64_t warmup = absl::GetFlag(FLAGS_warmup);
  o.steps = timed + warmup;
  o.warmup_steps = 1;
  o.eval_every = 0;
  o.val_fraction = 0;
  const int64_t windows = o.global_batch_size * (o.steps + 1);
  TRELLIS_ASSIGN_OR_RETURN(o.data,
                           SyntheticData(absl::GetFlag(FLAGS_vocab_size),
                                         windows * o.model.seq_len + 1));
  const Rate gemm =
      SgemmGflops(static_cast<int>(absl::GetFlag(FLAGS_gemm_size)));
  ParallelContext single = ParallelContext::Single();
  TRELLIS_ASSIGN_OR_RETURN(auto trainer,
                           Trainer::Create(o, single.groups(), single.coord()));
  std::vector<double> ms, cpu_ms;
  for (int64_t s = 0; s < o.steps; ++s) {
    const double cpu_start = CpuSeconds();
    TRELLIS_ASSIGN_OR_RETURN(StepMetrics m, trainer->Step());
    if (s >= warmup) {
      ms.push_back(m.ms);
      cpu_ms.push_back(1e3 * (CpuSeconds() - cpu_start));
    }
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu_ms.begin(), cpu_ms.end());
  const double median_s = ms[ms.size() / 2] / 1e3;
  const double median_cpu_s = cpu_ms[cpu_ms.size() / 2] / 1e3;
  const double tokens =
      static_cast<double>(o.global_batch_size * o.model.seq_len);
  const double flops =
      trainer->options().model.TrainingFlopsPerToken() * tokens;
  struct rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  const double model_wall = flops / median_s / 1e9;
  const double model_cpu = flops / median_cpu_s / 1e9;
  std::printf(
      "model %s (%lld parameters), batch %lld x %lld tokens, "
      "%.3g FLOPs/token (6N + 6LCT)\n"
      "sgemm %lld^3: %.1f GFLOP/s wall, %.1f GFLOP/s cpu-time\n"
      "step: %.1f ms wall (%.1f ms cpu) median of %lld, %.0f tokens/s, "
      "%.1f GFLOP/s wall, %.1f GFLOP/s cpu-time\n"
      "ratio to sgemm: %.1f%% wall, %.1f%% cpu-time; peak RSS %.0f MB\n",
      trainer->options().model.DebugString().c_str(),
      static_cast<long long>(trainer->options().model.NumParameters()),
      static_cast<long long>(o.global_batch_size),
      static_cast<long long>(o.model.seq_len),
      trainer->options().model.TrainingFlopsPerToken(),
      static_cast<long long>(absl::GetFlag(FLAGS_gemm_size)), gemm.wall,
      gemm.cpu, 1e3 * median_s, 1e3 * median_cpu_s,
      static_cast<long long>(ms.size()), tokens / median_s, model_wall,
      model_cpu, 100.0 * model_wall / gemm.wall, 100.0 * model_cpu / gemm.cpu,
      usage.ru_maxrss / 1024.0);
  std::filesystem::remove(o.data);
  return absl::OkStatus();
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "trellis-bench [--n_layer --n_head --d_model --seq_len ...]: times a "
      "training step against the GEMM rate");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = trellis::Bench();
  if (!status.ok()) {
    std::fprintf(stderr, "trellis-bench: error: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
