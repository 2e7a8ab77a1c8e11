// The CUDA kernels of a mixture-of-experts layer against their CPU twins,
// in float32 and bfloat16: the router (softmax and sigmoid scores, with and
// without normalized weights and a selection bias; more experts than a
// warp's lanes), its balance losses and their gradients, the counting sort
// of the routed slots, and the rows' way to their experts and back.
//
// Tolerances (max |gpu - cpu| / max |cpu|, CPU on the same rounded inputs):
//   chosen experts, route and counts: exact;
//   weights and dlogits: float32 1e-5; bfloat16 8e-3 (one rounding of the
//     output); the losses (float32 on both dtypes) 1e-5;
//   dispatched rows: exact; sums of k rows: float32 1e-6, bfloat16 8e-3;
//   dweight (a dot product over C): float32 1e-5, bfloat16 8e-3.
#include <cstdint>
#include <vector>

#include "framework/kernels/expert_rows.h"
#include "framework/kernels/router.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::ExpectClose;
using cuda_test::Gpu;
using cuda_test::Random;
using cuda_test::ToHost;
using cuda_test::Tolerance;

constexpr double kBf16Out = 8e-3;

using CudaMoeTest = cuda_test::DTypeTest;

// The int32 tensors of `a` and `b` (any devices) hold the same values.
void ExpectSameInts(const Tensor& a, const Tensor& b, const char* what) {
  const Tensor ha = a.To(Device::Cpu()), hb = b.To(Device::Cpu());
  ASSERT_EQ(ha.shape(), hb.shape()) << what;
  int64_t differ = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    differ += ha.data<int32_t>()[i] != hb.data<int32_t>()[i];
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << ha.numel();
}

Tensor Ints(Shape shape, Device device) {
  return Tensor::Empty(std::move(shape), DType::kI32, device);
}

struct RouterCase {
  int64_t experts;
  int64_t top_k;
  RouterScore score;
  bool normalize;
  bool bias;
};

TEST_P(CudaMoeTest, Router) {
  const int64_t N = 70;
  for (const RouterCase& c :
       {RouterCase{16, 3, RouterScore::kSoftmax, true, false},
        RouterCase{16, 2, RouterScore::kSoftmax, false, false},
        RouterCase{40, 4, RouterScore::kSigmoid, true, true},
        RouterCase{40, 1, RouterScore::kSigmoid, false, false}}) {
    SCOPED_TRACE(testing::Message()
                 << c.experts << " experts, top " << c.top_k
                 << (c.score == RouterScore::kSigmoid ? " sigmoid"
                                                      : " softmax"));
    const RouterSpec spec{c.top_k, c.score, c.normalize};
    const int64_t E = c.experts, k = c.top_k;
    const Tensor logits = Input({N, E}, 1, -3.0, 3.0);
    const Tensor bias = c.bias ? Input({E}, 2, -0.2, 0.2) : Tensor();
    Tensor index = Ints({N, k}, Device::Cpu());
    Tensor weight = Tensor::Empty({N, k}, DType::kF32);
    RouterTopK(logits, bias, spec, index, weight);
    const Tensor d_logits = Dev(logits);
    const Tensor d_bias = c.bias ? Dev(bias) : Tensor();
    Tensor d_index = Ints({N, k}, Gpu()), d_weight = DevEmpty({N, k});
    RouterTopK(d_logits, d_bias, spec, d_index, d_weight);
    ExpectSameInts(d_index, index, "chosen experts");
    ExpectClose(d_weight, weight, Tolerance(dtype(), 1e-5, kBf16Out),
                "weights");

    // The chain's start: dlogits overwritten (over garbage), both backends
    // from the weights as the dtype holds them.
    const Tensor dweight = Input({N, k}, 3);
    const Tensor held = cuda_test::Rounded(weight, dtype());
    Tensor dlogits = Tensor::Empty({N, E}, DType::kF32);
    RouterTopKBackward(logits, index, held, dweight, spec, dlogits);
    Tensor d_dlogits = Dev(Input({N, E}, 4));
    RouterTopKBackward(d_logits, d_index, Dev(held), Dev(dweight), spec,
                       d_dlogits);
    ExpectClose(d_dlogits, dlogits, Tolerance(dtype(), 1e-5, kBf16Out),
                "dlogits");

    // The balance losses over the counts of these choices, and their
    // gradients added onto dlogits.
    Tensor route = Ints({N * k}, Device::Cpu()),
           counts = Ints({E}, Device::Cpu());
    RouteByExpert(index, E, route, counts);
    Tensor losses = Tensor::Empty({2}, DType::kF32);
    RouterLosses(logits, counts, spec, losses);
    const Tensor d_counts = counts.To(Gpu());
    Tensor d_losses = F32({2});  // statistics: float32 on CUDA
    RouterLosses(d_logits, d_counts, spec, d_losses);
    ExpectClose(d_losses, losses, Tolerance(dtype(), 1e-5, kBf16Out), "losses");
    Tensor d_sum = Dev(dlogits);
    // Rounded start: the CPU adds onto the same values.
    Tensor start = ToHost(d_sum);
    Tensor expected = start.Clone();
    RouterLossesBackward(logits, counts, spec, 0.5, 0.25, expected);
    RouterLossesBackward(d_logits, d_counts, spec, 0.5, 0.25, d_sum);
    ExpectClose(d_sum, expected, Tolerance(dtype(), 1e-5, kBf16Out),
                "dlogits with the balance losses'");
  }
}

// The counting sort: 600 slots over 7 experts (three chunks of the device's
// sort), one expert never chosen.
TEST_P(CudaMoeTest, RouteByExpert) {
  const int64_t N = 300, k = 2, E = 7;
  Tensor index = Ints({N, k}, Device::Cpu());
  const Tensor draw = Random({N, k}, 5, 0.0, static_cast<double>(E - 1));
  for (int64_t i = 0; i < index.numel(); ++i) {
    index.data<int32_t>()[i] = static_cast<int32_t>(draw.data<float>()[i]);
  }
  Tensor route = Ints({N * k}, Device::Cpu()),
         counts = Ints({E}, Device::Cpu());
  RouteByExpert(index, E, route, counts);
  EXPECT_EQ(ExpertCounts(counts).back(), 0);
  Tensor d_route = Ints({N * k}, Gpu()), d_counts = Ints({E}, Gpu());
  RouteByExpert(index.To(Gpu()), E, d_route, d_counts);
  ExpectSameInts(d_route, route, "route");
  ExpectSameInts(d_counts, counts, "counts");
}

TEST_P(CudaMoeTest, ExpertRows) {
  const int64_t N = 50, k = 3, E = 5, C = 72;
  Tensor index = Ints({N, k}, Device::Cpu());
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      index.data<int32_t>()[t * k + j] = static_cast<int32_t>((t + 2 * j) % E);
    }
  }
  Tensor route = Ints({N * k}, Device::Cpu()),
         counts = Ints({E}, Device::Cpu());
  RouteByExpert(index, E, route, counts);
  const Tensor d_route = route.To(Gpu());
  const Tensor x = Input({N, C}, 6);
  Tensor perm = Tensor::Empty({N * k, C}, DType::kF32);
  DispatchRows(x, route, perm);
  Tensor d_perm = DevEmpty({N * k, C});
  DispatchRows(Dev(x), d_route, d_perm);
  ExpectClose(d_perm, perm, 0, "dispatched rows");

  const Tensor dperm = Input({N * k, C}, 7);
  Tensor dx = Tensor::Empty({N, C}, DType::kF32);
  DispatchRowsBackward(dperm, route, dx);
  Tensor d_dx = Dev(Input({N, C}, 8));  // garbage to overwrite
  DispatchRowsBackward(Dev(dperm), d_route, d_dx);
  ExpectClose(d_dx, dx, Tolerance(dtype(), 1e-6, kBf16Out), "dx");

  const Tensor y = Input({N * k, C}, 9), weight = Input({N, k}, 10, 0.0, 1.0);
  Tensor out = Tensor::Empty({N, C}, DType::kF32);
  CombineRows(y, route, weight, out);
  Tensor d_out = Dev(Input({N, C}, 11));
  const Tensor d_y = Dev(y), d_weight = Dev(weight);
  CombineRows(d_y, d_route, d_weight, d_out);
  ExpectClose(d_out, out, Tolerance(dtype(), 1e-6, kBf16Out), "combined");

  const Tensor dout = Input({N, C}, 12);
  Tensor dy = Tensor::Empty({N * k, C}, DType::kF32);
  Tensor dweight = Tensor::Empty({N, k}, DType::kF32);
  CombineRowsBackward(dout, y, route, weight, dy, dweight);
  Tensor d_dy = Dev(Input({N * k, C}, 13)), d_dweight = Dev(Input({N, k}, 14));
  CombineRowsBackward(Dev(dout), d_y, d_route, d_weight, d_dy, d_dweight);
  ExpectClose(d_dy, dy, Tolerance(dtype(), 1e-6, kBf16Out), "dy");
  ExpectClose(d_dweight, dweight, Tolerance(dtype(), 1e-5, kBf16Out),
              "dweight");
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaMoeTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         cuda_test::DTypeParamName);

}  // namespace
}  // namespace trellis
