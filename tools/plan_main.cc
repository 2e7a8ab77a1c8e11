// trellis-plan: predicts the memory per rank and the step time of every
// valid layout of a model on a cluster, before any device time is spent,
// and ranks them (docs/planning.md).
//
//   trellis-plan --flagfile=configs/gpt2-1558m.flags --cluster=h100-sxm-8x16
//   trellis-plan --flagfile=configs/tiny.flags --cluster=cpu --world=2 --json
//   trellis-plan ... --explain=1    (or a layout name from the table)
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "data/blend.h"
#include "framework/progress_bar.h"
#include "framework/text_file.h"
#include "parallel/schedule.h"
#include "tools/options/option_flags.h"
#include "tools/options/program_help.h"
#include "tools/plan/bench_profile.h"
#include "tools/plan/cluster.h"
#include "tools/plan/plan_report.h"
#include "tools/plan/planner.h"

ABSL_FLAG(std::string, cluster, "cpu",
          "h100-sxm-8xN, h200-8xN (N nodes of 8 GPUs), cpu (this machine, "
          "measured now) or a cluster .json file (docs/planning.md)");
ABSL_FLAG(int64_t, world, 0,
          "ranks to plan for (0: every device of the cluster)");
ABSL_FLAG(int64_t, vocab_size, 0,
          "vocabulary size (0: the --data file's, else 50257)");
ABSL_FLAG(bool, json, false, "print every planned layout as JSON instead");
ABSL_FLAG(std::string, explain, "",
          "break one layout's step down: its rank in the table (1 = best) "
          "or its name, e.g. dp2.tp1.pp1/1f1b/v1/mbs4/z0/none");
ABSL_FLAG(std::string, profile, "",
          "a trellis-bench --profile --json file measured on the cluster's "
          "device: its GEMM and attention kernel rates replace the "
          "cluster's efficiencies");
ABSL_FLAG(int64_t, top, 20, "layouts the table shows (of each kind)");
ABSL_FLAG(int64_t, max_micro_batch_size, 16,
          "largest micro batch size searched");
ABSL_FLAG(int64_t, max_virtual_stages, 8, "most virtual stages searched");
ABSL_FLAG(int64_t, max_cp, 0,
          "largest context-parallel size searched (0: any that divides the "
          "world; 1: whole windows on every rank)");

namespace trellis {
namespace {

absl::StatusOr<TrainOptions> BaseOptions(const ClusterSpec& cluster) {
  TrainOptions o;
  ReadModelAndRunFlags(o);
  ReadParallelFlags(o);
  o.device = cluster.device;
  o.precision = cluster.precision();
  o.pp_layers.clear();
  int64_t vocab = absl::GetFlag(FLAGS_vocab_size);
  if (vocab == 0 && !o.data.empty()) {
    TRELLIS_ASSIGN_OR_RETURN(TokenFileMetadata data, BlendMetadata(o.data));
    vocab = data.vocab_size;
  }
  o.model.vocab_size = vocab > 0 ? vocab : 50257;
  return o;
}

const LayoutPlan* FindLayout(const std::vector<LayoutPlan>& plans,
                             const std::string& which) {
  size_t rank = 0;
  if (absl::SimpleAtoi(which, &rank)) {
    return rank >= 1 && rank <= plans.size() ? &plans[rank - 1] : nullptr;
  }
  for (const LayoutPlan& p : plans) {
    if (p.name == which) return &p;
  }
  return nullptr;
}

// The --cluster, its kernel rates replaced by the --profile's when one is
// given.
absl::StatusOr<ClusterSpec> ClusterWithProfile() {
  TRELLIS_ASSIGN_OR_RETURN(ClusterSpec cluster,
                           LoadCluster(absl::GetFlag(FLAGS_cluster)));
  const std::string profile = absl::GetFlag(FLAGS_profile);
  if (!profile.empty()) {
    absl::StatusOr<std::string> text = ReadTextFile(profile);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--profile: ", text.status().message()));
    }
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--profile=", profile, " cannot be read as JSON"));
    }
    TRELLIS_RETURN_IF_ERROR(ApplyBenchProfile(j, profile, cluster));
  }
  return cluster;
}

// The search's bounds from the flags, each at least 1 (--max_cp 0: none).
absl::StatusOr<SearchLimits> SearchLimitsFromFlags() {
  SearchLimits limits;
  limits.max_micro_batch_size = absl::GetFlag(FLAGS_max_micro_batch_size);
  limits.max_virtual_stages = absl::GetFlag(FLAGS_max_virtual_stages);
  const int64_t max_cp = absl::GetFlag(FLAGS_max_cp);
  if (max_cp < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_cp=", max_cp,
        " must be at least 0 (0: any context-parallel size; 1: none)"));
  }
  if (max_cp > 0) limits.max_cp = max_cp;
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"max_micro_batch_size",
                                        limits.max_micro_batch_size},
        {"max_virtual_stages", limits.max_virtual_stages}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, "=", value, " must be at least 1 (the search's bound)"));
    }
  }
  return limits;
}

// --explain=NAME: plans the layout so named alone (a rank needs the whole
// search) and prints its breakdown.
absl::Status ExplainNamedLayout(const TrainOptions& base, int64_t world,
                                const SearchLimits& limits,
                                const ClusterSpec& cluster,
                                const std::string& explain) {
  const std::vector<TrainOptions> layouts =
      EnumerateLayouts(base, static_cast<int>(world), limits);
  for (const TrainOptions& o : layouts) {
    if (LayoutName(o) != explain) continue;
    TRELLIS_ASSIGN_OR_RETURN(LayoutPlan plan, PlanLayout(o, cluster));
    std::printf("%s", FormatExplain(plan, cluster).c_str());
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat(
      "--explain=", explain, " names no planned layout (", layouts.size(),
      " valid); give a rank from the table or a name it prints"));
}

// When no layout is valid, says why: the validator's verdict on the
// plainest layout, data parallel alone.
void NoteWhyNoLayout(const TrainOptions& base, int64_t world) {
  TrainOptions plain = base;
  plain.dp = 0;
  plain.tp = 1;
  plain.pp = 1;
  plain.virtual_stages = 1;
  plain.schedule = ScheduleKind::k1F1B;
  const absl::Status why = ValidateLayout(plain, static_cast<int>(world));
  if (!why.ok()) {
    std::fprintf(stderr, "trellis-plan: note: dp%lld alone is refused: %s\n",
                 static_cast<long long>(world),
                 std::string(why.message()).c_str());
  }
}

absl::Status Run() {
  TRELLIS_ASSIGN_OR_RETURN(ClusterSpec cluster, ClusterWithProfile());
  if (absl::GetFlag(FLAGS_world) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--world=", absl::GetFlag(FLAGS_world),
                     " must be at least 0 (0: every device of the cluster)"));
  }
  TRELLIS_ASSIGN_OR_RETURN(TrainOptions base, BaseOptions(cluster));
  const int64_t world = absl::GetFlag(FLAGS_world) > 0
                            ? absl::GetFlag(FLAGS_world)
                            : cluster.world();
  if (world > cluster.world()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world=", world, " exceeds the cluster's ", cluster.world(),
        " devices; lower --world or choose a "
        "larger --cluster"));
  }
  TRELLIS_ASSIGN_OR_RETURN(const SearchLimits limits, SearchLimitsFromFlags());
  const std::string explain = absl::GetFlag(FLAGS_explain);
  size_t explain_rank = 0;
  if (!explain.empty() && !absl::SimpleAtoi(explain, &explain_rank)) {
    return ExplainNamedLayout(base, world, limits, cluster, explain);
  }
  ProgressBar bar("planning", "layouts");
  TRELLIS_ASSIGN_OR_RETURN(std::vector<LayoutPlan> plans,
                           PlanAll(base, static_cast<int>(world), cluster,
                                   limits, [&bar](size_t done, size_t total) {
                                     bar.Update(static_cast<int64_t>(done),
                                                static_cast<int64_t>(total));
                                   }));
  if (!explain.empty()) {
    const LayoutPlan* plan = FindLayout(plans, explain);
    if (plan == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "--explain=", explain, " names no planned layout (", plans.size(),
          " valid); give a rank from the table or a name it prints"));
    }
    std::printf("%s", FormatExplain(*plan, cluster).c_str());
    return absl::OkStatus();
  }
  if (plans.empty()) NoteWhyNoLayout(base, world);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", PlansJson(plans, cluster).dump(2).c_str());
  } else {
    std::printf("%s", FormatPlanTable(plans, cluster,
                                      static_cast<size_t>(std::max<int64_t>(
                                          1, absl::GetFlag(FLAGS_top))))
                          .c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "predicts per-rank memory and step time of every valid layout of a "
      "model on a cluster and ranks them; see docs/planning.md.\n"
      "  trellis-plan --flagfile=configs/gpt2-1558m.flags "
      "--cluster=h100-sxm-8x16");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  absl::Status status = positional.size() > 1
                            ? absl::InvalidArgumentError(absl::StrCat(
                                  "unexpected argument '", positional[1],
                                  "': trellis-plan takes only flags"))
                            : trellis::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "trellis-plan: error: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
