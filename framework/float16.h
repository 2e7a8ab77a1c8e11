// Conversions between float and the two 16-bit float formats, bit for bit.
//
//   bfloat16: 1 sign, 8 exponent, 7 mantissa bits (the top half of a float).
//   float16:  IEEE 754 binary16, 1 sign, 5 exponent, 10 mantissa bits.
//
// Narrowing rounds to nearest, ties to even (what PyTorch and NumPy do), so a
// float16 or bfloat16 value widened to float and narrowed again comes back
// bit for bit. NaNs stay NaNs (quiet); overflow goes to infinity.
//
// Also ConvertElements, which moves n elements between any two of float32,
// float64, float16 and bfloat16 buffers through these rules.
//
// Thread safety: pure functions.
#ifndef TRELLIS_FRAMEWORK_FLOAT16_H_
#define TRELLIS_FRAMEWORK_FLOAT16_H_

#include <cstdint>
#include <cstring>

#include "framework/tensor.h"

namespace trellis {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float Bf16ToFloat(uint16_t h) {
  return FloatFromBits(uint32_t{h} << 16);
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet and a NaN.
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // Inf or NaN.
    return FloatFromBits(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent != 0) {
    return FloatFromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return FloatFromBits(sign);
  // Subnormal: normalize.
  int e = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return FloatFromBits(sign | (static_cast<uint32_t>(e) << 23) |
                       ((mantissa & 0x3ffu) << 13));
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN.
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // Rounds to infinity.
  const int exponent = static_cast<int>(magnitude >> 23);
  if (exponent >= 113) {  // Normal in half precision.
    const uint32_t rounding = 0xfffu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign |
                                 ((magnitude - (112u << 23) + rounding) >> 13));
  }
  if (exponent < 102) return sign;  // Below half the smallest subnormal.
  // Subnormal: shift the full mantissa (with its implicit bit) into place.
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const int shift = 126 - exponent;  // 14..24
  const uint32_t half_bit = 1u << (shift - 1);
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  uint32_t result = mantissa >> shift;
  if (rest > half_bit || (rest == half_bit && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

// Whether ConvertElements handles `dtype`.
inline bool IsFloatingDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 ||
         dtype == DType::kBF16;
}

// Converts `n` elements. REQUIRES: both dtypes IsFloatingDType; the buffers
// do not overlap unless the dtypes are equal and from == to.
inline void ConvertElements(const void* from, DType from_dtype, void* to,
                            DType to_dtype, int64_t n) {
  if (from_dtype == to_dtype) {
    if (from != to) std::memmove(to, from, n * DTypeSize(from_dtype));
    return;
  }
  auto load = [&](int64_t i) -> double {
    switch (from_dtype) {
      case DType::kF32:
        return static_cast<const float*>(from)[i];
      case DType::kF64:
        return static_cast<const double*>(from)[i];
      case DType::kF16:
        return HalfToFloat(static_cast<const uint16_t*>(from)[i]);
      default:
        return Bf16ToFloat(static_cast<const uint16_t*>(from)[i]);
    }
  };
  switch (to_dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) {
        static_cast<float*>(to)[i] = static_cast<float>(load(i));
      }
      break;
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) static_cast<double*>(to)[i] = load(i);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        static_cast<uint16_t*>(to)[i] =
            FloatToHalf(static_cast<float>(load(i)));
      }
      break;
    default:
      for (int64_t i = 0; i < n; ++i) {
        static_cast<uint16_t*>(to)[i] =
            FloatToBf16(static_cast<float>(load(i)));
      }
      break;
  }
}

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_FLOAT16_H_
