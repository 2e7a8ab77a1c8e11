// Reading the per-rank trace files trellis-train writes with --trace_dir.
//
// Each rank writes <dir>/trace_rank<RRRRR>.json, a Chrome trace (see
// framework/trace.h) whose "otherData" describes the run: world, dp, tp,
// pp, the rank's stage, schedule, virtual_stages, microbatches. Spans follow
// the trainer's conventions:
//   - category "step": "step" (a whole optimizer step, arg "step") and its
//     phases ("data", "pipeline", "grad sync", "embed sync", "optimizer");
//   - category "compute": "F", "B", "W" with args stage, vstage, mb;
//   - category "pp": posts of transfers ("RecvAct", ...) and waits
//     ("wait RecvAct3", "wait send", ...);
//   - categories "dp", "tp", "embed": collectives and their waits.
// All ranks' times share one origin (a world barrier before the first
// traced step), so spans of different ranks can be compared.
//
// Every problem with a file (not JSON, truncated, not a trellis trace,
// fields missing or of the wrong type, ranks missing or from another run)
// is an InvalidArgument or NotFound status naming the file and the fix.
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_BUBBLES_TRACE_FILE_H_
#define TRELLIS_TOOLS_BUBBLES_TRACE_FILE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trellis {

// A span read back from a trace.
struct TracedSpan {
  std::string name;
  std::string category;
  double start_us = 0.0;
  double duration_us = 0.0;
  std::map<std::string, int64_t> args;  // the integer arguments
  double end_us() const { return start_us + duration_us; }
  // The integer argument `key`, or `otherwise`.
  int64_t Arg(const std::string& key, int64_t otherwise = -1) const;
};

// One rank's trace file.
struct RankTrace {
  std::string path;
  int rank = 0;
  int world = 1;
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int stage = 0;
  std::string schedule;
  int virtual_stages = 1;
  int microbatches = 1;
  std::vector<TracedSpan> spans;  // complete ("X") events only
};

// The file name of `rank`'s trace: "trace_rank00003.json".
std::string TraceFileName(int rank);

// Parses one trace file's text; `path` names it in errors.
absl::StatusOr<RankTrace> ParseRankTrace(const std::string& text,
                                         const std::string& path);
absl::StatusOr<RankTrace> ReadRankTrace(const std::string& path);

// Reads every rank's trace in `dir`, in rank order, and checks that they are
// one run's: the same world, layout and schedule, and every rank present.
absl::StatusOr<std::vector<RankTrace>> ReadTraceDir(const std::string& dir);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_BUBBLES_TRACE_FILE_H_
