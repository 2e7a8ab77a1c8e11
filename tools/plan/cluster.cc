#include "tools/plan/cluster.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "framework/device_info.h"
#include "framework/kernels/attention.h"
#include "framework/status.h"
#include "framework/text_file.h"
#include "tools/plan/kernel_cost_calibrate.h"
#include "tools/plan/kernel_cost_measure.h"
#include "tools/plan/pass_measure.h"
#include "tools/trainer/health/peak_flops.h"

namespace trellis {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;
constexpr double kMicro = 1e-6;
// Beyond these a field is a typo: every figure (GiB, TFLOP/s, GB/s, µs)
// stays far below kMaxNumber, so its value in bytes, FLOP/s or seconds is
// finite; every count stays at most kMaxCount, so world() fits in int64.
constexpr double kMaxNumber = 1e15;
constexpr int64_t kMaxCount = int64_t{1} << 20;

absl::Status Bad(const std::string& where, const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("cluster ", where, ": ", message));
}

// The number in `json[field]`, or an error naming the field.
absl::StatusOr<double> Number(const nlohmann::json& json,
                              const std::string& where, const char* field,
                              const char* what) {
  if (!json.contains(field)) {
    return Bad(where,
               absl::StrCat("field \"", field, "\" is missing (", what, ")"));
  }
  const nlohmann::json& v = json.at(field);
  if (!v.is_number()) {
    return Bad(where, absl::StrCat("field \"", field, "\" must be a number (",
                                   what, "), not ", v.dump()));
  }
  const double d = v.get<double>();
  if (!(d >= 0) || !(d <= kMaxNumber)) {
    return Bad(where,
               absl::StrCat("field \"", field, "\" is ", v.dump(),
                            "; it must be ≥ 0 and at most 1e15 (", what, ")"));
  }
  return d;
}

// A positive number (sizes, rates, counts).
absl::StatusOr<double> Positive(const nlohmann::json& json,
                                const std::string& where, const char* field,
                                const char* what) {
  TRELLIS_ASSIGN_OR_RETURN(double d, Number(json, where, field, what));
  if (d <= 0) {
    return Bad(where, absl::StrCat("field \"", field, "\" is ", d,
                                   "; it must be positive (", what, ")"));
  }
  return d;
}

absl::StatusOr<double> Efficiency(const nlohmann::json& json,
                                  const std::string& where, const char* field,
                                  const char* what) {
  TRELLIS_ASSIGN_OR_RETURN(double d, Positive(json, where, field, what));
  if (d > 1) {
    return Bad(where, absl::StrCat("field \"", field, "\" is ", d,
                                   "; it must lie in (0, 1] (", what, ")"));
  }
  return d;
}

absl::StatusOr<int64_t> Count(const nlohmann::json& json,
                              const std::string& where, const char* field,
                              const char* what) {
  TRELLIS_ASSIGN_OR_RETURN(double d, Positive(json, where, field, what));
  if (d > static_cast<double>(kMaxCount)) {
    return Bad(where, absl::StrCat("field \"", field, "\" is ", d,
                                   "; it must be at most ", kMaxCount, " (",
                                   what, ")"));
  }
  if (d != static_cast<double>(static_cast<int64_t>(d))) {
    return Bad(where, absl::StrCat("field \"", field, "\" is ", d,
                                   "; it must be a whole number (", what, ")"));
  }
  return static_cast<int64_t>(d);
}

// The string in `json[field]`, or `fallback` when it is absent.
absl::StatusOr<std::string> Text(const nlohmann::json& json,
                                 const std::string& where, const char* field,
                                 const std::string& fallback) {
  if (!json.contains(field)) return fallback;
  const nlohmann::json& v = json.at(field);
  if (!v.is_string()) {
    return Bad(where, absl::StrCat("field \"", field,
                                   "\" must be a string, not ", v.dump()));
  }
  return v.get<std::string>();
}

// The GPU presets: per GPU figures, nodes of 8 with NVLink, one 400 Gb/s
// InfiniBand NIC per GPU. Sources and reasoning: docs/planning.md.
ClusterSpec GpuNode(const std::string& name, int64_t nodes, double memory_gib,
                    double hbm_tb_per_s) {
  ClusterSpec c;
  c.name = name;
  c.device = DeviceType::kCUDA;
  c.devices_per_node = 8;
  c.nodes = nodes;
  c.memory_bytes = memory_gib * kGiB;
  c.reserved_bytes = 2 * kGiB;
  c.peak_flops = 989e12;  // dense bf16, SXM
  c.gemm_efficiency = 0.70;
  c.attention_efficiency = 0.50;
  c.memory_bandwidth = 0.8 * hbm_tb_per_s * 1e12;
  // NVLink 4: 450 GB/s each way per GPU; NCCL reaches ~80% of it.
  c.intra = {360 * kGB, 5 * kMicro};
  // ConnectX-7 NDR, 400 Gb/s = 50 GB/s per GPU; ~90% of it.
  c.inter = {45 * kGB, 10 * kMicro};
  c.source = "preset (datasheet figures, docs/planning.md)";
  return c;
}

absl::StatusOr<ClusterSpec> Preset(const std::string& name) {
  if (name == "cpu") return MeasureCpuCluster();
  for (const auto& [prefix, memory_gib, hbm] :
       {std::tuple<const char*, double, double>{"h100-sxm-8x", 79.6, 3.35},
        {"h200-8x", 140.0, 4.8}}) {
    absl::string_view rest = name;
    if (!absl::ConsumePrefix(&rest, prefix)) continue;
    int64_t nodes = 0;
    if (!absl::SimpleAtoi(rest, &nodes) || nodes < 1 || nodes > kMaxCount) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cluster=", name, ": the number of nodes after '",
                       prefix, "' must be a positive integer up to ", kMaxCount,
                       ", e.g. ", prefix, "4"));
    }
    return GpuNode(name, nodes, memory_gib, hbm);
  }
  return absl::NotFoundError(absl::StrCat(
      "--cluster=", name,
      " is neither a preset (h100-sxm-8xN, h200-8xN, cpu) nor a .json file"));
}

// The optional "kernel_costs": a table inline, or a file named relative to
// the cluster file's directory; it must be of the cluster's device.
absl::Status ReadKernelCosts(const nlohmann::json& j, const std::string& where,
                             ClusterSpec& c) {
  if (!j.contains("kernel_costs")) return absl::OkStatus();
  const nlohmann::json& v = j.at("kernel_costs");
  absl::StatusOr<KernelCosts> costs;
  if (v.is_string()) {
    std::filesystem::path path = v.get<std::string>();
    if (path.is_relative()) {
      path = std::filesystem::path(where).parent_path() / path;
    }
    costs = LoadKernelCosts(path.string());
  } else if (v.is_object()) {
    costs = KernelCostsFromJson(v, absl::StrCat(where, " (inline)"));
  } else {
    return Bad(where,
               "field \"kernel_costs\" must name a kernel cost table file "
               "(trellis-bench --profile --json=FILE) or hold one");
  }
  if (!costs.ok()) {
    return Bad(where, absl::StrCat("field \"kernel_costs\": ",
                                   costs.status().message()));
  }
  const std::string device = c.device == DeviceType::kCPU ? "cpu" : "cuda";
  if (costs->device != device) {
    return Bad(where,
               absl::StrCat("field \"kernel_costs\" was measured on ",
                            costs->device, " but the cluster runs on ", device,
                            "; measure it on the cluster's "
                            "device"));
  }
  c.kernel_costs = std::make_shared<const KernelCosts>(*std::move(costs));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterSpec> ClusterFromJson(const nlohmann::json& j,
                                            const std::string& where) {
  if (!j.is_object()) return Bad(where, "must be a JSON object");
  ClusterSpec c;
  TRELLIS_ASSIGN_OR_RETURN(c.name, Text(j, where, "name", where));
  TRELLIS_ASSIGN_OR_RETURN(const std::string device,
                           Text(j, where, "device", "cuda"));
  if (device != "cuda" && device != "cpu") {
    return Bad(where, absl::StrCat("field \"device\" is \"", device,
                                   "\"; it must be \"cuda\" or \"cpu\""));
  }
  c.device = device == "cpu" ? DeviceType::kCPU : DeviceType::kCUDA;
  TRELLIS_ASSIGN_OR_RETURN(
      c.devices_per_node,
      Count(j, where, "gpus_per_node", "devices per node, e.g. 8"));
  TRELLIS_ASSIGN_OR_RETURN(c.nodes, Count(j, where, "nodes", "node count"));
  TRELLIS_ASSIGN_OR_RETURN(double memory,
                           Positive(j, where, "memory_gib", "GiB per device"));
  c.memory_bytes = memory * kGiB;
  double reserved = 0;
  if (j.contains("reserved_gib")) {
    TRELLIS_ASSIGN_OR_RETURN(
        reserved, Number(j, where, "reserved_gib", "GiB libraries take"));
  }
  c.reserved_bytes = reserved * kGiB;
  TRELLIS_ASSIGN_OR_RETURN(
      double tflops, Positive(j, where, "peak_tflops",
                              "dense bf16 TFLOP/s per device (fp32 on cpu)"));
  c.peak_flops = tflops * 1e12;
  TRELLIS_ASSIGN_OR_RETURN(
      c.gemm_efficiency,
      Efficiency(j, where, "gemm_efficiency", "share of peak GEMMs reach"));
  TRELLIS_ASSIGN_OR_RETURN(c.attention_efficiency,
                           Efficiency(j, where, "attention_efficiency",
                                      "share of peak attention reaches"));
  TRELLIS_ASSIGN_OR_RETURN(
      double hbm, Positive(j, where, "memory_bandwidth_gbs",
                           "device memory GB/s element-wise kernels reach"));
  c.memory_bandwidth = hbm * kGB;
  struct LinkField {
    LinkSpec* link;
    const char* bandwidth;
    const char* latency;
  };
  for (const LinkField& f : {LinkField{&c.intra, "intra_node_bandwidth_gbs",
                                       "intra_node_latency_us"},
                             LinkField{&c.inter, "inter_node_bandwidth_gbs",
                                       "inter_node_latency_us"}}) {
    TRELLIS_ASSIGN_OR_RETURN(
        double gbs, Positive(j, where, f.bandwidth, "GB/s one device sends"));
    TRELLIS_ASSIGN_OR_RETURN(
        double us, Number(j, where, f.latency, "microseconds per hop"));
    *f.link = LinkSpec{gbs * kGB, us * kMicro};
  }
  if (c.reserved_bytes >= c.memory_bytes) {
    return Bad(where, "field \"reserved_gib\" must be below \"memory_gib\"");
  }
  if (j.contains("async_collectives")) {
    if (!j.at("async_collectives").is_boolean()) {
      return Bad(where, "field \"async_collectives\" must be true or false");
    }
    c.async_collectives = j.at("async_collectives").get<bool>();
  } else {
    c.async_collectives = c.device == DeviceType::kCUDA;
  }
  if (j.contains("split_backward_ratio")) {
    TRELLIS_ASSIGN_OR_RETURN(
        c.split_backward_ratio,
        Positive(j, where, "split_backward_ratio",
                 "zero-bubble B + W over the fused backward, e.g. 1.05"));
  }
  TRELLIS_RETURN_IF_ERROR(ReadKernelCosts(j, where, c));
  TRELLIS_ASSIGN_OR_RETURN(
      c.source, Text(j, where, "source", absl::StrCat("file ", where)));
  return c;
}

nlohmann::json ClusterToJson(const ClusterSpec& c) {
  nlohmann::json j = {{"name", c.name},
                      {"device", c.device == DeviceType::kCPU ? "cpu" : "cuda"},
                      {"gpus_per_node", c.devices_per_node},
                      {"nodes", c.nodes},
                      {"memory_gib", c.memory_bytes / kGiB},
                      {"reserved_gib", c.reserved_bytes / kGiB},
                      {"peak_tflops", c.peak_flops / 1e12},
                      {"gemm_efficiency", c.gemm_efficiency},
                      {"attention_efficiency", c.attention_efficiency},
                      {"memory_bandwidth_gbs", c.memory_bandwidth / kGB},
                      {"intra_node_bandwidth_gbs", c.intra.bandwidth / kGB},
                      {"intra_node_latency_us", c.intra.latency / kMicro},
                      {"inter_node_bandwidth_gbs", c.inter.bandwidth / kGB},
                      {"inter_node_latency_us", c.inter.latency / kMicro},
                      {"async_collectives", c.async_collectives},
                      {"split_backward_ratio", c.split_backward_ratio},
                      {"source", c.source}};
  if (c.kernel_costs) j["kernel_costs"] = KernelCostsToJson(*c.kernel_costs);
  return j;
}

absl::StatusOr<ClusterSpec> LoadCluster(const std::string& name_or_path) {
  if (!absl::EndsWith(name_or_path, ".json")) return Preset(name_or_path);
  absl::StatusOr<std::string> text = ReadTextFile(name_or_path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("--cluster: ", text.status().message()));
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) {
    return Bad(name_or_path, "is not valid JSON");
  }
  return ClusterFromJson(j, name_or_path);
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// The causal attention kernel's FLOP rate on one core: forward and
// backward of (B=2, T=256, H=4, D=32), counted as the plan counts them.
double MeasureCpuAttention() {
  constexpr int64_t kB = 2, kT = 256, kH = 4, kD = 32;
  Tensor qkv = Tensor::Zeros({kB, kT, 3 * kH * kD}, DType::kF32);
  for (int64_t i = 0; i < qkv.numel(); ++i) {
    qkv.data<float>()[i] = 0.01f * static_cast<float>(i % 7);
  }
  Tensor out = Tensor::Zeros({kB, kT, kH * kD}, DType::kF32);
  Tensor saved = Tensor::Zeros(AttentionSavedShape(Device::Cpu(), kB, kT, kH),
                               DType::kF32);
  Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kF32);
  AttentionForward(qkv, kH, out, saved);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  AttentionForward(qkv, kH, out, saved);
  AttentionBackward(out, qkv, out, saved, kH, dqkv);
  // Forward 2·T·H·D per token (the causal half of QKᵀ and AV), backward 2×.
  const double flops = 3.0 * 2.0 * kB * kT * kT * kH * kD;
  return flops / SecondsSince(start);
}

// Bytes per second of a 32 MiB copy (read + write counted once each).
double MeasureCopyBandwidth() {
  constexpr size_t kBytes = 32u << 20;
  std::vector<char> a(kBytes, 1), b(kBytes, 0);
  std::memcpy(b.data(), a.data(), kBytes);  // warm-up: touch the pages
  constexpr int kReps = 4;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kReps; ++i) {
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(),
                kBytes);
  }
  return 2.0 * kReps * kBytes / SecondsSince(start);
}

// The small chunk of two GPT-2 blocks whose passes are timed: for a
// zero-bubble schedule's B + W over the fused backward, and the kernel cost
// table's factor to real passes.
TrainOptions SplitBackwardModel() {
  TrainOptions o;
  o.model.n_layer = 2;
  o.model.n_head = 4;
  o.model.d_model = 128;
  o.model.seq_len = 64;
  o.model.vocab_size = 257;
  o.micro_batch_size = 2;
  return o;
}

}  // namespace

ClusterSpec MeasureCpuCluster() {
  ClusterSpec c;
  c.name = "cpu";
  c.device = DeviceType::kCPU;
  c.devices_per_node = std::max(1u, std::thread::hardware_concurrency());
  c.nodes = 1;
  c.memory_bytes = static_cast<double>(DeviceMemoryAvailable(Device::Cpu())) /
                   static_cast<double>(c.devices_per_node);
  const PeakFlops gemm = PeakFlopsOf(Device::Cpu(), 0);
  c.peak_flops = gemm.flops_per_s;
  // The peak is the model-sized GEMM's own rate.
  c.gemm_efficiency = 1.0;
  c.attention_efficiency =
      std::clamp(MeasureCpuAttention() / c.peak_flops, 1e-3, 1.0);
  c.memory_bandwidth = MeasureCopyBandwidth();
  // Open MPI's shared-memory transport copies each message twice (into a
  // shared segment and out); its latency is a few microseconds.
  c.intra = {c.memory_bandwidth / 2 / 2, 5 * kMicro};
  c.inter = c.intra;
  c.async_collectives = false;
  const TrainOptions blocks = SplitBackwardModel();
  const PassTimes passes = MeasurePassTimes(blocks, 9);
  c.split_backward_ratio = passes.SplitRatio();
  // The table, scaled to the same blocks' measured passes (kernels alone
  // keep their operands in cache; inside a pass they do not).
  KernelCosts costs = MeasureKernelCosts(
      Device::Cpu(), DType::kF32, [] {}, c.peak_flops, c.memory_bandwidth,
      "measured on this machine's core when the cpu preset loaded");
  const double factor = CalibrateToPasses(blocks, passes, costs);
  c.kernel_costs = std::make_shared<const KernelCosts>(std::move(costs));
  c.source = absl::StrFormat(
      "measured on this machine: %s; attention %.0f%% of it; copies %.1f "
      "GB/s; split backward %.3f of the fused one; kernel costs by shape "
      "measured, scaled x%.3f to two blocks' passes",
      gemm.what, 100 * c.attention_efficiency, c.memory_bandwidth / kGB,
      c.split_backward_ratio, factor);
  return c;
}

}  // namespace trellis
