#include "framework/kernels/router.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::CheckRouterLosses;
using kernels_internal::CheckRouterLossesBackward;
using kernels_internal::CheckRouterTopK;
using kernels_internal::CheckRouterTopKBackward;
using kernels_internal::DispatchFloat;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

using Dims = kernels_internal::RouterDims;

// s (E) = the scores of one row of logits l (E).
template <typename T>
void Scores(const T* l, int64_t e, RouterScore score, T* s) {
  if (score == RouterScore::kSigmoid) {
    for (int64_t i = 0; i < e; ++i) s[i] = T{1} / (T{1} + std::exp(-l[i]));
    return;
  }
  T max = l[0];
  for (int64_t i = 1; i < e; ++i) max = l[i] > max ? l[i] : max;
  T sum = 0;
  for (int64_t i = 0; i < e; ++i) {
    s[i] = std::exp(l[i] - max);
    sum += s[i];
  }
  for (int64_t i = 0; i < e; ++i) s[i] /= sum;
}

template <typename T>
void TopKCpu(const T* logits, const T* bias, Dims d, const RouterSpec& spec,
             int32_t* index, T* weight) {
  const int64_t k = spec.top_k;
  std::vector<T> s(d.e), key(d.e);
  std::vector<bool> taken(d.e);
  for (int64_t t = 0; t < d.n; ++t) {
    Scores(logits + t * d.e, d.e, spec.score, s.data());
    for (int64_t i = 0; i < d.e; ++i) {
      key[i] = s[i] + (bias != nullptr ? bias[i] : T{0});
      taken[i] = false;
    }
    int32_t* idx = index + t * k;
    T* w = weight + t * k;
    T sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      // The largest key not taken; strict > keeps the lower index on ties.
      int64_t best = -1;
      for (int64_t i = 0; i < d.e; ++i) {
        if (!taken[i] && (best < 0 || key[i] > key[best])) best = i;
      }
      taken[best] = true;
      idx[j] = static_cast<int32_t>(best);
      w[j] = s[best];
      sum += s[best];
    }
    if (spec.normalize) {
      for (int64_t j = 0; j < k; ++j) w[j] /= sum;
    }
  }
}

// dl (E) from ds (E), the gradient at the scores s of logits l.
template <typename T>
void ScoresBackward(const T* s, const T* ds, int64_t e, RouterScore score,
                    T* dl) {
  if (score == RouterScore::kSigmoid) {
    for (int64_t i = 0; i < e; ++i) dl[i] = ds[i] * s[i] * (T{1} - s[i]);
    return;
  }
  T dot = 0;
  for (int64_t i = 0; i < e; ++i) dot += s[i] * ds[i];
  for (int64_t i = 0; i < e; ++i) dl[i] = s[i] * (ds[i] - dot);
}

template <typename T>
void TopKBackwardCpu(const T* logits, const int32_t* index, const T* weight,
                     const T* dweight, Dims d, const RouterSpec& spec,
                     T* dlogits) {
  const int64_t k = spec.top_k;
  std::vector<T> s(d.e), ds(d.e);
  for (int64_t t = 0; t < d.n; ++t) {
    Scores(logits + t * d.e, d.e, spec.score, s.data());
    const int32_t* idx = index + t * k;
    const T* w = weight + t * k;
    const T* dw = dweight + t * k;
    std::fill(ds.begin(), ds.end(), T{0});
    if (spec.normalize) {
      // w_j = s_j / S: ds_j = (dw_j - Σ_m dw_m w_m) / S.
      T sum = 0, dot = 0;
      for (int64_t j = 0; j < k; ++j) {
        sum += s[idx[j]];
        dot += dw[j] * w[j];
      }
      for (int64_t j = 0; j < k; ++j) ds[idx[j]] = (dw[j] - dot) / sum;
    } else {
      for (int64_t j = 0; j < k; ++j) ds[idx[j]] = dw[j];
    }
    ScoresBackward(s.data(), ds.data(), d.e, spec.score, dlogits + t * d.e);
  }
}

// p (E): the scores the aux loss averages (s for softmax, s / Σ s for
// sigmoid), and their sum's reciprocal for sigmoid.
template <typename T>
T BalanceProbabilities(const T* s, int64_t e, RouterScore score, T* p) {
  if (score == RouterScore::kSoftmax) {
    for (int64_t i = 0; i < e; ++i) p[i] = s[i];
    return T{1};
  }
  T sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += s[i];
  for (int64_t i = 0; i < e; ++i) p[i] = s[i] / sum;
  return T{1} / sum;
}

template <typename T>
T LogSumExp(const T* l, int64_t e) {
  T max = l[0];
  for (int64_t i = 1; i < e; ++i) max = l[i] > max ? l[i] : max;
  T sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += std::exp(l[i] - max);
  return max + std::log(sum);
}

// f_e = count_e / (N·k), as T.
template <typename T>
std::vector<T> SlotShares(const int32_t* counts, Dims d, int64_t k) {
  std::vector<T> f(d.e);
  const T slots = static_cast<T>(d.n * k);
  for (int64_t i = 0; i < d.e; ++i) f[i] = static_cast<T>(counts[i]) / slots;
  return f;
}

template <typename T>
void LossesCpu(const T* logits, const int32_t* counts, Dims d,
               const RouterSpec& spec, T* losses) {
  const std::vector<T> f = SlotShares<T>(counts, d, spec.top_k);
  std::vector<double> mean_p(d.e, 0.0);
  std::vector<T> s(d.e), p(d.e);
  double z = 0;
  for (int64_t t = 0; t < d.n; ++t) {
    const T* l = logits + t * d.e;
    Scores(l, d.e, spec.score, s.data());
    BalanceProbabilities(s.data(), d.e, spec.score, p.data());
    for (int64_t i = 0; i < d.e; ++i) mean_p[i] += p[i];
    const T lse = LogSumExp(l, d.e);
    z += static_cast<double>(lse) * lse;
  }
  double aux = 0;
  for (int64_t i = 0; i < d.e; ++i) aux += f[i] * mean_p[i];
  const double n = static_cast<double>(d.n > 0 ? d.n : 1);
  losses[0] = static_cast<T>(static_cast<double>(d.e) * aux / n);
  losses[1] = static_cast<T>(z / n);
}

template <typename T>
void LossesBackwardCpu(const T* logits, const int32_t* counts, Dims d,
                       const RouterSpec& spec, T aux_scale, T z_scale,
                       T* dlogits) {
  if (d.n == 0) return;
  const std::vector<T> f = SlotShares<T>(counts, d, spec.top_k);
  const T rows = static_cast<T>(d.n);
  // d(aux)/d(p_e) = E · f_e / N, the same for every row.
  std::vector<T> g(d.e);
  for (int64_t i = 0; i < d.e; ++i) {
    g[i] = aux_scale * static_cast<T>(d.e) * f[i] / rows;
  }
  std::vector<T> s(d.e), p(d.e), ds(d.e), dl(d.e), soft(d.e);
  for (int64_t t = 0; t < d.n; ++t) {
    const T* l = logits + t * d.e;
    T* out = dlogits + t * d.e;
    Scores(l, d.e, spec.score, s.data());
    const T inv_sum = BalanceProbabilities(s.data(), d.e, spec.score, p.data());
    if (spec.score == RouterScore::kSoftmax) {
      ScoresBackward(s.data(), g.data(), d.e, spec.score, dl.data());
    } else {
      // p = s / Σ s: ds_e = (g_e - Σ g·p) / Σ s, then through the sigmoid.
      T dot = 0;
      for (int64_t i = 0; i < d.e; ++i) dot += g[i] * p[i];
      for (int64_t i = 0; i < d.e; ++i) ds[i] = (g[i] - dot) * inv_sum;
      ScoresBackward(s.data(), ds.data(), d.e, spec.score, dl.data());
    }
    // d(z)/d(l) = 2 · lse · softmax(l) / N.
    Scores(l, d.e, RouterScore::kSoftmax, soft.data());
    const T zg = z_scale * T{2} * LogSumExp(l, d.e) / rows;
    for (int64_t i = 0; i < d.e; ++i) out[i] += dl[i] + zg * soft[i];
  }
}

Dims CheckLogits(const char* kernel, const Tensor& logits,
                 const RouterSpec& spec) {
  TRELLIS_CHECK(logits.ndim() == 2)
      << kernel << ": logits " << ShapeString(logits.shape())
      << ", expected (N, E)";
  const Dims d{logits.dim(0), logits.dim(1)};
  TRELLIS_CHECK(spec.top_k >= 1 && spec.top_k <= d.e)
      << kernel << ": top_k " << spec.top_k << " of " << d.e << " experts";
  return d;
}

void CheckChoices(const char* kernel, const Dims& d, const RouterSpec& spec,
                  const Tensor& index, const Tensor& weight) {
  const Shape choices = {d.n, spec.top_k};
  TRELLIS_CHECK(index.shape() == choices && weight.shape() == choices)
      << kernel << ": index " << ShapeString(index.shape()) << ", weight "
      << ShapeString(weight.shape()) << ", expected " << ShapeString(choices);
  TRELLIS_CHECK(index.dtype() == DType::kI32)
      << kernel << ": index is " << DTypeName(index.dtype())
      << ", expected int32";
}

void CheckCounts(const char* kernel, const Tensor& counts, int64_t e) {
  TRELLIS_CHECK(counts.shape() == Shape{e} && counts.dtype() == DType::kI32)
      << kernel << ": counts " << ShapeString(counts.shape()) << " "
      << DTypeName(counts.dtype()) << ", expected (" << e << ") int32";
}

}  // namespace

namespace kernels_internal {

RouterDims CheckRouterTopK(const char* kernel, const Tensor& logits,
                           const Tensor& bias, const RouterSpec& spec,
                           const Tensor& index, const Tensor& weight) {
  const Dims d = CheckLogits(kernel, logits, spec);
  CheckChoices(kernel, d, spec, index, weight);
  TRELLIS_CHECK(!bias.defined() || bias.shape() == Shape{d.e})
      << kernel << ": bias " << ShapeString(bias.shape()) << " for " << d.e
      << " experts";
  return d;
}

RouterDims CheckRouterTopKBackward(const char* kernel, const Tensor& logits,
                                   const Tensor& index, const Tensor& weight,
                                   const Tensor& dweight,
                                   const RouterSpec& spec,
                                   const Tensor& dlogits) {
  const Dims d = CheckLogits(kernel, logits, spec);
  CheckChoices(kernel, d, spec, index, weight);
  TRELLIS_CHECK(dweight.shape() == weight.shape() &&
                dlogits.shape() == logits.shape())
      << kernel << ": dweight " << ShapeString(dweight.shape()) << ", dlogits "
      << ShapeString(dlogits.shape());
  return d;
}

RouterDims CheckRouterLosses(const char* kernel, const Tensor& logits,
                             const Tensor& counts, const RouterSpec& spec,
                             const Tensor& losses) {
  const Dims d = CheckLogits(kernel, logits, spec);
  CheckCounts(kernel, counts, d.e);
  TRELLIS_CHECK(losses.shape() == Shape{2})
      << kernel << ": losses " << ShapeString(losses.shape())
      << ", expected (2)";
  return d;
}

RouterDims CheckRouterLossesBackward(const char* kernel, const Tensor& logits,
                                     const Tensor& counts,
                                     const RouterSpec& spec,
                                     const Tensor& dlogits) {
  const Dims d = CheckLogits(kernel, logits, spec);
  CheckCounts(kernel, counts, d.e);
  TRELLIS_CHECK(dlogits.shape() == logits.shape())
      << kernel << ": dlogits " << ShapeString(dlogits.shape());
  return d;
}

}  // namespace kernels_internal

void RouterTopK(const Tensor& logits, const Tensor& bias,
                const RouterSpec& spec, Tensor& index, Tensor& weight) {
  const char* kernel = "RouterTopK";
  TRELLIS_CUDA_DISPATCH(cuda::RouterTopK(logits, bias, spec, index, weight),
                        &logits, &bias, &index, &weight);
  RequireCpu(kernel, {&logits, &bias, &index, &weight});
  RequireDType(kernel, logits.dtype(), {&bias, &weight});
  const Dims d = CheckRouterTopK(kernel, logits, bias, spec, index, weight);
  DispatchFloat(kernel, logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    TopKCpu(logits.data<T>(), bias.defined() ? bias.data<T>() : nullptr, d,
            spec, index.data<int32_t>(), weight.data<T>());
  });
}

void RouterTopKBackward(const Tensor& logits, const Tensor& index,
                        const Tensor& weight, const Tensor& dweight,
                        const RouterSpec& spec, Tensor& dlogits) {
  const char* kernel = "RouterTopKBackward";
  TRELLIS_CUDA_DISPATCH(
      cuda::RouterTopKBackward(logits, index, weight, dweight, spec, dlogits),
      &logits, &index, &weight, &dweight, &dlogits);
  RequireCpu(kernel, {&logits, &index, &weight, &dweight, &dlogits});
  RequireDType(kernel, logits.dtype(), {&weight, &dweight, &dlogits});
  const Dims d = CheckRouterTopKBackward(kernel, logits, index, weight, dweight,
                                         spec, dlogits);
  DispatchFloat(kernel, logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    TopKBackwardCpu(logits.data<T>(), index.data<int32_t>(), weight.data<T>(),
                    dweight.data<T>(), d, spec, dlogits.data<T>());
  });
}

void RouterLosses(const Tensor& logits, const Tensor& counts,
                  const RouterSpec& spec, Tensor& losses) {
  const char* kernel = "RouterLosses";
  TRELLIS_CUDA_DISPATCH(cuda::RouterLosses(logits, counts, spec, losses),
                        &logits, &counts, &losses);
  RequireCpu(kernel, {&logits, &counts, &losses});
  RequireDType(kernel, logits.dtype(), {&losses});
  const Dims d = CheckRouterLosses(kernel, logits, counts, spec, losses);
  DispatchFloat(kernel, logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LossesCpu(logits.data<T>(), counts.data<int32_t>(), d, spec,
              losses.data<T>());
  });
}

void RouterLossesBackward(const Tensor& logits, const Tensor& counts,
                          const RouterSpec& spec, double aux_scale,
                          double z_scale, Tensor& dlogits) {
  const char* kernel = "RouterLossesBackward";
  TRELLIS_CUDA_DISPATCH(cuda::RouterLossesBackward(logits, counts, spec,
                                                   aux_scale, z_scale, dlogits),
                        &logits, &counts, &dlogits);
  RequireCpu(kernel, {&logits, &counts, &dlogits});
  RequireDType(kernel, logits.dtype(), {&dlogits});
  const Dims d =
      CheckRouterLossesBackward(kernel, logits, counts, spec, dlogits);
  if (aux_scale == 0 && z_scale == 0) return;
  DispatchFloat(kernel, logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LossesBackwardCpu(logits.data<T>(), counts.data<int32_t>(), d, spec,
                      static_cast<T>(aux_scale), static_cast<T>(z_scale),
                      dlogits.data<T>());
  });
}

}  // namespace trellis
