#include "framework/kernels/rope.h"

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

absl::Status CheckScaling(const RopeScaling& s) {
  if (s.type == RopeScalingType::kNone) return absl::OkStatus();
  if (!(s.factor > 0) || !(s.low_freq_factor > 0) ||
      !(s.high_freq_factor > s.low_freq_factor) ||
      !(s.original_max_position_embeddings > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama3 RoPE scaling needs factor > 0, 0 < low_freq_factor < "
        "high_freq_factor and original_max_position_embeddings > 0; got "
        "factor ",
        s.factor, ", low_freq_factor ", s.low_freq_factor,
        ", high_freq_factor ", s.high_freq_factor,
        ", original_max_position_embeddings ",
        s.original_max_position_embeddings));
  }
  return absl::OkStatus();
}

// Llama 3.1's rescaling of one inverse frequency.
double Llama3Frequency(double inv_freq, const RopeScaling& s) {
  const double wavelen = 2 * std::numbers::pi / inv_freq;
  const double low_freq_wavelen =
      s.original_max_position_embeddings / s.low_freq_factor;
  const double high_freq_wavelen =
      s.original_max_position_embeddings / s.high_freq_factor;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / s.factor;
  const double smooth =
      (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
      (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

// Rotates (sign = +1) or rotates back (sign = -1) the first `heads` heads of
// every row of x (rows, W), head width D; row r at position r mod T.
template <typename T>
void RotateCpu(T* x, int64_t rows, int64_t W, int64_t T_len, int64_t heads,
               int64_t D, const T* cos, const T* sin, T sign) {
  const int64_t half = D / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % T_len;
    const T* c = cos + t * half;
    const T* s = sin + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      T* lo = x + r * W + h * D;
      T* hi = lo + half;
      for (int64_t i = 0; i < half; ++i) {
        const T a = lo[i], b = hi[i], si = sign * s[i];
        lo[i] = a * c[i] - b * si;
        hi[i] = b * c[i] + a * si;
      }
    }
  }
}

struct Dims {
  int64_t rows, T, W, D;
};

// Checks qkv (..., T, (H + 2·Hkv)·D) and the (T_table >= T, D/2) tables.
Dims CheckShapes(const char* kernel, const Tensor& qkv, int64_t n_head,
                 int64_t n_kv_head, const Tensor& cos, const Tensor& sin) {
  TRELLIS_CHECK(n_head > 0 && n_kv_head > 0)
      << kernel << ": " << n_head << " heads, " << n_kv_head << " kv heads";
  const int64_t parts = n_head + 2 * n_kv_head;
  TRELLIS_CHECK(qkv.ndim() >= 2 && qkv.dim(-1) % parts == 0 &&
                (qkv.dim(-1) / parts) % 2 == 0)
      << kernel << ": qkv " << ShapeString(qkv.shape()) << " is not " << parts
      << " heads of an even width";
  const Dims d{qkv.numel() == 0 ? 0 : qkv.numel() / qkv.dim(-1), qkv.dim(-2),
               qkv.dim(-1), qkv.dim(-1) / parts};
  TRELLIS_CHECK(cos.ndim() == 2 && cos.shape() == sin.shape() &&
                cos.dim(1) == d.D / 2 && cos.dim(0) >= d.T)
      << kernel << ": tables " << ShapeString(cos.shape()) << " and "
      << ShapeString(sin.shape()) << " for qkv " << ShapeString(qkv.shape())
      << " (need (>= " << d.T << ", " << d.D / 2 << "))";
  return d;
}

void Rotate(const char* kernel, Tensor& qkv, int64_t n_head, int64_t n_kv_head,
            const Tensor& cos, const Tensor& sin, double sign) {
  RequireCpu(kernel, {&qkv, &cos, &sin});
  RequireDType(kernel, qkv.dtype(), {&cos, &sin});
  const Dims d = CheckShapes(kernel, qkv, n_head, n_kv_head, cos, sin);
  if (d.rows == 0) return;
  DispatchFloat(kernel, qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    RotateCpu(qkv.data<T>(), d.rows, d.W, d.T, n_head + n_kv_head, d.D,
              cos.data<T>(), sin.data<T>(), static_cast<T>(sign));
  });
}

}  // namespace

std::string_view RopeScalingTypeName(RopeScalingType type) {
  return type == RopeScalingType::kLlama3 ? "llama3" : "none";
}

absl::StatusOr<RopeScalingType> ParseRopeScalingType(std::string_view name) {
  if (name == "none") return RopeScalingType::kNone;
  if (name == "llama3") return RopeScalingType::kLlama3;
  return absl::InvalidArgumentError(absl::StrCat("unknown RoPE scaling '",
                                                 std::string(name),
                                                 "'; expected none or llama3"));
}

absl::StatusOr<std::vector<double>> RopeInverseFrequencies(
    int64_t head_dim, double theta, const RopeScaling& scaling) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RoPE needs an even, positive head width; got ", head_dim));
  }
  if (!(theta > 0) || !std::isfinite(theta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RoPE theta must be positive; got ", theta));
  }
  if (absl::Status s = CheckScaling(scaling); !s.ok()) return s;
  std::vector<double> inv_freq(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) /
                                            static_cast<double>(head_dim));
    if (scaling.type == RopeScalingType::kLlama3) {
      inv_freq[i] = Llama3Frequency(inv_freq[i], scaling);
    }
  }
  return inv_freq;
}

absl::StatusOr<RopeTables> RopeTable(int64_t head_dim, int64_t seq_len,
                                     double theta, const RopeScaling& scaling,
                                     DType dtype) {
  if (seq_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RoPE table for ", seq_len, " positions"));
  }
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RoPE tables are float32 or float64, not ", DTypeName(dtype)));
  }
  absl::StatusOr<std::vector<double>> inv_freq =
      RopeInverseFrequencies(head_dim, theta, scaling);
  if (!inv_freq.ok()) return inv_freq.status();
  const int64_t half = head_dim / 2;
  RopeTables tables{Tensor::Empty({seq_len, half}, dtype),
                    Tensor::Empty({seq_len, half}, dtype)};
  for (int64_t t = 0; t < seq_len; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * (*inv_freq)[i];
      if (dtype == DType::kF64) {
        tables.cos.data<double>()[t * half + i] = std::cos(angle);
        tables.sin.data<double>()[t * half + i] = std::sin(angle);
      } else {
        tables.cos.data<float>()[t * half + i] =
            static_cast<float>(std::cos(angle));
        tables.sin.data<float>()[t * half + i] =
            static_cast<float>(std::sin(angle));
      }
    }
  }
  return tables;
}

void RopeForward(Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                 const Tensor& cos, const Tensor& sin) {
  TRELLIS_CUDA_DISPATCH(cuda::RopeForward(qkv, n_head, n_kv_head, cos, sin),
                        &qkv, &cos, &sin);
  Rotate("RopeForward", qkv, n_head, n_kv_head, cos, sin, 1.0);
}

void RopeBackward(Tensor& dqkv, int64_t n_head, int64_t n_kv_head,
                  const Tensor& cos, const Tensor& sin) {
  TRELLIS_CUDA_DISPATCH(cuda::RopeBackward(dqkv, n_head, n_kv_head, cos, sin),
                        &dqkv, &cos, &sin);
  Rotate("RopeBackward", dqkv, n_head, n_kv_head, cos, sin, -1.0);
}

}  // namespace trellis
