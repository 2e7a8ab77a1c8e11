#include "tools/plan/kernel_costs.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "framework/status.h"
#include "framework/text_file.h"
#include "tools/plan/json_fields.h"

namespace trellis {
namespace {

constexpr double kMaxAxis = 2147483648.0;  // 2^31
constexpr double kMaxFigure = 1e15;        // in TFLOP/s or GB/s
constexpr size_t kMaxAxisValues = 64;
// Version 2's attention axis is the (window, head) pairs of one call;
// version 1 tables counted heads of calls over kVersion1Windows windows.
constexpr int kVersion = 2;
constexpr double kVersion1Windows = 2;

// Where x falls on `axis`: the lower index and the weight of the upper one,
// in the logarithm, clamped to the ends.
std::pair<size_t, double> Bracket(const std::vector<double>& axis, double x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  const size_t hi = static_cast<size_t>(
      std::upper_bound(axis.begin(), axis.end(), x) - axis.begin());
  const double a = std::log(axis[hi - 1]), b = std::log(axis[hi]);
  return {hi - 1, (std::log(x) - a) / (b - a)};
}

absl::Status Bad(const std::string& where, const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("kernel cost table ", where, ": ", message));
}

// A positive, finite figure at most kMaxFigure.
absl::StatusOr<double> Figure(const nlohmann::json& j, const std::string& where,
                              const std::string& field) {
  if (!j.is_number()) {
    return Bad(where, absl::StrCat("field \"", field,
                                   "\" must be a number, not ", j.dump()));
  }
  const double d = j.get<double>();
  if (!(d > 0) || !(d <= kMaxFigure)) {
    return Bad(where, absl::StrCat("field \"", field, "\" is ", j.dump(),
                                   "; it must be positive and at most 1e15"));
  }
  return d;
}

// A list of figures under `field` of `parent`.
absl::StatusOr<std::vector<double>> Figures(const nlohmann::json& parent,
                                            const std::string& where,
                                            const std::string& section,
                                            const char* field) {
  const std::string name = absl::StrCat(section, ".", field);
  if (!parent.contains(field) || !parent.at(field).is_array()) {
    return Bad(where, absl::StrCat("field \"", name,
                                   "\" is missing or not a list of numbers; "
                                   "write the table with trellis-bench "
                                   "--profile --json=FILE"));
  }
  std::vector<double> out;
  for (const nlohmann::json& v : parent.at(field)) {
    TRELLIS_ASSIGN_OR_RETURN(double d, Figure(v, where, name));
    out.push_back(d);
  }
  return out;
}

// An axis: 1 to 64 strictly ascending values in [1, 2^31].
absl::StatusOr<std::vector<double>> Axis(const nlohmann::json& parent,
                                         const std::string& where,
                                         const std::string& section,
                                         const char* field) {
  TRELLIS_ASSIGN_OR_RETURN(std::vector<double> axis,
                           Figures(parent, where, section, field));
  const std::string name = absl::StrCat(section, ".", field);
  if (axis.empty() || axis.size() > kMaxAxisValues) {
    return Bad(where, absl::StrCat("axis \"", name, "\" has ", axis.size(),
                                   " values; it must have 1 to 64"));
  }
  for (size_t i = 0; i < axis.size(); ++i) {
    if (axis[i] < 1 || axis[i] > kMaxAxis) {
      return Bad(where, absl::StrCat("axis \"", name, "\" holds ", axis[i],
                                     "; its values must lie in [1, 2^31]"));
    }
    if (i > 0 && axis[i] <= axis[i - 1]) {
      return Bad(where, absl::StrCat("axis \"", name,
                                     "\" must be strictly ascending"));
    }
  }
  return axis;
}

// One grid of `section`: its axes, and the rates of `rate_field` in `unit`
// (scaled to per second).
absl::StatusOr<RateGrid> Grid(const nlohmann::json& j, const std::string& where,
                              const std::string& section,
                              std::array<const char*, 3> axis_fields,
                              const char* rate_field, double unit) {
  if (!j.contains(section) || !j.at(section).is_object()) {
    return Bad(where, absl::StrCat("has no \"", section,
                                   "\" object; write the table with "
                                   "trellis-bench --profile --json=FILE"));
  }
  const nlohmann::json& s = j.at(section);
  RateGrid g;
  for (int a = 0; a < 3; ++a) {
    if (axis_fields[a] == nullptr) {
      g.axes[a] = {1};
      continue;
    }
    TRELLIS_ASSIGN_OR_RETURN(g.axes[a],
                             Axis(s, where, section, axis_fields[a]));
  }
  TRELLIS_ASSIGN_OR_RETURN(g.rates, Figures(s, where, section, rate_field));
  if (g.rates.size() != g.size()) {
    return Bad(where, absl::StrCat("field \"", section, ".", rate_field,
                                   "\" has ", g.rates.size(),
                                   " values; its axes make ", g.size()));
  }
  for (double& r : g.rates) r *= unit;
  return g;
}

nlohmann::json Scaled(const std::vector<double>& values, double unit) {
  nlohmann::json out = nlohmann::json::array();
  for (double v : values) out.push_back(v / unit);
  return out;
}

}  // namespace

double RateGrid::Interpolate(double x, double y, double z) const {
  const std::array<std::pair<size_t, double>, 3> b = {
      Bracket(axes[0], x), Bracket(axes[1], y), Bracket(axes[2], z)};
  double log_rate = 0;
  int corners = 0;
  size_t last = 0;
  for (int corner = 0; corner < 8; ++corner) {
    double weight = 1;
    std::array<size_t, 3> index{};
    for (int a = 0; a < 3; ++a) {
      const bool upper = (corner >> a) & 1;
      if (upper && axes[a].size() == 1) {
        weight = 0;
        break;
      }
      index[a] = b[a].first + (upper ? 1 : 0);
      weight *= upper ? b[a].second : 1 - b[a].second;
    }
    if (weight == 0) continue;
    const size_t i =
        (index[0] * axes[1].size() + index[1]) * axes[2].size() + index[2];
    log_rate += weight * std::log(rates[i]);
    ++corners;
    last = i;
  }
  // On a grid point (or clamped to one) the measured rate itself.
  return corners == 1 ? rates[last] : std::exp(log_rate);
}

double GemmSeconds(const KernelCosts& c, GemmPass pass, double rows, double in,
                   double out, double element_bytes) {
  const RateGrid& grid = pass == GemmPass::kForward ? c.gemm_forward
                         : pass == GemmPass::kBackwardInput
                             ? c.gemm_backward_input
                             : c.gemm_backward_weight;
  const double flops = 2 * rows * in * out;
  const double bytes = element_bytes * (rows * in + in * out + rows * out);
  const double roofline =
      std::max(flops / c.peak_flops, bytes / c.memory_bandwidth);
  return std::max(roofline, flops / grid.Interpolate(rows, in, out));
}

double AttentionRate(const KernelCosts& c, double seq_len, double head_dim,
                     double head_windows) {
  return std::min(c.peak_flops,
                  c.attention.Interpolate(seq_len, head_dim, head_windows));
}

double BlockAttentionRate(const KernelCosts& c, double block_len,
                          double head_dim, double head_windows) {
  if (c.block_attention.size() == 0) {
    return AttentionRate(c, block_len, head_dim, head_windows);
  }
  return std::min(c.peak_flops, c.block_attention.Interpolate(
                                    block_len, head_dim, head_windows));
}

double ElementwiseRate(const KernelCosts& c, double rows, double width) {
  // Not bounded by the memory bandwidth: activations that fit in a cache
  // move faster than a large copy does.
  return c.elementwise.Interpolate(rows, width, 1);
}

double AdamWRate(const KernelCosts& c, double elements) {
  return c.adamw.Interpolate(elements, 1, 1);
}

namespace {

// One line per head width of an attention-shaped grid (seq_len, head_dim,
// head_windows): its rates by `length` at the most pairs a call; nothing
// for an empty grid.
void AppendAttentionLines(const RateGrid& g, const char* what,
                          const char* length, std::string& out) {
  for (double d : g.axes[1]) {
    absl::StrAppendFormat(&out,
                          "  %s head width %g, %g (window, head) pairs a "
                          "call, TFLOP/s by %s:",
                          what, d, g.axes[2].back(), length);
    for (double t : g.axes[0]) {
      absl::StrAppendFormat(&out, " %g: %.3g", t,
                            g.Interpolate(t, d, g.axes[2].back()) / 1e12);
    }
    out += "\n";
  }
}

}  // namespace

std::string FormatKernelCosts(const KernelCosts& c) {
  std::string out = absl::StrFormat(
      "kernel costs (%s, %s; %s): roofline %.3g TFLOP/s, %.3g GB/s\n", c.device,
      c.dtype, c.source, c.peak_flops / 1e12, c.memory_bandwidth / 1e9);
  const RateGrid& g = c.gemm_forward;
  for (double side : g.axes[1]) {
    absl::StrAppendFormat(&out, "  GEMM %g×%g, TFLOP/s F/B/W by rows:", side,
                          side);
    for (double rows : g.axes[0]) {
      absl::StrAppendFormat(
          &out, " %g: %.3g/%.3g/%.3g", rows,
          g.Interpolate(rows, side, side) / 1e12,
          c.gemm_backward_input.Interpolate(rows, side, side) / 1e12,
          c.gemm_backward_weight.Interpolate(rows, side, side) / 1e12);
    }
    out += "\n";
  }
  AppendAttentionLines(c.attention, "attention", "T", out);
  AppendAttentionLines(c.block_attention, "ring block attention",
                       "block length", out);
  out += "  element-wise GB/s by (rows, width):";
  for (double rows : c.elementwise.axes[0]) {
    for (double w : c.elementwise.axes[1]) {
      absl::StrAppendFormat(&out, " (%g, %g): %.3g", rows, w,
                            c.elementwise.Interpolate(rows, w, 1) / 1e9);
    }
  }
  out += "\n  AdamW GB/s by elements:";
  for (double n : c.adamw.axes[0]) {
    absl::StrAppendFormat(&out, " %g: %.3g", n, AdamWRate(c, n) / 1e9);
  }
  return out + "\n";
}

absl::StatusOr<KernelCosts> KernelCostsFromJson(const nlohmann::json& json,
                                                const std::string& where) {
  const nlohmann::json* j = &json;
  // A trellis-bench summary carries the table under "kernel_costs".
  if (j->is_object() && j->contains("kernel_costs") &&
      j->at("kernel_costs").is_object()) {
    j = &j->at("kernel_costs");
  }
  const int64_t version = IntegerOr(*j, "kernel_costs");
  if (version != 1 && version != kVersion) {
    return Bad(where,
               "is not a kernel cost table (no \"kernel_costs\": 2, or 1 "
               "for an older one); write one with trellis-bench --profile "
               "--json=FILE");
  }
  KernelCosts c;
  c.device = StringOr(*j, "device");
  if (c.device != "cpu" && c.device != "cuda") {
    return Bad(where, "field \"device\" must be \"cpu\" or \"cuda\"");
  }
  c.dtype = StringOr(*j, "dtype");
  if (c.dtype != "f32" && c.dtype != "bf16") {
    return Bad(where, "field \"dtype\" must be \"f32\" or \"bf16\"");
  }
  if (j->contains("source") && !j->at("source").is_string()) {
    return Bad(where, "field \"source\" must be a string");
  }
  c.source = StringOr(*j, "source", where);
  for (const auto& [field, to, unit] :
       {std::tuple<const char*, double*, double>{"peak_tflops", &c.peak_flops,
                                                 1e12},
        {"memory_bandwidth_gbs", &c.memory_bandwidth, 1e9}}) {
    if (!j->contains(field)) {
      return Bad(where, absl::StrCat("field \"", field, "\" is missing"));
    }
    TRELLIS_ASSIGN_OR_RETURN(*to, Figure(j->at(field), where, field));
    *to *= unit;
  }
  const std::array<const char*, 3> gemm_axes = {"rows", "in", "out"};
  TRELLIS_ASSIGN_OR_RETURN(c.gemm_forward, Grid(*j, where, "gemm", gemm_axes,
                                                "forward_tflops", 1e12));
  TRELLIS_ASSIGN_OR_RETURN(
      c.gemm_backward_input,
      Grid(*j, where, "gemm", gemm_axes, "backward_input_tflops", 1e12));
  TRELLIS_ASSIGN_OR_RETURN(
      c.gemm_backward_weight,
      Grid(*j, where, "gemm", gemm_axes, "backward_weight_tflops", 1e12));
  TRELLIS_ASSIGN_OR_RETURN(
      c.attention,
      Grid(*j, where, "attention",
           {"seq_len", "head_dim", version == 1 ? "heads" : "head_windows"},
           "tflops", 1e12));
  if (version == 1) {
    for (double& pairs : c.attention.axes[2]) {
      pairs *= kVersion1Windows;
      if (pairs > kMaxAxis) {
        return Bad(where,
                   "axis \"attention.heads\" of a version-1 table must be "
                   "at most 2^30 (it counts heads of 2-window calls); "
                   "measure a new table with trellis-bench --profile");
      }
    }
  }
  if (j->contains("block_attention")) {
    TRELLIS_ASSIGN_OR_RETURN(
        c.block_attention,
        Grid(*j, where, "block_attention",
             {"seq_len", "head_dim", "head_windows"}, "tflops", 1e12));
  }
  TRELLIS_ASSIGN_OR_RETURN(
      c.elementwise,
      Grid(*j, where, "elementwise", {"rows", "width", nullptr}, "gbs", 1e9));
  TRELLIS_ASSIGN_OR_RETURN(
      c.adamw,
      Grid(*j, where, "adamw", {"elements", nullptr, nullptr}, "gbs", 1e9));
  return c;
}

nlohmann::json KernelCostsToJson(const KernelCosts& c) {
  const RateGrid& g = c.gemm_forward;
  const RateGrid& a = c.attention;
  const RateGrid& e = c.elementwise;
  nlohmann::json out = {
      {"kernel_costs", kVersion},
      {"device", c.device},
      {"dtype", c.dtype},
      {"source", c.source},
      {"peak_tflops", c.peak_flops / 1e12},
      {"memory_bandwidth_gbs", c.memory_bandwidth / 1e9},
      {"gemm",
       {{"rows", g.axes[0]},
        {"in", g.axes[1]},
        {"out", g.axes[2]},
        {"forward_tflops", Scaled(g.rates, 1e12)},
        {"backward_input_tflops", Scaled(c.gemm_backward_input.rates, 1e12)},
        {"backward_weight_tflops",
         Scaled(c.gemm_backward_weight.rates, 1e12)}}},
      {"attention",
       {{"seq_len", a.axes[0]},
        {"head_dim", a.axes[1]},
        {"head_windows", a.axes[2]},
        {"tflops", Scaled(a.rates, 1e12)}}},
      {"elementwise",
       {{"rows", e.axes[0]},
        {"width", e.axes[1]},
        {"gbs", Scaled(e.rates, 1e9)}}},
      {"adamw",
       {{"elements", c.adamw.axes[0]}, {"gbs", Scaled(c.adamw.rates, 1e9)}}},
  };
  const RateGrid& b = c.block_attention;
  if (b.size() > 0) {
    out["block_attention"] = {{"seq_len", b.axes[0]},
                              {"head_dim", b.axes[1]},
                              {"head_windows", b.axes[2]},
                              {"tflops", Scaled(b.rates, 1e12)}};
  }
  return out;
}

absl::StatusOr<KernelCosts> LoadKernelCosts(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("kernel cost table: ", text.status().message(),
                     "; write one with trellis-bench --profile --json=FILE"));
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Bad(path, "is not valid JSON");
  return KernelCostsFromJson(j, path);
}

}  // namespace trellis
