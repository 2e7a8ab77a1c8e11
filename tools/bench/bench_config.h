// trellis-bench's configuration: the values of its flags, checked and
// resolved (presets, per-device defaults) into one run before anything is
// measured, so that a bad flag costs no benchmark time.
#ifndef TRELLIS_TOOLS_BENCH_BENCH_CONFIG_H_
#define TRELLIS_TOOLS_BENCH_BENCH_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/options/options.h"
#include "tools/trainer/health/peak_flops.h"

namespace trellis {

// The flags as given; unset optionals take the preset's or the device's
// default.
struct BenchFlags {
  std::string device = "cpu";
  std::string precision;  // "": fp32 on CPU, bf16 on CUDA
  std::string recompute = "none";
  std::string attention = "cudnn";  // cudnn, mma or simt; ignored on CPU
  std::string preset;  // "": the small CPU model on CPU, gpt2-124m on CUDA
  std::optional<int64_t> n_layer, n_head, d_model, seq_len, vocab_size;
  std::optional<int64_t> micro_batch_size, global_batch_size;
  std::optional<int64_t> loss_chunk_rows;  // unset: the trainer's default
  bool bias_grad_epilogue = false;
  bool residual_in_gemm = true;
  bool gemm_autotune = false;
  int64_t steps = 5;
  int64_t warmup = 2;
  std::optional<int64_t> gemm_size;
  double peak_tflops = 0;  // 0: the device's known peak (CUDA), none (CPU)
  bool profile = false;
  std::string json;
  std::vector<std::string> positional;  // arguments that are not flags
};

struct BenchConfig {
  // Model, batch, device, precision, recompute and attention of the run; `data`
  // is left for the caller, steps = timed + warmup.
  TrainOptions train;
  std::string preset;  // "" when none applies
  int64_t timed_steps = 0;
  int64_t warmup = 0;
  int64_t gemm_size = 0;
  double peak_tflops = 0;  // 0: look the device up
  bool profile = false;
  std::string json;
  bool cuda() const { return train.device == DeviceType::kCUDA; }
};

// Checks every flag (messages name the flag) and fills in the defaults:
//  - model: --preset's shapes (configs/gpt2-*.flags: layers, heads, width;
//    the GPT-2 vocabulary of 50257; the flagfile's micro batch), else on
//    CPU 6 layers, 6 heads, width 384, vocabulary 257, micro batch 4;
//    explicit --n_layer etc. override;
//  - --seq_len 256 on CPU, 1024 on CUDA;
//  - --global_batch_size 2 micro batches on CPU, 4 on CUDA;
//  - --precision fp32 on CPU, bf16 on CUDA; --gemm_size 2048 on CPU, 8192
//    on CUDA.
// The training options are validated as the trainer will (one rank).
absl::StatusOr<BenchConfig> ResolveBenchConfig(const BenchFlags& flags);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_BENCH_BENCH_CONFIG_H_
