#include "tools/plan/stage_facts.h"

#include <algorithm>
#include <string>

#include "parallel/data_parallel.h"
#include "parallel/schedule.h"
#include "tools/plan/shape_only_groups.h"
#include "tools/trainer/stage_model.h"
#include "tools/trainer/zero_memory.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

// The trainer's buckets of `model`'s gradients (trainer.cc: the tied
// embedding alone under ZeRO, each bucket padded to dp elements there).
std::vector<int64_t> GradientBucketBytes(const StageModel& model,
                                         const TrainOptions& o,
                                         int64_t gradient_bytes) {
  std::vector<GradientBuckets::LayoutItem> items;
  int64_t elements = 0;
  const std::string tied = FamilyOf(o.model).TiedEmbedding(o.model);
  for (const Parameter* p : model.GradientReadyOrder()) {
    items.push_back({NumElements(p->spec.LocalShape()), 0, 0,
                     o.zero > 0 && !tied.empty() && p->name == tied});
    elements += items.back().elements;
  }
  if (elements == 0) return {};
  const size_t element_bytes = static_cast<size_t>(gradient_bytes / elements);
  for (auto& item : items) item.element_bytes = element_bytes;
  std::vector<int64_t> bytes;
  for (const std::vector<size_t>& bucket : GradientBuckets::Layout(
           items, static_cast<int64_t>(o.dp_bucket_mb * 1024 * 1024))) {
    int64_t n = 0;
    for (size_t i : bucket) n += items[i].elements;
    if (o.zero > 0) n = (n + o.dp - 1) / o.dp * o.dp;
    bytes.push_back(n * static_cast<int64_t>(element_bytes));
  }
  return bytes;
}

}  // namespace

PlanDevice PlanDeviceOf(const TrainOptions& options) {
  if (options.device != DeviceType::kCUDA) return {};
  return {DeviceType::kCUDA,
          options.precision == Precision::kBf16 ? DType::kBF16 : DType::kF32};
}

std::vector<StageFacts> PlanStages(const TrainOptions& options) {
  const PlanDevice where = PlanDeviceOf(options);
  const Device device =
      where.device == DeviceType::kCUDA ? Device::Cuda(0) : Device::Cpu();
  const std::vector<std::vector<Action>> schedules =
      BuildAllSchedules(options.schedule, static_cast<int>(options.pp),
                        static_cast<int>(options.microbatches()),
                        static_cast<int>(options.virtual_stages));
  std::vector<StageFacts> stages;
  for (int p = 0; p < static_cast<int>(options.pp); ++p) {
    const MeshCoord coord{0, 0, p};
    ShapeOnlyGroups groups(options.dp, options.tp, options.pp, coord);
    const StageModel model(options, groups.groups(), coord, device,
                           where.dtype);
    StageFacts facts;
    // The trainer's own plan of the rank's ZeRO level (CPU ranks
    // reduce-scatter through MPI's scratch blocks).
    const MemoryPlan replicated = model.PlanMemory(schedules[p]);
    facts.memory = PlanZeroMemory(model, options, replicated, device.is_cpu());
    facts.gradient_bytes = static_cast<int64_t>(replicated.gradients);
    facts.chunks = model.chunk_plans();
    for (const Parameter* param : model.params().all()) {
      facts.local_parameters += NumElements(param->spec.LocalShape());
    }
    facts.buckets = GradientBucketBytes(model, options, facts.gradient_bytes);
    const int64_t grad_bytes =
        facts.gradient_bytes / std::max<int64_t>(1, facts.local_parameters);
    for (const Parameter* param : model.TpPartialGradients()) {
      facts.tp_partial.push_back(grad_bytes *
                                 NumElements(param->spec.LocalShape()));
    }
    stages.push_back(std::move(facts));
  }
  return stages;
}

int64_t BlockGemmElements(const TrainOptions& options) {
  ChunkPlan one;
  one.first_layer = 0;
  one.num_layers = 1;
  one.has_embedding = false;
  one.has_head = false;
  ParameterSet params;
  FamilyOf(options.model)
      .DeclareParameters(options.model, one, TpPlace{options.tp, 0},
                         options.seed, Device::Cpu(), DType::kF32, params);
  int64_t elements = 0;
  for (const Parameter* p : params.all()) {
    const Shape local = p->spec.LocalShape();
    if (local.size() == 2) elements += NumElements(local);
  }
  return elements;
}

}  // namespace trellis
