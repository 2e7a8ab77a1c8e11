// The tensor-parallel linear layers state their splits and refuse
// parameters cut another way at construction.
#include <gtest/gtest.h>

#include "parallel/parameter.h"
#include "parallel/tensor_parallel.h"

namespace trellis {
namespace {

Parameter& Declared(ParameterSet& params, const char* name, ShardSpec spec) {
  return params.Declare(name, std::move(spec), false, Device::Cpu(),
                        DType::kF32, [](int64_t) { return 0.0; });
}

TEST(LinearSplitTest, LayersAcceptTheSplitsTheyState) {
  ParameterSet params;
  for (int64_t rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    Parameter& cw = params.Declare(
        "cw" + r, ColumnParallelLinear::WeightSpec(8, 12, 2, rank, 3), true,
        Device::Cpu(), DType::kF32, [](int64_t) { return 0.0; });
    Parameter& cb = params.Declare(
        "cb" + r, ColumnParallelLinear::BiasSpec(12, 2, rank, 3), false,
        Device::Cpu(), DType::kF32, [](int64_t) { return 0.0; });
    Parameter& rw = params.Declare(
        "rw" + r, RowParallelLinear::WeightSpec(12, 8, 2, rank), true,
        Device::Cpu(), DType::kF32, [](int64_t) { return 0.0; });
    Parameter& rb =
        params.Declare("rb" + r, RowParallelLinear::BiasSpec(8), false,
                       Device::Cpu(), DType::kF32, [](int64_t) { return 0.0; });
    ColumnParallelLinear column(cw, cb);
    RowParallelLinear row(rw, rb);
    EXPECT_EQ(cw.spec.LocalShape(), (Shape{8, 6}));
    EXPECT_EQ(rw.spec.LocalShape(), (Shape{6, 8}));
  }
}

using LinearSplitDeathTest = ::testing::Test;

TEST(LinearSplitDeathTest, ColumnLayerRefusesARowSplitWeight) {
  ParameterSet params;
  Parameter& w =
      Declared(params, "w", RowParallelLinear::WeightSpec(8, 12, 2, 0));
  Parameter& b =
      Declared(params, "b", ColumnParallelLinear::BiasSpec(12, 2, 0));
  EXPECT_DEATH(ColumnParallelLinear(w, b),
               "column-parallel layer given w split as .*along columns");
}

TEST(LinearSplitDeathTest, ColumnLayerRefusesABiasSplitUnlikeItsWeight) {
  ParameterSet params;
  Parameter& w =
      Declared(params, "w", ColumnParallelLinear::WeightSpec(8, 12, 2, 1));
  // Rank 0's bias beside rank 1's weight.
  Parameter& b =
      Declared(params, "b", ColumnParallelLinear::BiasSpec(12, 2, 0));
  EXPECT_DEATH(ColumnParallelLinear(w, b), "bias must be split like");
}

TEST(LinearSplitDeathTest, RowLayerRefusesAColumnSplitWeight) {
  ParameterSet params;
  Parameter& w =
      Declared(params, "w", ColumnParallelLinear::WeightSpec(12, 8, 2, 0));
  Parameter& b = Declared(params, "b", RowParallelLinear::BiasSpec(8));
  EXPECT_DEATH(RowParallelLinear(w, b),
               "row-parallel layer given w split as .*along rows");
}

TEST(LinearSplitDeathTest, RowLayerRefusesASplitBias) {
  ParameterSet params;
  Parameter& w =
      Declared(params, "w", RowParallelLinear::WeightSpec(12, 8, 2, 0));
  Parameter& b = Declared(params, "b", ColumnParallelLinear::BiasSpec(8, 2, 0));
  EXPECT_DEATH(RowParallelLinear(w, b), "the bias must be replicated");
}

}  // namespace
}  // namespace trellis
