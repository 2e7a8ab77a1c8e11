// Measures a KernelCosts table (tools/plan/kernel_costs.h) on one device by
// timing the framework's own kernels over the table's grids: the three
// dense-layer GEMMs (MatmulForward, MatmulBackwardInput,
// MatmulBackwardWeight) per (rows, in, out), causal attention forward and
// backward per (seq_len, head_dim, head_windows: the (window, head) pairs of
// one call, as windows of 4 heads on CPU and of 8 on CUDA), on the CPU
// context parallelism's ring step on one block (block attention forward,
// merge and backward) per (block length, head_dim, head_windows), a GPT-2
// block's element-wise kernels (LayerNorm, residual add, GELU; forward and
// backward) per (rows, width), and AdamW per element count. Each point is the
// faster of two rounds after a warm-up call, a round repeating the kernel until
// 2 ms have passed (one call at least; one round where a call takes over 10
// ms).
//
// The grids: on CPU rows 32 to 2048, weights' sides 64 to 1024, attention
// sequences 32 to 512 and ring blocks of 16 to 256 over 8 pairs (about 2 s
// on one core); on CUDA rows 1024 to 65536 by factors of 2 (GPT-2 124M's
// micro batch of 64 windows of 1024), sides 768 to 8192, sequences 256 to
// 8192 (the GPT-2 and Llama 3.2 1B shapes) over 16 to 1024 pairs (up to
// 128 windows: a training micro batch's calls; about 15 GB at the
// largest); about 10^14 GEMM FLOPs in all.
//
// Thread safety: runs kernels on the calling thread; not while a
// KernelProfiler is active.
#ifndef TRELLIS_TOOLS_PLAN_KERNEL_COST_MEASURE_H_
#define TRELLIS_TOOLS_PLAN_KERNEL_COST_MEASURE_H_

#include <functional>
#include <string>

#include "framework/tensor.h"
#include "tools/plan/kernel_costs.h"

namespace trellis {

// The table of `device` computing in `dtype` (F32 on CPU; BF16 or F32 on
// CUDA). `synchronize` waits for the device's queued work (a no-op on CPU);
// `peak_flops` and `memory_bandwidth` are the device's roofline (0 where
// unknown), raised to the fastest rate measured; `source` says what was
// measured, for the record.
KernelCosts MeasureKernelCosts(Device device, DType dtype,
                               const std::function<void()>& synchronize,
                               double peak_flops, double memory_bandwidth,
                               const std::string& source);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_KERNEL_COST_MEASURE_H_
