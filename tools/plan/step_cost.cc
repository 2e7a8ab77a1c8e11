#include "tools/plan/step_cost.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "framework/status.h"
#include "parallel/communicator.h"
#include "parallel/mesh.h"
#include "parallel/schedule.h"
#include "tools/plan/comm_cost.h"
#include "tools/plan/kernel_costs.h"
#include "tools/plan/step_work.h"
#include "transformer/config.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

// AdamW per owned element: reads weight, gradient and two moments, writes
// weight and moments, float32 each; bf16 runs also write the bf16 copy.
constexpr double kAdamBytes = 28;
constexpr double kAdamBf16Bytes = 2;

// The links of a layout's groups, and its two data-parallel groups: the
// dense gradients' (dp·cp ranks) and the experts' (dp·cp / ep).
struct Links {
  LinkSpec tp, pp, dp, cp, ep;
  SyncGroup dense, experts;
};

// A call of a data-parallel sync and the group it runs over.
struct GroupCall {
  PlannedCall call;
  const SyncGroup* group;
};

// `calls` over `group`, appended to `out`.
void AddCalls(const std::vector<PlannedCall>& calls, const SyncGroup& group,
              std::vector<GroupCall>& out) {
  for (const PlannedCall& c : calls) out.push_back({c, &group});
}

double GroupSeconds(const std::vector<GroupCall>& calls) {
  double t = 0;
  for (const GroupCall& c : calls) {
    t += CallSeconds({c.call}, c.group->n, c.group->link);
  }
  return t;
}

// The gradient sync of one stage: when it ends. Its collectives go one
// after another on the link, each from when its gradients are produced:
// ZeRO-2's per-microbatch reduce-scatters as each W of their chunk ends,
// the others' buckets linearly over the last microbatch's W of their chunk
// (latest chunk first, gradient order; the experts' after the dense ones,
// over their own group); on a cluster without asynchronous collectives,
// all of them when the stage's pipeline ends.
double DataParallelEnd(const TrainOptions& o, const StageFacts& stage,
                       const std::vector<TimedAction>& timeline,
                       double stage_end, const ClusterSpec& cluster,
                       const Links& links, double* total) {
  const DpCalls dense = StepDpCalls(o, stage);
  const DpCalls experts = StepExpertDpCalls(o, stage);
  std::vector<GroupCall> per_microbatch, per_step;
  AddCalls(dense.per_microbatch, links.dense, per_microbatch);
  AddCalls(experts.per_microbatch, links.experts, per_microbatch);
  AddCalls(dense.per_step, links.dense, per_step);
  AddCalls(experts.per_step, links.experts, per_step);
  *total = 0;
  if (per_microbatch.empty() && per_step.empty()) return stage_end;
  const int v = static_cast<int>(o.virtual_stages);
  const int last_mb = static_cast<int>(o.microbatches()) - 1;
  double link_free = 0;
  if (!per_microbatch.empty()) {
    // Each W produces its chunk's share of every bucket's gradients.
    const double per_w = GroupSeconds(per_microbatch) / static_cast<double>(v);
    for (const TimedAction& a : timeline) {
      if (a.action.type != ActionType::kBackwardWeight) continue;
      const double ready = cluster.async_collectives ? a.end : stage_end;
      link_free = std::max(link_free, ready) + per_w;
      *total += per_w;
    }
  }
  if (!per_step.empty()) {
    std::vector<std::pair<double, double>> windows;  // (start, end) per chunk
    for (int u = v - 1; u >= 0; --u) {
      for (const TimedAction& a : timeline) {
        if (a.action.type == ActionType::kBackwardWeight &&
            a.action.microbatch == last_mb && a.action.virtual_stage == u) {
          windows.push_back({a.start, a.end});
        }
      }
    }
    if (windows.empty() || !cluster.async_collectives) {
      windows.assign(1, {stage_end, stage_end});
    }
    double grads = 0;
    for (const GroupCall& c : per_step) {
      if (c.call.bytes > 8) grads += static_cast<double>(c.call.bytes);
    }
    const double per_chunk =
        std::max(1.0, grads) / static_cast<double>(windows.size());
    double produced = 0;
    for (const GroupCall& c : per_step) {
      if (c.call.bytes <= 8) continue;  // the loss average: after the update
      produced += static_cast<double>(c.call.bytes);
      // When the bucket's last byte is produced: linearly over its chunk's W.
      const size_t k = std::min(
          windows.size() - 1, static_cast<size_t>((produced - 1) / per_chunk));
      const double into = (produced - k * per_chunk) / per_chunk;
      const double ready =
          windows[k].first + into * (windows[k].second - windows[k].first);
      const double cost = GroupSeconds({c});
      *total += cost;
      link_free = std::max(link_free, ready) + cost;
    }
  }
  return std::max(stage_end, link_free);
}

// The update: AdamW over the owned elements (memory-bound: the dense ones
// sharded over dp·cp under ZeRO, the experts' over dp·cp / ep), then ZeRO's
// all-gathers of the weights; the slowest stage's.
double UpdateSeconds(const TrainOptions& o,
                     const std::vector<StageFacts>& stages,
                     const ClusterSpec& cluster, const Links& links) {
  const bool bf16 = PlanDeviceOf(o).dtype == DType::kBF16;
  double update = 0;
  for (const StageFacts& stage : stages) {
    const double dense =
        static_cast<double>(stage.local_parameters - stage.expert_parameters);
    const double experts = static_cast<double>(stage.expert_parameters);
    const double owned = o.zero > 0
                             ? dense / links.dense.n + experts / links.experts.n
                             : dense + experts;
    const double bytes = owned * (kAdamBytes + (bf16 ? kAdamBf16Bytes : 0));
    // With a cost table: AdamW's measured rate on as many elements (its
    // multi-tensor step walks them all in one call).
    const double rate = cluster.kernel_costs
                            ? AdamWRate(*cluster.kernel_costs, owned)
                            : cluster.memory_bandwidth;
    std::vector<GroupCall> calls;
    AddCalls(StepDpCalls(o, stage).update, links.dense, calls);
    AddCalls(StepExpertDpCalls(o, stage).update, links.experts, calls);
    update = std::max(update, bytes / rate + GroupSeconds(calls));
  }
  return update;
}

// What a pass adds to its compute: its tp collectives, its cp transfers
// that the attention does not hide and, under ZeRO-3, the wait for its
// weight gathers (and their whole duration).
struct PassCost {
  double tp = 0, cp = 0, ep = 0, gather = 0, gather_total = 0;
};
PassCost CostPass(const PassWork& pass, const TrainOptions& o,
                  const Links& links, const ClusterSpec& cluster) {
  const int tp = static_cast<int>(o.tp), cp = static_cast<int>(o.cp);
  PassCost c;
  c.tp = CallSeconds(pass.tp, tp, links.tp);
  c.cp = ContextExposedSeconds(pass, cp, links.cp, cluster.async_collectives);
  c.ep = CallSeconds(pass.ep, static_cast<int>(o.ep), links.ep);
  c.gather = GatherExposedSeconds(pass, links.dense, links.experts,
                                  cluster.async_collectives, &c.gather_total);
  return c;
}

// Every chunk's action costs, with and without the pipeline transfers, per
// global chunk k = u·pp + p; and per stage the step's busy seconds and the
// tp collectives', cp transfers' and ZeRO-3 gathers' shares of them.
struct ChunkCosts {
  std::vector<ActionCosts> with, without;
  std::vector<double> tp_time, cp_time, ep_time, busy, gather, gather_all;
};
ChunkCosts CostChunks(const TrainOptions& o,
                      const std::vector<StageFacts>& stages,
                      const ClusterSpec& cluster, const Links& links) {
  const int pp = static_cast<int>(o.pp), v = static_cast<int>(o.virtual_stages);
  ChunkCosts costs;
  costs.with.resize(pp * v);
  costs.without.resize(pp * v);
  costs.tp_time.assign(pp, 0);
  costs.cp_time.assign(pp, 0);
  costs.ep_time.assign(pp, 0);
  costs.busy.assign(pp, 0);
  costs.gather.assign(pp, 0);
  costs.gather_all.assign(pp, 0);
  const double m = static_cast<double>(o.microbatches());
  const double transfer =
      pp > 1 ? CollectiveSeconds(CommOp::kSend, TransferBytes(o), 2, links.pp)
             : 0;
  for (int p = 0; p < pp; ++p) {
    for (int u = 0; u < v; ++u) {
      const ChunkWork c = PlanChunkWork(o, stages[p], u, cluster);
      double tp_s = 0, cp_s = 0, ep_s = 0, gather_s = 0;
      auto cost = [&](const PassWork& pass) {
        const PassCost k = CostPass(pass, o, links, cluster);
        tp_s += k.tp;
        cp_s += k.cp;
        ep_s += k.ep;
        gather_s += k.gather;
        costs.gather_all[p] += m * k.gather_total;
        return pass.compute + k.tp + k.cp + k.ep + k.gather;
      };
      ActionCosts& a = costs.with[u * pp + p];
      a.forward = cost(c.f);
      a.backward_input = cost(c.b);
      a.backward_weight = cost(c.w);
      a.transfer = transfer;
      costs.without[u * pp + p] = a;
      costs.without[u * pp + p].transfer = 0;
      costs.tp_time[p] += m * tp_s;
      costs.cp_time[p] += m * cp_s;
      costs.ep_time[p] += m * ep_s;
      costs.gather[p] += m * gather_s;
      costs.busy[p] += m * (a.forward + a.backward_input + a.backward_weight);
    }
  }
  return costs;
}

// When the step's gradient syncs end: each stage's starts from its own
// timeline and the step goes on when the last stage's ends; the tied
// embedding's gradient is then summed between the first and the last stage
// (float32, its local rows). *dp_comm_total: the longest stage's sync time.
double SyncedEnd(const TrainOptions& o, const std::vector<StageFacts>& stages,
                 const ScheduleSimulation& sim, const ClusterSpec& cluster,
                 const Links& links, double* dp_comm_total) {
  const int pp = static_cast<int>(o.pp);
  double synced = sim.makespan;
  for (int p = 0; p < pp; ++p) {
    double total = 0;
    const double stage_end =
        sim.timeline[p].empty() ? 0 : sim.timeline[p].back().end;
    synced =
        std::max(synced, DataParallelEnd(o, stages[p], sim.timeline[p],
                                         stage_end, cluster, links, &total));
    *dp_comm_total = std::max(*dp_comm_total, total);
  }
  if (pp > 1 && !FamilyOf(o.model).TiedEmbedding(o.model).empty()) {
    const int64_t rows = PaddedVocab(o.model.vocab_size, o.tp) / o.tp;
    synced += CollectiveSeconds(CommOp::kAllReduce, 4 * rows * o.model.d_model,
                                2, links.pp);
  }
  return synced;
}

}  // namespace

absl::StatusOr<StepEstimate> EstimateStep(const TrainOptions& o,
                                          const std::vector<StageFacts>& stages,
                                          const ClusterSpec& cluster,
                                          const StageSchedules* built) {
  // The trainer's mesh: cp folded into the dp axis, its ranks consecutive.
  const int replicas = static_cast<int>(o.gradient_replicas());
  TRELLIS_ASSIGN_OR_RETURN(
      Mesh mesh, Mesh::Create(replicas * static_cast<int>(o.tp * o.pp),
                              replicas, static_cast<int>(o.tp),
                              static_cast<int>(o.pp), o.mesh_order));
  TRELLIS_ASSIGN_OR_RETURN(mesh,
                           mesh.WithExpertParallel(static_cast<int>(o.ep)));
  TRELLIS_ASSIGN_OR_RETURN(mesh,
                           mesh.WithContextParallel(static_cast<int>(o.cp)));
  Links links;
  links.tp = GroupLink(mesh, GroupKind::kTp, cluster);
  links.pp = GroupLink(mesh, GroupKind::kPp, cluster);
  links.dp = GroupLink(mesh, GroupKind::kDp, cluster);
  links.cp = o.cp > 1 ? GroupLink(mesh, GroupKind::kCp, cluster) : links.tp;
  links.ep = o.ep > 1 ? GroupLink(mesh, GroupKind::kEp, cluster) : links.tp;
  links.dense = {replicas, links.dp};
  links.experts = {
      replicas / static_cast<int>(o.ep),
      o.ep > 1 ? GroupLink(mesh, GroupKind::kExpertDp, cluster) : links.dp};
  const int pp = static_cast<int>(o.pp), v = static_cast<int>(o.virtual_stages);
  const ChunkCosts costs = CostChunks(o, stages, cluster, links);
  std::vector<std::vector<Action>> own;
  if (built == nullptr) {
    own = BuildAllSchedules(o.schedule, pp, static_cast<int>(o.microbatches()),
                            v);
  }
  const std::vector<std::vector<Action>>& schedules =
      built != nullptr ? built->actions : own;
  TRELLIS_ASSIGN_OR_RETURN(ScheduleSimulation sim,
                           SimulateSchedules(schedules, v, costs.with));
  TRELLIS_ASSIGN_OR_RETURN(ScheduleSimulation free_transfers,
                           SimulateSchedules(schedules, v, costs.without));
  StepEstimate e;
  const std::vector<double>& busy = costs.busy;
  const int busiest = static_cast<int>(
      std::max_element(busy.begin(), busy.end()) - busy.begin());
  e.tp_comm = costs.tp_time[busiest];
  e.cp_comm = costs.cp_time[busiest];
  e.ep_comm = costs.ep_time[busiest];
  e.dp_gather = costs.gather[busiest];
  e.dp_gather_total = costs.gather_all[busiest];
  e.compute = busy[busiest] - e.tp_comm - e.cp_comm - e.ep_comm - e.dp_gather;
  e.bubble = std::max(0.0, free_transfers.makespan - busy[busiest]);
  e.pp_comm = std::max(0.0, sim.makespan - free_transfers.makespan);
  e.bubble_fraction = sim.BubbleFraction();
  const double synced =
      SyncedEnd(o, stages, sim, cluster, links, &e.dp_comm_total);
  e.dp_comm = synced - sim.makespan;
  const double update = UpdateSeconds(o, stages, cluster, links);
  e.optimizer = update;
  e.step = synced + e.optimizer;
  return e;
}

}  // namespace trellis
