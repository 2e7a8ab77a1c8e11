// What every model family's chunk is told: which part of the model it holds
// (ChunkPlan), where it sits in its tensor-parallel group (TpPlace) and how
// it trades memory for compute (BlockOptions).
#ifndef TRELLIS_TRANSFORMER_CHUNK_OPTIONS_H_
#define TRELLIS_TRANSFORMER_CHUNK_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "framework/kernels/attention_path.h"
#include "framework/tensor.h"

namespace trellis {

// Which part of the model a chunk holds. Pipeline stage p holds one chunk
// (or several with virtual stages).
struct ChunkPlan {
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  bool has_embedding = true;  // The token embedding: the model's first chunk.
  bool has_head = true;       // Final norm + LM head + loss: the last chunk.
  // Expert parallelism: this rank is `expert_rank` of `expert_ranks` that
  // split each MoE layer's experts (ranks hold equal, contiguous runs).
  int64_t expert_rank = 0;
  int64_t expert_ranks = 1;
};

// This rank's place in its tensor-parallel group.
struct TpPlace {
  int64_t size = 1;
  int64_t rank = 0;
};

// What a block keeps for backward (see transformer/decoder_block.h).
enum class Recompute { kNone, kSelective, kFull };
// "none", "selective" or "full".
absl::StatusOr<Recompute> ParseRecompute(const std::string& name);

struct BlockOptions {
  Recompute recompute = Recompute::kNone;
  bool defer_weight_grads = true;
  // Rows per chunk of the LM head, which forms the (rows, Vl) logits of one
  // chunk at a time; 0: all N rows at once.
  int64_t loss_chunk_rows = 1024;
  // Which kernels run attention on CUDA (framework/kernels/attention_path.h).
  AttentionPath attention = kDefaultAttentionPath;
  // Document masking (--document_mask): every Forward gets a doc_start
  // (ChunkMasks) and attention stops at document boundaries.
  bool document_mask = false;
  // Loss weights (--eod_mask_loss): a training Forward of the last chunk
  // gets a per-target loss weight (ChunkMasks).
  bool eod_mask_loss = false;
  // Each linear layer's bias gradient formed in its weight-gradient GEMM
  // (cuBLASLt's bias-gradient epilogue on CUDA) instead of in the one
  // column-sum pass over all of a block's gradients, which then sums only
  // the norms' parameters. The same sums (in another order).
  bool bias_grad_epilogue = false;
  // The block's output, residual + MLP, formed by the MLP's last GEMM
  // (RowParallelLinear::ForwardResidual) instead of a separate add.
  bool residual_in_gemm = true;
  // Megatron's sequence parallelism (transformer/sequence_split.h): between
  // the tensor-parallel layers each tp rank holds 1/tp of the rows.
  // Nothing changes with one tp rank.
  bool sequence_parallel = false;
};

// The dtype of saved statistics (norm statistics, attention's saved state,
// loss statistics) for activations of `dtype`: float32 for float32 and
// bfloat16, float64 for float64.
DType StatsDType(DType dtype);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_CHUNK_OPTIONS_H_
