// trellis-bubbles: pipeline bubbles, measured from a traced run or planned
// from a schedule.
//
//   trellis-train ... --trace_dir=runs/t --trace_steps=5,6
//   trellis-bubbles runs/t              # table per stage and step
//   trellis-bubbles runs/t --json       # the same as JSON
//   trellis-bubbles --plan --schedule=zb-h1 --pp=4 --microbatches=8
//       [--virtual_stages=2] [--costs=1,1,1] [--svg=plan.svg]
//
// Trace mode writes an SVG timeline per traced step beside the traces
// (bubbles-step<N>.svg); --svg also writes the median step's to a path.
// Plan mode writes its timeline to --svg (default
// bubbles-plan-<schedule>-pp<P>-m<M>[-v<V>].svg in the working directory).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "framework/status.h"
#include "tools/bubbles/analysis.h"
#include "tools/bubbles/report.h"
#include "tools/bubbles/trace_file.h"
#include "tools/options/program_help.h"

ABSL_FLAG(bool, json, false, "print the figures as JSON");
ABSL_FLAG(std::string, svg, "",
          "also write the (median step's) timeline to this SVG file");
ABSL_FLAG(bool, plan, false, "plan a schedule instead of reading traces");
ABSL_FLAG(std::string, schedule, "1f1b",
          "plan: gpipe, 1f1b, interleaved-1f1b or zb-h1");
ABSL_FLAG(int32_t, pp, 4, "plan: pipeline stages");
ABSL_FLAG(int32_t, microbatches, 8, "plan: microbatches per step");
ABSL_FLAG(int32_t, virtual_stages, 1, "plan: model chunks per stage");
ABSL_FLAG(std::string, costs, "1,1,1",
          "plan: relative costs of F, B (input gradient) and W (weight "
          "gradient) of one chunk");

namespace trellis {
namespace {

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, "; check the directory exists"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ActionCosts> ParseCosts(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  ActionCosts costs;
  double* fields[] = {&costs.forward, &costs.backward_input,
                      &costs.backward_weight};
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--costs=", text, " needs three numbers F,B,W, e.g. --costs=1,2,1"));
  }
  for (int i = 0; i < 3; ++i) {
    if (!absl::SimpleAtod(parts[i], fields[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--costs entry '", parts[i], "' is not a number; e.g. 1,2,1"));
    }
  }
  return costs;
}

absl::StatusOr<BubbleReport> Plan() {
  TRELLIS_ASSIGN_OR_RETURN(ScheduleKind kind,
                           ParseScheduleKind(absl::GetFlag(FLAGS_schedule)));
  TRELLIS_ASSIGN_OR_RETURN(ActionCosts costs,
                           ParseCosts(absl::GetFlag(FLAGS_costs)));
  return AnalyzePlan(kind, absl::GetFlag(FLAGS_pp),
                     absl::GetFlag(FLAGS_microbatches),
                     absl::GetFlag(FLAGS_virtual_stages), costs);
}

// Writes the timelines; returns the paths written.
absl::StatusOr<std::vector<std::string>> WriteTimelines(
    const BubbleReport& report, const std::string& dir) {
  std::vector<std::string> written;
  std::string svg = absl::GetFlag(FLAGS_svg);
  if (report.mode == "plan") {
    if (svg.empty()) {
      svg = absl::StrCat("bubbles-plan-", report.schedule, "-pp", report.pp,
                         "-m", report.microbatches,
                         report.virtual_stages > 1
                             ? absl::StrCat("-v", report.virtual_stages)
                             : std::string(),
                         ".svg");
    }
  } else {
    for (const StepFigures& f : report.steps) {
      const std::string path =
          absl::StrCat(dir, "/bubbles-step", f.step, ".svg");
      TRELLIS_RETURN_IF_ERROR(WriteText(path, TimelineSvg(f.timeline)));
      written.push_back(path);
    }
  }
  if (!svg.empty()) {
    const StepFigures& f = report.median ? *report.median : report.steps[0];
    TRELLIS_RETURN_IF_ERROR(WriteText(svg, TimelineSvg(f.timeline)));
    written.push_back(svg);
  }
  return written;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pipeline bubbles of a traced run or a planned schedule:\n"
      "  trellis-bubbles TRACE_DIR [--json] [--svg=FILE]\n"
      "  trellis-bubbles --plan --schedule=S --pp=P --microbatches=M "
      "[--virtual_stages=V] [--costs=F,B,W] [--json] [--svg=FILE]");
  if (trellis::PrintHelpIfAsked(argc, argv,
                                std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "trellis-bubbles: error: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  };
  const bool plan = absl::GetFlag(FLAGS_plan);
  if (plan != (args.size() == 1)) {
    return fail(absl::InvalidArgumentError(
        plan ? "--plan takes no trace directory"
             : "give one trace directory (the --trace_dir of a traced run), "
               "or --plan; see --help"));
  }
  std::string dir;
  absl::StatusOr<BubbleReport> report;
  if (plan) {
    report = Plan();
  } else {
    dir = args[1];
    absl::StatusOr<std::vector<RankTrace>> traces = ReadTraceDir(dir);
    if (!traces.ok()) return fail(traces.status());
    report = AnalyzeTraces(*traces);
  }
  if (!report.ok()) return fail(report.status());
  absl::StatusOr<std::vector<std::string>> svgs = WriteTimelines(*report, dir);
  if (!svgs.ok()) return fail(svgs.status());
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j = ReportToJson(*report);
    j["svg"] = *svgs;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", FormatReport(*report).c_str());
    for (const std::string& path : *svgs) {
      std::printf("timeline: %s\n", path.c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::Main(argc, argv); }
