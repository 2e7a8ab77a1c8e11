#include "framework/kernels/cached_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "framework/cuda/cached_attention_cuda.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

struct Dims {
  int64_t n, heads, kv_heads, d, width, cap;
};

// Checks the shapes of CachedAttentionForward's operands; returns them.
Dims CheckShapes(const Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                 int64_t start, const Tensor& k_cache, const Tensor& v_cache,
                 const Tensor& out) {
  const char* kernel = "CachedAttentionForward";
  TRELLIS_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0)
      << kernel << ": " << n_head << " query heads, " << n_kv_head
      << " key/value heads";
  TRELLIS_CHECK(qkv.ndim() == 2 && out.ndim() == 2 && k_cache.ndim() == 2)
      << kernel << ": qkv " << ShapeString(qkv.shape()) << ", out "
      << ShapeString(out.shape()) << ", cache " << ShapeString(k_cache.shape());
  Dims d;
  d.n = qkv.dim(0);
  d.heads = n_head;
  d.kv_heads = n_kv_head;
  d.width = qkv.dim(1);
  TRELLIS_CHECK_EQ(d.width % (n_head + 2 * n_kv_head), 0)
      << kernel << ": qkv width " << d.width;
  d.d = d.width / (n_head + 2 * n_kv_head);
  d.cap = k_cache.dim(0);
  TRELLIS_CHECK(out.shape() == (Shape{d.n, n_head * d.d}))
      << kernel << ": out " << ShapeString(out.shape());
  TRELLIS_CHECK(k_cache.shape() == (Shape{d.cap, n_kv_head * d.d}) &&
                v_cache.shape() == k_cache.shape())
      << kernel << ": caches " << ShapeString(k_cache.shape()) << " and "
      << ShapeString(v_cache.shape()) << " for " << n_kv_head
      << " key/value heads of " << d.d;
  TRELLIS_CHECK(start >= 0 && start + d.n <= d.cap)
      << kernel << ": positions [" << start << ", " << start + d.n
      << ") beyond the cache's " << d.cap;
  return d;
}

template <typename T>
void CachedAttentionCpu(const T* qkv, const Dims& d, int64_t start, T* kc,
                        T* vc, T* out) {
  const int64_t kvw = d.kv_heads * d.d;
  for (int64_t i = 0; i < d.n; ++i) {
    const T* row = qkv + i * d.width;
    std::memcpy(kc + (start + i) * kvw, row + d.heads * d.d, kvw * sizeof(T));
    std::memcpy(vc + (start + i) * kvw, row + (d.heads + d.kv_heads) * d.d,
                kvw * sizeof(T));
  }
  const T scale = T{1} / std::sqrt(static_cast<T>(d.d));
  const int64_t group = d.heads / d.kv_heads;
  std::vector<T> p(start + d.n);
  for (int64_t i = 0; i < d.n; ++i) {
    const int64_t keys = start + i + 1;
    for (int64_t h = 0; h < d.heads; ++h) {
      const T* q = qkv + i * d.width + h * d.d;
      const int64_t kv = (h / group) * d.d;
      T max = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        const T* k = kc + j * kvw + kv;
        T dot = 0;
        for (int64_t c = 0; c < d.d; ++c) dot += q[c] * k[c];
        p[j] = dot * scale;
        max = std::max(max, p[j]);
      }
      T sum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        p[j] = std::exp(p[j] - max);
        sum += p[j];
      }
      T* o = out + i * d.heads * d.d + h * d.d;
      std::fill(o, o + d.d, T{0});
      for (int64_t j = 0; j < keys; ++j) {
        const T* v = vc + j * kvw + kv;
        const T w = p[j] / sum;
        for (int64_t c = 0; c < d.d; ++c) o[c] += w * v[c];
      }
    }
  }
}

}  // namespace

void CachedAttentionForward(const Tensor& qkv, int64_t n_head,
                            int64_t n_kv_head, int64_t start, Tensor& k_cache,
                            Tensor& v_cache, Tensor& out) {
  const char* kernel = "CachedAttentionForward";
  const Dims d =
      CheckShapes(qkv, n_head, n_kv_head, start, k_cache, v_cache, out);
  TRELLIS_CUDA_DISPATCH(
      cuda::CachedAttentionForward(qkv, n_head, n_kv_head, start, k_cache,
                                   v_cache, out),
      &qkv, &k_cache, &v_cache, &out);
  RequireCpu(kernel, {&qkv, &k_cache, &v_cache, &out});
  RequireDType(kernel, qkv.dtype(), {&k_cache, &v_cache, &out});
  DispatchFloat(kernel, qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    CachedAttentionCpu(qkv.data<T>(), d, start, k_cache.data<T>(),
                       v_cache.data<T>(), out.data<T>());
  });
}

}  // namespace trellis
