// CPU blockwise attention, one (batch, query head) at a time with BLAS
// doing the products. Because k_pos is sorted, the keys query i may attend
// are one contiguous run of the block's columns, [lo_i, hi_i): hi_i counts
// the keys at or before q_pos[i], lo_i those before its document's start.
// Query rows go in blocks of kRows; a row block's products cover only the
// columns from the smallest lo to the largest hi of its rows, so the
// causal parts of the ring (and the empty blocks entirely) cost nothing.
#include "framework/kernels/block_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::DotLanes;
using kernels_internal::ExpShiftSum;
using kernels_internal::Gemm;
using kernels_internal::MaxLanes;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

constexpr int64_t kRows = 32;

struct Dims {
  int64_t B, Tq, Tk, H, Hkv, D;
  int64_t QWidth() const { return H * D; }
  int64_t KvWidth() const { return 2 * Hkv * D; }
  // Element offsets in a kv row of query head h's key and value heads.
  int64_t KeyOffset(int64_t h) const { return h / (H / Hkv) * D; }
  int64_t ValueOffset(int64_t h) const { return Hkv * D + KeyOffset(h); }
};

// The run of key columns [lo, hi) one query attends; empty when lo >= hi.
struct Span {
  int64_t lo, hi;
};

// The spans of the Tq queries of batch row b.
std::vector<Span> Spans(const Dims& d, const BlockMask& mask, int64_t b) {
  const int32_t* qp = mask.q_pos->data<int32_t>();
  const int32_t* kp = mask.k_pos->data<int32_t>();
  const int32_t* ds = mask.doc_start == nullptr
                          ? nullptr
                          : mask.doc_start->data<int32_t>() + b * d.Tq;
  std::vector<Span> spans(d.Tq);
  for (int64_t i = 0; i < d.Tq; ++i) {
    spans[i].hi = std::upper_bound(kp, kp + d.Tk, qp[i]) - kp;
    spans[i].lo =
        ds == nullptr ? 0 : std::lower_bound(kp, kp + d.Tk, ds[i]) - kp;
  }
  return spans;
}

// The columns a row block [r0, r0 + rows) needs: the union of its spans.
Span Window(const std::vector<Span>& spans, int64_t r0, int64_t rows) {
  Span w{std::numeric_limits<int64_t>::max(), 0};
  for (int64_t i = r0; i < r0 + rows; ++i) {
    if (spans[i].lo >= spans[i].hi) continue;
    w.lo = std::min(w.lo, spans[i].lo);
    w.hi = std::max(w.hi, spans[i].hi);
  }
  if (w.hi == 0) w.lo = 0;
  return w;
}

// One query head's operands, strided out of q and kv.
template <typename T>
struct Head {
  const T* q;
  const T* k;
  const T* v;
  int64_t ldq, ldkv;
  T scale;
};

template <typename T>
Head<T> MakeHead(const Dims& d, const T* q, const T* kv, int64_t b, int64_t h) {
  const T* kv_rows = kv + b * d.Tk * d.KvWidth();
  return Head<T>{q + b * d.Tq * d.QWidth() + h * d.D,
                 kv_rows + d.KeyOffset(h),
                 kv_rows + d.ValueOffset(h),
                 d.QWidth(),
                 d.KvWidth(),
                 static_cast<T>(1.0 / std::sqrt(static_cast<double>(d.D)))};
}

// Row i of p (scores over the window's columns) becomes the softmax over
// its span, zero elsewhere; lse[i] its log-sum-exp (-inf when empty).
template <typename T>
void SoftmaxRow(const Span& s, const Span& w, int64_t cols, T* p, T* lse) {
  if (s.lo >= s.hi) {
    std::fill(p, p + cols, T{0});
    *lse = -std::numeric_limits<T>::infinity();
    return;
  }
  T* live = p + (s.lo - w.lo);
  const int64_t n = s.hi - s.lo;
  const T max = MaxLanes(live, n);
  const T sum = ExpShiftSum(live, max, n, live);
  const T inv = T{1} / sum;
  for (int64_t j = 0; j < n; ++j) live[j] *= inv;
  std::fill(p, live, T{0});
  std::fill(live + n, p + cols, T{0});
  *lse = max + std::log(sum);
}

template <typename T>
void HeadForward(const Dims& d, const Head<T>& h,
                 const std::vector<Span>& spans, T* o, T* lse,
                 std::vector<T>& p) {
  const int64_t ldo = d.QWidth();
  for (int64_t r0 = 0; r0 < d.Tq; r0 += kRows) {
    const int64_t rows = std::min(kRows, d.Tq - r0);
    const Span w = Window(spans, r0, rows);
    const int64_t cols = w.hi - w.lo;
    if (cols <= 0) {
      for (int64_t i = r0; i < r0 + rows; ++i) {
        std::fill(o + i * ldo, o + i * ldo + d.D, T{0});
        lse[i] = -std::numeric_limits<T>::infinity();
      }
      continue;
    }
    // S (rows, cols) = scale · Q[r0:] (rows, D) @ K[w]^T (D, cols)
    Gemm<T>(false, true, rows, cols, d.D, h.scale, h.q + r0 * h.ldq, h.ldq,
            h.k + w.lo * h.ldkv, h.ldkv, 0, p.data(), cols);
    for (int64_t i = 0; i < rows; ++i) {
      SoftmaxRow(spans[r0 + i], w, cols, p.data() + i * cols, lse + r0 + i);
    }
    // O[r0:] (rows, D) = P (rows, cols) @ V[w] (cols, D)
    Gemm<T>(false, false, rows, d.D, cols, 1, p.data(), cols,
            h.v + w.lo * h.ldkv, h.ldkv, 0, o + r0 * ldo, ldo);
  }
}

// Gradients of one head, written through dq, dk, dv (strided like q, k, v).
template <typename T>
struct HeadGrad {
  const T* lse;  // (Tq), the merged log-sum-exps
  const T* out;
  const T* dout;
  T* dq;
  T* dk;
  T* dv;
};

template <typename T>
void HeadBackward(const Dims& d, const Head<T>& h,
                  const std::vector<Span>& spans, const HeadGrad<T>& g,
                  std::vector<T>& p, std::vector<T>& ds) {
  const int64_t ldo = d.QWidth();
  for (int64_t r0 = 0; r0 < d.Tq; r0 += kRows) {
    const int64_t rows = std::min(kRows, d.Tq - r0);
    const Span w = Window(spans, r0, rows);
    const int64_t cols = w.hi - w.lo;
    if (cols <= 0) continue;
    const T* q = h.q + r0 * h.ldq;
    const T* dout = g.dout + r0 * ldo;
    // P (rows, cols) = exp(scale · Q K^T - lse) over each span, else 0.
    Gemm<T>(false, true, rows, cols, d.D, h.scale, q, h.ldq,
            h.k + w.lo * h.ldkv, h.ldkv, 0, p.data(), cols);
    // dP (rows, cols) = dO (rows, D) @ V[w]^T (D, cols)
    Gemm<T>(false, true, rows, cols, d.D, 1, dout, ldo, h.v + w.lo * h.ldkv,
            h.ldkv, 0, ds.data(), cols);
    for (int64_t i = 0; i < rows; ++i) {
      T* prow = p.data() + i * cols;
      T* drow = ds.data() + i * cols;
      const Span& s = spans[r0 + i];
      const T lse = g.lse[r0 + i];
      if (s.lo >= s.hi || std::isinf(lse)) {
        std::fill(prow, prow + cols, T{0});
      } else {
        T* live = prow + (s.lo - w.lo);
        ExpShiftSum(live, lse, s.hi - s.lo, live);
        std::fill(prow, live, T{0});
        std::fill(live + (s.hi - s.lo), prow + cols, T{0});
      }
      // dS = P ⊙ (dP - rowsum(dO ⊙ O)): zero wherever P is.
      const T delta =
          DotLanes<T>(g.dout + (r0 + i) * ldo, g.out + (r0 + i) * ldo, d.D);
      for (int64_t j = 0; j < cols; ++j) drow[j] = prow[j] * (drow[j] - delta);
    }
    // dQ[r0:] (rows, D) += scale · dS (rows, cols) @ K[w] (cols, D)
    Gemm<T>(false, false, rows, d.D, cols, h.scale, ds.data(), cols,
            h.k + w.lo * h.ldkv, h.ldkv, 1, g.dq + r0 * h.ldq, h.ldq);
    // dK[w] (cols, D) += scale · dS^T (cols, rows) @ Q[r0:] (rows, D)
    Gemm<T>(true, false, cols, d.D, rows, h.scale, ds.data(), cols, q, h.ldq, 1,
            g.dk + w.lo * h.ldkv, h.ldkv);
    // dV[w] (cols, D) += P^T (cols, rows) @ dO[r0:] (rows, D)
    Gemm<T>(true, false, cols, d.D, rows, 1, p.data(), cols, dout, ldo, 1,
            g.dv + w.lo * h.ldkv, h.ldkv);
  }
}

void CheckPositions(const char* kernel, const Dims& d, const BlockMask& m) {
  TRELLIS_CHECK(
      m.q_pos != nullptr && m.k_pos != nullptr &&
      m.q_pos->dtype() == DType::kI32 && m.k_pos->dtype() == DType::kI32 &&
      m.q_pos->shape() == Shape({d.Tq}) && m.k_pos->shape() == Shape({d.Tk}))
      << kernel << ": q_pos and k_pos must be int32 (Tq = " << d.Tq
      << ") and (Tk = " << d.Tk << ")";
  const int32_t* kp = m.k_pos->data<int32_t>();
  for (int64_t j = 1; j < d.Tk; ++j) {
    TRELLIS_CHECK(kp[j] >= kp[j - 1])
        << kernel << ": k_pos decreases at " << j << " (" << kp[j - 1] << ", "
        << kp[j] << ")";
  }
  if (m.doc_start == nullptr || !m.doc_start->defined()) return;
  TRELLIS_CHECK(m.doc_start->dtype() == DType::kI32 &&
                m.doc_start->shape() == Shape({d.B, d.Tq}))
      << kernel << ": doc_start " << ShapeString(m.doc_start->shape())
      << ", expected int32 " << ShapeString(Shape{d.B, d.Tq});
  const int32_t* qp = m.q_pos->data<int32_t>();
  const int32_t* s = m.doc_start->data<int32_t>();
  for (int64_t i = 0; i < d.B * d.Tq; ++i) {
    TRELLIS_CHECK(s[i] >= 0 && s[i] <= qp[i % d.Tq])
        << kernel << ": doc_start " << s[i] << " after its query's position "
        << qp[i % d.Tq];
  }
}

// Checks q, kv and the rows/lse tensors; returns the dimensions.
Dims CheckShapes(const char* kernel, const Tensor& q, const Tensor& kv,
                 const BlockMask& mask, int64_t n_head, int64_t n_kv_head,
                 std::initializer_list<const Tensor*> rows, const Tensor& lse) {
  TRELLIS_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0)
      << kernel << ": " << n_head << " query heads in groups over " << n_kv_head
      << " key/value heads";
  TRELLIS_CHECK(q.ndim() == 3 && kv.ndim() == 3 && q.dim(0) == kv.dim(0) &&
                q.dim(2) % n_head == 0 &&
                kv.dim(2) == 2 * n_kv_head * (q.dim(2) / n_head))
      << kernel << ": q " << ShapeString(q.shape()) << ", kv "
      << ShapeString(kv.shape()) << ", " << n_head << " heads, " << n_kv_head
      << " kv heads";
  const Dims d{q.dim(0), q.dim(1),  kv.dim(1),
               n_head,   n_kv_head, q.dim(2) / n_head};
  for (const Tensor* r : rows) {
    TRELLIS_CHECK(r->shape() == q.shape())
        << kernel << ": " << ShapeString(r->shape()) << ", expected "
        << ShapeString(q.shape());
  }
  TRELLIS_CHECK(lse.shape() == Shape({d.B, d.H, d.Tq}))
      << kernel << ": lse " << ShapeString(lse.shape()) << ", expected "
      << ShapeString(Shape{d.B, d.H, d.Tq});
  CheckPositions(kernel, d, mask);
  return d;
}

template <typename T>
void MergeCpu(int64_t rows, int64_t H, int64_t Tq, int64_t D, T* out, T* lse,
              const T* bout, const T* blse) {
  for (int64_t r = 0; r < rows; ++r) {  // r = (b, h, i)
    const int64_t b = r / (H * Tq), h = r / Tq % H, i = r % Tq;
    const T a = lse[r], c = blse[r];
    if (std::isinf(c) && c < 0) continue;
    T* o = out + (b * Tq + i) * H * D + h * D;
    const T* bo = bout + (b * Tq + i) * H * D + h * D;
    if (std::isinf(a) && a < 0) {
      std::copy(bo, bo + D, o);
      lse[r] = c;
      continue;
    }
    const T m = std::max(a, c);
    const T merged = m + std::log(std::exp(a - m) + std::exp(c - m));
    const T wa = std::exp(a - merged), wc = std::exp(c - merged);
    for (int64_t j = 0; j < D; ++j) o[j] = wa * o[j] + wc * bo[j];
    lse[r] = merged;
  }
}

// Copies `width` columns from column `from` of each of `rows` rows of src
// (row stride ls) to column `to` of dst (row stride ld).
template <typename T>
void CopyBand(const T* src, int64_t ls, int64_t from, T* dst, int64_t ld,
              int64_t to, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * ls + from, src + r * ls + from + width,
              dst + r * ld + to);
  }
}

// The widths of the q and kv bands of qkv, checked against q and kv.
std::pair<int64_t, int64_t> Bands(const char* kernel, const Tensor& qkv,
                                  int64_t n_head, int64_t n_kv_head,
                                  const Tensor& q, const Tensor& kv) {
  const int64_t parts = n_head + 2 * n_kv_head;
  TRELLIS_CHECK(n_head > 0 && n_kv_head > 0 && qkv.ndim() == 3 &&
                qkv.dim(2) % parts == 0)
      << kernel << ": qkv " << ShapeString(qkv.shape()) << ", " << n_head
      << " heads, " << n_kv_head << " kv heads";
  const int64_t d = qkv.dim(2) / parts;
  const Shape qs{qkv.dim(0), qkv.dim(1), n_head * d};
  const Shape kvs{qkv.dim(0), qkv.dim(1), 2 * n_kv_head * d};
  TRELLIS_CHECK(q.shape() == qs && kv.shape() == kvs)
      << kernel << ": q " << ShapeString(q.shape()) << " and kv "
      << ShapeString(kv.shape()) << ", expected " << ShapeString(qs) << " and "
      << ShapeString(kvs);
  return {qs[2], kvs[2]};
}

}  // namespace

void SplitQkv(const Tensor& qkv, int64_t n_head, int64_t n_kv_head, Tensor& q,
              Tensor& kv) {
  const char* kernel = "SplitQkv";
  RequireCpu(kernel, {&qkv, &q, &kv});
  RequireDType(kernel, qkv.dtype(), {&q, &kv});
  const auto [wq, wkv] = Bands(kernel, qkv, n_head, n_kv_head, q, kv);
  const int64_t rows = qkv.dim(0) * qkv.dim(1), w = qkv.dim(2);
  DispatchFloat(kernel, qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    CopyBand(qkv.data<T>(), w, 0, q.data<T>(), wq, 0, rows, wq);
    CopyBand(qkv.data<T>(), w, wq, kv.data<T>(), wkv, 0, rows, wkv);
  });
}

void JoinQkv(const Tensor& dq, const Tensor& dkv, int64_t n_head,
             int64_t n_kv_head, Tensor& dqkv) {
  const char* kernel = "JoinQkv";
  RequireCpu(kernel, {&dq, &dkv, &dqkv});
  RequireDType(kernel, dqkv.dtype(), {&dq, &dkv});
  const auto [wq, wkv] = Bands(kernel, dqkv, n_head, n_kv_head, dq, dkv);
  const int64_t rows = dqkv.dim(0) * dqkv.dim(1), w = dqkv.dim(2);
  DispatchFloat(kernel, dqkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    CopyBand(dq.data<T>(), wq, 0, dqkv.data<T>(), w, 0, rows, wq);
    CopyBand(dkv.data<T>(), wkv, 0, dqkv.data<T>(), w, wq, rows, wkv);
  });
}

void BlockAttentionForward(const Tensor& q, const Tensor& kv,
                           const BlockMask& mask, int64_t n_head,
                           int64_t n_kv_head, Tensor& out, Tensor& lse) {
  const char* kernel = "BlockAttentionForward";
  RequireCpu(kernel, {&q, &kv, &out, &lse});
  RequireDType(kernel, q.dtype(), {&kv, &out, &lse});
  const Dims d =
      CheckShapes(kernel, q, kv, mask, n_head, n_kv_head, {&out}, lse);
  DispatchFloat(kernel, q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    thread_local std::vector<T> p;
    p.resize(kRows * std::max<int64_t>(d.Tk, 1));
    for (int64_t b = 0; b < d.B; ++b) {
      const std::vector<Span> spans = Spans(d, mask, b);
      for (int64_t h = 0; h < d.H; ++h) {
        HeadForward(d, MakeHead(d, q.data<T>(), kv.data<T>(), b, h), spans,
                    out.data<T>() + b * d.Tq * d.QWidth() + h * d.D,
                    lse.data<T>() + (b * d.H + h) * d.Tq, p);
      }
    }
  });
}

void AttentionMergeBlock(Tensor& out, Tensor& lse, const Tensor& block_out,
                         const Tensor& block_lse) {
  const char* kernel = "AttentionMergeBlock";
  RequireCpu(kernel, {&out, &lse, &block_out, &block_lse});
  RequireDType(kernel, out.dtype(), {&lse, &block_out, &block_lse});
  TRELLIS_CHECK(out.ndim() == 3 && lse.ndim() == 3 &&
                block_out.shape() == out.shape() &&
                block_lse.shape() == lse.shape() && lse.dim(0) == out.dim(0) &&
                lse.dim(2) == out.dim(1) && lse.dim(1) > 0 &&
                out.dim(2) % lse.dim(1) == 0)
      << kernel << ": out " << ShapeString(out.shape()) << ", lse "
      << ShapeString(lse.shape()) << ", block "
      << ShapeString(block_out.shape()) << " and "
      << ShapeString(block_lse.shape());
  const int64_t H = lse.dim(1), Tq = lse.dim(2), D = out.dim(2) / H;
  DispatchFloat(kernel, out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    MergeCpu(lse.numel(), H, Tq, D, out.data<T>(), lse.data<T>(),
             block_out.data<T>(), block_lse.data<T>());
  });
}

void BlockAttentionBackward(const Tensor& dout, const Tensor& q,
                            const Tensor& kv, const BlockMask& mask,
                            const Tensor& out, const Tensor& lse,
                            int64_t n_head, int64_t n_kv_head, Tensor& dq,
                            Tensor& dkv) {
  const char* kernel = "BlockAttentionBackward";
  RequireCpu(kernel, {&dout, &q, &kv, &out, &lse, &dq, &dkv});
  RequireDType(kernel, q.dtype(), {&dout, &kv, &out, &lse, &dq, &dkv});
  const Dims d = CheckShapes(kernel, q, kv, mask, n_head, n_kv_head,
                             {&dout, &out, &dq}, lse);
  TRELLIS_CHECK(dkv.shape() == kv.shape())
      << kernel << ": dkv " << ShapeString(dkv.shape()) << ", kv "
      << ShapeString(kv.shape());
  DispatchFloat(kernel, q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    thread_local std::vector<T> p, ds;
    p.resize(kRows * std::max<int64_t>(d.Tk, 1));
    ds.resize(p.size());
    for (int64_t b = 0; b < d.B; ++b) {
      const std::vector<Span> spans = Spans(d, mask, b);
      for (int64_t h = 0; h < d.H; ++h) {
        const Head<T> head = MakeHead(d, q.data<T>(), kv.data<T>(), b, h);
        const int64_t row = b * d.Tq * d.QWidth() + h * d.D;
        T* kv_rows = dkv.data<T>() + b * d.Tk * d.KvWidth();
        const HeadGrad<T> g{lse.data<T>() + (b * d.H + h) * d.Tq,
                            out.data<T>() + row,
                            dout.data<T>() + row,
                            dq.data<T>() + row,
                            kv_rows + d.KeyOffset(h),
                            kv_rows + d.ValueOffset(h)};
        HeadBackward(d, head, spans, g, p, ds);
      }
    }
  });
}

}  // namespace trellis
