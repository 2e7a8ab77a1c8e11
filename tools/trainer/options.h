// TrainOptions: everything a training run is configured with, read from
// flags (and flagfiles) and validated as a whole before anything is
// allocated. Every program and test builds runs from this one struct.
#ifndef TRELLIS_TOOLS_TRAINER_OPTIONS_H_
#define TRELLIS_TOOLS_TRAINER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transformer/config.h"

namespace trellis {

struct TrainOptions {
  // Model (vocab_size comes from the data file).
  GptConfig model;
  // Data.
  std::string data;
  double val_fraction = 0.02;
  // Batch: global_batch_size windows per step, in microbatches of
  // micro_batch_size windows per data-parallel rank.
  int64_t micro_batch_size = 4;
  int64_t global_batch_size = 16;
  // Optimization.
  int64_t steps = 200;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 20;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  uint64_t seed = 1337;
  // Checkpoints.
  std::string save_dir;
  int64_t save_every = 0;        // 0: only at the end (when save_dir is set).
  std::string resume;            // "", a checkpoint directory, or "auto".
  int64_t keep_checkpoints = 0;  // 0: keep all.
  // Evaluation and logging.
  int64_t eval_every = 0;  // 0: never.
  int64_t eval_windows = 64;
  int64_t log_every = 1;
  std::string metrics_file;
  // Layout.
  int64_t dp = 0;  // 0: world / (tp · pp).
  int64_t tp = 1;
  int64_t pp = 1;
  std::string mesh_order = "tp-dp-pp";
  std::string schedule = "1f1b";
  int64_t virtual_stages = 1;
  std::vector<int64_t> pp_layers;  // Layers per stage; empty: even split.
  double dp_bucket_mb = 25.0;
  // Backend: "cpu" or "cuda". On CUDA, "bf16" precision keeps bfloat16
  // weights, activations and GEMM inputs with float32 master weights,
  // gradients, optimizer moments and statistics; "fp32" computes in float32
  // throughout (the only CPU precision).
  std::string device = "cpu";
  std::string precision = "fp32";
  // Activation recomputation in backward: "none", "selective" (attention
  // and GELU inputs are recomputed, Megatron's selective recompute) or
  // "full" (each block is recomputed from its input).
  std::string recompute = "none";
  // Attention kernels on CUDA (framework/kernels/attention_path.h): "cudnn"
  // (cuDNN's fused attention where a plan builds, else "mma" with a note),
  // "mma" (the tensor-core kernels, SIMT where they do not apply) or "simt".
  // CPU runs accept any of the three and ignore it (one CPU kernel).
  std::string attention = "cudnn";
  // Rows of the LM head's logits formed at once (each chunk's logits are
  // turned into their gradient before the next); 0: all rows of a
  // microbatch.
  int64_t loss_chunk_rows = 1024;
  // GPU collectives: "nccl" (one GPU per rank) or "host" (staged through
  // host memory over MPI, so several ranks may share one GPU).
  std::string gpu_comm = "nccl";
  // Bytes the run may plan to allocate on its device, in GiB; 0: the
  // device's free memory (CUDA) or the machine's physical memory (CPU).
  double memory_budget_gb = 0;
  // Tracing: the (1-based) steps written as Chrome traces into trace_dir.
  std::string trace_dir;
  std::vector<int64_t> trace_steps;

  // Microbatches per data-parallel rank per step.
  int64_t microbatches() const {
    return global_batch_size / (dp * micro_batch_size);
  }
  // Resolves dp from `world` and checks every flag and their combination:
  // layout against world size, heads and vocabulary against tp, layers
  // against stages, batch sizes against dp × micro batch. Messages name the
  // flags to change.
  absl::Status Resolve(int world, int64_t vocab_size);
  // The flags that reproduce this run, one per line (a flagfile): ranks
  // compare them at start, checkpoints record them.
  std::string ToFlagString() const;
};

// Layers of each pipeline stage: pp_layers if given, else an even split with
// the remainder spread over the first stages.
std::vector<int64_t> StageLayers(int64_t n_layer, int64_t pp,
                                 const std::vector<int64_t>& pp_layers);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_OPTIONS_H_
