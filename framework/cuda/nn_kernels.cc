// Tensor-level CUDA kernels (cuda_kernels.h): LayerNorm (alone and after a
// residual add), the cross-entropy pieces and attention (whose path is
// resolved in attention_select.cc). Each checks devices,
// dtypes and shapes, makes the tensors' device current and calls its
// launcher (cuda_launch.h).
#include <cstdint>
#include <initializer_list>

#include "framework/cuda/attention_select.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/cuda/cuda_launch.h"
#include "framework/cuda/tensor_checks.h"
#include "framework/kernels/attention.h"
#include "framework/kernels/layernorm.h"

namespace trellis {
namespace cuda {
namespace {

using cuda_internal::CommonDevice;
using cuda_internal::ElemOf;
using cuda_internal::RequireDType;
using cuda_internal::Rows;

// Checks x (N, C) against `other` (same shape), a (C) vector and mean/rstd
// (N) float32.
void CheckLayerNorm(const char* kernel, const Tensor& x, const Tensor& other,
                    const Tensor& vec, const Tensor& mean, const Tensor& rstd) {
  TRELLIS_CHECK(x.ndim() >= 1 && x.shape() == other.shape())
      << kernel << ": " << ShapeString(x.shape()) << " vs "
      << ShapeString(other.shape());
  TRELLIS_CHECK(vec.ndim() == 1 && vec.dim(0) == x.dim(-1))
      << kernel << ": x " << ShapeString(x.shape()) << ", weight "
      << ShapeString(vec.shape());
  TRELLIS_CHECK(mean.numel() == Rows(x) && rstd.numel() == Rows(x))
      << kernel << ": x " << ShapeString(x.shape()) << ", mean "
      << ShapeString(mean.shape()) << ", rstd " << ShapeString(rstd.shape());
  RequireDType(kernel, DType::kF32, {&mean, &rstd});
}

// The rows (N) and columns (Vl) of logits (..., Vl), checking 0 <= valid <=
// Vl and that every (N) vector has N elements.
struct LogitDims {
  int64_t N, Vl;
};
LogitDims CheckLogits(const char* kernel, const Tensor& logits, int64_t valid,
                      std::initializer_list<const Tensor*> rows) {
  TRELLIS_CHECK_GE(logits.ndim(), 1) << kernel;
  const LogitDims d{Rows(logits), logits.dim(-1)};
  TRELLIS_CHECK(valid >= 0 && valid <= d.Vl)
      << kernel << ": " << valid << " valid columns of "
      << ShapeString(logits.shape());
  for (const Tensor* r : rows) {
    TRELLIS_CHECK_EQ(r->numel(), d.N)
        << kernel << ": " << ShapeString(r->shape()) << " for logits "
        << ShapeString(logits.shape());
  }
  TRELLIS_CHECK_LE(d.N, int64_t{0x7fffffff}) << kernel << " rows ";
  return d;
}

void CheckTargets(const char* kernel, const Tensor& targets) {
  TRELLIS_CHECK(targets.dtype() == DType::kI32)
      << kernel << ": targets are " << DTypeName(targets.dtype())
      << ", not int32";
}

// Checks qkv (B, T, (H + 2·Hkv)·D), `rows` (B, T, H·D), saved (B, H, T)
// float32, and the kernels' limits.
cuda_launch::AttentionDims CheckAttention(
    const char* kernel, const Tensor& qkv, int64_t n_head, int64_t n_kv_head,
    std::initializer_list<const Tensor*> rows, const Tensor& saved) {
  TRELLIS_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0)
      << kernel << ": " << n_head << " query heads in groups over " << n_kv_head
      << " key/value heads";
  const int64_t parts = n_head + 2 * n_kv_head;
  TRELLIS_CHECK(qkv.ndim() == 3 && qkv.dim(2) % parts == 0)
      << kernel << ": qkv " << ShapeString(qkv.shape()) << ", " << n_head
      << " heads, " << n_kv_head << " kv heads";
  const cuda_launch::AttentionDims d{qkv.dim(0), qkv.dim(1), n_head,
                                     qkv.dim(2) / parts, n_kv_head};
  const Shape row_shape{d.B, d.T, d.H * d.D};
  for (const Tensor* r : rows) {
    TRELLIS_CHECK(r->shape() == row_shape)
        << kernel << ": " << ShapeString(r->shape()) << ", expected "
        << ShapeString(row_shape);
  }
  const Shape saved_shape = AttentionSavedShape(qkv.device(), d.B, d.T, d.H);
  TRELLIS_CHECK(saved.shape() == saved_shape)
      << kernel << ": saved " << ShapeString(saved.shape()) << ", expected "
      << ShapeString(saved_shape);
  RequireDType(kernel, DType::kF32, {&saved});
  TRELLIS_CHECK_LE(d.D, cuda_launch::kAttentionMaxHeadDim)
      << kernel << ": head width " << d.D << " (" << ShapeString(qkv.shape())
      << ", " << n_head
      << " heads) is wider than the CUDA kernels take; use more heads ";
  TRELLIS_CHECK_LE(d.B * d.H, int64_t{65535})
      << kernel << ": batch × heads per launch ";
  return d;
}

}  // namespace

void LayerNormForward(const Tensor& x, const Tensor& w, const Tensor& b,
                      Tensor& out, Tensor& mean, Tensor& rstd) {
  const char* kernel = "LayerNormForward";
  CudaDeviceGuard guard(CommonDevice(kernel, {&x, &w, &b, &out, &mean, &rstd}));
  RequireDType(kernel, x.dtype(), {&w, &b, &out});
  CheckLayerNorm(kernel, x, out, w, mean, rstd);
  TRELLIS_CHECK(b.shape() == w.shape())
      << kernel << " bias " << ShapeString(b.shape());
  cuda_launch::LayerNormForward(ElemOf(kernel, x), x.raw(), w.raw(), b.raw(),
                                Rows(x), x.dim(-1),
                                static_cast<float>(kLayerNormEps), out.raw(),
                                mean.data<float>(), rstd.data<float>());
}

void AddLayerNormForward(const Tensor& a, const Tensor& b, const Tensor& w,
                         const Tensor& bias, Tensor& sum, Tensor& out,
                         Tensor& mean, Tensor& rstd) {
  const char* kernel = "AddLayerNormForward";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&a, &b, &w, &bias, &sum, &out, &mean, &rstd}));
  RequireDType(kernel, a.dtype(), {&b, &w, &bias, &sum, &out});
  CheckLayerNorm(kernel, a, out, w, mean, rstd);
  TRELLIS_CHECK(b.shape() == a.shape() && sum.shape() == a.shape())
      << kernel << ": a " << ShapeString(a.shape()) << ", b "
      << ShapeString(b.shape()) << ", sum " << ShapeString(sum.shape());
  TRELLIS_CHECK(bias.shape() == w.shape())
      << kernel << " bias " << ShapeString(bias.shape());
  TRELLIS_CHECK(sum.numel() == 0 || sum.raw() != out.raw())
      << kernel << ": out would overwrite sum";
  cuda_launch::AddLayerNormForward(
      ElemOf(kernel, a), a.raw(), b.raw(), w.raw(), bias.raw(), Rows(a),
      a.dim(-1), static_cast<float>(kLayerNormEps), sum.raw(), out.raw(),
      mean.data<float>(), rstd.data<float>());
}

void LayerNormBackwardInput(const Tensor& dout, const Tensor& x,
                            const Tensor& w, const Tensor& mean,
                            const Tensor& rstd, Tensor& dx) {
  const char* kernel = "LayerNormBackwardInput";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&dout, &x, &w, &mean, &rstd, &dx}));
  RequireDType(kernel, x.dtype(), {&dout, &w, &dx});
  CheckLayerNorm(kernel, x, dout, w, mean, rstd);
  TRELLIS_CHECK(dx.shape() == x.shape())
      << kernel << " dx " << ShapeString(dx.shape());
  cuda_launch::LayerNormBackwardInput(
      ElemOf(kernel, x), dout.raw(), x.raw(), w.raw(), mean.data<float>(),
      rstd.data<float>(), Rows(x), x.dim(-1), dx.raw(), dx.raw());
}

void LayerNormBackwardInputResidual(const Tensor& dout, const Tensor& x,
                                    const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& residual,
                                    Tensor& dx) {
  const char* kernel = "LayerNormBackwardInputResidual";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&dout, &x, &w, &mean, &rstd, &residual, &dx}));
  RequireDType(kernel, x.dtype(), {&dout, &w, &residual, &dx});
  CheckLayerNorm(kernel, x, dout, w, mean, rstd);
  TRELLIS_CHECK(dx.shape() == x.shape() && residual.shape() == x.shape())
      << kernel << " dx " << ShapeString(dx.shape()) << ", residual "
      << ShapeString(residual.shape());
  TRELLIS_CHECK(dx.numel() == 0 ||
                (dx.raw() != dout.raw() && dx.raw() != x.raw()))
      << kernel << ": dx aliases dout or x";
  cuda_launch::LayerNormBackwardInput(
      ElemOf(kernel, x), dout.raw(), x.raw(), w.raw(), mean.data<float>(),
      rstd.data<float>(), Rows(x), x.dim(-1), residual.raw(), dx.raw());
}

void LayerNormBackwardWeight(const Tensor& dout, const Tensor& x,
                             const Tensor& mean, const Tensor& rstd, Tensor& dw,
                             Tensor& db) {
  const char* kernel = "LayerNormBackwardWeight";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&dout, &x, &mean, &rstd, &dw, &db}));
  RequireDType(kernel, x.dtype(), {&dout});
  RequireDType(kernel, dw.dtype(), {&db});
  CheckLayerNorm(kernel, x, dout, dw, mean, rstd);
  TRELLIS_CHECK(db.shape() == dw.shape())
      << kernel << " db " << ShapeString(db.shape());
  cuda_launch::LayerNormBackwardWeight(ElemOf(kernel, x), dout.raw(), x.raw(),
                                       mean.data<float>(), rstd.data<float>(),
                                       Rows(x), x.dim(-1), ElemOf(kernel, dw),
                                       dw.raw(), db.raw());
}

void CrossEntropyRowMax(const Tensor& logits, int64_t valid, Tensor& row_max) {
  const char* kernel = "CrossEntropyRowMax";
  CudaDeviceGuard guard(CommonDevice(kernel, {&logits, &row_max}));
  RequireDType(kernel, DType::kF32, {&row_max});
  const LogitDims d = CheckLogits(kernel, logits, valid, {&row_max});
  cuda_launch::CrossEntropyRowMax(ElemOf(kernel, logits), logits.raw(), d.N,
                                  d.Vl, valid, row_max.data<float>());
}

void CrossEntropyRowSumExp(const Tensor& logits, int64_t valid,
                           const Tensor& row_max, Tensor& sumexp) {
  const char* kernel = "CrossEntropyRowSumExp";
  CudaDeviceGuard guard(CommonDevice(kernel, {&logits, &row_max, &sumexp}));
  RequireDType(kernel, DType::kF32, {&row_max, &sumexp});
  const LogitDims d = CheckLogits(kernel, logits, valid, {&row_max, &sumexp});
  cuda_launch::CrossEntropyRowSumExp(ElemOf(kernel, logits), logits.raw(), d.N,
                                     d.Vl, valid, row_max.data<float>(),
                                     sumexp.data<float>());
}

void CrossEntropyTargetLogit(const Tensor& logits, const Tensor& targets,
                             int64_t vocab_start, int64_t valid,
                             Tensor& target_logit) {
  const char* kernel = "CrossEntropyTargetLogit";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&logits, &targets, &target_logit}));
  RequireDType(kernel, DType::kF32, {&target_logit});
  CheckTargets(kernel, targets);
  const LogitDims d =
      CheckLogits(kernel, logits, valid, {&targets, &target_logit});
  cuda_launch::CrossEntropyTargetLogit(
      ElemOf(kernel, logits), logits.raw(), targets.data<int32_t>(), d.N, d.Vl,
      vocab_start, valid, target_logit.data<float>());
}

void CrossEntropyLoss(const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit, Tensor& losses) {
  const char* kernel = "CrossEntropyLoss";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&row_max, &sumexp, &target_logit, &losses}));
  RequireDType(kernel, DType::kF32,
               {&row_max, &sumexp, &target_logit, &losses});
  const int64_t N = row_max.numel();
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&sumexp, &target_logit, &losses}) {
    TRELLIS_CHECK_EQ(t->numel(), N) << kernel << ": " << ShapeString(t->shape())
                                    << " vs " << ShapeString(row_max.shape());
  }
  cuda_launch::CrossEntropyLoss(row_max.data<float>(), sumexp.data<float>(),
                                target_logit.data<float>(), N,
                                losses.data<float>());
}

void CrossEntropyBackward(const Tensor& logits, const Tensor& targets,
                          int64_t vocab_start, int64_t valid,
                          const Tensor& row_max, const Tensor& sumexp,
                          double scale, Tensor& dlogits) {
  const char* kernel = "CrossEntropyBackward";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&logits, &targets, &row_max, &sumexp, &dlogits}));
  RequireDType(kernel, DType::kF32, {&row_max, &sumexp});
  RequireDType(kernel, logits.dtype(), {&dlogits});
  CheckTargets(kernel, targets);
  const LogitDims d =
      CheckLogits(kernel, logits, valid, {&targets, &row_max, &sumexp});
  TRELLIS_CHECK(dlogits.shape() == logits.shape())
      << kernel << ": dlogits " << ShapeString(dlogits.shape()) << ", logits "
      << ShapeString(logits.shape());
  cuda_launch::CrossEntropyBackward(
      ElemOf(kernel, logits), logits.raw(), targets.data<int32_t>(), d.N, d.Vl,
      vocab_start, valid, row_max.data<float>(), sumexp.data<float>(),
      static_cast<float>(scale), dlogits.raw());
}

void CrossEntropyFused(const Tensor& logits, const Tensor& targets,
                       int64_t valid, const Tensor& row_weights, double scale,
                       Tensor& losses, Tensor& dlogits) {
  const char* kernel = "CrossEntropyFused";
  CudaDeviceGuard guard(CommonDevice(
      kernel, {&logits, &targets, &row_weights, &losses, &dlogits}));
  RequireDType(kernel, DType::kF32, {&row_weights, &losses});
  RequireDType(kernel, logits.dtype(), {&dlogits});
  CheckTargets(kernel, targets);
  const LogitDims d = CheckLogits(kernel, logits, valid, {&targets, &losses});
  if (row_weights.defined()) CheckLogits(kernel, logits, valid, {&row_weights});
  TRELLIS_CHECK(!dlogits.defined() || dlogits.shape() == logits.shape())
      << kernel << ": dlogits " << ShapeString(dlogits.shape()) << ", logits "
      << ShapeString(logits.shape());
  cuda_launch::CrossEntropyFused(
      ElemOf(kernel, logits), logits.raw(), targets.data<int32_t>(), d.N, d.Vl,
      valid, row_weights.defined() ? row_weights.data<float>() : nullptr,
      static_cast<float>(scale), losses.data<float>(),
      dlogits.defined() ? dlogits.raw() : nullptr);
}

void AttentionForward(const Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                      Tensor& out, Tensor& saved, AttentionPath path) {
  const char* kernel = "AttentionForward";
  CudaDeviceGuard guard(CommonDevice(kernel, {&qkv, &out, &saved}));
  RequireDType(kernel, qkv.dtype(), {&out});
  const cuda_launch::AttentionDims d =
      CheckAttention(kernel, qkv, n_head, n_kv_head, {&out}, saved);
  cuda_internal::RunAttentionForward(path, ElemOf(kernel, qkv), d, qkv.raw(),
                                     out.raw(), saved.data<float>());
}

void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                       const Tensor& saved, int64_t n_head, int64_t n_kv_head,
                       Tensor& dqkv, AttentionPath path, GradWrite write) {
  const char* kernel = "AttentionBackward";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&dout, &qkv, &out, &saved, &dqkv}));
  RequireDType(kernel, qkv.dtype(), {&dout, &out, &dqkv});
  const cuda_launch::AttentionDims d =
      CheckAttention(kernel, qkv, n_head, n_kv_head, {&dout, &out}, saved);
  TRELLIS_CHECK(dqkv.shape() == qkv.shape())
      << kernel << ": dqkv " << ShapeString(dqkv.shape()) << ", qkv "
      << ShapeString(qkv.shape());
  cuda_internal::RunAttentionBackward(
      path, ElemOf(kernel, qkv), d, dout.raw(), qkv.raw(), out.raw(),
      saved.data<float>(), dqkv.raw(), write == GradWrite::kAccumulate);
}

}  // namespace cuda
}  // namespace trellis
