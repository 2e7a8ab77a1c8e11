// Rotary position embeddings (RoPE) for Llama-family attention.
//
// Layout: rotate-half per head, as Hugging Face's Llama: within a head of D
// channels, channel i (i < D/2) pairs with channel i + D/2 and the pair is
// rotated by the angle t · inv_freq[i] for position t:
//   x[i]       ← x[i] · cos - x[i + D/2] · sin
//   x[i + D/2] ← x[i + D/2] · cos + x[i] · sin
// so Q and K projection weights converted from Hugging Face need no
// permutation.
//
// Frequencies: inv_freq[i] = theta^(-2i/D), optionally rescaled as Llama 3.1
// does ("llama3": Hugging Face transformers' _compute_llama3_parameters):
// with wavelength λ = 2π / inv_freq, low = original_max / low_freq_factor
// and high = original_max / high_freq_factor,
//   λ < high:         inv_freq unchanged (high frequencies);
//   λ > low:          inv_freq / factor (low frequencies);
//   otherwise:        (1 - s) · inv_freq / factor + s · inv_freq with
//                     s = (original_max / λ - low_freq_factor) /
//                         (high_freq_factor - low_freq_factor).
// The frequencies and angles are computed in float64 and the tables rounded
// once to their dtype (Hugging Face computes them in float32; the angles
// differ by float32 rounding, about 6e-8 relative).
//
// The rotation applies in place to the Q and K parts of a packed qkv whose
// rows are [H q heads | Hkv k heads | Hkv v heads], D channels each (the
// layout the grouped-query AttentionForward reads), shape (..., T, W) with
// W = (H + 2·Hkv)·D: row r of the flattened rows has position r mod T,
// T = qkv.dim(-2). V is left alone.
//
// Thread safety: RopeTable is pure; the kernels as every kernel.
#ifndef TRELLIS_FRAMEWORK_KERNELS_ROPE_H_
#define TRELLIS_FRAMEWORK_KERNELS_ROPE_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "framework/tensor.h"

namespace trellis {

enum class RopeScalingType : uint8_t { kNone, kLlama3 };

// "none" or "llama3" (Hugging Face's rope_type), and back; InvalidArgument
// naming the choices for anything else.
std::string_view RopeScalingTypeName(RopeScalingType type);
absl::StatusOr<RopeScalingType> ParseRopeScalingType(std::string_view name);

// Hugging Face's rope_scaling fields (Llama 3.1's values as defaults); only
// read when type is kLlama3.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
};

// The (D/2) inverse frequencies, scaled as `scaling` says. InvalidArgument
// for an odd or non-positive head_dim, theta <= 0, or llama3 scaling with
// factor <= 0, low_freq_factor <= 0, high_freq_factor <= low_freq_factor or
// original_max_position_embeddings <= 0.
absl::StatusOr<std::vector<double>> RopeInverseFrequencies(
    int64_t head_dim, double theta, const RopeScaling& scaling);

// cos and sin of t · inv_freq[i] for positions t < seq_len: (seq_len, D/2)
// CPU tensors of dtype float32 or float64 (CUDA callers copy them to the
// device as float32). Errors as RopeInverseFrequencies, and InvalidArgument
// for seq_len < 0 or another dtype.
struct RopeTables {
  Tensor cos;
  Tensor sin;
};
absl::StatusOr<RopeTables> RopeTable(int64_t head_dim, int64_t seq_len,
                                     double theta, const RopeScaling& scaling,
                                     DType dtype = DType::kF32);

// Rotates the q and k heads of qkv (..., T, (H + 2·Hkv)·D) in place by the
// angles of their positions. cos, sin (T_table >= T, D/2): on the CPU of
// qkv's dtype, on CUDA float32 (for float32 and bfloat16 qkv).
// REQUIRES: n_head > 0, n_kv_head > 0 (no divisibility needed here).
void RopeForward(Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                 const Tensor& cos, const Tensor& sin);
// The backward of RopeForward: rotates dq and dk in dqkv back by the same
// angles (the transposed rotation), in place; dv is left alone. So dqkv,
// holding the gradient with respect to the rotated q and k, ends up holding
// the gradient with respect to the unrotated ones (which is why it rotates
// rather than accumulates: run it once the attention backward has added
// everything it adds).
void RopeBackward(Tensor& dqkv, int64_t n_head, int64_t n_kv_head,
                  const Tensor& cos, const Tensor& sin);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_ROPE_H_
