#include "tools/trainer/layout_report.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trellis {
namespace {

std::string Groups(const Mesh& mesh, GroupKind kind) {
  std::set<std::vector<int>> groups;
  for (int r = 0; r < mesh.world(); ++r) groups.insert(mesh.Group(kind, r));
  std::vector<std::string> parts;
  for (const auto& g : groups) {
    parts.push_back(absl::StrCat("[", absl::StrJoin(g, " "), "]"));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace

std::string LayoutReport(const Mesh& mesh, const TrainOptions& o,
                         const std::vector<std::string>& hostnames) {
  std::string out = absl::StrCat(
      "layout: world ", mesh.world(), " = dp ", mesh.dp(), " × tp ", mesh.tp(),
      " × pp ", mesh.pp(), " (order ", mesh.order(), ", tp fastest), ",
      o.microbatches(), " microbatches of ", o.micro_batch_size,
      " per step, schedule ", ScheduleKindName(o.schedule), "\n");
  absl::StrAppend(&out, "  tp groups: ", Groups(mesh, GroupKind::kTp), "\n");
  absl::StrAppend(&out, "  dp groups: ", Groups(mesh, GroupKind::kDp), "\n");
  absl::StrAppend(&out, "  pp groups: ", Groups(mesh, GroupKind::kPp), "\n");
  const int64_t chunks = o.pp * o.virtual_stages;
  const std::vector<int64_t> layers =
      o.virtual_stages == 1 ? StageLayers(o.model.n_layer, o.pp, o.pp_layers)
                            : StageLayers(o.model.n_layer, chunks, {});
  std::vector<int64_t> first(chunks, 0);
  for (int64_t k = 1; k < chunks; ++k) first[k] = first[k - 1] + layers[k - 1];
  for (int64_t p = 0; p < o.pp; ++p) {
    std::vector<std::string> parts;
    for (int64_t v = 0; v < o.virtual_stages; ++v) {
      const int64_t k = v * o.pp + p;
      std::string part =
          absl::StrCat("layers ", first[k], "-", first[k] + layers[k] - 1);
      if (k == 0) part = absl::StrCat("embedding + ", part);
      if (k == chunks - 1) absl::StrAppend(&part, " + ln_f/head/loss");
      parts.push_back(part);
    }
    absl::StrAppend(&out, "  stage ", p, ": ", absl::StrJoin(parts, " | "),
                    "\n");
  }
  if (!hostnames.empty()) {
    std::map<std::string, std::vector<std::string>> by_host;
    for (int r = 0; r < mesh.world(); ++r) {
      const MeshCoord c = mesh.Coord(r);
      by_host[hostnames[r]].push_back(
          absl::StrCat(r, "=(dp", c.d, ",tp", c.t, ",pp", c.p, ")"));
    }
    for (const auto& [host, ranks] : by_host) {
      absl::StrAppend(&out, "  node ", host, ": ", absl::StrJoin(ranks, " "),
                      "\n");
    }
  }
  return out;
}

}  // namespace trellis
