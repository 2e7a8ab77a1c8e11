// Float exp/tanh over arrays, declared in cpu_common.h.
//
// exp(x): x = n·ln2 + r with |r| <= ln2/2, a degree-6 Taylor polynomial for
// exp(r) (truncation below 1.2e-7 relative), and 2^n assembled in the
// exponent bits. The same steps run on 8 lanes (AVX2 + FMA, chosen at run
// time, since the build targets x86-64-v2) or 4 lanes (SSE2); elsewhere libm
// runs. Array tails go through a padded buffer, so every element of an array
// sees the same arithmetic.
#include "framework/kernels/cpu_common.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TRELLIS_X86_SIMD 1
#endif

namespace trellis {
namespace kernels_internal {
namespace {

// What an array loop computes per element, and the tail's padding.
enum class Op { kExpShiftSum, kExpShiftScale, kTanh };

constexpr float kPad[] = {-INFINITY, 0.0f, 0.0f};  // exp(-inf) adds nothing
constexpr float kRound = 12582912.0f;              // 1.5·2^23
constexpr float kLog2e = 1.44269504f;
constexpr float kLn2Hi = 0.693145752f;  // ln2 split: n·kLn2Hi is exact
constexpr float kLn2Lo = 1.42860677e-6f;
constexpr float kLow = -87.3f, kHigh = 88.0f;
constexpr float kCoeffs[] = {
    1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};

#if defined(TRELLIS_X86_SIMD)

__m128 Exp4(__m128 x) {
  const __m128 xc =
      _mm_min_ps(_mm_max_ps(x, _mm_set1_ps(kLow)), _mm_set1_ps(kHigh));
  const __m128 shifted =
      _mm_add_ps(_mm_mul_ps(xc, _mm_set1_ps(kLog2e)), _mm_set1_ps(kRound));
  const __m128 n = _mm_sub_ps(shifted, _mm_set1_ps(kRound));
  const __m128i ni =
      _mm_sub_epi32(_mm_castps_si128(shifted), _mm_set1_epi32(0x4B400000));
  __m128 r = _mm_sub_ps(xc, _mm_mul_ps(n, _mm_set1_ps(kLn2Hi)));
  r = _mm_sub_ps(r, _mm_mul_ps(n, _mm_set1_ps(kLn2Lo)));
  __m128 p = _mm_set1_ps(kCoeffs[0]);
  for (int i = 1; i < 7; ++i) {
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kCoeffs[i]));
  }
  const __m128 scale = _mm_castsi128_ps(
      _mm_slli_epi32(_mm_add_epi32(ni, _mm_set1_epi32(127)), 23));
  __m128 e = _mm_mul_ps(p, scale);
  e = _mm_andnot_ps(_mm_cmplt_ps(x, _mm_set1_ps(kLow)), e);
  return _mm_or_ps(e, _mm_and_ps(_mm_cmpunord_ps(x, x), x));
}

template <Op op>
float LoopSse(const float* x, int64_t n, float shift, float mul, float* y) {
  const __m128 s = _mm_set1_ps(shift), m = _mm_set1_ps(mul);
  const __m128 one = _mm_set1_ps(1.0f), two = _mm_set1_ps(2.0f);
  __m128 acc = _mm_setzero_ps();
  float buf[4];
  for (int64_t i = 0; i < n; i += 4) {
    const bool tail = i + 4 > n;
    if (tail) {
      std::fill_n(buf, 4, kPad[static_cast<int>(op)]);
      std::copy(x + i, x + n, buf);
    }
    const __m128 v = _mm_loadu_ps(tail ? buf : x + i);
    __m128 out;
    if constexpr (op == Op::kTanh) {
      const __m128 e = Exp4(_mm_mul_ps(v, two));
      out = _mm_sub_ps(one, _mm_div_ps(two, _mm_add_ps(e, one)));
    } else {
      out = Exp4(_mm_sub_ps(v, s));
      if constexpr (op == Op::kExpShiftSum) acc = _mm_add_ps(acc, out);
      if constexpr (op == Op::kExpShiftScale) out = _mm_mul_ps(out, m);
    }
    _mm_storeu_ps(tail ? buf : y + i, out);
    if (tail) std::copy(buf, buf + (n - i), y + i);
  }
  _mm_storeu_ps(buf, acc);
  return (buf[0] + buf[1]) + (buf[2] + buf[3]);
}

#define TRELLIS_AVX2 __attribute__((target("avx2,fma")))

TRELLIS_AVX2 __m256 Exp8(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kLow)),
                                  _mm256_set1_ps(kHigh));
  const __m256 shifted =
      _mm256_fmadd_ps(xc, _mm256_set1_ps(kLog2e), _mm256_set1_ps(kRound));
  const __m256 n = _mm256_sub_ps(shifted, _mm256_set1_ps(kRound));
  const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(shifted),
                                      _mm256_set1_epi32(0x4B400000));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kCoeffs[0]);
  for (int i = 1; i < 7; ++i) {
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kCoeffs[i]));
  }
  const __m256 scale = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
  __m256 e = _mm256_mul_ps(p, scale);
  e = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(kLow), _CMP_LT_OQ), e);
  return _mm256_or_ps(e, _mm256_and_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q), x));
}

template <Op op>
TRELLIS_AVX2 float LoopAvx2(const float* x, int64_t n, float shift, float mul,
                            float* y) {
  const __m256 s = _mm256_set1_ps(shift), m = _mm256_set1_ps(mul);
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  __m256 acc = _mm256_setzero_ps();
  float buf[8];
  for (int64_t i = 0; i < n; i += 8) {
    const bool tail = i + 8 > n;
    if (tail) {
      std::fill_n(buf, 8, kPad[static_cast<int>(op)]);
      std::copy(x + i, x + n, buf);
    }
    const __m256 v = _mm256_loadu_ps(tail ? buf : x + i);
    __m256 out;
    if constexpr (op == Op::kTanh) {
      const __m256 e = Exp8(_mm256_mul_ps(v, two));
      out = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(e, one)));
    } else {
      out = Exp8(_mm256_sub_ps(v, s));
      if constexpr (op == Op::kExpShiftSum) acc = _mm256_add_ps(acc, out);
      if constexpr (op == Op::kExpShiftScale) out = _mm256_mul_ps(out, m);
    }
    _mm256_storeu_ps(tail ? buf : y + i, out);
    if (tail) std::copy(buf, buf + (n - i), y + i);
  }
  _mm256_storeu_ps(buf, acc);
  return ((buf[0] + buf[1]) + (buf[2] + buf[3])) +
         ((buf[4] + buf[5]) + (buf[6] + buf[7]));
}

#endif  // TRELLIS_X86_SIMD

// One element at a time through libm: the portable path.
template <Op op>
float LoopScalar(const float* x, int64_t n, float shift, float mul, float* y) {
  float total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (op == Op::kTanh) {
      y[i] = std::tanh(x[i]);
    } else {
      const float e = std::exp(x[i] - shift);
      total += e;
      y[i] = op == Op::kExpShiftScale ? e * mul : e;
    }
  }
  return total;
}

template <Op op>
float Loop(const float* x, int64_t n, float shift, float mul, float* y,
           Simd simd) {
#if defined(TRELLIS_X86_SIMD)
  TRELLIS_CHECK(simd == Simd::kNone || simd == Simd::kSse2 ||
                BestSimd() == Simd::kAvx2Fma)
      << "this CPU has no AVX2/FMA";
  switch (simd) {
    case Simd::kAvx2Fma:
      return LoopAvx2<op>(x, n, shift, mul, y);
    case Simd::kSse2:
      return LoopSse<op>(x, n, shift, mul, y);
    case Simd::kNone:
      break;
  }
#endif
  return LoopScalar<op>(x, n, shift, mul, y);
}

}  // namespace

Simd BestSimd() {
#if defined(TRELLIS_X86_SIMD)
  static const Simd best =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
          ? Simd::kAvx2Fma
          : Simd::kSse2;
  return best;
#else
  return Simd::kNone;
#endif
}

float ExpShiftSum(const float* x, float shift, int64_t n, float* y, Simd simd) {
  return Loop<Op::kExpShiftSum>(x, n, shift, 1.0f, y, simd);
}

void ExpShiftScale(const float* x, float shift, float mul, int64_t n, float* y,
                   Simd simd) {
  Loop<Op::kExpShiftScale>(x, n, shift, mul, y, simd);
}

void TanhArray(const float* x, int64_t n, float* y, Simd simd) {
  Loop<Op::kTanh>(x, n, 0.0f, 1.0f, y, simd);
}

}  // namespace kernels_internal
}  // namespace trellis
