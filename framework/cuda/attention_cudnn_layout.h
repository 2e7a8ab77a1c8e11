// The (B, H, T, D) views that cuDNN's attention graphs read and write, as
// strided windows of trellis's packed buffers. Pure arithmetic, no CUDA.
//
//   qkv (B, T, 3C), C = H·D: head h of Q at column h·D, K at C + h·D, V at
//     2C + h·D; element (b, h, t, d) of part p at
//     b·T·3C + t·3C + p·C + h·D + d.
//   Grouped-query qkv (B, T, W), W = (H + 2·Hkv)·D: H Q heads at column 0,
//     Hkv K heads at H·D, Hkv V heads at (H + Hkv)·D; with Hkv = H it is
//     the packed layout above.
//   out, dout (B, T, C): (b, h, t, d) at b·T·C + t·C + h·D + d.
//   stats (B, H, T), trellis's saved row log-sum-exps: (b, h, t) at
//     b·H·T + h·T + t, as cuDNN's (B, H, T, 1) stats tensor.
//
// A View is dims, strides (elements) and the element offset of its first
// element from the buffer's start. K is also read transposed, (B, H, D, T):
// dims and strides of the last two axes swapped.
//
// Thread safety: pure functions.
#ifndef TRELLIS_FRAMEWORK_CUDA_ATTENTION_CUDNN_LAYOUT_H_
#define TRELLIS_FRAMEWORK_CUDA_ATTENTION_CUDNN_LAYOUT_H_

#include <array>
#include <cstdint>
#include <utility>

namespace trellis {
namespace cudnn_attention {

struct View {
  std::array<int64_t, 4> dims;
  std::array<int64_t, 4> strides;
  int64_t offset = 0;
};

enum class QkvPart : int { kQ = 0, kK = 1, kV = 2 };

// Part p of a grouped-query qkv (or dqkv) buffer: (B, H, T, D) for Q,
// (B, Hkv, T, D) for K and V.
inline View GroupedQkvView(int64_t B, int64_t T, int64_t H, int64_t Hkv,
                           int64_t D, QkvPart part) {
  const int64_t W = (H + 2 * Hkv) * D;
  const int64_t heads = part == QkvPart::kQ ? H : Hkv;
  const int64_t offset = part == QkvPart::kQ   ? 0
                         : part == QkvPart::kK ? H * D
                                               : (H + Hkv) * D;
  return View{{B, heads, T, D}, {T * W, D, W, 1}, offset};
}

// Part p of the packed qkv (or dqkv) buffer, (B, H, T, D).
inline View PackedQkvView(int64_t B, int64_t T, int64_t H, int64_t D,
                          QkvPart part) {
  return GroupedQkvView(B, T, H, H, D, part);
}

// out or dout (B, T, C) as (B, H, T, D).
inline View RowsView(int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D;
  return View{{B, H, T, D}, {T * C, D, C, 1}, 0};
}

// The saved row statistics (B, H, T) as (B, H, T, 1).
inline View StatsView(int64_t B, int64_t T, int64_t H) {
  return View{{B, H, T, 1}, {H * T, T, 1, 1}, 0};
}

// A dense (B, H, rows, cols) tensor, last axis fastest.
inline View DenseView(int64_t B, int64_t H, int64_t rows, int64_t cols) {
  return View{{B, H, rows, cols}, {H * rows * cols, rows * cols, cols, 1}, 0};
}

// The view with its last two axes swapped (a transposed read).
inline View Transposed(View v) {
  std::swap(v.dims[2], v.dims[3]);
  std::swap(v.strides[2], v.strides[3]);
  return v;
}

// Where element (b, h, t, d) of view v lies, in elements from the buffer's
// start.
inline int64_t ElementAt(const View& v, int64_t b, int64_t h, int64_t t,
                         int64_t d) {
  return v.offset + b * v.strides[0] + h * v.strides[1] + t * v.strides[2] +
         d * v.strides[3];
}

}  // namespace cudnn_attention
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_ATTENTION_CUDNN_LAYOUT_H_
