// The backward's fused and write-not-accumulate kernels on the CPU (the
// reference): each equals, bit for bit, the unfused sequence it replaces
// (zero-fill then accumulate, copy then accumulate, one call per tensor),
// whose pieces have their own finite-difference tests; and the one call
// that takes over a derivative (MatmulBackwardInputGelu) is also checked
// against finite differences of the composed function.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/kernels/adamw.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/gelu.h"
#include "framework/kernels/layernorm.h"
#include "framework/kernels/matmul.h"
#include "framework/launch_count.h"
#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Cast;
using kernel_test::Dot;
using kernel_test::NumericGradient;
using kernel_test::Random;
using kernel_test::RelError;

constexpr int64_t N = 6, K = 5, M = 7;

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

Tensor Nans(Shape shape, DType dtype) {
  Tensor t = Tensor::Empty(std::move(shape), dtype);
  t.Fill(std::numeric_limits<double>::quiet_NaN());
  return t;
}

class BackwardFusionTest : public ::testing::TestWithParam<WeightLayout> {
 protected:
  WeightLayout layout() const { return GetParam(); }
  Shape WeightShape() const {
    return layout() == WeightLayout::kInOut ? Shape{K, M} : Shape{M, K};
  }
};

TEST_P(BackwardFusionTest, WriteModeIgnoresOldContentAndEqualsZeroThenAdd) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor dout = Random({N, M}, 1, dtype);
    const Tensor w = Random(WeightShape(), 2, dtype);
    Tensor ref = Tensor::Zeros({N, K}, dtype);
    MatmulBackwardInput(dout, w, ref, layout());
    Tensor dx = Nans({N, K}, dtype);
    MatmulBackwardInput(dout, w, dx, layout(), GradWrite::kWrite);
    EXPECT_TRUE(SameBits(dx, ref));
    // Accumulating stays the default.
    MatmulBackwardInput(dout, w, dx, layout());
    EXPECT_LT(RelError(dx, kernel_test::Scaled(ref, 2)), 1e-6);
  }
}

TEST_P(BackwardFusionTest, InputGeluEqualsGemmThenGeluBackward) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor dout = Random({N, M}, 3, dtype);
    const Tensor w = Random(WeightShape(), 4, dtype);
    const Tensor pre = Random({N, K}, 5, dtype, -3, 3);
    Tensor dgelu = Tensor::Zeros({N, K}, dtype);
    MatmulBackwardInput(dout, w, dgelu, layout());
    Tensor ref = Tensor::Zeros({N, K}, dtype);
    GeluBackward(pre, dgelu, ref);
    Tensor dpre = Nans({N, K}, dtype);
    MatmulBackwardInputGelu(dout, w, pre, dpre, layout());
    EXPECT_TRUE(SameBits(dpre, ref));
  }
}

TEST_P(BackwardFusionTest, InputGeluMatchesFiniteDifferences) {
  // loss = sum(g ⊙ gelu(pre) @ w): its gradient in pre is
  // MatmulBackwardInputGelu(g, w, pre).
  const Tensor g = Random({N, M}, 6);
  const Tensor w = Random(WeightShape(), 7);
  Tensor pre = Random({N, K}, 8, DType::kF64, -3, 3);
  Tensor dpre = Tensor::Empty({N, K}, DType::kF64);
  MatmulBackwardInputGelu(g, w, pre, dpre, layout());
  const auto loss = [&] {
    Tensor act = Tensor::Empty({N, K}, DType::kF64);
    Tensor out = Tensor::Empty({N, M}, DType::kF64);
    GeluForward(pre, act);
    MatmulForward(act, w, Tensor(), out, layout());
    return Dot(out, g);
  };
  EXPECT_LT(RelError(dpre, NumericGradient(loss, pre)), 1e-7);
}

INSTANTIATE_TEST_SUITE_P(Layouts, BackwardFusionTest,
                         ::testing::Values(WeightLayout::kInOut,
                                           WeightLayout::kOutIn),
                         [](const auto& info) {
                           return std::string(info.param == WeightLayout::kInOut
                                                  ? "InOut"
                                                  : "OutIn");
                         });

TEST(LayerNormResidualTest, EqualsCopyThenAccumulate) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t C = 11;
    const Tensor x = Random({N, C}, 1, dtype, 1, 3);
    const Tensor w = Random({C}, 2, dtype, 0.5, 1.5);
    const Tensor b = Random({C}, 3, dtype);
    const Tensor dout = Random({N, C}, 4, dtype);
    const Tensor residual = Random({N, C}, 5, dtype);
    Tensor out = Tensor::Empty({N, C}, dtype);
    Tensor mean = Tensor::Empty({N}, dtype), rstd = Tensor::Empty({N}, dtype);
    LayerNormForward(x, w, b, out, mean, rstd);

    Tensor ref = residual.Clone();
    LayerNormBackwardInput(dout, x, w, mean, rstd, ref);
    Tensor dx = Nans({N, C}, dtype);
    LayerNormBackwardInputResidual(dout, x, w, mean, rstd, residual, dx);
    EXPECT_TRUE(SameBits(dx, ref));
    // The residual may be dx itself.
    Tensor in_place = residual.Clone();
    LayerNormBackwardInputResidual(dout, x, w, mean, rstd, in_place, in_place);
    EXPECT_TRUE(SameBits(in_place, ref));
  }
}

// Under sequence parallelism a block's LayerNorm jobs cover this rank's
// share of the rows and its bias jobs all of them: each row count takes a
// call (a launch on CUDA) of its own.
TEST(ColumnSumsManyTest, EqualsBiasAndLayerNormWeightCalls) {
  const DType dtype = DType::kF32;
  for (const int64_t norm_rows : {N, N / 2}) {
    SCOPED_TRACE(testing::Message() << "LayerNorm rows " << norm_rows);
    const Tensor d1 = Random({N, M}, 1, dtype);
    const Tensor d2 = Random({norm_rows, K}, 2, dtype);
    const Tensor d3 = Random({N, K}, 9, dtype);
    const Tensor x = Random({norm_rows, K}, 3, dtype, 1, 2);
    const Tensor mean = Random({norm_rows}, 4, dtype, 1, 2);
    const Tensor rstd = Random({norm_rows}, 5, dtype, 0.5, 2);
    // Gradients that already hold something: the sums add onto them.
    const Tensor db1_0 = Random({M}, 6, dtype), dw_0 = Random({K}, 7, dtype);
    const Tensor db2_0 = Random({K}, 8, dtype), db3_0 = Random({K}, 10, dtype);

    Tensor db1 = db1_0.Clone(), dw = dw_0.Clone(), db2 = db2_0.Clone(),
           db3 = db3_0.Clone();
    BiasBackward(d1, db1);
    LayerNormBackwardWeight(d2, x, mean, rstd, dw, db2);
    BiasBackward(d3, db3);

    Tensor got_db1 = db1_0.Clone(), got_dw = dw_0.Clone(),
           got_db2 = db2_0.Clone(), got_db3 = db3_0.Clone();
    LaunchCounter launches;
    ColumnSumsMany({{.dout = &d1, .db = &got_db1},
                    {.dout = &d2,
                     .x = &x,
                     .mean = &mean,
                     .rstd = &rstd,
                     .dw = &got_dw,
                     .db = &got_db2},
                    {.dout = &d3, .db = &got_db3}});
    // One launch for N rows (d1, d3), one more for a share (d2).
    EXPECT_EQ(launches.count(), norm_rows == N ? 1 : 2);
    EXPECT_TRUE(SameBits(got_db1, db1));
    EXPECT_TRUE(SameBits(got_dw, dw));
    EXPECT_TRUE(SameBits(got_db2, db2));
    EXPECT_TRUE(SameBits(got_db3, db3));
  }
}

TEST(AdamWStepManyTest, EqualsOneStepPerParameterThenRefresh) {
  AdamWHyper hyper;
  hyper.lr = 1e-2;
  hyper.step = 3;
  hyper.grad_scale = 0.5;
  hyper.weight_decay = 123.0;  // Ignored: each entry brings its own.
  const std::vector<Shape> shapes = {{4, 3}, {5}, {2, 2, 2}};
  const std::vector<double> decays = {0.1, 0.0, 0.3};
  std::vector<Tensor> grads, params, ms, vs, refs, values;
  for (size_t i = 0; i < shapes.size(); ++i) {
    grads.push_back(Random(shapes[i], 10 + i, DType::kF32));
    params.push_back(Random(shapes[i], 20 + i, DType::kF32));
    ms.push_back(Random(shapes[i], 30 + i, DType::kF32));
    vs.push_back(Random(shapes[i], 40 + i, DType::kF32, 0, 1));
    values.push_back(Tensor::Zeros(shapes[i], DType::kBF16));
  }
  // The reference: a loop of AdamWStep and Convert on copies.
  std::vector<Tensor> p_ref, m_ref, v_ref;
  for (size_t i = 0; i < shapes.size(); ++i) {
    p_ref.push_back(params[i].Clone());
    m_ref.push_back(ms[i].Clone());
    v_ref.push_back(vs[i].Clone());
    AdamWHyper one = hyper;
    one.weight_decay = decays[i];
    AdamWStep(one, grads[i], p_ref[i], m_ref[i], v_ref[i]);
    Tensor value = Tensor::Empty(shapes[i], DType::kBF16);
    Convert(p_ref[i], value);
    refs.push_back(value);
  }
  std::vector<AdamWTensors> entries;
  for (size_t i = 0; i < shapes.size(); ++i) {
    entries.push_back({&grads[i], &params[i], &ms[i], &vs[i], decays[i],
                       i == 1 ? nullptr : &values[i]});
  }
  AdamWStepMany(hyper, entries);
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(SameBits(params[i], p_ref[i]));
    EXPECT_TRUE(SameBits(ms[i], m_ref[i]));
    EXPECT_TRUE(SameBits(vs[i], v_ref[i]));
    if (i == 1) {
      Tensor untouched = Tensor::Zeros(shapes[i], DType::kBF16);
      EXPECT_TRUE(SameBits(values[i], untouched));
    } else {
      EXPECT_TRUE(SameBits(values[i], refs[i]));
    }
  }
}

}  // namespace
}  // namespace trellis
