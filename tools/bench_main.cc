// trellis-bench: the speed of a training step against the device's GEMM
// rate and peak, measured in one run, on the CPU or a CUDA GPU.
//
// It first times a large reference GEMM (CPU: sgemm; CUDA: the public
// MatmulForward on device tensors of the run's precision, timed with CUDA
// events), then trains the model on synthetic tokens on one rank through
// the Trainer and reports, per timed step and for the median step: tokens/s,
// the model FLOP rate (FLOPs per token 6·N + 6·L·C·T, see
// tools/bench/bench_report.h), MFU against the device's dense bf16 peak,
// the ratio to the GEMM rate, and peak memory. --profile adds the per-kernel
// time table of the last timed step and then measures the device's kernel
// cost table (the GEMMs, attention, element-wise kernels and AdamW by shape,
// tools/plan/kernel_cost_measure.h), which --json writes into the summary
// under "kernel_costs" for trellis-plan --profile or a cluster file.
// Use OPENBLAS_NUM_THREADS=1 for single-thread CPU figures.
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "data/token_dataset.h"
#include "framework/gemm_tuning.h"
#include "framework/kernel_profile.h"
#include "framework/memory_arena.h"
#include "framework/rng.h"
#include "parallel/bootstrap.h"
#include "tools/bench/bench_config.h"
#include "tools/bench/bench_device.h"
#include "tools/bench/bench_report.h"
#include "tools/options/program_help.h"
#include "tools/plan/kernel_cost_calibrate.h"
#include "tools/plan/kernel_cost_measure.h"
#include "tools/trainer/trainer.h"

ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, precision, "",
          "fp32 or bf16 (default: fp32 on cpu, bf16 on cuda)");
ABSL_FLAG(std::string, recompute, "none",
          "activation recomputation: none, selective or full");
ABSL_FLAG(std::string, attention, "cudnn",
          "CUDA attention kernels: cudnn (else mma with a note), mma or simt; "
          "ignored on cpu");
ABSL_FLAG(std::string, preset, "",
          "model shape: gpt2-124m, gpt2-350m, gpt2-774m or gpt2-1558m "
          "(default: a 6-layer, 384-wide model on cpu, gpt2-124m on cuda)");
ABSL_FLAG(std::optional<int64_t>, n_layer, std::nullopt,
          "transformer blocks (default: the preset's, else 6)");
ABSL_FLAG(std::optional<int64_t>, n_head, std::nullopt,
          "attention heads (default: the preset's, else 6)");
ABSL_FLAG(std::optional<int64_t>, d_model, std::nullopt,
          "model width (default: the preset's, else 384)");
ABSL_FLAG(std::optional<int64_t>, seq_len, std::nullopt,
          "context length (default: 256 on cpu, 1024 on cuda)");
ABSL_FLAG(std::optional<int64_t>, vocab_size, std::nullopt,
          "synthetic vocabulary size (default: 50257 with a preset, else 257)");
ABSL_FLAG(std::optional<int64_t>, micro_batch_size, std::nullopt,
          "windows per microbatch (default: the preset's, on cuda the one "
          "fastest on an 80 GB H100: 64, 64, 32, 16; else 4)");
ABSL_FLAG(std::optional<int64_t>, global_batch_size, std::nullopt,
          "windows per step (default: 2 microbatches on cpu, 4 on cuda)");
ABSL_FLAG(std::optional<int64_t>, loss_chunk_rows, std::nullopt,
          "rows of logits the LM head forms at a time (0: all; -1: the "
          "device's choice, trellis-train's default)");
ABSL_FLAG(bool, bias_grad_epilogue, false,
          "bias gradients in the weight-gradient GEMMs' epilogue, as for "
          "trellis-train");
ABSL_FLAG(bool, residual_in_gemm, true,
          "each block's residual add in the MLP's last GEMM, as for "
          "trellis-train");
ABSL_FLAG(bool, gemm_autotune, false,
          "time cuBLASLt's candidate algorithms per GEMM shape and keep the "
          "fastest, as for trellis-train");
ABSL_FLAG(int64_t, steps, 5, "timed steps");
ABSL_FLAG(int64_t, warmup, 2, "untimed steps first");
ABSL_FLAG(std::optional<int64_t>, gemm_size, std::nullopt,
          "M = N = K of the reference GEMM (default: 2048 on cpu, 8192 on "
          "cuda)");
ABSL_FLAG(double, peak_tflops, 0,
          "device peak in TFLOP/s for MFU (0: the known dense bf16 peak of "
          "H100 and H200 GPUs; none on cpu)");
ABSL_FLAG(bool, profile, false,
          "print the per-kernel time table of the last timed step, then "
          "measure the device's kernel cost table by shape (into --json)");
ABSL_FLAG(std::string, json, "", "write the summary as JSON to this file");

namespace trellis {
namespace {

using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  timespec t = {};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// A token file of uniform random tokens in the temporary directory,
// removed when this goes out of scope.
class SyntheticData {
 public:
  static absl::StatusOr<std::unique_ptr<SyntheticData>> Create(int64_t vocab,
                                                               int64_t tokens) {
    auto data = std::unique_ptr<SyntheticData>(new SyntheticData(
        (std::filesystem::temp_directory_path() /
         absl::StrCat("trellis-bench-tokens-", getpid(), ".h5"))
            .string()));
    TRELLIS_ASSIGN_OR_RETURN(
        auto writer,
        TokenDatasetWriter::Create(
            data->path_, TokenFileMetadata{"synthetic", vocab, vocab - 1}));
    std::vector<uint32_t> doc(tokens);
    for (int64_t i = 0; i < tokens; ++i) {
      doc[i] = static_cast<uint32_t>(RandomBits(7, 7, i) % (vocab - 1));
    }
    TRELLIS_RETURN_IF_ERROR(writer->AppendDocument(doc));
    TRELLIS_RETURN_IF_ERROR(writer->Finish());
    return data;
  }
  ~SyntheticData() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  explicit SyntheticData(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

BenchFlags FlagsFromCommandLine(const std::vector<char*>& positional) {
  BenchFlags f;
  f.device = absl::GetFlag(FLAGS_device);
  f.precision = absl::GetFlag(FLAGS_precision);
  f.recompute = absl::GetFlag(FLAGS_recompute);
  f.attention = absl::GetFlag(FLAGS_attention);
  f.preset = absl::GetFlag(FLAGS_preset);
  f.n_layer = absl::GetFlag(FLAGS_n_layer);
  f.n_head = absl::GetFlag(FLAGS_n_head);
  f.d_model = absl::GetFlag(FLAGS_d_model);
  f.seq_len = absl::GetFlag(FLAGS_seq_len);
  f.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  f.micro_batch_size = absl::GetFlag(FLAGS_micro_batch_size);
  f.global_batch_size = absl::GetFlag(FLAGS_global_batch_size);
  f.loss_chunk_rows = absl::GetFlag(FLAGS_loss_chunk_rows);
  f.bias_grad_epilogue = absl::GetFlag(FLAGS_bias_grad_epilogue);
  f.residual_in_gemm = absl::GetFlag(FLAGS_residual_in_gemm);
  f.gemm_autotune = absl::GetFlag(FLAGS_gemm_autotune);
  f.steps = absl::GetFlag(FLAGS_steps);
  f.warmup = absl::GetFlag(FLAGS_warmup);
  f.gemm_size = absl::GetFlag(FLAGS_gemm_size);
  f.peak_tflops = absl::GetFlag(FLAGS_peak_tflops);
  f.profile = absl::GetFlag(FLAGS_profile);
  f.json = absl::GetFlag(FLAGS_json);
  for (size_t i = 1; i < positional.size(); ++i) {
    f.positional.push_back(positional[i]);
  }
  return f;
}

// The peak MFU is taken against: the flag, else the device's known one.
absl::StatusOr<double> PeakTflops(const BenchConfig& c,
                                  const BenchDevice& device) {
  if (c.peak_tflops > 0 || !c.cuda()) return c.peak_tflops;
  const std::optional<double> known = KnownPeakTflops(device.name());
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat("no known dense bf16 peak for \"", device.name(),
                     "\"; pass its peak as --peak_tflops=<TFLOP/s>"));
  }
  return *known;
}

// --profile: the device's kernel cost table, printed and kept for --json.
// `stepped`: the trainer's resolved options.
void MeasureCostTable(const BenchConfig& c, const TrainOptions& stepped,
                      const BenchDevice& device, BenchRun& run) {
  const Device where = c.cuda() ? Device::Cuda(device.index()) : Device::Cpu();
  const DType dtype =
      c.train.precision == Precision::kBf16 ? DType::kBF16 : DType::kF32;
  std::printf("kernel cost table (%s, %s): measuring...\n",
              device.name().c_str(), run.precision.c_str());
  std::fflush(stdout);
  KernelCosts costs = MeasureKernelCosts(
      where, dtype, [&] { device.Synchronize(); },
      run.peak_tflops > 0 ? run.peak_tflops * 1e12 : run.gemm.wall, 0,
      absl::StrCat("trellis-bench --profile on ", device.name(), " (",
                   run.device, ", ", run.precision, ")"));
  // The kernels ran slower inside the profiled step than alone: scale the
  // table to it, unless that step was the run's first (cold: pages not
  // yet touched, nothing warmed).
  if (stepped.steps < 2) {
    std::printf(
        "kernel cost table not scaled to the profiled step: it was the "
        "run's first (give --steps of 2 or more)\n");
  } else {
    const StepCalibration k = CalibrateToStep(stepped, run.kernels, costs);
    std::printf(
        "in the profiled step: GEMMs %.2f ms (table alone %.2f), attention "
        "%.2f ms (%.2f), AdamW %.2f ms (%.2f); rates scaled by %.3f, %.3f, "
        "%.3f\n",
        1e3 * k.gemm_measured, 1e3 * k.gemm_predicted,
        1e3 * k.attention_measured, 1e3 * k.attention_predicted,
        1e3 * k.adamw_measured, 1e3 * k.adamw_predicted, k.gemm, k.attention,
        k.adamw);
  }
  std::printf("%s", FormatKernelCosts(costs).c_str());
  run.kernel_costs = KernelCostsToJson(costs);
}

// --json: the summary.
absl::Status WriteJson(const BenchConfig& c, const BenchRun& run) {
  if (c.json.empty()) return absl::OkStatus();
  std::ofstream out(c.json, std::ios::trunc);
  out << SummaryJson(run).dump(2) << "\n";
  out.close();
  if (!out) {
    return absl::InternalError(
        absl::StrCat("--json=", c.json, ": cannot write the summary"));
  }
  return absl::OkStatus();
}

// With --gemm_autotune, what the timing of each GEMM shape found.
void PrintGemmTuning() {
  if (!GemmAutotune()) return;
  const GemmTuningStats tuned = GemmTuningSoFar();
  std::printf(
      "GEMM autotune: %lld shapes timed, %lld run another algorithm than "
      "the heuristic's first; one call of each: %.3f ms with the "
      "heuristic's first, %.3f ms as chosen\n",
      static_cast<long long>(tuned.problems),
      static_cast<long long>(tuned.changed), tuned.heuristic_ms,
      tuned.chosen_ms);
}

absl::Status Bench(const BenchFlags& flags) {
  TRELLIS_ASSIGN_OR_RETURN(BenchConfig c, ResolveBenchConfig(flags));
  TRELLIS_ASSIGN_OR_RETURN(BenchDevice device,
                           BenchDevice::Open(c.train.device));
  BenchRun run;
  TRELLIS_ASSIGN_OR_RETURN(run.peak_tflops, PeakTflops(c, device));
  TrainOptions& o = c.train;
  const int64_t windows = o.global_batch_size * (o.steps + 1);
  TRELLIS_ASSIGN_OR_RETURN(
      auto data,
      SyntheticData::Create(o.model.vocab_size, windows * o.model.seq_len + 1));
  o.data = data->path();

  run.gemm = device.MeasureGemm(c.gemm_size, o.precision == Precision::kBf16
                                                 ? DType::kBF16
                                                 : DType::kF32);
  // One rank: every group is a group of one, on the GPU too (DeviceGroups
  // needs MPI only for groups of several ranks), so the bench starts no MPI
  // runtime and runs on a GPU node without one.
  ParallelContext context = ParallelContext::Single();
  device.ResetPeakMemory();
  TRELLIS_ASSIGN_OR_RETURN(
      auto trainer, Trainer::Create(o, context.groups(), context.coord()));
  run.device = DeviceTypeName(o.device);
  run.device_name = device.name();
  run.precision = PrecisionName(o.precision);
  run.recompute = RecomputeName(o.recompute);
  run.attention = std::string(AttentionPathName(o.attention));
  run.preset = c.preset;
  run.model = trainer->options().model;
  run.micro_batch_size = o.micro_batch_size;
  run.global_batch_size = o.global_batch_size;
  run.warmup = c.warmup;
  run.memory_what = device.PeakMemoryWhat();
  std::printf("%s", FormatHeader(run).c_str());
  std::fflush(stdout);

  for (int64_t s = 0; s < o.steps; ++s) {
    const bool timed = s >= c.warmup;
    const bool profiled = c.profile && s + 1 == o.steps;
    std::optional<KernelProfiler> profiler;
    if (profiled) profiler.emplace();
    device.ResetPeakMemory();
    const auto start = Clock::now();
    const double cpu_start = CpuSeconds();
    TRELLIS_RETURN_IF_ERROR(trainer->Step().status());
    device.Synchronize();
    const double ms =
        std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    const double cpu_ms = 1e3 * (CpuSeconds() - cpu_start);
    if (profiled) run.kernels = profiler->Report();
    if (!timed) continue;
    run.steps.push_back(StepSample{s - c.warmup + 1, ms, cpu_ms,
                                   device.PeakMemoryBytes(), profiled});
    std::printf("%s\n", FormatStep(run, run.steps.back()).c_str());
    std::fflush(stdout);
  }
  std::printf("%s", FormatSummary(run).c_str());
  // On the GPU the device peak is mostly the arena (the memory plan plus
  // headroom); this is how much of it the steps used.
  const MemoryArena::Stats arena = trainer->arena().stats();
  std::printf(
      "memory arena: %s reserved, peak %s used; %zu allocations (%s) outside "
      "it\n",
      Readable(trainer->arena().capacity()).c_str(),
      Readable(arena.peak_in_use).c_str(), arena.fallbacks,
      Readable(arena.fallback_bytes).c_str());
  PrintGemmTuning();
  // The table's largest operands need the memory the trainer held.
  const TrainOptions stepped = trainer->options();
  trainer.reset();
  if (c.profile) MeasureCostTable(c, stepped, device, run);
  return WriteJson(c, run);
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "trellis-bench [--device=cpu|cuda --preset=gpt2-124m ...]: times a "
      "training step against the device's GEMM rate and peak");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const absl::Status status =
      trellis::Bench(trellis::FlagsFromCommandLine(positional));
  if (!status.ok()) {
    std::fprintf(stderr, "trellis-bench: error: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
