#include "tools/plan/layout_space.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

std::vector<int64_t> Divisors(int64_t n, int64_t limit) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n && d <= limit; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// `o` with `field` set to each of `values`.
template <typename T>
std::vector<TrainOptions> Vary(const TrainOptions& o, T TrainOptions::*field,
                               const std::vector<T>& values) {
  std::vector<TrainOptions> out;
  for (const T& v : values) {
    out.push_back(o);
    out.back().*field = v;
  }
  return out;
}

// tp, pp and cp (up to the limit) over the divisors of the world; dp
// follows from them.
std::vector<TrainOptions> Sizes(const TrainOptions& o, int world,
                                const SearchLimits& limits) {
  std::vector<TrainOptions> out;
  for (int64_t tp : Divisors(world, world)) {
    for (int64_t pp : Divisors(world / tp, world / tp)) {
      for (int64_t cp : Divisors(world / (tp * pp), limits.max_cp)) {
        out.push_back(o);
        out.back().tp = tp;
        out.back().pp = pp;
        out.back().cp = cp;
        out.back().dp = world / (cp * tp * pp);
        out.back().pp_layers.clear();  // an even split of the searched pp
      }
    }
  }
  return out;
}

// A mixture's experts over ep ranks: every ep dividing both the dp·cp
// ranks and the experts (a dense model keeps ep 1).
std::vector<TrainOptions> ExpertSizes(const TrainOptions& o, int,
                                      const SearchLimits&) {
  if (o.model.experts == 0) return Vary<int64_t>(o, &TrainOptions::ep, {1});
  std::vector<int64_t> sizes;
  for (int64_t ep : Divisors(o.dp * o.cp, o.dp * o.cp)) {
    if (o.model.experts % ep == 0) sizes.push_back(ep);
  }
  return Vary(o, &TrainOptions::ep, sizes);
}

// Under cp, the ring and all-to-all; without it the option is unused.
std::vector<TrainOptions> ContextComms(const TrainOptions& o, int,
                                       const SearchLimits&) {
  if (o.cp == 1) return Vary<std::string>(o, &TrainOptions::cp_comm, {"ring"});
  return Vary<std::string>(o, &TrainOptions::cp_comm, {"ring", "a2a"});
}

// With one stage every schedule runs the same computes: keep 1F1B.
std::vector<TrainOptions> Schedules(const TrainOptions& o, int,
                                    const SearchLimits&) {
  if (o.pp == 1) return Vary(o, &TrainOptions::schedule, {ScheduleKind::k1F1B});
  return Vary(o, &TrainOptions::schedule,
              {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
               ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubbleH1});
}

// At most as many as give each chunk a layer: the limit alone, however
// large, never makes more variants than the model has layers.
std::vector<TrainOptions> VirtualStages(const TrainOptions& o, int,
                                        const SearchLimits& limits) {
  std::vector<int64_t> v;
  const int64_t most = std::min(limits.max_virtual_stages,
                                o.model.n_layer / std::max<int64_t>(o.pp, 1));
  for (int64_t i = 1; i <= most; ++i) v.push_back(i);
  return Vary(o, &TrainOptions::virtual_stages, v);
}

std::vector<TrainOptions> MicroBatches(const TrainOptions& o, int,
                                       const SearchLimits& limits) {
  if (o.global_batch_size % o.dp != 0) return {};
  return Vary(
      o, &TrainOptions::micro_batch_size,
      Divisors(o.global_batch_size / o.dp, limits.max_micro_batch_size));
}

}  // namespace

const std::vector<SearchAxis>& SearchAxes() {
  static const auto* axes = new std::vector<SearchAxis>{
      {"dp×cp×tp×pp", Sizes},
      {"cp_comm", ContextComms},
      {"ep", ExpertSizes},
      {"schedule", Schedules},
      {"virtual_stages", VirtualStages},
      {"micro_batch_size", MicroBatches},
      {"zero",
       [](const TrainOptions& o, int, const SearchLimits&) {
         return Vary<int64_t>(o, &TrainOptions::zero, {0, 1, 2, 3});
       }},
      {"sequence_parallel",
       [](const TrainOptions& o, int, const SearchLimits&) {
         return Vary(o, &TrainOptions::sequence_parallel, {false, true});
       }},
      {"recompute",
       [](const TrainOptions& o, int, const SearchLimits&) {
         return Vary(
             o, &TrainOptions::recompute,
             {Recompute::kNone, Recompute::kSelective, Recompute::kFull});
       }},
  };
  return *axes;
}

absl::Status ValidateLayout(TrainOptions& o, int world) {
  TrainOptions probe = o;
  probe.device = DeviceType::kCPU;
  probe.precision = Precision::kFp32;
  if (probe.data.empty()) probe.data = "(planned)";
  TRELLIS_RETURN_IF_ERROR(probe.Resolve(world, o.model.vocab_size));
  TRELLIS_RETURN_IF_ERROR(
      CheckScheduleShape(probe.schedule, static_cast<int>(probe.pp),
                         static_cast<int>(probe.microbatches()),
                         static_cast<int>(probe.virtual_stages)));
  probe.device = o.device;
  probe.precision = o.precision;
  probe.data = o.data;
  o = probe;
  return absl::OkStatus();
}

std::vector<TrainOptions> EnumerateLayouts(const TrainOptions& base, int world,
                                           const SearchLimits& limits) {
  std::vector<TrainOptions> candidates = {base};
  for (const SearchAxis& axis : SearchAxes()) {
    std::vector<TrainOptions> next;
    for (const TrainOptions& c : candidates) {
      for (TrainOptions& v : axis.variants(c, world, limits)) {
        next.push_back(std::move(v));
      }
    }
    candidates = std::move(next);
  }
  std::vector<TrainOptions> valid;
  for (TrainOptions& c : candidates) {
    if (ValidateLayout(c, world).ok()) valid.push_back(std::move(c));
  }
  return valid;
}

std::string LayoutName(const TrainOptions& o) {
  const std::string cp = absl::StrCat(
      o.ep > 1 ? absl::StrFormat(".ep%d", o.ep) : "",
      o.cp > 1 ? absl::StrFormat(".cp%d-%s", o.cp, o.cp_comm) : "");
  return absl::StrFormat(
      "dp%d%s.tp%d.pp%d/%s/v%d/mbs%d/z%d/%s%s", o.dp, cp, o.tp, o.pp,
      ScheduleKindName(o.schedule), o.virtual_stages, o.micro_batch_size,
      o.zero, RecomputeName(o.recompute), o.sequence_parallel ? "/sp" : "");
}

}  // namespace trellis
