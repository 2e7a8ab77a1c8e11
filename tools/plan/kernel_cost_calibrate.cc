#include "tools/plan/kernel_cost_calibrate.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "tools/plan/stage_facts.h"
#include "transformer/config.h"

namespace trellis {
namespace {

// Predicted over measured, the factor a grid's rates are scaled by.
double Factor(double predicted, double measured) {
  if (predicted <= 0 || measured <= 0) return 1;
  return std::clamp(predicted / measured, 0.25, 4.0);
}

void Scale(RateGrid& grid, double factor) {
  for (double& r : grid.rates) r *= factor;
}

// The table's seconds for one step's GEMMs, attention and AdamW.
void Predict(const TrainOptions& o, const KernelCosts& c, StepCalibration& s) {
  const ModelConfig& m = o.model;
  const double rows = static_cast<double>(o.micro_batch_size * m.seq_len);
  const double micro = static_cast<double>(o.microbatches());
  const double layers = static_cast<double>(m.n_layer);
  const double width = static_cast<double>(m.d_model);
  const double bytes = o.precision == Precision::kBf16 ? 2 : 4;
  const double vocab = static_cast<double>(PaddedVocab(m.vocab_size, 1));
  double block = 0, head = 0;
  for (GemmPass pass : {GemmPass::kForward, GemmPass::kBackwardInput,
                        GemmPass::kBackwardWeight}) {
    for (const GemmShape& g : BlockGemmShapes(o)) {
      block += static_cast<double>(g.count) *
               GemmSeconds(c, pass, rows * g.rows, static_cast<double>(g.in),
                           static_cast<double>(g.out), bytes);
    }
    head += GemmSeconds(c, pass, rows, width, vocab, bytes);
  }
  s.gemm_predicted = micro * (layers * block + head);
  const double heads = static_cast<double>(m.n_head);
  const double seq = static_cast<double>(m.seq_len);
  const double flops =
      3 * 2 * rows * seq * heads * static_cast<double>(m.HeadDim());
  const double head_windows = heads * static_cast<double>(o.micro_batch_size);
  s.attention_predicted =
      micro * layers * flops /
      AttentionRate(c, seq, static_cast<double>(m.HeadDim()), head_windows);
  const double params = static_cast<double>(m.NumParameters());
  s.adamw_predicted = 28 * params / AdamWRate(c, params);
}

}  // namespace

StepCalibration CalibrateToStep(const TrainOptions& o,
                                const std::vector<KernelTime>& kernels,
                                KernelCosts& costs) {
  StepCalibration s;
  for (const KernelTime& k : kernels) {
    const double seconds = k.ms / 1e3;
    if (absl::StartsWith(k.name, "Matmul")) s.gemm_measured += seconds;
    if (absl::StartsWith(k.name, "Attention")) s.attention_measured += seconds;
    if (absl::StartsWith(k.name, "AdamW")) s.adamw_measured += seconds;
  }
  Predict(o, costs, s);
  s.gemm = Factor(s.gemm_predicted, s.gemm_measured);
  s.attention = Factor(s.attention_predicted, s.attention_measured);
  s.adamw = Factor(s.adamw_predicted, s.adamw_measured);
  for (RateGrid* g : {&costs.gemm_forward, &costs.gemm_backward_input,
                      &costs.gemm_backward_weight}) {
    Scale(*g, s.gemm);
  }
  Scale(costs.attention, s.attention);
  Scale(costs.adamw, s.adamw);
  absl::StrAppendFormat(
      &costs.source,
      "; scaled to a profiled step of %lld layers, %lld wide, T %lld, micro "
      "batch %lld: GEMMs x%.3f, attention x%.3f, AdamW x%.3f",
      static_cast<long long>(o.model.n_layer),
      static_cast<long long>(o.model.d_model),
      static_cast<long long>(o.model.seq_len),
      static_cast<long long>(o.micro_batch_size), s.gemm, s.attention, s.adamw);
  return s;
}

double CalibrateToPasses(const TrainOptions& o, const PassTimes& passes,
                         KernelCosts& costs) {
  const ModelConfig& m = o.model;
  const double rows = static_cast<double>(o.micro_batch_size * m.seq_len);
  const double width = static_cast<double>(m.d_model);
  const double seq = static_cast<double>(m.seq_len);
  const double heads = static_cast<double>(m.n_head);
  const double head_dim = static_cast<double>(m.HeadDim());
  // One block's F, B and W as step_work.cc costs them (float32, tp = 1).
  const double head_windows = heads * static_cast<double>(o.micro_batch_size);
  double block = 3 * 2 * rows * seq * heads * head_dim /
                     AttentionRate(costs, seq, head_dim, head_windows) +
                 3 * rows * 4 * (14 * width + 8 * 4 * width) /
                     ElementwiseRate(costs, rows, width);
  for (GemmPass pass : {GemmPass::kForward, GemmPass::kBackwardInput,
                        GemmPass::kBackwardWeight}) {
    for (const GemmShape& g : BlockGemmShapes(o)) {
      block +=
          static_cast<double>(g.count) *
          GemmSeconds(costs, pass, rows * g.rows, static_cast<double>(g.in),
                      static_cast<double>(g.out), 4);
    }
  }
  const double blocks = static_cast<double>(std::min<int64_t>(2, m.n_layer));
  const double factor =
      Factor(blocks * block, passes.forward + passes.fused_backward);
  for (RateGrid* g :
       {&costs.gemm_forward, &costs.gemm_backward_input,
        &costs.gemm_backward_weight, &costs.attention, &costs.elementwise}) {
    Scale(*g, factor);
  }
  absl::StrAppendFormat(&costs.source,
                        "; scaled x%.3f to the measured passes of %g "
                        "%lld-wide blocks",
                        factor, blocks, static_cast<long long>(m.d_model));
  return factor;
}

}  // namespace trellis
