#include "tools/bubbles/trace_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "framework/status.h"
#include "framework/trace.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// `object`.<key> if it is a string, else "".
std::string StringOf(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": ", what,
      "; trace files are written by trellis-train --trace_dir (rerun the "
      "traced steps to get whole ones)"));
}

// otherData.<key> as an int >= `min`.
absl::StatusOr<int> IntField(const json& other, const char* key, int min,
                             const std::string& path) {
  auto it = other.find(key);
  if (it == other.end() || !it->is_number_integer() ||
      it->get<int64_t>() < min) {
    return Bad(path, absl::StrCat("otherData has no integer \"", key,
                                  "\" of at least ", min));
  }
  return it->get<int>();
}

absl::StatusOr<TracedSpan> ParseSpan(const json& event, size_t index,
                                     const std::string& path) {
  auto fail = [&](const std::string& what) {
    return Bad(path, absl::StrCat("event ", index, " ", what));
  };
  TracedSpan span;
  auto name = event.find("name");
  auto cat = event.find("cat");
  if (name == event.end() || !name->is_string()) return fail("has no name");
  if (cat == event.end() || !cat->is_string()) return fail("has no \"cat\"");
  span.name = name->get<std::string>();
  span.category = cat->get<std::string>();
  auto ts = event.find("ts");
  auto dur = event.find("dur");
  if (ts == event.end() || !ts->is_number() || dur == event.end() ||
      !dur->is_number() || dur->get<double>() < 0) {
    return fail(absl::StrCat("(\"", span.name,
                             "\") needs numeric \"ts\" and \"dur\" >= 0"));
  }
  span.start_us = ts->get<double>();
  span.duration_us = dur->get<double>();
  auto args = event.find("args");
  if (args != event.end()) {
    if (!args->is_object()) return fail("has \"args\" that is not an object");
    for (const auto& [key, value] : args->items()) {
      if (value.is_number_integer()) span.args[key] = value.get<int64_t>();
    }
  }
  return span;
}

absl::Status ParseRunFields(const json& other, const std::string& path,
                            RankTrace& trace) {
  TRELLIS_ASSIGN_OR_RETURN(trace.world, IntField(other, "world", 1, path));
  TRELLIS_ASSIGN_OR_RETURN(trace.rank, IntField(other, "rank", 0, path));
  TRELLIS_ASSIGN_OR_RETURN(trace.dp, IntField(other, "dp", 1, path));
  TRELLIS_ASSIGN_OR_RETURN(trace.tp, IntField(other, "tp", 1, path));
  TRELLIS_ASSIGN_OR_RETURN(trace.pp, IntField(other, "pp", 1, path));
  TRELLIS_ASSIGN_OR_RETURN(trace.stage, IntField(other, "stage", 0, path));
  TRELLIS_ASSIGN_OR_RETURN(trace.virtual_stages,
                           IntField(other, "virtual_stages", 1, path));
  TRELLIS_ASSIGN_OR_RETURN(trace.microbatches,
                           IntField(other, "microbatches", 1, path));
  auto schedule = other.find("schedule");
  if (schedule == other.end() || !schedule->is_string()) {
    return Bad(path, "otherData has no \"schedule\"");
  }
  trace.schedule = schedule->get<std::string>();
  if (trace.rank >= trace.world || trace.stage >= trace.pp ||
      trace.dp * trace.tp * trace.pp != trace.world) {
    return Bad(path, absl::StrCat("otherData is inconsistent: rank ",
                                  trace.rank, " stage ", trace.stage,
                                  " of world ", trace.world, " = dp ", trace.dp,
                                  " x tp ", trace.tp, " x pp ", trace.pp));
  }
  return absl::OkStatus();
}

// What identifies the run a trace belongs to.
std::string RunKey(const RankTrace& t) {
  return absl::StrFormat(
      "world %d (dp %d, tp %d, pp %d), schedule %s, %d virtual stages, %d "
      "microbatches",
      t.world, t.dp, t.tp, t.pp, t.schedule, t.virtual_stages, t.microbatches);
}

}  // namespace

int64_t TracedSpan::Arg(const std::string& key, int64_t otherwise) const {
  auto it = args.find(key);
  return it == args.end() ? otherwise : it->second;
}

std::string TraceFileName(int rank) {
  return absl::StrFormat("trace_rank%05d.json", rank);
}

absl::StatusOr<RankTrace> ParseRankTrace(const std::string& text,
                                         const std::string& path) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    return Bad(path, absl::StrCat("not valid JSON, perhaps truncated (",
                                  e.what(), ")"));
  }
  if (!doc.is_object()) return Bad(path, "not a JSON object");
  auto other = doc.find("otherData");
  if (other == doc.end() || !other->is_object() ||
      StringOf(*other, "format") != kTraceFormat) {
    return Bad(path, absl::StrCat("not a trellis trace (otherData.format is "
                                  "not \"",
                                  kTraceFormat, "\")"));
  }
  auto version = other->find("version");
  if (version == other->end() || !version->is_number_integer() ||
      version->get<int64_t>() != kTraceFormatVersion) {
    return Bad(path,
               absl::StrCat("otherData.version is not ", kTraceFormatVersion,
                            ", the trace format this program reads"));
  }
  RankTrace trace;
  trace.path = path;
  TRELLIS_RETURN_IF_ERROR(ParseRunFields(*other, path, trace));
  auto events = doc.find("traceEvents");
  if (events == doc.end() || !events->is_array()) {
    return Bad(path, "has no \"traceEvents\" array");
  }
  for (size_t i = 0; i < events->size(); ++i) {
    const json& event = (*events)[i];
    if (!event.is_object())
      return Bad(path, absl::StrCat("event ", i, " is not an object"));
    if (StringOf(event, "ph") != "X") continue;
    TRELLIS_ASSIGN_OR_RETURN(TracedSpan span, ParseSpan(event, i, path));
    trace.spans.push_back(std::move(span));
  }
  return trace;
}

absl::StatusOr<RankTrace> ReadRankTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open the trace file ", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseRankTrace(text.str(), path);
}

absl::StatusOr<std::vector<RankTrace>> ReadTraceDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(
        dir, " is not a directory; pass the --trace_dir of a traced run"));
  }
  const std::regex pattern("trace_rank[0-9]+\\.json");
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (std::regex_match(entry.path().filename().string(), pattern)) {
      paths.push_back(entry.path().string());
    }
  }
  if (paths.empty()) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        " holds no trace files (trace_rank*.json); run trellis-train "
        "with --trace_dir=",
        dir, " --trace_steps=5,6"));
  }
  std::vector<RankTrace> traces;
  for (const std::string& path : paths) {
    TRELLIS_ASSIGN_OR_RETURN(RankTrace trace, ReadRankTrace(path));
    traces.push_back(std::move(trace));
  }
  std::sort(
      traces.begin(), traces.end(),
      [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  const RankTrace& first = traces.front();
  std::vector<int> missing;
  for (int r = 0, i = 0; r < first.world; ++r) {
    if (i < static_cast<int>(traces.size()) && traces[i].rank == r) {
      ++i;
    } else {
      missing.push_back(r);
    }
  }
  for (size_t i = 0; i < traces.size(); ++i) {
    if (RunKey(traces[i]) != RunKey(first) ||
        (i > 0 && traces[i].rank == traces[i - 1].rank)) {
      return absl::InvalidArgumentError(absl::StrCat(
          traces[i].path, " (", RunKey(traces[i]), ", rank ", traces[i].rank,
          ") is not from the run of ", first.path, " (", RunKey(first),
          "); give each traced run its own --trace_dir"));
    }
  }
  if (!missing.empty()) {
    return absl::NotFoundError(absl::StrCat(
        dir, " lacks the traces of rank(s) ", absl::StrJoin(missing, ", "),
        " of ", first.world, "; did the run finish its traced steps?"));
  }
  return traces;
}

}  // namespace trellis
