#include "tools/plan/stage_facts.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "framework/status.h"
#include "parallel/data_parallel.h"
#include "parallel/schedule.h"
#include "tools/plan/shape_only_groups.h"
#include "tools/trainer/bucket_layout.h"
#include "tools/trainer/stage_model.h"
#include "tools/trainer/zero_memory.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

// The trainer's buckets of `model`'s gradients, every set's
// (tools/trainer/bucket_layout.h) in one list: each bucket's padded
// elements, and the bucket of each parameter. The dense parameters' buckets
// come first, over dp·cp ranks; then, under expert parallelism, the
// experts' over the dp·cp / ep ranks holding them (from index `dense` on).
struct BucketLayout {
  std::vector<int64_t> elements;
  std::unordered_map<const Parameter*, int> bucket_of;
  std::unordered_map<const Parameter*, int64_t> offset_of;  // in its bucket
  size_t dense = 0;
};

BucketLayout GradientBucketLayout(const StageModel& model,
                                  const TrainOptions& o, size_t element_bytes) {
  BucketLayout out;
  for (const BucketSet& set : BucketSets(model, o)) {
    const SetBuckets buckets = LayOutBuckets(model, o, set, element_bytes);
    const int first = static_cast<int>(out.elements.size());
    for (size_t i = 0; i < buckets.params.size(); ++i) {
      out.bucket_of[buckets.params[i]] = first + buckets.of_item[i];
      out.offset_of[buckets.params[i]] = buckets.offset_of_item[i];
    }
    out.elements.insert(out.elements.end(), buckets.padded.begin(),
                        buckets.padded.end());
    if (!set.expert) out.dense = out.elements.size();
  }
  return out;
}

// Under ZeRO-3, the gathered bytes of each bucket and each chunk's gather
// units as bucket indices (ShardedParameters gathers a unit's distinct
// buckets; the experts' only where more than one rank holds them).
void PlanWeightGathers(const StageModel& model, const TrainOptions& o,
                       const BucketLayout& layout, StageFacts& facts) {
  if (o.zero != 3 || o.gradient_replicas() == 1) return;
  const int64_t value_bytes = PlanDeviceOf(o).dtype == DType::kBF16 ? 2 : 4;
  for (int64_t n : layout.elements) {
    facts.gather_bytes.push_back(n * value_bytes);
  }
  const bool expert_gathers = o.gradient_replicas() / o.ep > 1;
  const std::vector<std::vector<Parameter*>> units = model.GatherUnits();
  size_t next = 0;
  for (const ChunkPlan& chunk : facts.chunks) {
    const size_t count = (chunk.has_embedding ? 1 : 0) +
                         static_cast<size_t>(chunk.num_layers) +
                         (chunk.has_head ? 1 : 0);
    facts.unit_buckets.emplace_back();
    for (size_t u = 0; u < count && next < units.size(); ++u, ++next) {
      std::vector<int> buckets;
      for (const Parameter* p : units[next]) {
        const int b = layout.bucket_of.at(p);
        if (static_cast<size_t>(b) >= layout.dense && !expert_gathers) {
          continue;
        }
        if (std::find(buckets.begin(), buckets.end(), b) == buckets.end()) {
          buckets.push_back(b);
        }
      }
      facts.unit_buckets.back().push_back(std::move(buckets));
    }
  }
  TRELLIS_CHECK_EQ(next, units.size()) << "gather units not split by chunk";
}

// The elements of `param`'s gradient dp·cp rank `replica` sums over tp
// after the dp sync: all of them, or under ZeRO those in its block of the
// bucket (tp_gradient_sums.h: OwnedGradientRanges).
int64_t OwnedElements(const Parameter& param, const BucketLayout& layout,
                      const TrainOptions& o, int replica) {
  const int64_t n = NumElements(param.spec.LocalShape());
  if (o.zero == 0) return n;
  const int64_t block =
      layout.elements[layout.bucket_of.at(&param)] / o.gradient_replicas();
  const int64_t offset = layout.offset_of.at(&param);
  const int64_t lo = std::max(offset, replica * block);
  const int64_t hi = std::min(offset + n, (replica + 1) * block);
  return std::max<int64_t>(0, hi - lo);
}

}  // namespace

PlanDevice PlanDeviceOf(const TrainOptions& options) {
  if (options.device != DeviceType::kCUDA) return {};
  return {DeviceType::kCUDA,
          options.precision == Precision::kBf16 ? DType::kBF16 : DType::kF32};
}

std::vector<StageFacts> PlanStages(const TrainOptions& options,
                                   const StageSchedules* schedules,
                                   int replica) {
  TRELLIS_CHECK(replica >= 0 && replica < options.gradient_replicas());
  const PlanDevice where = PlanDeviceOf(options);
  const Device device =
      where.device == DeviceType::kCUDA ? Device::Cuda(0) : Device::Cpu();
  StageSchedules built;
  if (schedules == nullptr) {
    built = BuildStageSchedules(options);
    schedules = &built;
  }
  std::vector<StageFacts> stages;
  for (int p = 0; p < static_cast<int>(options.pp); ++p) {
    const MeshCoord coord{replica, 0, p};
    ShapeOnlyGroups groups(options.dp, options.cp, options.tp, options.pp,
                           coord, options.ep);
    const StageModel model(options, groups.groups(), coord, device, where.dtype,
                           schedules);
    StageFacts facts;
    // The trainer's own plan of the rank's ZeRO level (CPU ranks
    // reduce-scatter through MPI's scratch blocks).
    const MemoryPlan replicated = model.PlanMemory();
    facts.memory = PlanZeroMemory(model, options, replicated, device.is_cpu());
    facts.gradient_bytes = static_cast<int64_t>(replicated.gradients);
    facts.chunks = model.chunk_plans();
    facts.routed_experts = model.RoutedExperts();
    for (const Parameter* param : model.params().all()) {
      facts.local_parameters += NumElements(param->spec.LocalShape());
    }
    for (const Parameter* param : model.params().all()) {
      if (param->expert) {
        facts.expert_parameters += NumElements(param->spec.LocalShape());
      }
    }
    const int64_t grad_bytes =
        facts.gradient_bytes / std::max<int64_t>(1, facts.local_parameters);
    const BucketLayout layout =
        GradientBucketLayout(model, options, static_cast<size_t>(grad_bytes));
    for (size_t b = 0; b < layout.elements.size(); ++b) {
      (b < layout.dense ? facts.buckets : facts.expert_buckets)
          .push_back(layout.elements[b] * grad_bytes);
    }
    PlanWeightGathers(model, options, layout, facts);
    for (const Parameter* param : model.TpPartialGradients()) {
      const int64_t n = OwnedElements(*param, layout, options, replica);
      if (n > 0) facts.tp_partial.push_back(grad_bytes * n);
    }
    stages.push_back(std::move(facts));
  }
  int64_t routed = 0;
  for (const StageFacts& s : stages)
    routed = std::max(routed, s.routed_experts);
  for (StageFacts& s : stages) s.routed_experts = routed;
  return stages;
}

std::vector<GemmShape> BlockGemmShapes(const TrainOptions& options,
                                       int64_t layer) {
  const ModelConfig& m = options.model;
  ChunkPlan one;
  one.first_layer = layer;
  one.num_layers = 1;
  one.has_embedding = false;
  one.has_head = false;
  // One expert declared (and marked as an expert) stands for the E/ep a
  // rank holds.
  one.expert_ranks = std::max<int64_t>(1, m.experts);
  ParameterSet params;
  FamilyOf(options.model)
      .DeclareParameters(options.model, one, TpPlace{options.tp, 0},
                         options.seed, Device::Cpu(), DType::kF32, params);
  const double expert_rows =
      m.experts > 0 ? static_cast<double>(options.ep * m.experts_per_token) /
                          static_cast<double>(m.experts)
                    : 1.0;
  const int64_t experts_here = m.experts > 0 ? m.experts / options.ep : 1;
  std::vector<GemmShape> shapes;
  for (const Parameter* p : params.all()) {
    const Shape local = p->spec.LocalShape();
    if (local.size() != 2) continue;
    if (p->expert) {
      shapes.push_back({local[0], local[1], expert_rows, experts_here});
    } else {
      shapes.push_back({local[0], local[1]});
    }
  }
  return shapes;
}

double BlockGemmElements(const TrainOptions& options, int64_t layer) {
  double elements = 0;
  for (const GemmShape& s : BlockGemmShapes(options, layer)) {
    elements += static_cast<double>(s.count) * s.rows *
                static_cast<double>(s.in) * static_cast<double>(s.out);
  }
  return elements;
}

}  // namespace trellis
