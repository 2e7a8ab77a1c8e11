#include "transformer/block_parts.h"

namespace trellis {

void BlockMlp::Down(BlockTensors&, Tensor&) const {
  TRELLIS_CHECK(false) << "this MLP's output is its row-parallel layer, down()";
}

ColumnParallelLinear ColumnLayer(Parameter* weight, Parameter* bias) {
  TRELLIS_CHECK(weight != nullptr);
  return bias != nullptr ? ColumnParallelLinear(*weight, *bias)
                         : ColumnParallelLinear(*weight);
}

RowParallelLinear RowLayer(Parameter* weight, Parameter* bias) {
  TRELLIS_CHECK(weight != nullptr);
  return bias != nullptr ? RowParallelLinear(*weight, *bias)
                         : RowParallelLinear(*weight);
}

}  // namespace trellis
