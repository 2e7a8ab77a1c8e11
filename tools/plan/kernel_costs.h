// KernelCosts: what a device's kernels cost by shape, measured on the device
// (trellis-bench --profile, or the cpu preset when it loads), so that the
// planner can cost a model shape nobody measured: a 96-wide model's GEMMs
// run far below a 384³ sgemm's rate, and its element-wise kernels below a
// memcpy's bandwidth.
//
// Three tables of measured rates over log-spaced axes, read by multilinear
// interpolation in the logarithms of the axes and of the rates, clamped to
// each axis's ends (a shape beyond the table runs at the rate of its edge):
//   gemm         (rows, in, out) -> FLOP/s of the three dense-layer kernels
//                a layer of an (in, out) weight runs on `rows` rows:
//                forward (MatmulForward), input gradient
//                (MatmulBackwardInput) and weight gradient
//                (MatmulBackwardWeight); 2·rows·in·out FLOPs each;
//   attention    (seq_len, head_dim, head_windows) -> FLOP/s of causal
//                attention's forward and backward together over
//                head_windows (window, head) pairs in one call (a
//                microbatch's windows times the heads on the rank: a GPU
//                fills its multiprocessors with those pairs, so a call of
//                few runs far below one of many), counted as the plan
//                counts them: 3 · 2·T·heads·head_dim FLOPs per token;
//   block_attention (optional; seq_len, head_dim, head_windows) -> FLOP/s
//                of context parallelism's ring on one block: seq_len
//                queries against as many keys and values, none masked
//                (BlockAttentionForward, AttentionMergeBlock,
//                BlockAttentionBackward), counted as the plan counts a
//                ring rank's attention: 3 · 4·T·heads·head_dim FLOPs per
//                query token of the block (a ring rank's causal share of a
//                window is cp/2 such blocks); measured where the kernels
//                run (the CPU), absent elsewhere, and then the ring is
//                priced at `attention`'s rate on T/cp;
//   elementwise  (rows, width) -> bytes/s of a GPT-2 block's element-wise
//                kernels (two LayerNorms, two residual adds, the GELU of the
//                4·width activation; forward and backward), counted as the
//                plan counts their bytes (step_work.cc);
//   adamw        (elements) -> bytes/s of the multi-tensor AdamW step over
//                one tensor of that many float32 elements, counted as the
//                plan counts them: 28 bytes per element (step_cost.cc).
// A GEMM's time is bounded below by the device's roofline: its FLOPs at
// `peak_flops` and its operands' bytes at `memory_bandwidth`.
//
// The JSON form (docs/planning.md, "Kernel cost tables"):
//   {"kernel_costs": 2, "device": "cpu", "dtype": "f32", "source": "...",
//    "peak_tflops": 0.1, "memory_bandwidth_gbs": 10,
//    "gemm": {"rows": [..], "in": [..], "out": [..],
//             "forward_tflops": [..], "backward_input_tflops": [..],
//             "backward_weight_tflops": [..]},
//    "attention": {"seq_len": [..], "head_dim": [..],
//                  "head_windows": [..], "tflops": [..]},
//    "block_attention": {as "attention"} (optional),
//    "elementwise": {"rows": [..], "width": [..], "gbs": [..]},
//    "adamw": {"elements": [..], "gbs": [..]}}
// with each rate list in row-major order of its axes (the last fastest).
// A version-1 table (attention by "heads", measured over 2 windows a call)
// is read with its heads axis doubled into (window, head) pairs.
//
// Invariants of a table read or measured: every axis holds 1 to 64 strictly
// ascending values in [1, 2^31]; every rate and roofline figure is positive,
// finite and at most 1e15 in its unit (TFLOP/s, GB/s).
// Thread safety: pure functions; tables are immutable once built.
#ifndef TRELLIS_TOOLS_PLAN_KERNEL_COSTS_H_
#define TRELLIS_TOOLS_PLAN_KERNEL_COSTS_H_

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trellis {

// Rates over a grid of three ascending axes (a one-value axis is constant).
struct RateGrid {
  std::array<std::vector<double>, 3> axes;
  std::vector<double> rates;  // axes[0] × axes[1] × axes[2], last fastest

  size_t size() const {
    return axes[0].size() * axes[1].size() * axes[2].size();
  }
  double& at(size_t i, size_t j, size_t k) {
    return rates[(i * axes[1].size() + j) * axes[2].size() + k];
  }
  // The rate at (x, y, z): multilinear in the logarithms, clamped to the
  // axes' ends. REQUIRES: the grid is well formed (see above).
  double Interpolate(double x, double y, double z) const;
};

struct KernelCosts {
  std::string device = "cpu";   // "cpu" or "cuda"
  std::string dtype = "f32";    // "f32" or "bf16"
  std::string source;           // how and where it was measured
  double peak_flops = 0;        // roofline: FLOP/s
  double memory_bandwidth = 0;  // roofline: bytes/s
  RateGrid gemm_forward, gemm_backward_input, gemm_backward_weight;
  RateGrid attention;  // (seq_len, head_dim, head_windows), FLOP/s
  // The ring's block attention, as `attention`; empty (no axes) when the
  // table has none.
  RateGrid block_attention;
  RateGrid elementwise;  // (rows, width, 1), bytes/s
  RateGrid adamw;        // (elements, 1, 1), bytes/s
};

// Which of a layer's three GEMMs.
enum class GemmPass { kForward, kBackwardInput, kBackwardWeight };

// Seconds of `pass` of a dense layer of an (in, out) weight on `rows` rows
// with `element_bytes`-byte operands: the table's rate, bounded by the
// roofline.
double GemmSeconds(const KernelCosts& costs, GemmPass pass, double rows,
                   double in, double out, double element_bytes);
// FLOP/s of causal attention at (seq_len, head_dim, head_windows): a call
// over head_windows (window, head) pairs.
double AttentionRate(const KernelCosts& costs, double seq_len, double head_dim,
                     double head_windows);
// FLOP/s of the ring's block attention on blocks of `block_len` tokens
// (T/cp), counted as AttentionRate's: the table's block_attention, or
// without one AttentionRate at seq_len block_len.
double BlockAttentionRate(const KernelCosts& costs, double block_len,
                          double head_dim, double head_windows);
// Bytes/s of the element-wise kernels on (rows, width) activations.
double ElementwiseRate(const KernelCosts& costs, double rows, double width);
// Bytes/s of AdamW stepping `elements` elements.
double AdamWRate(const KernelCosts& costs, double elements);

// The table in a few lines of text: the GEMMs' rates by rows on square
// weights, attention's by sequence length per head width, the element-wise
// kernels' and AdamW's bandwidths.
std::string FormatKernelCosts(const KernelCosts& costs);

// Reads a table from its JSON form (`where` names it in errors), or from a
// trellis-bench --json summary holding one under "kernel_costs".
// InvalidArgument in one line naming the field and what it must be.
absl::StatusOr<KernelCosts> KernelCostsFromJson(const nlohmann::json& json,
                                                const std::string& where);
nlohmann::json KernelCostsToJson(const KernelCosts& costs);
// Reads the table in file `path` (as above). NotFound / InvalidArgument in
// one line naming the file and how to write one.
absl::StatusOr<KernelCosts> LoadKernelCosts(const std::string& path);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_KERNEL_COSTS_H_
