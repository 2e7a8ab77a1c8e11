// ClusterSpec: the machines a layout is planned for — how many devices,
// how much memory each has, how fast they compute and how fast they talk —
// read from a preset name or a JSON file (docs/planning.md lists the fields
// and the sources of the presets' figures).
//
//   TRELLIS_ASSIGN_OR_RETURN(ClusterSpec c, LoadCluster("h100-sxm-8x16"));
//
// Presets: "h100-sxm-8xN" and "h200-8xN" (N nodes of 8 GPUs, NVLink inside
// a node, 8×400 Gb/s InfiniBand between nodes) and "cpu" (this machine: one
// device per core, rates measured when the preset is loaded).
//
// Invariants of a loaded spec: every count in [1, 2^20], every rate and
// size > 0 and finite, efficiencies in (0, 1], latencies ≥ 0 and finite.
// Thread safety: the functions are safe to call from any thread ("cpu"
// measures on the calling thread).
#ifndef TRELLIS_TOOLS_PLAN_CLUSTER_H_
#define TRELLIS_TOOLS_PLAN_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "tools/options/option_types.h"
#include "tools/plan/kernel_costs.h"

namespace trellis {

// One link class (inside a node, or between nodes): α-β model, a message
// of B bytes over one hop takes latency + B / bandwidth.
struct LinkSpec {
  double bandwidth = 0;  // bytes/s one device sends (one direction)
  double latency = 0;    // seconds per hop
};

struct ClusterSpec {
  std::string name;
  DeviceType device = DeviceType::kCUDA;
  int64_t devices_per_node = 0;
  int64_t nodes = 0;
  double memory_bytes = 0;          // usable memory of one device
  double reserved_bytes = 0;        // of it, taken by libraries (context, NCCL)
  double peak_flops = 0;            // dense FLOP/s of one device (bf16 on GPUs)
  double gemm_efficiency = 0;       // share of the peak large GEMMs reach
  double attention_efficiency = 0;  // share of the peak attention reaches
  double memory_bandwidth = 0;      // bytes/s (element-wise kernels, AdamW)
  LinkSpec intra;                   // between devices of one node
  LinkSpec inter;                   // between nodes
  // Whether collectives progress while the device computes (NCCL on its
  // own stream: yes; MPI on CPU ranks moves data only inside MPI calls).
  bool async_collectives = true;
  // A zero-bubble schedule's split backward (B, then W apart) over the
  // fused backward of the other schedules, in compute time: B keeps the
  // gradients W needs and W re-reads them later (tools/plan/pass_measure.h
  // measures it). 1 where not measured.
  double split_backward_ratio = 1.0;
  // The device's kernel costs by shape (tools/plan/kernel_costs.h); when
  // set, GEMMs, attention and element-wise kernels cost what it says and
  // the two efficiencies and the memory bandwidth above are not used for
  // them. Null: every GEMM at peak × gemm_efficiency.
  std::shared_ptr<const KernelCosts> kernel_costs;
  std::string source;  // where the figures come from

  int64_t world() const { return devices_per_node * nodes; }
  // The precision runs on this device use: bf16 on GPUs, fp32 on CPUs.
  Precision precision() const {
    return device == DeviceType::kCUDA ? Precision::kBf16 : Precision::kFp32;
  }
};

// Reads a cluster from JSON (fields in docs/planning.md). `where` names the
// source in errors. InvalidArgument names the first missing, non-numeric,
// negative or out-of-range field in one line. The optional "kernel_costs"
// is a table (kernel_costs.h) or the path of a file holding one, relative
// to `where`'s directory; a table for another device is an error.
absl::StatusOr<ClusterSpec> ClusterFromJson(const nlohmann::json& json,
                                            const std::string& where);
// The spec as JSON in the same fields (ClusterFromJson reads it back).
nlohmann::json ClusterToJson(const ClusterSpec& cluster);

// A preset name ("h100-sxm-8x16", "h200-8x4", "cpu") or a path to a .json
// file. NotFound/InvalidArgument in one line naming the choices or field.
absl::StatusOr<ClusterSpec> LoadCluster(const std::string& name_or_path);

// This machine, measured now: one device per core, the float32 GEMM rate
// of one core (as trellis-train's MFU does), the CPU attention kernel's
// share of it, memory-copy bandwidth, the kernel cost table of one core
// (kernel_cost_measure.h), the split backward's ratio to the fused one (on
// a 2-block, 128-wide chunk, T = 64, 2 windows); MPI's shared-memory
// transport estimated as two copies per message.
ClusterSpec MeasureCpuCluster();

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_CLUSTER_H_
