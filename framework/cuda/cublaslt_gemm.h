// Internal to framework/cuda/matmul.cc: one column-major GEMM through
// cuBLASLt, with the per-problem plan cache, and through cublasGemmEx where
// cuBLASLt has no algorithm.
//
// Each thread keeps, per device, a cuBLASLt handle, a cuBLAS handle, a
// 32 MiB workspace and, per problem (shape, strides, dtypes, transposes,
// epilogue, beta and the alignments), the matmul descriptor, the three
// matrix layouts and the algorithm the heuristic chose (asked once), or
// with --gemm_autotune (framework/gemm_tuning.h) the fastest of its first
// candidates, timed on the problem's first call. Only the bias and aux
// pointers are set again per call. They live until the
// process exits. Every GEMM run counts one launch (framework/launch_count.h).
#ifndef TRELLIS_FRAMEWORK_CUDA_CUBLASLT_GEMM_H_
#define TRELLIS_FRAMEWORK_CUDA_CUBLASLT_GEMM_H_

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

namespace trellis {
namespace cuda {
namespace cublaslt {

// One column-major GEMM: D (m, n) = op(A) (m, k) · op(B) (k, n) + beta · C,
// then the epilogue; C is D unless `c` is set.
struct Gemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  // C (m, n) of d_type, ld = ldd, read with beta; null: C is D.
  const void* c = nullptr;
  cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
  float beta = 0.f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  // (m) for the bias epilogues, (m) for BGRADA, (n) for BGRADB; written by
  // the gradient epilogues.
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;  // set with `bias`
  void* aux = nullptr;  // GELU input (m, n), of d_type, ld = ldd
};

// The alignment cuBLASLt may assume for a matrix: that of its pointer and of
// its column stride, at most 256 bytes.
uint32_t Alignment(const void* pointer, int64_t ld, size_t elem_bytes);

// Runs `g` through cuBLASLt on ComputeStream(); false (nothing run) when
// cuBLASLt has no algorithm for it.
bool TryLtGemm(int device, const Gemm& g);
// `g` without its epilogue through cublasGemmEx (any alignment).
void FallbackGemm(int device, const Gemm& g);
// Prints, once per epilogue kind (per thread and device), that a fused
// epilogue fell back to separate passes.
void ReportFallback(int device, const Gemm& g);

}  // namespace cublaslt
}  // namespace cuda
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_CUBLASLT_GEMM_H_
