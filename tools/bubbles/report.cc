#include "tools/bubbles/report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace trellis {
namespace {

using nlohmann::json;

std::string FormatStage(const StageFigures& s) {
  const std::string name =
      s.stage < 0 ? std::string("all") : absl::StrCat(s.stage);
  return absl::StrFormat(
      "%6s %6d %10.2f %10.2f %7.1f%% %10.2f %10.2f %6.0f%%\n", name, s.ranks,
      s.busy, s.idle, 100 * s.bubble, s.recv_wait, s.dp, 100 * s.cpu_share);
}

std::string FormatStep(const BubbleReport& r, const StepFigures& f,
                       const std::string& heading) {
  std::string out =
      absl::StrFormat("%s: %.2f %s", heading, f.step_time, r.unit);
  absl::StrAppend(
      &out,
      absl::StrFormat(
          "; bubble %.1f%%, theory %.1f%%, planned %.1f%% (with F %.3g, "
          "B %.3g, W %.3g %s per chunk)\n",
          100 * f.whole.bubble, 100 * f.theory, 100 * f.planned, f.cost_forward,
          f.cost_backward_input, f.cost_backward_weight, r.unit));
  absl::StrAppend(&out, absl::StrFormat("%6s %6s %10s %10s %8s %10s %10s %7s\n",
                                        "stage", "ranks", "busy", "idle",
                                        "bubble", "recv wait", "dp", "cpu"));
  for (const StageFigures& s : f.stages) absl::StrAppend(&out, FormatStage(s));
  absl::StrAppend(&out, FormatStage(f.whole));
  if (f.median_busy > 0) {
    const std::string who = f.slowest_rank >= 0
                                ? absl::StrCat("rank ", f.slowest_rank)
                                : std::string("the slowest rank");
    absl::StrAppend(
        &out, absl::StrFormat("rank skew: %s computes %.2f %s, the median "
                              "rank %.2f %s (%.2fx)\n",
                              who, f.slowest_busy, r.unit, f.median_busy,
                              r.unit, f.slowest_busy / f.median_busy));
  }
  return out;
}

json StageJson(const StageFigures& s) {
  json j = {{"ranks", s.ranks},   {"busy", s.busy},
            {"idle", s.idle},     {"window", s.window},
            {"bubble", s.bubble}, {"recv_wait", s.recv_wait},
            {"dp", s.dp},         {"cpu_share", s.cpu_share}};
  if (s.stage >= 0) j["stage"] = s.stage;
  return j;
}

json StepJson(const StepFigures& f) {
  json stages = json::array();
  for (const StageFigures& s : f.stages) stages.push_back(StageJson(s));
  json j = {{"step_time", f.step_time},
            {"theory", f.theory},
            {"planned", f.planned},
            {"costs",
             {{"F", f.cost_forward},
              {"B", f.cost_backward_input},
              {"W", f.cost_backward_weight}}},
            {"min_cpu_share", f.min_cpu_share},
            {"slowest_busy", f.slowest_busy},
            {"median_busy", f.median_busy},
            {"stages", std::move(stages)},
            {"whole", StageJson(f.whole)}};
  if (f.step > 0) j["step"] = f.step;
  if (f.slowest_rank >= 0) j["slowest_rank"] = f.slowest_rank;
  return j;
}

std::string Escape(const std::string& text) {
  return absl::StrReplaceAll(
      text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

// Fill colours by type and virtual stage (later virtual stages lighter).
const char* Fill(ActionType type, int vstage) {
  static constexpr const char* kColors[3][2] = {
      {"#3b6fb6", "#8db4e2"}, {"#3e9651", "#93cf9d"}, {"#8e5ea2", "#c9a6d6"}};
  const int t = type == ActionType::kForward         ? 0
                : type == ActionType::kBackwardInput ? 1
                                                     : 2;
  return kColors[t][vstage % 2];
}

// A tick step of 1, 2 or 5 × 10^k giving about 10 ticks over `span`.
double TickStep(double span) {
  if (span <= 0) return 1.0;
  const double raw = span / 10.0;
  const double base = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * base) return m * base;
  }
  return 10.0 * base;
}

struct Geometry {
  double left = 70, top = 48, width = 1100, row = 34, gap = 10;
  double scale = 1.0;  // pixels per time unit
  double RowY(size_t i) const { return top + i * (row + gap); }
};

void DrawRow(const TimelineRow& r, size_t i, const Geometry& g,
             const std::string& unit, std::string& svg) {
  const double y = g.RowY(i);
  absl::StrAppend(
      &svg,
      absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                      "font-size=\"13\">%s</text>\n",
                      g.left - 8, y + g.row / 2 + 4, Escape(r.label)),
      absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                      "height=\"%.1f\" fill=\"#f6d7d2\"><title>idle</title>"
                      "</rect>\n",
                      g.left, y, g.width, g.row));
  for (const TimelineBlock& b : r.compute) {
    const double x = g.left + b.start * g.scale;
    const double w = std::max(0.5, (b.end - b.start) * g.scale);
    const char* type = ActionTypeName(b.type);
    absl::StrAppend(
        &svg,
        absl::StrFormat(
            "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
            "fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>%s "
            "mb %d vstage %d: %.3f to %.3f %s</title></rect>\n",
            x, y, w, g.row, Fill(b.type, b.virtual_stage), type, b.microbatch,
            b.virtual_stage, b.start, b.end, unit));
    if (w >= 9) {
      absl::StrAppend(
          &svg, absl::StrFormat("<text x=\"%.2f\" y=\"%.1f\" "
                                "text-anchor=\"middle\" font-size=\"%d\" "
                                "fill=\"#ffffff\">%d</text>\n",
                                x + w / 2, y + g.row / 2 + 4, w >= 16 ? 11 : 8,
                                b.microbatch));
    }
  }
  for (const auto& [start, end] : r.waits) {
    absl::StrAppend(
        &svg, absl::StrFormat("<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                              "height=\"4\" fill=\"#c62828\"><title>receive "
                              "wait %.3f to %.3f %s</title></rect>\n",
                              g.left + start * g.scale, y + g.row - 4,
                              std::max(0.5, (end - start) * g.scale), start,
                              end, unit));
  }
}

void DrawAxisAndLegend(const Timeline& t, const Geometry& g, double axis_y,
                       std::string& svg) {
  absl::StrAppend(&svg,
                  absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" "
                                  "x2=\"%.1f\" y2=\"%.1f\" "
                                  "stroke=\"#444\"/>\n",
                                  g.left, axis_y, g.left + g.width, axis_y));
  const double step = TickStep(t.end);
  for (double v = 0; v <= t.end * (1 + 1e-9); v += step) {
    const double x = g.left + v * g.scale;
    absl::StrAppend(
        &svg,
        absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                        "y2=\"%.1f\" stroke=\"#444\"/>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                        "font-size=\"11\">%g</text>\n",
                        x, axis_y, x, axis_y + 5, x, axis_y + 18, v));
  }
  absl::StrAppend(
      &svg, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" "
                            "text-anchor=\"end\" "
                            "font-size=\"11\">%s</text>\n",
                            g.left + g.width, axis_y + 34, Escape(t.unit)));
  struct Key {
    const char* label;
    const char* color;
  };
  const Key keys[] = {{"F", Fill(ActionType::kForward, 0)},
                      {"B", Fill(ActionType::kBackwardInput, 0)},
                      {"W", Fill(ActionType::kBackwardWeight, 0)},
                      {"idle", "#f6d7d2"},
                      {"receive wait", "#c62828"}};
  double x = g.left;
  for (const Key& k : keys) {
    absl::StrAppend(
        &svg,
        absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" "
                        "height=\"12\" fill=\"%s\"/><text x=\"%.1f\" "
                        "y=\"%.1f\" font-size=\"11\">%s</text>\n",
                        x, axis_y + 26, k.color, x + 16, axis_y + 36, k.label));
    x += 30 + 7 * std::string(k.label).size();
  }
  absl::StrAppend(&svg, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" "
                                        "font-size=\"11\">numbers: "
                                        "microbatch; lighter: later virtual "
                                        "stage</text>\n",
                                        x + 10, axis_y + 36));
}

}  // namespace

std::string FormatReport(const BubbleReport& r) {
  std::string out = absl::StrFormat("%s, pp %d, %d microbatches", r.schedule,
                                    r.pp, r.microbatches);
  if (r.virtual_stages > 1) {
    absl::StrAppend(&out, ", ", r.virtual_stages, " virtual stages");
  }
  if (r.mode == "trace") {
    absl::StrAppend(&out, absl::StrFormat(", dp %d, tp %d (%d ranks)", r.dp,
                                          r.tp, r.dp * r.tp * r.pp));
  }
  absl::StrAppend(&out, "; times in ", r.unit,
                  ", stage figures are means over the stage's ranks, \"all\" "
                  "the mean over stages\n\n");
  for (const StepFigures& f : r.steps) {
    const std::string heading =
        r.mode == "plan" ? std::string("plan") : absl::StrCat("step ", f.step);
    absl::StrAppend(&out, FormatStep(r, f, heading), "\n");
  }
  if (r.median) {
    absl::StrAppend(
        &out,
        FormatStep(r, *r.median,
                   absl::StrCat("median of ", r.steps.size(), " steps")),
        "\n");
  }
  if (r.mode == "trace") {
    absl::StrAppend(&out,
                    "cpu: the ranks' CPU time over the wall time of their "
                    "pipeline run; well below 100%, other processes took "
                    "their cores and the bubble counts that too\n");
  }
  return out;
}

json ReportToJson(const BubbleReport& r) {
  json steps = json::array();
  for (const StepFigures& f : r.steps) steps.push_back(StepJson(f));
  json j = {{"mode", r.mode},
            {"unit", r.unit},
            {"schedule", r.schedule},
            {"pp", r.pp},
            {"microbatches", r.microbatches},
            {"virtual_stages", r.virtual_stages},
            {"dp", r.dp},
            {"tp", r.tp},
            {"steps", std::move(steps)}};
  if (r.median) j["median"] = StepJson(*r.median);
  return j;
}

std::string TimelineSvg(const Timeline& t) {
  Geometry g;
  g.scale = t.end > 0 ? g.width / t.end : 1.0;
  const double axis_y = g.RowY(t.rows.size()) + 2;
  const double height = axis_y + 50;
  const double width = g.left + g.width + 20;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
      "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
      "font-family=\"Helvetica, Arial, sans-serif\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n"
      "<text x=\"%.1f\" y=\"26\" font-size=\"15\">%s</text>\n",
      width, height, width, height, g.left, Escape(t.title));
  for (size_t i = 0; i < t.rows.size(); ++i) {
    DrawRow(t.rows[i], i, g, t.unit, svg);
  }
  DrawAxisAndLegend(t, g, axis_y, svg);
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

}  // namespace trellis
