// Rendering a BubbleReport: a table for people, JSON for machines and an SVG
// timeline (one row per stage, F/B/W coloured and numbered by microbatch,
// idle time shaded, receive waits marked).
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_BUBBLES_REPORT_H_
#define TRELLIS_TOOLS_BUBBLES_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "tools/bubbles/analysis.h"

namespace trellis {

// Per step (and the median, when there are several): a row per stage and one
// for the whole step with busy, idle, bubble, receive wait, dp time and CPU
// share, under a line with the step time and the theoretical and planned
// bubble; for traces, a line of the per-rank skew (the rank that computed
// longest against the median rank).
std::string FormatReport(const BubbleReport& report);

// {"mode", "unit", "schedule", "pp", "microbatches", "virtual_stages", "dp",
//  "tp", "steps": [{"step", "step_time", "theory", "planned", "costs": {"F",
//  "B", "W"}, "min_cpu_share", "slowest_rank" (traces), "slowest_busy",
//  "median_busy", "stages": [{"stage", "ranks", "busy", "idle",
//  "window", "bubble", "recv_wait", "dp", "cpu_share"}], "whole": {...}}],
//  "median": {...}, "svg": [paths written]} ("svg" added by the program).
// Times are in "unit"; bubbles and CPU shares are fractions.
nlohmann::json ReportToJson(const BubbleReport& report);

// A standalone SVG document drawing `timeline`.
std::string TimelineSvg(const Timeline& timeline);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_BUBBLES_REPORT_H_
