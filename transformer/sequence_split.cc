#include "transformer/sequence_split.h"

#include "framework/kernels/elementwise.h"
#include "framework/status.h"

namespace trellis {

SequenceSplit::SequenceSplit(TpPlace tp, bool sequence_parallel)
    : parts_(sequence_parallel ? tp.size : 1),
      index_(sequence_parallel ? tp.rank : 0) {}

int64_t SequenceSplit::Local(int64_t n) const {
  TRELLIS_CHECK_EQ(n % parts_, 0)
      << "sequence parallelism needs the " << n
      << " rows of a microbatch divisible by tp = " << parts_;
  return n / parts_;
}

Tensor SequenceSplit::Mine(const Tensor& full) const {
  return SequenceRows(full, parts_, index_);
}

void SequenceSplit::GatherInput(Communicator& tp, Tensor& full) const {
  if (on()) GatherFromSequence::Forward(tp, full);
}

void SequenceSplit::RowOutput(Communicator& tp, const RowParallelLinear& layer,
                              const Tensor& x, Tensor& partial,
                              Tensor& y) const {
  if (on()) {
    layer.ForwardToSequence(tp, x, partial, y);
  } else {
    layer.Forward(tp, x, y);
  }
}

void SequenceSplit::RowOutputResidual(Communicator& tp,
                                      const RowParallelLinear& layer,
                                      const Tensor& x, const Tensor& residual,
                                      Tensor& partial, Tensor& y) const {
  if (on()) {
    layer.ForwardToSequence(tp, x, partial, y);
    Add(y, residual, y);
  } else {
    layer.ForwardResidual(tp, x, residual, y);
  }
}

void SequenceSplit::ReducePartial(Communicator& tp, Tensor& sums,
                                  Tensor& y) const {
  if (on()) {
    ScatterToSequence::Forward(tp, sums, y);
  } else {
    TRELLIS_CHECK(sums.raw() == y.raw()) << "without the split the sums are y";
    ReduceFromTp::Forward(tp, y);
  }
}

void SequenceSplit::ReduceInputGrad(Communicator& tp, Tensor& dfull) const {
  if (on()) {
    GatherFromSequence::Backward(tp, dfull);
  } else {
    CopyToTp::Backward(tp, dfull);
  }
}

void SequenceSplit::GatherOutputGrad(Communicator& tp, const Tensor& dlocal,
                                     Tensor& dfull) const {
  if (on()) {
    ScatterToSequence::Backward(tp, dlocal, dfull);
  } else if (dlocal.raw() != dfull.raw()) {
    dfull.CopyFrom(dlocal);
  }
}

}  // namespace trellis
