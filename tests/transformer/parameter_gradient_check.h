// The finite-difference check every model family's gradient test runs:
// each parameter's analytic gradient against central differences of the
// whole model's loss, at a few elements spread over the tensor; and the
// random token windows those tests feed the model.
//
// Thread safety: none needed; each test calls it from its own thread.
#ifndef TRELLIS_TESTS_TRANSFORMER_PARAMETER_GRADIENT_CHECK_H_
#define TRELLIS_TESTS_TRANSFORMER_PARAMETER_GRADIENT_CHECK_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "framework/rng.h"
#include "parallel/parameter.h"

namespace trellis::test {

// (b, t) int32 tokens below `vocab`, a function of `stream` only.
inline Tensor RandomTokens(int64_t b, int64_t t, int64_t vocab,
                           uint64_t stream) {
  Tensor x = Tensor::Empty({b, t}, DType::kI32);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] =
        static_cast<int32_t>(RandomBits(7, stream, i) % vocab);
  }
  return x;
}

// `loss` runs forward and backward of float64 `params` (adding into their
// gradients) and returns the loss. Checks up to `samples` elements of each
// parameter, always its first and last, within 1e-7 + 1e-5 · |numeric| of
// the central difference with step 1e-5.
inline void ExpectGradientsMatchFiniteDifferences(
    ParameterSet& params, const std::function<double()>& loss,
    int64_t samples) {
  params.ZeroGrads();
  loss();
  std::map<std::string, Tensor> analytic;
  for (Parameter* p : params.all()) analytic[p->name] = p->grad.Clone();
  const double h = 1e-5;
  for (Parameter* p : params.all()) {
    double* w = p->value.data<double>();
    const int64_t n = p->numel();
    for (int64_t k = 0; k < std::min<int64_t>(n, samples); ++k) {
      const int64_t i =
          k == 0 ? 0 : (k == samples - 1 ? n - 1 : (k * 7919) % n);
      const double saved = w[i];
      w[i] = saved + h;
      const double up = loss();
      w[i] = saved - h;
      const double down = loss();
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double exact = analytic[p->name].data<double>()[i];
      EXPECT_NEAR(exact, numeric, 1e-7 + 1e-5 * std::abs(numeric))
          << p->name << "[" << i << "]";
    }
  }
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TRANSFORMER_PARAMETER_GRADIENT_CHECK_H_
