// RoutingReport: a mixture of experts' routing per step, as the trainer
// reports it (StepMetrics: the log line, the metrics file, TensorBoard):
// the balance losses' mean over the MoE layers and the step's microbatches,
// and per MoE layer the slots its busiest expert received over the mean
// (1: evenly loaded). The statistics of each rank's layers (its chunks'
// TakeRouting) are summed over the pipeline's stages and the data-parallel
// replicas in one all-reduce each; the tp ranks of a stage hold the same
// routing and are not summed.
//
// Thread safety: one per rank, on the training thread.
#ifndef TRELLIS_TOOLS_TRAINER_HEALTH_ROUTING_REPORT_H_
#define TRELLIS_TOOLS_TRAINER_HEALTH_ROUTING_REPORT_H_

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "tools/trainer/health/metrics.h"
#include "transformer/model_family.h"

namespace trellis {

class RoutingReport {
 public:
  // `experts`: the most experts any layer of the whole model routes over
  // (agreed by the world; 0 turns the report off). `microbatches`: the
  // step's microbatches per data-parallel replica.
  RoutingReport(int64_t n_layer, int64_t experts, int64_t microbatches)
      : n_layer_(n_layer), experts_(experts), microbatches_(microbatches) {}

  bool on() const { return experts_ > 0; }
  // Sums `mine` over pp and dp and fills m's routing fields; with `loads`,
  // also each layer's slots per expert over the step (the whole model's,
  // the same on every rank; empty rows for layers that did not route), the
  // loads ExpertBias::Update moves by. Collective over pp and dp when on();
  // nothing otherwise.
  void Report(const std::vector<ModelChunk::LayerRouting>& mine,
              Communicator& pp, Communicator& dp, StepMetrics& m,
              std::vector<std::vector<double>>* loads = nullptr) const;

 private:
  int64_t n_layer_;
  int64_t experts_;
  int64_t microbatches_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_HEALTH_ROUTING_REPORT_H_
