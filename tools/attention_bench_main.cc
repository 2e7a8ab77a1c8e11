// trellis-attention-bench: the causal attention kernels alone, per path, at
// the shapes a GPT-2 preset trains with (trellis-bench's micro batch,
// seq_len 1024, head width 64), so that each path can be set against
// another and against PyTorch's scaled_dot_product_attention on the same
// device (scripts/torch_reference/sdpa_bench.py times the same shapes).
//
// For each shape and path it times the public AttentionForward alone and
// AttentionForward + AttentionBackward, --reps times each after --warmup
// untimed passes, and reports the median (CUDA: events on the compute
// stream around each repetition; CPU: the steady clock) and its rate. FLOPs
// count the two T×T products causally (half of the square): forward
// 4·B·H·T²·D / 2, backward 2.5 times that.
//
// Paths. On CUDA each call names its path (framework/kernels/
// attention_path.h): "cudnn", "mma" or "simt"; a path that cannot take a
// call falls back (cudnn to mma, mma to simt) and says so once on stderr.
// Every path runs one untimed forward and backward on the same inputs
// first, and the report gives its largest difference from the first path's
// results; two paths whose results agree to the bit ran the same kernels,
// which the report flags (the second one fell back). On the CPU the one
// path is "cpu".
//
// Scratch. On CUDA every shape's runs draw their scratch (cuDNN's
// workspace and float32 dQ accumulator, the tensor-core path's row sums)
// from a memory arena, as a training step does: without one each call
// would cudaMalloc and cudaFree it, which waits for the device and is not
// what training pays. A row notes any allocation the arena could not hold.
//
// Thread safety: a single-threaded program.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "framework/float16.h"
#include "framework/kernels/attention.h"
#include "framework/memory_arena.h"
#include "framework/rng.h"
#include "framework/status.h"
#include "tools/bench/bench_config.h"
#include "tools/bench/bench_device.h"

#if defined(TRELLIS_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "tools/options/program_help.h"
#endif

ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, paths, "",
          "comma-separated attention paths (default: every path the build "
          "offers: cpu on the CPU; simt, mma and, where built, cudnn on CUDA)");
ABSL_FLAG(std::string, shapes, "gpt2-124m,gpt2-350m,gpt2-774m",
          "comma-separated shapes: a trellis-bench preset (its micro batch "
          "and heads, seq_len 1024, head width 64) or BxTxHxD");
ABSL_FLAG(std::string, dtype, "",
          "bf16 or fp32 (default: bf16 on cuda, fp32 on cpu)");
ABSL_FLAG(int64_t, warmup, 3, "untimed passes per shape and path");
ABSL_FLAG(int64_t, reps, 20, "timed passes per shape and path (median)");
ABSL_FLAG(bool, info, false,
          "print the device, driver and runtime versions and exit");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this file");

namespace trellis {
namespace {

using Clock = std::chrono::steady_clock;

struct Shape4 {
  std::string name;   // the preset, or "custom"
  std::string label;  // name and B×T×H×D, for tables
  int64_t B = 0, T = 0, H = 0, D = 0;
  double ForwardFlops() const { return 2.0 * B * H * T * T * D; }
};

struct PathResult {
  std::string path;
  double forward_ms = 0, forward_backward_ms = 0;
  double out_diff = 0, grad_diff = 0;  // vs the first path, relative
  bool same_as_first = false;          // bit-identical results
  bool finite = true;
  size_t outside_arena = 0;  // scratch allocations the arena could not hold
};

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// A preset's attention shape (through trellis-bench's own preset table), or
// "BxTxHxD".
absl::StatusOr<Shape4> ParseShape(const std::string& text,
                                  const std::string& device) {
  const std::vector<std::string> parts = absl::StrSplit(text, 'x');
  Shape4 s;
  s.name = "custom";
  if (parts.size() == 4 && absl::SimpleAtoi(parts[0], &s.B) &&
      absl::SimpleAtoi(parts[1], &s.T) && absl::SimpleAtoi(parts[2], &s.H) &&
      absl::SimpleAtoi(parts[3], &s.D)) {
    if (s.B < 1 || s.T < 1 || s.H < 1 || s.D < 1 || s.D > 128) {
      return Bad(absl::StrCat("--shapes: ", text,
                              " needs B, T, H >= 1 and 1 <= D <= 128"));
    }
    return s;
  }
  BenchFlags flags;
  flags.device = device;
  flags.preset = text;
  flags.seq_len = 1024;
  absl::StatusOr<BenchConfig> config = ResolveBenchConfig(flags);
  if (!config.ok()) {
    return Bad(absl::StrCat(
        "--shapes: '", text,
        "' is neither BxTxHxD nor a preset: ", config.status().message()));
  }
  const ModelConfig& m = config->train.model;
  s.name = text;
  s.B = config->train.micro_batch_size;
  s.T = m.seq_len;
  s.H = m.n_head;
  s.D = m.HeadDim();
  return s;
}

std::vector<std::string> DefaultPaths(bool cuda) {
  if (!cuda) return {"cpu"};
  return {"simt", "mma", "cudnn"};
}

// Random values in [-1, 1) of `dtype` on `device`.
Tensor RandomTensor(const Shape& shape, DType dtype, Device device,
                    uint64_t stream) {
  Tensor host = Tensor::Empty(shape, DType::kF32);
  float* p = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    p[i] = static_cast<float>(2 * UniformAt(5, stream, i) - 1);
  }
  Tensor typed = Tensor::Empty(shape, dtype);
  ConvertElements(p, DType::kF32, typed.raw(), dtype, host.numel());
  return typed.To(device);
}

// float32 host copy of a tensor of any floating dtype on any device.
std::vector<float> HostFloats(const Tensor& t) {
  const Tensor host = t.To(Device::Cpu());
  std::vector<float> v(t.numel());
  ConvertElements(host.raw(), host.dtype(), v.data(), DType::kF32, t.numel());
  return v;
}

// max |a - b| / max |b|.
double RelativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double{a[i]} - b[i]));
    scale = std::max(scale, std::abs(double{b[i]}));
  }
  return diff / scale;
}

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(),
                     [](float x) { return std::isfinite(x); });
}

// Milliseconds of each of `reps` runs of `fn`, timed on the device.
std::vector<double> TimeRuns(const BenchDevice& device, int64_t reps,
                             const std::function<void()>& fn) {
  std::vector<double> ms;
#if defined(TRELLIS_WITH_CUDA)
  if (device.cuda()) {
    CudaDeviceGuard guard(device.index());
    cudaEvent_t start = nullptr, stop = nullptr;
    TRELLIS_CUDA_CHECK(cudaEventCreate(&start));
    TRELLIS_CUDA_CHECK(cudaEventCreate(&stop));
    for (int64_t r = 0; r < reps; ++r) {
      TRELLIS_CUDA_CHECK(cudaEventRecord(start, ComputeStream()));
      fn();
      TRELLIS_CUDA_CHECK(cudaEventRecord(stop, ComputeStream()));
      TRELLIS_CUDA_CHECK(cudaEventSynchronize(stop));
      float elapsed = 0;
      TRELLIS_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
      ms.push_back(elapsed);
    }
    TRELLIS_CUDA_CHECK(cudaEventDestroy(start));
    TRELLIS_CUDA_CHECK(cudaEventDestroy(stop));
    return ms;
  }
#endif
  for (int64_t r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    fn();
    device.Synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start)
                     .count());
  }
  return ms;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Buffers {
  Tensor qkv, dout, out, saved, dqkv;
};

Buffers MakeBuffers(const Shape4& s, DType dtype, Device device) {
  const int64_t C = s.H * s.D;
  Buffers b;
  b.qkv = RandomTensor({s.B, s.T, 3 * C}, dtype, device, 1);
  b.dout = RandomTensor({s.B, s.T, C}, dtype, device, 2);
  b.out = Tensor::Empty({s.B, s.T, C}, dtype, device);
  b.saved = Tensor::Empty(AttentionSavedShape(device, s.B, s.T, s.H),
                          DType::kF32, device);
  b.dqkv = Tensor::Zeros({s.B, s.T, 3 * C}, dtype, device);
  return b;
}

// One path on one shape: a checked pass, then the timings.
PathResult RunPath(const BenchDevice& device, const Shape4& s,
                   const std::string& path, Buffers& b, int64_t warmup,
                   int64_t reps, std::vector<float>* first_out,
                   std::vector<float>* first_grad) {
  // "cpu" is the one CPU kernel, which takes any path and ignores it.
  const AttentionPath kernels =
      path == "cpu" ? kDefaultAttentionPath : ParseAttentionPath(path).value();
  PathResult r;
  r.path = path;
  const auto forward = [&] {
    AttentionForward(b.qkv, s.H, b.out, b.saved, kernels);
  };
  const auto backward = [&] {
    // As the decoder block calls it: dqkv overwritten, not added to.
    AttentionBackward(b.dout, b.qkv, Tensor(), b.out, b.saved, s.H, s.H, b.dqkv,
                      kernels, GradWrite::kWrite);
  };
  b.out.Fill(std::nan(""));
  b.dqkv.Fill(std::nan(""));  // Backward must write every element.
  forward();
  backward();
  const std::vector<float> out = HostFloats(b.out);
  const std::vector<float> grad = HostFloats(b.dqkv);
  r.finite = AllFinite(out) && AllFinite(grad);
  if (first_out->empty()) {
    *first_out = out;
    *first_grad = grad;
  } else {
    r.out_diff = RelativeDiff(out, *first_out);
    r.grad_diff = RelativeDiff(grad, *first_grad);
    r.same_as_first = out == *first_out && grad == *first_grad;
  }
  for (int64_t i = 0; i < warmup; ++i) {
    forward();
    backward();
  }
  r.forward_ms = Median(TimeRuns(device, reps, forward));
  r.forward_backward_ms = Median(TimeRuns(device, reps, [&] {
    forward();
    backward();
  }));
  return r;
}

std::string Row(const Shape4& s, const PathResult& r, const std::string& ref) {
  const double f = s.ForwardFlops();
  std::string note = r.finite ? "" : "NOT FINITE";
  if (r.same_as_first) {
    note = absl::StrCat("same results as ", ref, ": path not in this build?");
  }
  if (r.outside_arena > 0) {
    absl::StrAppend(&note, note.empty() ? "" : "; ", r.outside_arena,
                    " allocations outside the arena (timings include "
                    "cudaMalloc/cudaFree)");
  }
  const std::string diff =
      r.path == ref
          ? "—"
          : absl::StrFormat("%.1e", std::max(r.out_diff, r.grad_diff));
  return absl::StrFormat("| %s | %s | %.3f | %.3g | %.3f | %.3g | %s | %s |",
                         s.label, r.path, r.forward_ms,
                         f / (1e9 * r.forward_ms), r.forward_backward_ms,
                         3.5 * f / (1e9 * r.forward_backward_ms), diff, note);
}

nlohmann::json PathJson(const Shape4& s, const PathResult& r) {
  const double f = s.ForwardFlops();
  return {{"path", r.path},
          {"forward_ms", r.forward_ms},
          {"forward_backward_ms", r.forward_backward_ms},
          {"forward_tflops", f / (1e9 * r.forward_ms)},
          {"forward_backward_tflops", 3.5 * f / (1e9 * r.forward_backward_ms)},
          {"out_diff_vs_first", r.out_diff},
          {"grad_diff_vs_first", r.grad_diff},
          {"same_as_first", r.same_as_first},
          {"finite", r.finite},
          {"allocations_outside_arena", r.outside_arena}};
}

std::string VersionLine(const BenchDevice& device) {
  std::string line = absl::StrCat("device: ", device.name());
#if defined(TRELLIS_WITH_CUDA)
  if (device.cuda()) {
    int driver = 0, runtime = 0;
    TRELLIS_CUDA_CHECK(cudaDriverGetVersion(&driver));
    TRELLIS_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    absl::StrAppend(&line, " (", CudaDeviceDescription(device.index()),
                    "); CUDA driver API ", driver / 1000, ".",
                    driver % 1000 / 10, ", runtime ", runtime / 1000, ".",
                    runtime % 1000 / 10);
  }
#endif
  return line;
}

struct Options {
  std::string device;
  std::vector<std::string> paths;
  std::vector<Shape4> shapes;
  DType dtype = DType::kF32;
  int64_t warmup = 0, reps = 0;
  std::string json;
};

absl::StatusOr<Options> ReadFlags() {
  Options o;
  o.device = absl::GetFlag(FLAGS_device);
  if (o.device != "cpu" && o.device != "cuda") {
    return Bad(absl::StrCat("--device=", o.device, " is not cpu or cuda"));
  }
  const bool cuda = o.device == "cuda";
  const std::string paths = absl::GetFlag(FLAGS_paths);
  o.paths = paths.empty() ? DefaultPaths(cuda)
                          : absl::StrSplit(paths, ',', absl::SkipEmpty());
  for (const std::string& p : o.paths) {
    if (cuda ? !ParseAttentionPath(p).ok() : p != "cpu") {
      return Bad(absl::StrCat("--paths: '", p,
                              "' is not a path of --device=", o.device));
    }
  }
  const std::vector<std::string> shapes =
      absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',', absl::SkipEmpty());
  for (const std::string& text : shapes) {
    TRELLIS_ASSIGN_OR_RETURN(Shape4 s, ParseShape(text, o.device));
    o.shapes.push_back(s);
  }
  std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype.empty()) dtype = cuda ? "bf16" : "fp32";
  if (dtype != "bf16" && dtype != "fp32") {
    return Bad(absl::StrCat("--dtype=", dtype, " is not bf16 or fp32"));
  }
  o.dtype = dtype == "bf16" ? DType::kBF16 : DType::kF32;
  if (!cuda && o.dtype == DType::kBF16) {
    return Bad("--dtype=bf16 needs --device=cuda; use --dtype=fp32 on cpu");
  }
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.reps = absl::GetFlag(FLAGS_reps);
  if (o.warmup < 0 || o.reps < 1) {
    return Bad("--warmup must be at least 0 and --reps at least 1");
  }
  if (o.shapes.empty() || o.paths.empty()) {
    return Bad("--shapes and --paths must name at least one each");
  }
  o.json = absl::GetFlag(FLAGS_json);
  return o;
}

absl::Status Run() {
  TRELLIS_ASSIGN_OR_RETURN(Options o, ReadFlags());
  TRELLIS_ASSIGN_OR_RETURN(
      BenchDevice device,
      BenchDevice::Open(o.device == "cuda" ? DeviceType::kCUDA
                                           : DeviceType::kCPU));
  std::printf("%s\n", VersionLine(device).c_str());
  if (absl::GetFlag(FLAGS_info)) return absl::OkStatus();
  const Device where =
      device.cuda() ? Device::Cuda(device.index()) : Device::Cpu();
  std::printf(
      "attention alone, %s, causal; median of %lld after %lld warm-up "
      "passes; TFLOP/s count the causal half\n\n",
      DTypeName(o.dtype), static_cast<long long>(o.reps),
      static_cast<long long>(o.warmup));
  std::printf(
      "| shape (B×T×H×D) | path | fwd ms | fwd TFLOP/s | fwd+bwd ms | "
      "fwd+bwd TFLOP/s | max diff vs %s | note |\n"
      "|---|---|---|---|---|---|---|---|\n",
      o.paths.front().c_str());
  nlohmann::json shapes = nlohmann::json::array();
  for (Shape4& s : o.shapes) {
    s.label =
        absl::StrCat(s.name, " (", s.B, "×", s.T, "×", s.H, "×", s.D, ")");
    Buffers b = MakeBuffers(s, o.dtype, where);
    std::vector<float> first_out, first_grad;
    nlohmann::json paths = nlohmann::json::array();
    // Scratch for one forward and backward: well above the float32 dQ
    // accumulator and cuDNN's workspace (a few times the qkv's float32
    // bytes), as the trainer's plan holds it.
    std::shared_ptr<MemoryArena> arena;
    if (device.cuda()) {
      const size_t qkv_f32 = static_cast<size_t>(b.qkv.numel()) * 4;
      arena = MemoryArena::Create(4 * qkv_f32 + (size_t{256} << 20), where);
    }
    for (const std::string& path : o.paths) {
      std::optional<ArenaScope> scope;
      if (arena != nullptr) scope.emplace(arena);
      const size_t before = arena != nullptr ? arena->stats().fallbacks : 0;
      PathResult r = RunPath(device, s, path, b, o.warmup, o.reps, &first_out,
                             &first_grad);
      if (arena != nullptr) r.outside_arena = arena->stats().fallbacks - before;
      std::printf("%s\n", Row(s, r, o.paths.front()).c_str());
      std::fflush(stdout);
      paths.push_back(PathJson(s, r));
    }
    shapes.push_back({{"name", s.name},
                      {"label", s.label},
                      {"B", s.B},
                      {"T", s.T},
                      {"H", s.H},
                      {"D", s.D},
                      {"forward_flops", s.ForwardFlops()},
                      {"paths", paths}});
  }
  if (!o.json.empty()) {
    const nlohmann::json j = {{"device", o.device},
                              {"device_name", device.name()},
                              {"dtype", DTypeName(o.dtype)},
                              {"causal", true},
                              {"warmup", o.warmup},
                              {"reps", o.reps},
                              {"shapes", shapes}};
    std::ofstream out(o.json, std::ios::trunc);
    out << j.dump(2) << "\n";
    out.close();
    if (!out) {
      return Bad(absl::StrCat("--json=", o.json, ": cannot write the file"));
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "trellis-attention-bench [--device=cuda --paths=simt,mma "
      "--shapes=gpt2-124m,8x1024x12x64 --json=FILE]: times causal attention "
      "forward and forward+backward per path");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr,
                 "trellis-attention-bench: error: unexpected argument '%s'; "
                 "it takes only flags\n",
                 positional[1]);
    return 1;
  }
  const absl::Status status = trellis::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "trellis-attention-bench: error: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
