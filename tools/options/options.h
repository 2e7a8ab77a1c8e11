// TrainOptions: everything a training run is configured with, read from
// flags (and flagfiles) and validated as a whole before anything is
// allocated. Every program and test builds runs from this one struct.
#ifndef TRELLIS_TOOLS_OPTIONS_OPTIONS_H_
#define TRELLIS_TOOLS_OPTIONS_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/options/option_types.h"
#include "transformer/config.h"

namespace trellis {

// Every option of a training run besides the model's shape
// (TRELLIS_MODEL_CONFIG_OPTIONS), each defined once: X(group, type, name,
// default, help). TrainOptions' fields and defaults, trellis-train's flags,
// the config printed at start and the flags checkpoints record all derive
// from these lists. Two lists, because trellis-eval takes the layout and
// device options but not the run's.
//
// What a training run is: data, batch, optimization, checkpoints, logging.
#define TRELLIS_RUN_OPTIONS(X)                                                \
  X(Data, std::string, data, "",                                              \
    "token file made by trellis-preprocess, or a blend of several sharing "   \
    "one tokenizer, weight:path,... (e.g. 0.7:web.h5,0.3:code.h5)")           \
  X(Data, double, val_fraction, 0.02,                                         \
    "share of the token stream held out (its tail) for validation")           \
  X(Data, bool, document_mask, false,                                         \
    "attention stops at document boundaries inside a window (a token "        \
    "attends only to earlier tokens of its own document; cpu only)")          \
  X(Data, bool, eod_mask_loss, false,                                         \
    "no loss where the input token is end-of-text (predicting the next "      \
    "document's first token); the mean is over the counted tokens")           \
  X(Batch, int64_t, micro_batch_size, 4,                                      \
    "windows per microbatch on each data-parallel rank")                      \
  X(Batch, int64_t, global_batch_size, 32,                                    \
    "windows per optimizer step (gradient accumulation over "                 \
    "global / (dp * micro) microbatches)")                                    \
  X(Optimization, int64_t, steps, 300, "optimizer steps")                     \
  X(Optimization, double, lr, 2e-3, "peak learning rate")                     \
  X(Optimization, double, min_lr, 2e-4,                                       \
    "learning rate at the end of the cosine decay")                           \
  X(Optimization, int64_t, warmup_steps, 30, "linear warmup steps")           \
  X(Optimization, double, weight_decay, 0.1,                                  \
    "AdamW weight decay (2-D weights only)")                                  \
  X(Optimization, double, grad_clip, 1.0,                                     \
    "clip the global gradient norm to this (0: off)")                         \
  X(Optimization, double, beta1, 0.9, "AdamW beta1")                          \
  X(Optimization, double, beta2, 0.95, "AdamW beta2")                         \
  X(Optimization, uint64_t, seed, 1337, "initialization and data order seed") \
  X(Optimization, int64_t, max_skipped_steps, 10,                             \
    "consecutive skipped steps (non-finite loss or gradient norm, or a "      \
    "spike) after which the run saves and exits with status 1 (0: never)")    \
  X(Optimization, double, skip_spike_zscore, 0,                               \
    "also skip steps whose loss or gradient norm lies this many standard "    \
    "deviations above the last 100 steps' (0: off)")                          \
  X(Checkpoints, std::string, save_dir, "", "checkpoint directory")           \
  X(Checkpoints, int64_t, save_every, 0,                                      \
    "steps between checkpoints (0: only at the end, when --save_dir is set)") \
  X(Checkpoints, std::string, resume, "",                                     \
    "checkpoint directory to resume from, or 'auto' (the latest in "          \
    "--save_dir, if any)")                                                    \
  X(Checkpoints, int64_t, keep_checkpoints, 0,                                \
    "keep only the newest N checkpoints (0: all)")                            \
  X(Logging, int64_t, eval_every, 50, "steps between validations (0: never)") \
  X(Logging, int64_t, eval_windows, 64, "validation windows per evaluation")  \
  X(Logging, int64_t, log_every, 1, "steps between log lines")                \
  X(Logging, std::string, metrics_file, "",                                   \
    "write one JSON line of metrics per logged step here")                    \
  X(Logging, std::string, tensorboard_dir, "",                                \
    "write the logged steps' metrics as TensorBoard scalars here (rank 0)")   \
  X(Logging, int64_t, straggler_every, 10,                                    \
    "steps between comparisons of the ranks' compute times (0: never)")       \
  X(Logging, double, straggler_threshold, 1.2,                                \
    "name the slowest rank when its compute time exceeds the median by this " \
    "factor")                                                                 \
  X(Logging, std::string, trace_dir, "",                                      \
    "write Chrome traces of --trace_steps here, one file per rank (read "     \
    "them with trellis-bubbles)")                                             \
  X(Logging, IntList, trace_steps, IntList(),                                 \
    "steps to trace, e.g. 5,6 (1-based, as logged)")

// Where and how it runs: the layout of ranks and the device.
#define TRELLIS_PARALLEL_OPTIONS(X)                                           \
  X(Layout, int64_t, dp, 0, "data-parallel size (0: world / (tp * pp))")      \
  X(Layout, int64_t, tp, 1, "tensor-parallel size")                           \
  X(Layout, int64_t, pp, 1, "pipeline-parallel size")                         \
  X(Layout, int64_t, ep, 1,                                                   \
    "expert-parallel size: each MoE layer's experts split over ep "           \
    "data-parallel ranks, which exchange tokens (divides dp)")                \
  X(Layout, int64_t, cp, 1,                                                   \
    "context-parallel size: each window's tokens split over cp ranks per "    \
    "replica (world = dp·cp·tp·pp)")                                          \
  X(Layout, std::string, cp_comm, "ring",                                     \
    "how cp ranks attend over the split window: ring (key/value blocks "      \
    "passed round) or a2a (all-to-all to a head split; heads on each tp "     \
    "rank divisible by cp)")                                                  \
  X(Layout, std::string, mesh_order, "tp-dp-pp",                              \
    "mesh axes, fastest-varying first")                                       \
  X(Layout, ScheduleKind, schedule, ScheduleKind::k1F1B,                      \
    "pipeline schedule: gpipe, 1f1b, interleaved-1f1b or zb-h1")              \
  X(Layout, int64_t, virtual_stages, 1,                                       \
    "model chunks per pipeline stage (interleaved-1f1b)")                     \
  X(Layout, IntList, pp_layers, IntList(),                                    \
    "layers per pipeline stage, e.g. 3,5,5,3 (default: an even split)")       \
  X(Layout, double, dp_bucket_mb, 25.0,                                       \
    "data-parallel gradient bucket size in MiB")                              \
  X(Layout, int64_t, zero, 0,                                                 \
    "ZeRO sharding over dp: 0 (none), 1 (AdamW moments sharded, "             \
    "gradients reduce-scattered, weights all-gathered), 2 (gradients "        \
    "sharded too: each microbatch's reduce-scattered into the owned block) "  \
    "or 3 (weights sharded too: each layer's gathered around its compute)")   \
  X(Layout, bool, sequence_parallel, false,                                   \
    "split the norm and residual rows over tp (Megatron's sequence "          \
    "parallelism; needs --tp > 1): all-gathers and reduce-scatters replace "  \
    "the tp all-reduces, activations there shrink by tp")                     \
  X(Layout, double, comm_timeout_s, 600,                                      \
    "seconds a rank waits on one communication before it reports every "      \
    "rank's recent operations and ends the job (0: no deadline)")             \
  X(Device, DeviceType, device, DeviceType::kCPU, "cpu or cuda")              \
  X(Device, Precision, precision, Precision::kFp32,                           \
    "fp32, or bf16 (CUDA: bfloat16 weights and activations, float32 "         \
    "master weights, gradients and moments)")                                 \
  X(Device, Recompute, recompute, Recompute::kNone,                           \
    "activation recomputation in backward: none, selective (attention "       \
    "and GELU inputs) or full (each block from its input)")                   \
  X(Device, AttentionPath, attention, kDefaultAttentionPath,                  \
    "CUDA attention kernels: cudnn (cuDNN's fused attention where a plan "    \
    "builds, else mma with a note), mma (tensor cores) or simt; ignored on "  \
    "cpu")                                                                    \
  X(Device, int64_t, loss_chunk_rows, -1,                                     \
    "rows of the LM head's logits formed at once (0: a whole microbatch; "    \
    "-1: chosen for the device: 1024 on cpu, on cuda as many 1024-row "       \
    "blocks as fit in 2 GiB of logits); bounds the head's memory, not its "   \
    "result")                                                                 \
  X(Device, bool, bias_grad_epilogue, false,                                  \
    "form each GPT-2 bias gradient in its weight-gradient GEMM (cuBLASLt's "  \
    "bias-gradient epilogue on cuda) instead of a column-sum pass; the same " \
    "sums in another order")                                                  \
  X(Device, bool, residual_in_gemm, true,                                     \
    "add the residual stream to each block's output in the MLP's last GEMM "  \
    "(the GEMM's C matrix on cuda, one rounding; with one tp rank) instead "  \
    "of a pass of its own; on cpu the same sums either way")                  \
  X(Device, bool, gemm_autotune, false,                                       \
    "cuda: time cuBLASLt's first candidate algorithms for each GEMM shape "   \
    "on its first call and keep the fastest (results then may differ in "     \
    "the last bits between runs); off: the heuristic's first, every run "     \
    "the same")                                                               \
  X(Device, DeviceTransport, gpu_comm, DeviceTransport::kNccl,                \
    "GPU collectives: nccl (one GPU per rank) or host (staged through "       \
    "host memory over MPI; ranks may share a GPU)")                           \
  X(Device, double, memory_budget_gb, 0,                                      \
    "GiB the run may allocate on its device (0: the device's free memory, "   \
    "or physical memory on CPU)")                                             \
  X(Device, double, peak_tflops, 0,                                           \
    "per-rank peak in TFLOP/s that MFU is measured against (0: the dense "    \
    "bf16 peak of an H100, H200 or A100; on cpu a float32 GEMM measured at "  \
    "start)")

struct TrainOptions {
  // Model (vocab_size comes from the data file).
  ModelConfig model;
#define TRELLIS_TRAIN_OPTION_FIELD(group, type, name, value, help) \
  type name = value;
  TRELLIS_RUN_OPTIONS(TRELLIS_TRAIN_OPTION_FIELD)
  TRELLIS_PARALLEL_OPTIONS(TRELLIS_TRAIN_OPTION_FIELD)
#undef TRELLIS_TRAIN_OPTION_FIELD

  // The ranks that average gradients and shard ZeRO state: the dp replicas
  // and, within each, the cp ranks that split its windows.
  int64_t gradient_replicas() const { return dp * cp; }
  // Tokens of each window a rank holds: seq_len / cp.
  int64_t local_seq_len() const { return model.seq_len / cp; }
  // Microbatches per data-parallel rank per step.
  int64_t microbatches() const {
    return global_batch_size / (dp * micro_batch_size);
  }
  // The LM head's rows per chunk (0: all of a microbatch): loss_chunk_rows,
  // or for -1 the device's choice. On CUDA that is the most whole 1024-row
  // blocks whose logits (this tp rank's padded vocabulary, in the run's
  // precision) take at most kHeadChunkBytes: few chunks make the head's
  // weight-gradient GEMMs long (each chunk reads and writes the float32
  // gradient of the whole vocabulary once). On CPU 1024 rows, which keep
  // a chunk's logits in cache.
  static constexpr int64_t kHeadChunkBytes = int64_t{2} << 30;
  int64_t head_chunk_rows() const;
  // Resolves dp from `world` and checks every flag and their combination:
  // layout against world size, heads and vocabulary against tp, layers
  // against stages, batch sizes against dp × micro batch. Messages name the
  // flags to change.
  absl::Status Resolve(int world, int64_t vocab_size);
  // The flags that reproduce this run, one per line (a flagfile), every
  // option in list order: ranks compare them at start, checkpoints record
  // them.
  std::string ToFlagString() const;
  // Sets the options named in `flags` (ToFlagString's format; blank lines
  // and # comments skipped); others keep their values. InvalidArgument
  // names an unknown option or a bad value.
  absl::Status ApplyFlagString(const std::string& flags);
};

// The options of a run as the report printed at start: one line per group
// ("model", "data", ...), `name=value` for each option.
std::string ConfigReport(const TrainOptions& options);

// Layers of each pipeline stage: pp_layers if given, else an even split with
// the remainder spread over the first stages.
std::vector<int64_t> StageLayers(int64_t n_layer, int64_t pp,
                                 const std::vector<int64_t>& pp_layers);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_OPTIONS_OPTIONS_H_
