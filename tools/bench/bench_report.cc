#include "tools/bench/bench_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

// A FLOP rate in the device's customary unit: GFLOP/s on the CPU, TFLOP/s
// on a GPU.
std::string Rate(const BenchRun& run, double flops) {
  return run.cuda() ? absl::StrFormat("%.1f TFLOP/s", flops / 1e12)
                    : absl::StrFormat("%.1f GFLOP/s", flops / 1e9);
}

std::string Bytes(uint64_t bytes) {
  return bytes >= (uint64_t{1} << 30)
             ? absl::StrFormat("%.2f GiB", bytes / double(uint64_t{1} << 30))
             : absl::StrFormat("%.0f MiB", bytes / double(uint64_t{1} << 20));
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

uint64_t MaxMemory(const BenchRun& run) {
  uint64_t most = 0;
  for (const StepSample& s : run.steps) most = std::max(most, s.memory);
  return most;
}

nlohmann::json RatesJson(const BenchRun& run, double ms, double cpu_ms) {
  const StepRates r = RatesOf(run, ms, cpu_ms);
  nlohmann::json j = {{"ms", ms},
                      {"cpu_ms", cpu_ms},
                      {"tokens_per_s", r.tokens_per_s},
                      {"model_tflops", r.flops / 1e12},
                      {"model_tflops_cpu_time", r.cpu_flops / 1e12},
                      {"gemm_ratio", r.gemm_ratio},
                      {"mfu", nullptr}};
  if (run.peak_tflops > 0) j["mfu"] = r.mfu;
  // CPU time measures the work of a CPU run; on a GPU it is the host's.
  if (run.cuda()) j["model_tflops_cpu_time"] = nullptr;
  return j;
}

}  // namespace

StepRates RatesOf(const BenchRun& run, double ms, double cpu_ms) {
  StepRates r;
  const double tokens = run.tokens_per_step();
  const double flops = run.model.TrainingFlopsPerToken() * tokens;
  r.tokens_per_s = tokens / (ms / 1e3);
  r.flops = flops / (ms / 1e3);
  r.cpu_flops = cpu_ms > 0 ? flops / (cpu_ms / 1e3) : 0;
  r.mfu = run.peak_tflops > 0 ? r.flops / (run.peak_tflops * 1e12) : 0;
  r.gemm_ratio = run.gemm.wall > 0 ? r.flops / run.gemm.wall : 0;
  r.cpu_gemm_ratio =
      run.gemm.cpu_time > 0 ? r.cpu_flops / run.gemm.cpu_time : 0;
  return r;
}

std::string FormatHeader(const BenchRun& run) {
  std::string out = absl::StrFormat(
      "model %s (%d parameters), batch %d x %d tokens (micro batch %d), "
      "%.3g FLOPs/token (6N + 6LCT)\n",
      run.model.DebugString(), run.model.NumParameters(), run.global_batch_size,
      run.model.seq_len, run.micro_batch_size,
      run.model.TrainingFlopsPerToken());
  absl::StrAppendFormat(&out, "device %s (%s), %s, recompute %s%s%s\n",
                        run.device, run.device_name, run.precision,
                        run.recompute,
                        run.cuda() ? ", attention " + run.attention : "",
                        run.preset.empty() ? "" : ", preset " + run.preset);
  if (run.cuda()) {
    absl::StrAppendFormat(&out, "%s: %s\n", run.gemm.what,
                          Rate(run, run.gemm.wall));
  } else {
    absl::StrAppendFormat(&out, "%s: %s wall, %s cpu-time\n", run.gemm.what,
                          Rate(run, run.gemm.wall),
                          Rate(run, run.gemm.cpu_time));
  }
  if (run.peak_tflops > 0) {
    absl::StrAppendFormat(&out, "peak %.0f TFLOP/s (dense bf16), for MFU\n",
                          run.peak_tflops);
  }
  return out;
}

std::string FormatStep(const BenchRun& run, const StepSample& s) {
  const StepRates r = RatesOf(run, s.ms, s.cpu_ms);
  std::string out = absl::StrFormat("step %d: %.1f ms", s.step, s.ms);
  if (!run.cuda()) absl::StrAppendFormat(&out, " (%.1f ms cpu)", s.cpu_ms);
  absl::StrAppendFormat(&out, ", %.0f tokens/s, %s", r.tokens_per_s,
                        Rate(run, r.flops));
  if (run.peak_tflops > 0)
    absl::StrAppendFormat(&out, ", MFU %.1f%%", 100 * r.mfu);
  absl::StrAppendFormat(&out, ", %.1f%% of the GEMM, %s %s%s",
                        100 * r.gemm_ratio, run.memory_what, Bytes(s.memory),
                        s.profiled ? " (profiled)" : "");
  return out;
}

std::string FormatSummary(const BenchRun& run) {
  std::vector<double> ms, cpu_ms;
  for (const StepSample& s : run.steps) {
    ms.push_back(s.ms);
    cpu_ms.push_back(s.cpu_ms);
  }
  const double median_ms = Median(ms), median_cpu_ms = Median(cpu_ms);
  const StepRates r = RatesOf(run, median_ms, median_cpu_ms);
  std::string out;
  if (run.cuda()) {
    absl::StrAppendFormat(
        &out, "step: %.1f ms median of %d, %.0f tokens/s, %s\n", median_ms,
        run.steps.size(), r.tokens_per_s, Rate(run, r.flops));
  } else {
    absl::StrAppendFormat(
        &out,
        "step: %.1f ms wall (%.1f ms cpu) median of %d, %.0f tokens/s, "
        "%s wall, %s cpu-time\n",
        median_ms, median_cpu_ms, run.steps.size(), r.tokens_per_s,
        Rate(run, r.flops), Rate(run, r.cpu_flops));
  }
  if (run.peak_tflops > 0) {
    absl::StrAppendFormat(&out, "MFU %.1f%% of %.0f TFLOP/s; ", 100 * r.mfu,
                          run.peak_tflops);
  }
  if (run.cuda()) {
    absl::StrAppendFormat(&out, "ratio to the GEMM: %.1f%%",
                          100 * r.gemm_ratio);
  } else {
    absl::StrAppendFormat(&out, "ratio to sgemm: %.1f%% wall, %.1f%% cpu-time",
                          100 * r.gemm_ratio, 100 * r.cpu_gemm_ratio);
  }
  absl::StrAppendFormat(&out, "; %s %s\n", run.memory_what,
                        Bytes(MaxMemory(run)));
  if (!run.kernels.empty()) {
    const StepSample& last = run.steps.back();
    double kernel_ms = 0;
    for (const KernelTime& k : run.kernels) kernel_ms += k.ms;
    absl::StrAppendFormat(
        &out,
        "kernels of step %d (%.1f ms; the kernels cover %.1f%% of it):\n%s",
        last.step, last.ms, 100 * kernel_ms / last.ms,
        FormatKernelTimes(run.kernels));
  }
  return out;
}

nlohmann::json SummaryJson(const BenchRun& run) {
  nlohmann::json steps = nlohmann::json::array();
  std::vector<double> ms, cpu_ms;
  for (const StepSample& s : run.steps) {
    nlohmann::json j = RatesJson(run, s.ms, s.cpu_ms);
    j["step"] = s.step;
    j["peak_memory_bytes"] = s.memory;
    j["profiled"] = s.profiled;
    steps.push_back(j);
    ms.push_back(s.ms);
    cpu_ms.push_back(s.cpu_ms);
  }
  nlohmann::json kernels = nlohmann::json::array();
  double kernel_ms = 0;
  for (const KernelTime& k : run.kernels) kernel_ms += k.ms;
  for (const KernelTime& k : run.kernels) {
    kernels.push_back({{"name", k.name},
                       {"calls", k.calls},
                       {"ms", k.ms},
                       {"share", kernel_ms > 0 ? k.ms / kernel_ms : 0.0}});
  }
  const ModelConfig& m = run.model;
  nlohmann::json j = {
      {"device", run.device},
      {"device_name", run.device_name},
      {"precision", run.precision},
      {"recompute", run.recompute},
      {"attention", run.attention},
      {"preset", run.preset},
      {"model",
       {{"family", ModelFamilyName(m.family)},
        {"n_layer", m.n_layer},
        {"n_head", m.n_head},
        {"n_kv_heads", m.kv_heads()},
        {"d_model", m.d_model},
        {"ffn_hidden", m.family == ModelFamilyKind::kGpt2 ? 4 * m.d_model
                                                          : m.LlamaFfnHidden()},
        {"rope_theta", m.rope_theta},
        {"norm_eps", m.norm_eps},
        {"tie_embeddings", m.tie_embeddings},
        {"seq_len", m.seq_len},
        {"vocab_size", m.vocab_size},
        {"parameters", m.NumParameters()}}},
      {"micro_batch_size", run.micro_batch_size},
      {"global_batch_size", run.global_batch_size},
      {"tokens_per_step", run.tokens_per_step()},
      {"flops_per_token", m.TrainingFlopsPerToken()},
      {"flops_per_token_formula", "6N + 6LCT"},
      {"gemm",
       {{"what", run.gemm.what},
        {"tflops", run.gemm.wall / 1e12},
        {"tflops_cpu_time", run.cuda()
                                ? nlohmann::json(nullptr)
                                : nlohmann::json(run.gemm.cpu_time / 1e12)}}},
      {"peak_tflops", nullptr},
      {"warmup_steps", run.warmup},
      {"steps", steps},
      {"median", RatesJson(run, Median(ms), Median(cpu_ms))},
      {"peak_memory_bytes", MaxMemory(run)},
      {"peak_memory_what", run.memory_what},
      {"kernels", kernels}};
  if (run.peak_tflops > 0) j["peak_tflops"] = run.peak_tflops;
  if (!run.kernel_costs.is_null()) j["kernel_costs"] = run.kernel_costs;
  // What else shapes the model, where set: the head width, the q/k norm,
  // a mixture's experts (with the active parameters the FLOPs count).
  nlohmann::json& model = j["model"];
  if (m.head_dim > 0) model["head_dim"] = m.head_dim;
  if (m.qk_norm) model["qk_norm"] = true;
  if (m.family == ModelFamilyKind("moe")) {
    model["experts"] = m.experts;
    model["experts_per_token"] = m.experts_per_token;
    model["moe_ffn_hidden"] = m.moe_ffn_hidden;
    model["moe_first_dense"] = m.moe_first_dense;
    model["active_parameters"] = FamilyOf(m).ActiveParameters(m);
  }
  return j;
}

}  // namespace trellis
