// Softmax cross-entropy over a vocabulary that may be split across ranks.
//
// Each rank holds logits (N, Vl) for vocabulary ids [vocab_start,
// vocab_start + Vl); only the first `valid` columns are real (the rest are
// padding and never enter the loss). A full-vocabulary loss is assembled as:
//   1. CrossEntropyRowMax       -> all-reduce MAX over the vocab group
//   2. CrossEntropyRowSumExp    -> all-reduce SUM
//      CrossEntropyTargetLogit  -> all-reduce SUM (0 where not local)
//   3. CrossEntropyLoss: loss = log(sumexp) + max - target_logit
//   4. CrossEntropyBackward: dlogits = scale · (softmax - onehot)
// With one rank the reductions are identities, and CrossEntropyFused does
// all of it in one pass over each row. Statistics are float32 for
// float32 logits and float64 for float64 logits. targets (N) int32.
#ifndef TRELLIS_FRAMEWORK_KERNELS_CROSS_ENTROPY_H_
#define TRELLIS_FRAMEWORK_KERNELS_CROSS_ENTROPY_H_

#include <cstdint>

#include "framework/tensor.h"

namespace trellis {

// row_max (N) = max over the valid columns (-inf if valid == 0).
void CrossEntropyRowMax(const Tensor& logits, int64_t valid, Tensor& row_max);
// sumexp (N) = sum over valid columns of exp(logit - row_max).
void CrossEntropyRowSumExp(const Tensor& logits, int64_t valid,
                           const Tensor& row_max, Tensor& sumexp);
// target_logit (N) = logits[i, targets[i] - vocab_start] if local, else 0.
void CrossEntropyTargetLogit(const Tensor& logits, const Tensor& targets,
                             int64_t vocab_start, int64_t valid,
                             Tensor& target_logit);
// losses (N) = log(sumexp) + row_max - target_logit.
void CrossEntropyLoss(const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit, Tensor& losses);
// dlogits (N, Vl) = scale · (exp(logit - max) / sumexp - onehot(target)),
// zero in padded columns. OVERWRITES dlogits, which may alias logits.
void CrossEntropyBackward(const Tensor& logits, const Tensor& targets,
                          int64_t vocab_start, int64_t valid,
                          const Tensor& row_max, const Tensor& sumexp,
                          double scale, Tensor& dlogits);

// The fused classifier, for logits that hold the whole vocabulary (one
// vocabulary rank): per row, the max and the sum of exponentials over the
// valid columns, then losses (N) = w · (log(sumexp) + max - target logit)
// and, when dlogits is defined, dlogits (N, Vl) = scale · w · (softmax -
// onehot(target)), zero in padded columns; w = row_weights[i], or 1 when
// row_weights is undefined. The probabilities are never stored: the
// gradient is written over the row it is formed from, so dlogits may alias
// logits (and then OVERWRITES them). targets (N) int32 (one outside [0, valid)
// adds no target term); row_weights (N) float32; losses (N) as the statistics
// (float32 for float32 or bfloat16 logits, float64 for float64).
void CrossEntropyFused(const Tensor& logits, const Tensor& targets,
                       int64_t valid, const Tensor& row_weights, double scale,
                       Tensor& losses, Tensor& dlogits);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_CROSS_ENTROPY_H_
