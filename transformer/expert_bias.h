// DeepSeek-V3's auxiliary-loss-free load balancing: a per-expert bias that
// a mixture-of-experts router adds to its scores when it chooses each
// token's experts (framework/kernels/router.h: the choice only, never a
// weight), moved after every applied optimizer step toward even loads:
//
//   b_e += rate · sign(mean over e' of load_e' − load_e)
//
// load_e being the slots expert e received over the whole step (every
// microbatch of every data-parallel replica, as the trainer's routing
// report sums them: the same on every rank and in every layout), rate
// ModelConfig::moe_bias_update_rate. An expert loaded exactly at the mean
// keeps its bias; a bias of zeros chooses as no bias does.
//
// ExpertBias is the whole model's table, which every rank keeps whole
// (n_layer × E numbers; not a parameter: no gradient, no optimizer state,
// no ZeRO shard): row l holds layer l's E biases and is empty for a dense
// layer, and for every layer before the first update. Chunks and decoders
// take their own layers' rows (ModelChunk::SetExpertBias); checkpoints keep
// the table in state.json.
//
// Thread safety: a value type.
#ifndef TRELLIS_TRANSFORMER_EXPERT_BIAS_H_
#define TRELLIS_TRANSFORMER_EXPERT_BIAS_H_

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "framework/tensor.h"

namespace trellis {

class ExpertBias {
 public:
  ExpertBias() = default;
  explicit ExpertBias(std::vector<std::vector<double>> rows)
      : rows_(std::move(rows)) {}

  // No layer has a row (every bias zero).
  bool empty() const;
  const std::vector<std::vector<double>>& rows() const { return rows_; }
  // Layer `layer`'s biases; empty when it has none.
  std::span<const double> Row(int64_t layer) const;

  // Moves the row of every layer that routed (loads[l] nonempty: its
  // experts' slots over the step) by `rate` as the file comment says, a
  // missing row starting at zeros. REQUIRES: a layer's loads and its row
  // have one size.
  void Update(const std::vector<std::vector<double>>& loads, double rate);

  // InvalidArgument, naming the problem, unless the table fits a model of
  // `n_layer` layers of `experts` experts: no rows or n_layer of them,
  // each empty or `experts` finite numbers.
  absl::Status Check(int64_t n_layer, int64_t experts) const;

  bool operator==(const ExpertBias&) const = default;

 private:
  std::vector<std::vector<double>> rows_;
};

// bias (E, a floating dtype, any device) = row rounded to its dtype; zeros
// for an empty row. REQUIRES: a nonempty row has E values.
void CopyExpertBiasRow(std::span<const double> row, Tensor& bias);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_EXPERT_BIAS_H_
