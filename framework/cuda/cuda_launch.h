// Internal to framework/cuda/: the kernel launchers of the .cu files, on raw
// device pointers. The Tensor-level functions of cuda_kernels.h check shapes,
// dtypes and devices, make the tensors' device current and call these.
//
// Every launcher runs on ComputeStream() of the current device, returns
// without waiting (except the reductions to a host value, which wait for
// their result), and checks its launches. Element types are float32 or
// bfloat16 (Elem); arithmetic is float32 throughout, with float64 for the
// whole-tensor sums. Sizes are element counts.
//
// This header is light (no Abseil, no CUDA headers) so that .cu files and
// .cc files share it.
#ifndef TRELLIS_FRAMEWORK_CUDA_CUDA_LAUNCH_H_
#define TRELLIS_FRAMEWORK_CUDA_CUDA_LAUNCH_H_

#include <cstdint>

namespace trellis {
namespace cuda_launch {

enum class Elem : uint8_t { kF32, kBF16 };

// ---- elementwise.cu ----

// n elements of `elem_bytes` (2, 4 or 8) bytes each set to the low bytes of
// `pattern`.
void Fill(void* data, int64_t n, int elem_bytes, uint64_t pattern);
// dst (n) = src (n) converted (bfloat16 rounds to nearest even).
void Convert(Elem src_type, const void* src, Elem dst_type, void* dst,
             int64_t n);
void Add(Elem t, const void* a, const void* b, void* out, int64_t n);
void Axpy(Elem t, float alpha, const void* x, void* y, int64_t n);
void Scale(Elem t, float s, void* x, int64_t n);
// x (rows, cols) row i *= w[i], w float32.
void ScaleRows(Elem t, const float* w, void* x, int64_t rows, int64_t cols);
// out (rows, cols) += bias (cols).
void AddBias(Elem t, const void* bias, void* out, int64_t rows, int64_t cols);
// out (cols) += column sums of in (rows, cols), summed in float32 in a fixed
// order (deterministic).
void ColumnSums(Elem in_type, const void* in, int64_t rows, int64_t cols,
                Elem out_type, void* out);
// One job of ColumnSumsMany (cols columns of `rows`-row inputs): db (cols)
// += column sums of dout, and when x is not null, dw (cols) += column sums
// of dout · (x - mean) · rstd. dout and x of in_type; dw, db of out_type.
struct ColumnJob {
  const void* dout;
  const void* x;
  const float* mean;
  const float* rstd;
  void* dw;
  void* db;
  int64_t cols;
  Elem in_type, out_type;
};
inline constexpr int kColumnJobs = 8;
// All jobs in one launch, deterministic. REQUIRES: count <= kColumnJobs.
void ColumnSumsMany(const ColumnJob* jobs, int count, int64_t rows);
// Sum and sum of squares of x (n), accumulated in float64 in a fixed order;
// waits for the result.
void SumAndSumOfSquares(Elem t, const void* x, int64_t n, double* sum,
                        double* sum_of_squares);
// The sum of squares of `count` arrays (xs[i] of types[i], sizes[i]
// elements), accumulated in float64 in a fixed order; waits once.
double SumOfSquaresMany(const Elem* types, const void* const* xs,
                        const int64_t* sizes, int count);
void GeluForward(Elem t, const void* x, void* out, int64_t n);
// dx += gelu'(x) · dout, or = when !accumulate (dx may then alias dout).
void GeluBackward(Elem t, const void* x, const void* dout, void* dx, int64_t n,
                  bool accumulate = true);
// out (n) += src (n), src float32, out of type t.
void AccumulateFloat(const float* src, Elem t, void* out, int64_t n);

// The AdamW step's scalars, folded on the host.
struct AdamWScalars {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2;
  float inv_bias_correction1, inv_bias_correction2;
  float eps, weight_decay, grad_scale;
};
// m, v float32; param and grad float32 or bfloat16.
void AdamW(const AdamWScalars& s, Elem grad_type, const void* grad,
           Elem param_type, void* param, float* m, float* v, int64_t n);
// One tensor of a multi-tensor AdamW launch: float32 grad, param, m, v of n
// elements, its weight decay, and an optional copy of param to refresh
// (null for none) of type refresh_type.
struct AdamWSlice {
  const float* grad;
  float* param;
  float* m;
  float* v;
  void* refresh;
  int64_t n;
  float weight_decay;
  Elem refresh_type;
};
// Steps `count` slices in one launch. REQUIRES: count <= kAdamWSlices.
inline constexpr int kAdamWSlices = 256;
void AdamWMany(const AdamWScalars& s, const AdamWSlice* slices, int count);

// ---- norm_embedding.cu ----

// out (N, C) = table (Vl, C) [ids - vocab_start] or 0 outside [0, Vl).
void EmbeddingForward(Elem t, const int32_t* ids, int64_t N, const void* table,
                      int64_t Vl, int64_t C, int64_t vocab_start, void* out);
// dtable (Vl, C) [ids - vocab_start] += dout (N, C), for ids in the shard.
// Atomic adds: the order of the sum is not fixed.
void EmbeddingBackward(Elem dout_type, const int32_t* ids, int64_t N,
                       const void* dout, int64_t C, int64_t vocab_start,
                       Elem table_type, void* dtable, int64_t Vl);
// x (B, T, C) += wpe (T_max, C) rows 0..T-1.
void AddPositionEmbedding(Elem t, const void* wpe, void* x, int64_t B,
                          int64_t T, int64_t C);
// dwpe rows 0..T-1 += sum over b of dout (B, T, C).
void PositionEmbeddingBackward(Elem dout_type, const void* dout, int64_t B,
                               int64_t T, int64_t C, Elem dwpe_type,
                               void* dwpe);
// x, w, b, out of type t; mean, rstd (N) float32.
void LayerNormForward(Elem t, const void* x, const void* w, const void* b,
                      int64_t N, int64_t C, float eps, void* out, float* mean,
                      float* rstd);
// sum (N, C) = a + b rounded to t (sum may alias a or b), then
// LayerNormForward of the stored sum with w and bias into out, mean, rstd.
void AddLayerNormForward(Elem t, const void* a, const void* b, const void* w,
                         const void* bias, int64_t N, int64_t C, float eps,
                         void* sum, void* out, float* mean, float* rstd);
// dx (N, C) = base + rstd · (g - mean(g) - xhat · mean(g · xhat)),
// g = dout · w; base is dx to accumulate, or a residual gradient (which may
// alias dx).
void LayerNormBackwardInput(Elem t, const void* dout, const void* x,
                            const void* w, const float* mean, const float* rstd,
                            int64_t N, int64_t C, const void* base, void* dx);
// dw (C) += column sums of dout · xhat, db (C) += column sums of dout.
void LayerNormBackwardWeight(Elem t, const void* dout, const void* x,
                             const float* mean, const float* rstd, int64_t N,
                             int64_t C, Elem w_type, void* dw, void* db);

// ---- rmsnorm.cu: one warp per row ----

// x, w, out of type t; rstd (N) float32.
void RmsNormForward(Elem t, const void* x, const void* w, int64_t N, int64_t C,
                    float eps, void* out, float* rstd);
// sum (N, C) = a + b rounded to t (sum may alias a or b), then
// RmsNormForward of the stored sum.
void AddRmsNormForward(Elem t, const void* a, const void* b, const void* w,
                       int64_t N, int64_t C, float eps, void* sum, void* out,
                       float* rstd);
// dx (N, C) = base + rstd · (g - xhat · mean(g · xhat)), g = dout · w; base
// is dx to accumulate, or a residual gradient (which may alias dx).
void RmsNormBackwardInput(Elem t, const void* dout, const void* x,
                          const void* w, const float* rstd, int64_t N,
                          int64_t C, const void* base, void* dx);
// dw (C) += column sums of dout · x · rstd.
void RmsNormBackwardWeight(Elem t, const void* dout, const void* x,
                           const float* rstd, int64_t N, int64_t C, Elem w_type,
                           void* dw);

// ---- qk_norm.cu: the per-head q/k RMSNorm, one warp per (row, head) ----

// qkv (N, W) of type t, each row [heads | kv_heads | kv_heads] heads of D;
// the query and key heads normalized in place (wq, wk (D) of type t); in
// (N, heads + kv_heads, D) of type t and rstd (N, heads + kv_heads)
// float32 saved.
void QkNormForward(Elem t, void* qkv, int64_t N, int64_t heads,
                   int64_t kv_heads, int64_t D, const void* wq, const void* wk,
                   float eps, void* in, float* rstd);
// dw (2, D) of type w_type += the weights' gradients (row 0 wq's, row 1
// wk's), then dqkv's query and key heads ← the gradient at the norm's
// input, in place.
void QkNormBackward(Elem t, void* dqkv, int64_t N, int64_t heads,
                    int64_t kv_heads, int64_t D, const void* in,
                    const float* rstd, const void* wq, const void* wk,
                    Elem w_type, void* dw);

// ---- router.cu: the mixture-of-experts router, one warp per token row
// (E at most kMaxRouterExperts) ----

inline constexpr int64_t kMaxRouterExperts = 1024;
// index (N, k) int32 and weight (N, k) of type t from logits (N, E) and
// bias (E) or null.
void RouterTopK(Elem t, const void* logits, const void* bias, int64_t N,
                int64_t E, int k, bool sigmoid, bool normalize, int32_t* index,
                void* weight);
// dlogits (N, E) overwritten.
void RouterTopKBackward(Elem t, const void* logits, const int32_t* index,
                        const void* weight, const void* dweight, int64_t N,
                        int64_t E, int k, bool sigmoid, bool normalize,
                        void* dlogits);
// losses (2) float32 = [aux, z]; counts (E) int32.
void RouterLosses(Elem t, const void* logits, const int32_t* counts, int64_t N,
                  int64_t E, int k, bool sigmoid, float* losses);
// dlogits (N, E) += the balance losses' gradients.
void RouterLossesBackward(Elem t, const void* logits, const int32_t* counts,
                          int64_t N, int64_t E, int k, bool sigmoid,
                          float aux_scale, float z_scale, void* dlogits);

// ---- expert_rows.cu: rows to their experts and back ----

// route (slots) and counts (E) from index (slots) int32, every entry in
// [0, E) (not checked on the device).
void RouteByExpert(const int32_t* index, int64_t slots, int64_t E,
                   int32_t* route, int32_t* counts);
// x_perm[route[t·k + j]] = x[t], rows of C elements of type t.
void DispatchRows(Elem t, const void* x, const int32_t* route, int64_t n,
                  int64_t k, int64_t C, void* x_perm);
// out[t] = Σ_j weight[t, j] · perm[route[t·k + j]] (weight null: 1),
// j ascending; out overwritten.
void GatherRowSums(Elem t, const void* perm, const int32_t* route,
                   const void* weight, int64_t n, int64_t k, int64_t C,
                   void* out);
// dy_perm[route[s]] = weight[s] · dout[s / k] and dweight[s] = dout[s / k]
// · y_perm[route[s]], both overwritten.
void CombineRowsBackward(Elem t, const void* dout, const void* y_perm,
                         const int32_t* route, const void* weight, int64_t n,
                         int64_t k, int64_t C, void* dy_perm, void* dweight);

// ---- llama_elementwise.cu: SwiGLU and RoPE ----

// out (N, F) = silu(gate) · up over gate_up (N, 2F) = [gate | up].
void SwiGluForward(Elem t, const void* gate_up, int64_t N, int64_t F,
                   void* out);
// dgate_up (N, 2F) += (or = when !accumulate) the SwiGLU gradient.
void SwiGluBackward(Elem t, const void* gate_up, const void* dout, int64_t N,
                    int64_t F, void* dgate_up, bool accumulate);
// Rotates, in place, the first `heads` heads (width D) of each of the
// `rows` rows (row stride W) of x by the angles of position row mod T:
// sign = 1 forward, -1 backward. cos, sin (>= T, D/2) float32.
void Rope(Elem t, void* x, int64_t rows, int64_t W, int64_t T, int64_t heads,
          int64_t D, const float* cos, const float* sin, float sign);

// ---- cross_entropy.cu ----  logits (N, Vl) of type t, statistics float32.

void CrossEntropyRowMax(Elem t, const void* logits, int64_t N, int64_t Vl,
                        int64_t valid, float* row_max);
void CrossEntropyRowSumExp(Elem t, const void* logits, int64_t N, int64_t Vl,
                           int64_t valid, const float* row_max, float* sumexp);
void CrossEntropyTargetLogit(Elem t, const void* logits, const int32_t* targets,
                             int64_t N, int64_t Vl, int64_t vocab_start,
                             int64_t valid, float* target_logit);
void CrossEntropyLoss(const float* row_max, const float* sumexp,
                      const float* target_logit, int64_t N, float* losses);
// dlogits (N, Vl), of type t, may alias logits.
void CrossEntropyBackward(Elem t, const void* logits, const int32_t* targets,
                          int64_t N, int64_t Vl, int64_t vocab_start,
                          int64_t valid, const float* row_max,
                          const float* sumexp, float scale, void* dlogits);
// The fused classifier over whole-vocabulary rows (cross_entropy.h):
// row_weights may be null (weight 1), dlogits null (losses only) or equal
// to logits.
void CrossEntropyFused(Elem t, const void* logits, const int32_t* targets,
                       int64_t N, int64_t Vl, int64_t valid,
                       const float* row_weights, float scale, float* losses,
                       void* dlogits);

// ---- attention.cu ----

// H query heads and Hkv key/value heads (grouped-query attention: query
// head h reads key/value head h / (H / Hkv)); 0 means Hkv = H, so that the
// four-field aggregate {B, T, H, D} keeps meaning multi-head attention.
// Every launcher takes either; WithKvHeads fills Hkv in.
struct AttentionDims {
  int64_t B, T, H, D;
  int64_t Hkv = 0;
};
inline AttentionDims WithKvHeads(AttentionDims d) {
  if (d.Hkv == 0) d.Hkv = d.H;
  return d;
}
// The largest head width the attention kernels take.
inline constexpr int64_t kAttentionMaxHeadDim = 128;
// qkv (B, T, (H + 2·Hkv)·D), out (B, T, H·D) of type t; lse (B, H, T)
// float32, the log-sum-exp of each row's scaled scores.
void AttentionForward(Elem t, const AttentionDims& d, const void* qkv,
                      void* out, float* lse);
// dqkv (B, T, (H + 2·Hkv)·D) += gradients, probabilities recomputed from
// lse; a key/value head's gradients summed over its group.
void AttentionBackward(Elem t, const AttentionDims& d, const void* dout,
                       const void* qkv, const void* out, const float* lse,
                       void* dqkv);

}  // namespace cuda_launch
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_CUDA_LAUNCH_H_
