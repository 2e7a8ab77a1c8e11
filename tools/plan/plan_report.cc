#include "tools/plan/plan_report.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "parallel/schedule.h"
#include "tools/options/option_types.h"
#include "tools/plan/step_work.h"

namespace trellis {
namespace {

std::string Bytes(double b) { return Readable(static_cast<size_t>(b)); }

std::string Header(const std::vector<LayoutPlan>& plans, const ClusterSpec& c) {
  std::string out = absl::StrFormat(
      "cluster %s: %d × %d devices, %s each (%s reserved), %.4g TFLOP/s "
      "peak; %s\n",
      c.name, c.nodes, c.devices_per_node, Bytes(c.memory_bytes),
      Bytes(c.reserved_bytes), c.peak_flops / 1e12, c.source);
  if (!plans.empty()) {
    const TrainOptions& o = plans.front().options;
    absl::StrAppendFormat(
        &out, "model: %s, %d parameters; global batch %d × %d tokens\n",
        o.model.DebugString(), o.model.NumParameters(), o.global_batch_size,
        o.model.seq_len);
  }
  return out;
}

double Ms(double seconds) { return seconds * 1e3; }

// The tp, dp (and under cp the cp) calls of one step, a line each.
void AppendCalls(const LayoutPlan& p, std::string& out) {
  for (const auto& [group, stats] :
       {std::pair<const char*, const CommStats*>{"tp", &p.traffic.tp},
        {"dp", &p.traffic.dp},
        {"cp", &p.traffic.cp}}) {
    if (group == std::string("cp") && p.options.cp == 1) continue;
    std::string calls;
    for (int i = 0; i < static_cast<int>(CommOp::kCount); ++i) {
      if (stats->calls[i] == 0) continue;
      absl::StrAppendFormat(&calls, "%s%lld × %s", calls.empty() ? "" : ", ",
                            static_cast<long long>(stats->calls[i]),
                            CommOpName(static_cast<CommOp>(i)));
    }
    absl::StrAppendFormat(&out, "  %s calls per step (stage %d): %s\n", group,
                          p.largest_stage, calls.empty() ? "none" : calls);
  }
}

}  // namespace

std::string FormatPlanTable(const std::vector<LayoutPlan>& plans,
                            const ClusterSpec& cluster, size_t top) {
  std::string out = Header(plans, cluster);
  const size_t fitting = static_cast<size_t>(std::count_if(
      plans.begin(), plans.end(), [](const LayoutPlan& p) { return p.fits; }));
  absl::StrAppendFormat(&out, "%d valid layouts, %d fit\n", plans.size(),
                        fitting);
  if (fitting == 0) {
    if (plans.empty()) {
      absl::StrAppend(&out,
                      "nothing fits: no layout of this model and batch is "
                      "valid on this many ranks\n");
      return out;
    }
    absl::StrAppendFormat(
        &out,
        "nothing fits: every layout needs more than the %s a device offers; "
        "the smallest, %s, needs %s per rank\n",
        Bytes(plans.front().available_bytes), plans.front().name,
        Bytes(plans.front().arena_bytes));
  } else {
    absl::StrAppendFormat(&out, "%4s  %-56s %12s %6s %10s %10s %7s %9s %9s\n",
                          "rank", "layout", "tokens/s", "MFU", "mem/rank",
                          "headroom", "bubble", "exp.comm", "step");
    for (size_t i = 0; i < std::min(fitting, top); ++i) {
      const LayoutPlan& p = plans[i];
      const StepEstimate& e = p.step;
      absl::StrAppendFormat(
          &out, "%4d  %-56s %12.4g %5.1f%% %10s %10s %6.1f%% %7.2fms %7.2fms\n",
          i + 1, p.name, p.tokens_per_s, 100 * p.mfu, Bytes(p.arena_bytes),
          Bytes(p.available_bytes - p.arena_bytes), 100 * e.bubble / e.step,
          Ms(e.tp_comm + e.cp_comm + e.ep_comm + e.pp_comm + e.dp_comm +
             e.dp_gather),
          Ms(e.step));
    }
  }
  const bool cp_shown =
      std::any_of(plans.begin(), plans.begin() + std::min(fitting, top),
                  [](const LayoutPlan& p) { return p.options.cp > 1; });
  if (cp_shown && cluster.device == DeviceType::kCUDA) {
    absl::StrAppend(&out,
                    "note: trellis-train runs context parallelism (cp > 1) "
                    "on the CPU only until its CUDA kernels land; the cp "
                    "rows plan that future build\n");
  }
  const size_t not_fitting = plans.size() - fitting;
  if (not_fitting > 0) {
    absl::StrAppendFormat(&out, "do not fit (%d; smallest need first):\n",
                          not_fitting);
    for (size_t i = fitting; i < std::min(plans.size(), fitting + top); ++i) {
      const LayoutPlan& p = plans[i];
      absl::StrAppendFormat(&out, "      %-56s needs %s per rank, has %s\n",
                            p.name, Bytes(p.arena_bytes),
                            Bytes(p.available_bytes));
    }
  }
  return out;
}

nlohmann::json LayoutJson(const LayoutPlan& p) {
  const TrainOptions& o = p.options;
  const StepEstimate& e = p.step;
  const MemoryPlan& m = p.memory;
  return {{"layout", p.name},
          {"dp", o.dp},
          {"cp", o.cp},
          {"cp_comm", o.cp_comm},
          {"ep", o.ep},
          {"tp", o.tp},
          {"pp", o.pp},
          {"schedule", ScheduleKindName(o.schedule)},
          {"virtual_stages", o.virtual_stages},
          {"micro_batch_size", o.micro_batch_size},
          {"zero", o.zero},
          {"recompute", RecomputeName(o.recompute)},
          {"fits", p.fits},
          {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"memory",
           {{"weights", m.weights},
            {"gradients", m.gradients},
            {"optimizer", m.optimizer},
            {"activations", m.activations},
            {"workspace", m.workspace},
            {"pipeline", m.pipeline},
            {"checkpoint", m.checkpoint},
            {"total", m.total()},
            {"arena", p.arena_bytes},
            {"available", p.available_bytes},
            {"largest_stage", p.largest_stage}}},
          {"step_s",
           {{"compute", e.compute},
            {"bubble", e.bubble},
            {"tp_comm", e.tp_comm},
            {"cp_comm", e.cp_comm},
            {"ep_comm", e.ep_comm},
            {"dp_gather", e.dp_gather},
            {"pp_comm", e.pp_comm},
            {"dp_comm", e.dp_comm},
            {"optimizer", e.optimizer},
            {"total", e.step},
            {"dp_comm_total", e.dp_comm_total},
            {"dp_gather_total", e.dp_gather_total}}},
          {"bubble_fraction", e.bubble_fraction}};
}

nlohmann::json PlansJson(const std::vector<LayoutPlan>& plans,
                         const ClusterSpec& cluster) {
  nlohmann::json layouts = nlohmann::json::array();
  for (const LayoutPlan& p : plans) layouts.push_back(LayoutJson(p));
  nlohmann::json model = nullptr;
  if (!plans.empty()) {
    const TrainOptions& o = plans.front().options;
    model = {{"config", o.model.DebugString()},
             {"parameters", o.model.NumParameters()},
             {"flops_per_token", o.model.TrainingFlopsPerToken()},
             {"global_batch_size", o.global_batch_size},
             {"seq_len", o.model.seq_len}};
  }
  return {
      {"cluster", ClusterToJson(cluster)},
      {"model", model},
      {"fitting", std::count_if(plans.begin(), plans.end(),
                                [](const LayoutPlan& p) { return p.fits; })},
      {"layouts", layouts}};
}

namespace {

// The kernel rates each kind of block is costed at.
void AppendKernelRates(const TrainOptions& o, const ClusterSpec& cluster,
                       std::string& out) {
  const std::vector<KernelRates> rates = PlanKernelRates(o, cluster);
  for (const KernelRates& r : rates) {
    // A model of one kind of block says "a block's"; a mixture names each
    // kind's layers.
    const std::string blocks =
        rates.size() == 1 ? std::string("a block's")
                          : absl::StrFormat("layer %d's (%d of its kind)",
                                            r.first_layer, r.layers);
    absl::StrAppendFormat(
        &out,
        "  kernel rates (%s) on N = %g rows: %s GEMMs F %.4g, B %.4g, "
        "W %.4g TFLOP/s; attention %.4g TFLOP/s; element-wise %.4g GB/s\n",
        r.by_shape ? "by shape, from the kernel cost table"
                   : "the cluster's peak × efficiencies",
        r.rows, blocks, r.gemm_forward / 1e12, r.gemm_backward_input / 1e12,
        r.gemm_backward_weight / 1e12, r.attention / 1e12, r.elementwise / 1e9);
  }
}

// How the layout splits the model: ZeRO, sequence, expert and context
// parallelism.
void AppendSplits(const TrainOptions& o, std::string& out) {
  absl::StrAppendFormat(
      &out, "  ZeRO level %d%s; sequence parallelism %s\n", o.zero,
      o.zero == 0   ? " (replicated)"
      : o.zero == 1 ? " (optimizer states sharded over dp)"
      : o.zero == 2 ? " (gradients and optimizer states sharded over dp)"
                    : " (weights, gradients and optimizer states sharded over "
                      "dp; each unit's weights gathered before F, B and a "
                      "deferred W)",
      o.sequence_parallel ? "on (norms and residuals on N/tp rows)" : "off");
  if (o.ep > 1) {
    const int64_t holders = o.gradient_replicas() / o.ep;
    absl::StrAppendFormat(
        &out,
        "  expert parallelism: ep %d, each rank %d of a layer's %d "
        "experts; %s\n",
        o.ep, o.model.experts / o.ep, o.model.experts,
        holders == 1
            ? std::string("each alone on its rank (no gradient sync)")
            : absl::StrFormat(
                  "their gradients synced%s over the %d ranks holding them",
                  o.zero > 0 ? " and sharded" : "", holders));
  }
  if (o.cp > 1) {
    absl::StrAppendFormat(
        &out,
        "  context parallelism: cp %d by %s, each rank %d of a window's %d "
        "tokens; gradients synced over dp×cp = %d ranks\n",
        o.cp,
        o.cp_comm == "a2a" ? "all-to-all (heads split around attention)"
                           : "ring (key/value blocks passed beside attention)",
        o.local_seq_len(), o.model.seq_len, o.gradient_replicas());
  }
}

}  // namespace

std::string FormatExplain(const LayoutPlan& p, const ClusterSpec& cluster) {
  const StepEstimate& e = p.step;
  std::string out = absl::StrFormat(
      "layout %s on %s: %.4g tokens/s, MFU %.1f%%, step %.2f ms\n", p.name,
      cluster.name, p.tokens_per_s, 100 * p.mfu, Ms(e.step));
  const std::pair<const char*, double> parts[] = {
      {"compute (busiest stage's F, B, W)", e.compute},
      {"pipeline bubble", e.bubble},
      {"exposed tp communication", e.tp_comm},
      {"exposed cp transfers", e.cp_comm},
      {"exposed ep token exchanges", e.ep_comm},
      {"exposed ZeRO-3 weight gathers", e.dp_gather},
      {"exposed pp communication", e.pp_comm},
      {"exposed dp communication", e.dp_comm},
      {"optimizer", e.optimizer},
  };
  for (const auto& [what, seconds] : parts) {
    absl::StrAppendFormat(&out, "  %-36s %9.3f ms %6.1f%%\n", what, Ms(seconds),
                          100 * seconds / e.step);
  }
  absl::StrAppendFormat(&out,
                        "  (dp gradient sync %.3f ms in all, %.3f ms hidden "
                        "behind backward; simulated bubble fraction %.1f%%)\n",
                        Ms(e.dp_comm_total),
                        Ms(std::max(0.0, e.dp_comm_total - e.dp_comm)),
                        100 * e.bubble_fraction);
  const TrainOptions& o = p.options;
  if (o.zero == 3 && o.gradient_replicas() > 1) {
    absl::StrAppendFormat(
        &out,
        "  (ZeRO-3 weight gathers %.3f ms in all, %.3f ms hidden behind "
        "compute: each unit's gather prefetched while the one before it "
        "computes)\n",
        Ms(e.dp_gather_total),
        Ms(std::max(0.0, e.dp_gather_total - e.dp_gather)));
  }
  AppendKernelRates(o, cluster, out);
  AppendSplits(o, out);
  AppendCalls(p, out);
  absl::StrAppendFormat(
      &out, "memory per rank (stage %d, the largest): %s; arena %s of %s%s\n",
      p.largest_stage, p.memory.Format(), Bytes(p.arena_bytes),
      Bytes(p.available_bytes), p.fits ? "" : " — does not fit");
  return out;
}

}  // namespace trellis
