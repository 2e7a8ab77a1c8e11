#include "framework/kernels/embedding.h"

#include <algorithm>
#include <cstdint>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

// out (N, C) = table (Vl, C) [ids (N) - vocab_start], or 0 outside the shard.
template <typename T>
void EmbeddingForwardCpu(const int32_t* ids, const T* __restrict table,
                         int64_t Vl, int64_t vocab_start, int64_t N, int64_t C,
                         T* __restrict out) {
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = static_cast<int64_t>(ids[i]) - vocab_start;
    T* out_row = out + i * C;
    if (row >= 0 && row < Vl) {
      std::copy_n(table + row * C, C, out_row);
    } else {
      std::fill_n(out_row, C, T{0});
    }
  }
}

template <typename T>
void EmbeddingBackwardWeightCpu(const int32_t* ids, const T* __restrict dout,
                                int64_t vocab_start, int64_t N, int64_t C,
                                int64_t Vl, T* __restrict dtable) {
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = static_cast<int64_t>(ids[i]) - vocab_start;
    if (row < 0 || row >= Vl) continue;
    const T* d = dout + i * C;
    T* g = dtable + row * C;
    for (int64_t c = 0; c < C; ++c) g[c] += d[c];
  }
}

// x (B, T, C) += wpe (T_max, C) rows 0..T-1.
template <typename T>
void AddPositionEmbeddingCpu(const T* __restrict wpe, int64_t B, int64_t Tn,
                             int64_t C, T* __restrict x) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Tn; ++t) {
      T* row = x + (b * Tn + t) * C;
      const T* w = wpe + t * C;
      for (int64_t c = 0; c < C; ++c) row[c] += w[c];
    }
  }
}

// dwpe (T_max, C) rows 0..T-1 += sum over b of dout (B, T, C).
template <typename T>
void PositionEmbeddingBackwardWeightCpu(const T* __restrict dout, int64_t B,
                                        int64_t Tn, int64_t C,
                                        T* __restrict dwpe) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Tn; ++t) {
      const T* d = dout + (b * Tn + t) * C;
      T* g = dwpe + t * C;
      for (int64_t c = 0; c < C; ++c) g[c] += d[c];
    }
  }
}

// ids (any shape, N elements) and rows (..., C) of N·C elements.
void CheckEmbeddingShapes(const char* kernel, const Tensor& ids,
                          const Tensor& table, const Tensor& rows) {
  TRELLIS_CHECK(ids.dtype() == DType::kI32)
      << kernel << ": ids are " << DTypeName(ids.dtype()) << ", not int32";
  TRELLIS_CHECK_EQ(table.ndim(), 2)
      << kernel << " table " << ShapeString(table.shape());
  TRELLIS_CHECK(rows.ndim() >= 1 && rows.dim(-1) == table.dim(1) &&
                rows.numel() == ids.numel() * table.dim(1))
      << kernel << ": ids " << ShapeString(ids.shape()) << ", table "
      << ShapeString(table.shape()) << ", rows " << ShapeString(rows.shape());
}

void CheckPositionShapes(const char* kernel, const Tensor& wpe,
                         const Tensor& x) {
  TRELLIS_CHECK(wpe.ndim() == 2 && x.ndim() == 3 && x.dim(2) == wpe.dim(1) &&
                x.dim(1) <= wpe.dim(0))
      << kernel << ": wpe " << ShapeString(wpe.shape()) << ", x "
      << ShapeString(x.shape());
}

}  // namespace

void EmbeddingForward(const Tensor& ids, const Tensor& table,
                      int64_t vocab_start, Tensor& out) {
  TRELLIS_CUDA_DISPATCH(cuda::EmbeddingForward(ids, table, vocab_start, out),
                        &ids, &table, &out);
  RequireCpu("EmbeddingForward", {&ids, &table, &out});
  RequireDType("EmbeddingForward", table.dtype(), {&out});
  CheckEmbeddingShapes("EmbeddingForward", ids, table, out);
  DispatchFloat("EmbeddingForward", table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EmbeddingForwardCpu(ids.data<int32_t>(), table.data<T>(), table.dim(0),
                        vocab_start, ids.numel(), table.dim(1), out.data<T>());
  });
}

void EmbeddingBackwardWeight(const Tensor& ids, const Tensor& dout,
                             int64_t vocab_start, Tensor& dtable) {
  TRELLIS_CUDA_DISPATCH(
      cuda::EmbeddingBackwardWeight(ids, dout, vocab_start, dtable), &ids,
      &dout, &dtable);
  RequireCpu("EmbeddingBackwardWeight", {&ids, &dout, &dtable});
  RequireDType("EmbeddingBackwardWeight", dtable.dtype(), {&dout});
  CheckEmbeddingShapes("EmbeddingBackwardWeight", ids, dtable, dout);
  DispatchFloat("EmbeddingBackwardWeight", dtable.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EmbeddingBackwardWeightCpu(ids.data<int32_t>(), dout.data<T>(), vocab_start,
                               ids.numel(), dtable.dim(1), dtable.dim(0),
                               dtable.data<T>());
  });
}

void AddPositionEmbedding(const Tensor& wpe, Tensor& x) {
  TRELLIS_CUDA_DISPATCH(cuda::AddPositionEmbedding(wpe, x), &wpe, &x);
  RequireCpu("AddPositionEmbedding", {&wpe, &x});
  RequireDType("AddPositionEmbedding", wpe.dtype(), {&x});
  CheckPositionShapes("AddPositionEmbedding", wpe, x);
  DispatchFloat("AddPositionEmbedding", wpe.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AddPositionEmbeddingCpu(wpe.data<T>(), x.dim(0), x.dim(1), x.dim(2),
                            x.data<T>());
  });
}

void PositionEmbeddingBackwardWeight(const Tensor& dout, Tensor& dwpe) {
  TRELLIS_CUDA_DISPATCH(cuda::PositionEmbeddingBackwardWeight(dout, dwpe),
                        &dout, &dwpe);
  RequireCpu("PositionEmbeddingBackwardWeight", {&dout, &dwpe});
  RequireDType("PositionEmbeddingBackwardWeight", dwpe.dtype(), {&dout});
  CheckPositionShapes("PositionEmbeddingBackwardWeight", dwpe, dout);
  DispatchFloat("PositionEmbeddingBackwardWeight", dwpe.dtype(), [&](auto tag) {
    using T = decltype(tag);
    PositionEmbeddingBackwardWeightCpu(dout.data<T>(), dout.dim(0), dout.dim(1),
                                       dout.dim(2), dwpe.data<T>());
  });
}

}  // namespace trellis
