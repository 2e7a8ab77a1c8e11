// CPU attention, one (batch, head) at a time, with BLAS doing the products:
// S = scale · Q K^T, causal softmax in place in `saved`, O = P V. Q, K and V
// are read straight out of qkv (row stride (H + 2·Hkv)·D; query head h reads
// key/value head h / (H / Hkv)), O written straight into out (row stride
// H·D). A key/value head's dK, dV accumulate over its group's query heads
// (the backward gemms add, beta = 1). Rows go in blocks of kBlock so that the
// products skip the blocks above the diagonal: for a row block, only columns up
// to its end. With document masking, row t's softmax runs over columns
// [doc_start[t], t] and is zero elsewhere; backward needs nothing more,
// since dS = P ⊙ (dP - rowsum(dP ⊙ P)) is zero wherever P is.
#include "framework/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"
#include "framework/launch_count.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::DotLanes;
using kernels_internal::ExpShiftSum;
using kernels_internal::Gemm;
using kernels_internal::MaxLanes;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

// Rows per block. Smaller blocks skip more of the upper triangle but make
// smaller products; at T = 128..1024, D = 64, 32 rows were fastest or within
// 5% of it (OpenBLAS, one thread).
constexpr int64_t kBlock = 32;

struct Dims {
  int64_t B, T, H, D, Hkv;
  int64_t C() const { return H * D; }
  int64_t Width() const { return (H + 2 * Hkv) * D; }  // qkv's row
  // Element offsets in a qkv row of query head h's K and V heads.
  int64_t KeyOffset(int64_t h) const { return H * D + h / (H / Hkv) * D; }
  int64_t ValueOffset(int64_t h) const { return KeyOffset(h) + Hkv * D; }
};

// One head's operands: Q, K, V (T, D) with row stride ld; O or dO (T, D) with
// row stride ldo; P (T, T) contiguous.
template <typename T>
struct Head {
  const T* q;
  const T* k;
  const T* v;
  int64_t ld;
  int64_t ldo;
  int64_t n;  // T, the sequence length
  int64_t d;  // D, the head width
  T scale;
};

// Rows [r0, r0 + rows) of p (T, T) hold raw scores in columns [0, r0 + rows);
// each row t becomes softmax over columns [lo, t] (lo = doc_start[t], or 0
// without document masking), zero elsewhere.
template <typename T>
void CausalSoftmaxRows(int64_t n, int64_t r0, int64_t rows,
                       const int32_t* doc_start, T* p) {
  for (int64_t t = r0; t < r0 + rows; ++t) {
    T* row = p + t * n;
    const int64_t lo = doc_start == nullptr ? 0 : doc_start[t];
    T* live = row + lo;
    const T row_max = MaxLanes(live, t + 1 - lo);
    const T inv_sum = T{1} / ExpShiftSum(live, row_max, t + 1 - lo, live);
    for (int64_t j = lo; j <= t; ++j) row[j] *= inv_sum;
    std::fill(row, row + lo, T{0});
    std::fill(row + t + 1, row + n, T{0});
  }
}

// p (T, T) = causal softmax(scale · Q K^T); o (T, D) = p V. doc_start (T)
// or null: see CausalSoftmaxRows.
template <typename T>
void HeadForward(const Head<T>& h, const int32_t* doc_start, T* p, T* o) {
  for (int64_t r0 = 0; r0 < h.n; r0 += kBlock) {
    const int64_t rows = std::min(kBlock, h.n - r0), cols = r0 + rows;
    // (rows, cols) = scale · Q[r0:] (rows, D) @ K[:cols]^T (D, cols)
    Gemm<T>(false, true, rows, cols, h.d, h.scale, h.q + r0 * h.ld, h.ld, h.k,
            h.ld, 0, p + r0 * h.n, h.n);
    CausalSoftmaxRows(h.n, r0, rows, doc_start, p);
    // O[r0:] (rows, D) = P (rows, cols) @ V[:cols] (cols, D)
    Gemm<T>(false, false, rows, h.d, cols, 1, p + r0 * h.n, h.n, h.v, h.ld, 0,
            o + r0 * h.ldo, h.ldo);
  }
}

// Rows [r0, r0 + rows) of ds (T, T) hold dP in columns [0, r0 + rows); each
// becomes dS = P ⊙ (dP - rowsum(dP ⊙ P)) over columns [0, t], zero after.
template <typename T>
void SoftmaxBackwardRows(const T* p, int64_t n, int64_t r0, int64_t rows,
                         T* ds) {
  for (int64_t t = r0; t < r0 + rows; ++t) {
    const T* prow = p + t * n;
    T* drow = ds + t * n;
    const T dot = DotLanes<T>(drow, prow, t + 1);
    for (int64_t j = 0; j <= t; ++j) drow[j] = prow[j] * (drow[j] - dot);
    std::fill(drow + t + 1, drow + r0 + rows, T{0});
  }
}

// dq, dk, dv (T, D) with row stride ld += the gradients of one head, given
// dout (T, D) with row stride ldo. ds (T, T) is scratch.
template <typename T>
void HeadBackward(const Head<T>& h, const T* p, const T* dout, T* ds, T* dq,
                  T* dk, T* dv) {
  for (int64_t r0 = 0; r0 < h.n; r0 += kBlock) {
    const int64_t rows = std::min(kBlock, h.n - r0), cols = r0 + rows;
    // dP (rows, cols) = dO[r0:] (rows, D) @ V[:cols]^T (D, cols)
    Gemm<T>(false, true, rows, cols, h.d, 1, dout + r0 * h.ldo, h.ldo, h.v,
            h.ld, 0, ds + r0 * h.n, h.n);
    SoftmaxBackwardRows(p, h.n, r0, rows, ds);
    // dQ[r0:] (rows, D) += scale · dS (rows, cols) @ K[:cols] (cols, D)
    Gemm<T>(false, false, rows, h.d, cols, h.scale, ds + r0 * h.n, h.n, h.k,
            h.ld, 1, dq + r0 * h.ld, h.ld);
  }
  // Columns [c0, c0 + cb) of dS and P are nonzero only in rows t >= c0.
  for (int64_t c0 = 0; c0 < h.n; c0 += kBlock) {
    const int64_t cb = std::min(kBlock, h.n - c0), rows = h.n - c0;
    // dK[c0:] (cb, D) += scale · dS[c0:, c0:c0+cb]^T (cb, rows) @ Q[c0:]
    Gemm<T>(true, false, cb, h.d, rows, h.scale, ds + c0 * h.n + c0, h.n,
            h.q + c0 * h.ld, h.ld, 1, dk + c0 * h.ld, h.ld);
    // dV[c0:] (cb, D) += P[c0:, c0:c0+cb]^T (cb, rows) @ dO[c0:]
    Gemm<T>(true, false, cb, h.d, rows, 1, p + c0 * h.n + c0, h.n,
            dout + c0 * h.ldo, h.ldo, 1, dv + c0 * h.ld, h.ld);
  }
}

// Query head h of batch b and its key/value head, read out of qkv
// (B, T, (H + 2·Hkv)·D).
template <typename T>
Head<T> MakeHead(const Dims& d, const T* qkv, int64_t b, int64_t h) {
  const T* row = qkv + b * d.T * d.Width();
  return Head<T>{row + h * d.D,
                 row + d.KeyOffset(h),
                 row + d.ValueOffset(h),
                 d.Width(),
                 d.C(),
                 d.T,
                 d.D,
                 static_cast<T>(1.0 / std::sqrt(static_cast<double>(d.D)))};
}

template <typename T>
void AttentionForwardCpu(const Dims& d, const T* qkv, const int32_t* doc_start,
                         T* out, T* probs) {
  for (int64_t b = 0; b < d.B; ++b) {
    const int32_t* row_start =
        doc_start == nullptr ? nullptr : doc_start + b * d.T;
    for (int64_t h = 0; h < d.H; ++h) {
      HeadForward(MakeHead(d, qkv, b, h), row_start,
                  probs + (b * d.H + h) * d.T * d.T,
                  out + b * d.T * d.C() + h * d.D);
    }
  }
}

template <typename T>
void AttentionBackwardCpu(const Dims& d, const T* dout, const T* qkv,
                          const T* probs, T* dqkv) {
  thread_local std::vector<T> scratch;  // dP, then dS: (T, T)
  if (scratch.size() < static_cast<size_t>(d.T * d.T)) {
    scratch.resize(d.T * d.T);
  }
  const int64_t C = d.C();
  for (int64_t b = 0; b < d.B; ++b) {
    T* row = dqkv + b * d.T * d.Width();
    for (int64_t h = 0; h < d.H; ++h) {
      HeadBackward(MakeHead(d, qkv, b, h), probs + (b * d.H + h) * d.T * d.T,
                   dout + b * d.T * C + h * d.D, scratch.data(), row + h * d.D,
                   row + d.KeyOffset(h), row + d.ValueOffset(h));
    }
  }
}

// Checks qkv (B, T, (H + 2·Hkv)·D), `rows` (B, T, H·D) and `saved`.
Dims CheckShapes(const char* kernel, const Tensor& qkv, int64_t n_head,
                 int64_t n_kv_head, std::initializer_list<const Tensor*> rows,
                 const Tensor& saved) {
  TRELLIS_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0)
      << kernel << ": " << n_head << " query heads in groups over " << n_kv_head
      << " key/value heads";
  const int64_t parts = n_head + 2 * n_kv_head;
  TRELLIS_CHECK(qkv.ndim() == 3 && qkv.dim(2) % parts == 0)
      << kernel << ": qkv " << ShapeString(qkv.shape()) << ", " << n_head
      << " heads, " << n_kv_head << " kv heads";
  const Dims d{qkv.dim(0), qkv.dim(1), n_head, qkv.dim(2) / parts, n_kv_head};
  const Shape row_shape{d.B, d.T, d.C()};
  for (const Tensor* r : rows) {
    TRELLIS_CHECK(r->shape() == row_shape)
        << kernel << ": " << ShapeString(r->shape()) << ", expected "
        << ShapeString(row_shape);
  }
  const Shape saved_shape = AttentionSavedShape(qkv.device(), d.B, d.T, d.H);
  TRELLIS_CHECK(saved.shape() == saved_shape)
      << kernel << ": saved " << ShapeString(saved.shape()) << ", expected "
      << ShapeString(saved_shape);
  return d;
}

// doc_start, when defined: (B, T) int32 on the CPU, each row's starts in
// [0, t] and non-decreasing.
void CheckDocStart(const char* kernel, const Dims& d, const Tensor& doc_start) {
  if (!doc_start.defined()) return;
  TRELLIS_CHECK(doc_start.dtype() == DType::kI32 &&
                doc_start.shape() == Shape({d.B, d.T}))
      << kernel << ": doc_start " << ShapeString(doc_start.shape())
      << ", expected int32 " << ShapeString(Shape{d.B, d.T});
  const int32_t* s = doc_start.data<int32_t>();
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t t = 0; t < d.T; ++t) {
      const int32_t v = s[b * d.T + t];
      TRELLIS_CHECK(v >= 0 && v <= t && (t == 0 || v >= s[b * d.T + t - 1]))
          << kernel << ": doc_start[" << b << ", " << t << "] = " << v;
    }
  }
}

}  // namespace

Shape AttentionSavedShape(Device device, int64_t B, int64_t T, int64_t n_head) {
  if (device.is_cuda()) return {B, n_head, T};
  return {B, n_head, T, T};
}

void AttentionForward(const Tensor& qkv, const Tensor& doc_start,
                      int64_t n_head, int64_t n_kv_head, Tensor& out,
                      Tensor& saved, AttentionPath path) {
  const char* kernel = "AttentionForward";
  TRELLIS_CHECK(!doc_start.defined() || !qkv.device().is_cuda())
      << kernel << ": document masking runs on the CPU only";
  TRELLIS_CUDA_DISPATCH(
      cuda::AttentionForward(qkv, n_head, n_kv_head, out, saved, path), &qkv,
      &out, &saved);
  RequireCpu(kernel, {&qkv, &out, &saved});
  RequireDType(kernel, qkv.dtype(), {&out, &saved});
  const Dims d = CheckShapes(kernel, qkv, n_head, n_kv_head, {&out}, saved);
  CheckDocStart(kernel, d, doc_start);
  const int32_t* starts =
      doc_start.defined() ? doc_start.data<int32_t>() : nullptr;
  DispatchFloat(kernel, qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AttentionForwardCpu(d, qkv.data<T>(), starts, out.data<T>(),
                        saved.data<T>());
  });
}

void AttentionBackward(const Tensor& dout, const Tensor& qkv,
                       const Tensor& doc_start, const Tensor& out,
                       const Tensor& saved, int64_t n_head, int64_t n_kv_head,
                       Tensor& dqkv, AttentionPath path, GradWrite write) {
  const char* kernel = "AttentionBackward";
  TRELLIS_CHECK(!doc_start.defined() || !qkv.device().is_cuda())
      << kernel << ": document masking runs on the CPU only";
  TRELLIS_CUDA_DISPATCH(cuda::AttentionBackward(dout, qkv, out, saved, n_head,
                                                n_kv_head, dqkv, path, write),
                        &dout, &qkv, &out, &saved, &dqkv);
  RequireCpu(kernel, {&dout, &qkv, &out, &saved, &dqkv});
  RequireDType(kernel, qkv.dtype(), {&dout, &out, &saved, &dqkv});
  const Dims d =
      CheckShapes(kernel, qkv, n_head, n_kv_head, {&dout, &out}, saved);
  TRELLIS_CHECK(dqkv.shape() == qkv.shape())
      << kernel << ": dqkv " << ShapeString(dqkv.shape()) << ", qkv "
      << ShapeString(qkv.shape());
  // The saved probabilities already hold the mask (see the top).
  CheckDocStart(kernel, d, doc_start);
  if (write == GradWrite::kWrite) {
    dqkv.Zero();  // The gemms add (beta = 1).
    // The tensor-core twin zero-fills dqkv too, before its three launches.
    trellis_cpu_launches.set_launches(ModeledLaunches(kernel) + 1);
  }
  DispatchFloat(kernel, qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AttentionBackwardCpu(d, dout.data<T>(), qkv.data<T>(), saved.data<T>(),
                         dqkv.data<T>());
  });
}

void AttentionForward(const Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                      Tensor& out, Tensor& saved, AttentionPath path) {
  AttentionForward(qkv, Tensor(), n_head, n_kv_head, out, saved, path);
}

void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                       const Tensor& saved, int64_t n_head, int64_t n_kv_head,
                       Tensor& dqkv, AttentionPath path) {
  AttentionBackward(dout, qkv, Tensor(), out, saved, n_head, n_kv_head, dqkv,
                    path);
}

void AttentionForward(const Tensor& qkv, int64_t n_head, Tensor& out,
                      Tensor& saved, AttentionPath path) {
  AttentionForward(qkv, n_head, n_head, out, saved, path);
}

void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                       const Tensor& saved, int64_t n_head, Tensor& dqkv,
                       AttentionPath path) {
  AttentionBackward(dout, qkv, out, saved, n_head, n_head, dqkv, path);
}

}  // namespace trellis
