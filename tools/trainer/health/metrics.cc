#include "tools/trainer/health/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trellis {

std::string FormatLogLine(const StepMetrics& m, int64_t total_steps) {
  std::string line = absl::StrFormat(
      "step %5d/%d | loss %.4f | lr %.2e | grad_norm %.3f | %.1f ms | "
      "%.0f tok/s",
      m.step, total_steps, m.loss, m.lr, m.grad_norm, m.ms, m.tokens_per_s);
  if (m.model_tflops > 0) {
    absl::StrAppend(&line, absl::StrFormat(" | %.3g TFLOP/s", m.model_tflops));
  }
  if (m.mfu > 0) {
    absl::StrAppend(&line, absl::StrFormat(" | mfu %.1f%%", 100 * m.mfu));
  }
  if (m.bubble_theory > 0 || m.bubble > 0) {
    absl::StrAppend(&line,
                    absl::StrFormat(" | bubble %.1f%% (theory %.1f%%)",
                                    100 * m.bubble, 100 * m.bubble_theory));
  }
  if (m.dp_wait_ms > 0) {
    absl::StrAppend(&line, absl::StrFormat(" | dp wait %.1f ms", m.dp_wait_ms));
  }
  if (!m.expert_load.empty()) {
    // The worst-loaded layer speaks for the rest.
    auto worst = m.expert_load.front();
    for (const auto& layer : m.expert_load) {
      if (layer.second > worst.second) worst = layer;
    }
    absl::StrAppend(&line, absl::StrFormat(" | moe aux %.4f z %.4f load %.2f "
                                           "(layer %d)",
                                           m.moe_aux_loss, m.moe_z_loss,
                                           worst.second, worst.first));
  }
  if (m.val_loss) {
    absl::StrAppend(&line, absl::StrFormat(" | val_loss %.4f", *m.val_loss));
    for (size_t i = 0; i < m.val_loss_by_source.size(); ++i) {
      absl::StrAppend(&line, i == 0 ? " (" : ", ",
                      m.val_loss_by_source[i].first,
                      absl::StrFormat(" %.4f", m.val_loss_by_source[i].second),
                      i + 1 == m.val_loss_by_source.size() ? ")" : "");
    }
  }
  if (!m.skipped.empty()) {
    absl::StrAppend(
        &line,
        absl::StrFormat(" | SKIPPED (%s): no update; %d in a row, "
                        "%d in all",
                        m.skipped, m.consecutive_skips, m.skipped_steps));
  } else if (m.skipped_steps > 0) {
    absl::StrAppend(&line,
                    absl::StrFormat(" | skipped %d in all", m.skipped_steps));
  }
  return line;
}

Scalars TensorBoardScalars(const StepMetrics& m) {
  Scalars s = {{"train/loss", m.loss},
               {"train/lr", m.lr},
               {"train/grad_norm", m.grad_norm},
               {"perf/tokens_per_s", m.tokens_per_s},
               {"perf/ms", m.ms},
               {"perf/model_tflops", m.model_tflops},
               {"pipeline/bubble", m.bubble},
               {"pipeline/bubble_theory", m.bubble_theory},
               {"perf/dp_wait_ms", m.dp_wait_ms},
               {"memory/peak_bytes", m.memory_peak_bytes},
               {"memory/planned_bytes", m.memory_planned_bytes},
               {"health/skipped_steps", static_cast<double>(m.skipped_steps)},
               {"health/skipped", m.skipped.empty() ? 0.0 : 1.0}};
  if (m.mfu > 0) s.emplace_back("perf/mfu", m.mfu);
  if (m.val_loss) s.emplace_back("val/loss", *m.val_loss);
  for (const auto& [source, loss] : m.val_loss_by_source) {
    s.emplace_back("val/loss_by_source/" + source, loss);
  }
  if (m.straggler_ratio > 0) {
    s.emplace_back("health/slowest_over_median", m.straggler_ratio);
  }
  if (!m.expert_load.empty()) {
    s.emplace_back("moe/aux_loss", m.moe_aux_loss);
    s.emplace_back("moe/z_loss", m.moe_z_loss);
    for (const auto& [layer, load] : m.expert_load) {
      s.emplace_back(absl::StrCat("moe/expert_load/layer_", layer), load);
    }
  }
  return s;
}

absl::Status MetricsWriter::Open(const std::string& path,
                                 const std::string& tensorboard_dir) {
  if (!tensorboard_dir.empty()) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> tensorboard =
        TensorBoardWriter::Open(tensorboard_dir);
    if (!tensorboard.ok()) return tensorboard.status();
    tensorboard_ = *std::move(tensorboard);
  }
  if (path.empty()) return absl::OkStatus();
  const std::filesystem::path parent =
      std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  out_.open(path, std::ios::app);
  if (!out_) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open --metrics_file=", path, " for writing"));
  }
  path_ = path;
  out_.seekp(0, std::ios::end);
  whole_bytes_ = std::max<std::streamoff>(0, out_.tellp());
  return absl::OkStatus();
}

void MetricsWriter::Write(const StepMetrics& m) {
  if (tensorboard_ != nullptr) {
    const absl::Status written =
        tensorboard_->Write(m.step, TensorBoardScalars(m));
    if (!written.ok()) {
      std::fprintf(stderr, "warning: %s; no further TensorBoard events\n",
                   std::string(written.message()).c_str());
      tensorboard_.reset();
    }
  }
  if (!out_.is_open()) return;
  nlohmann::json j = {{"step", m.step},
                      {"loss", m.loss},
                      {"lr", m.lr},
                      {"grad_norm", m.grad_norm},
                      {"tokens_per_s", m.tokens_per_s},
                      {"ms", m.ms},
                      {"model_tflops", m.model_tflops},
                      {"mfu", m.mfu},
                      {"bubble", m.bubble},
                      {"bubble_theory", m.bubble_theory},
                      {"dp_wait_ms", m.dp_wait_ms},
                      {"memory_peak_bytes", m.memory_peak_bytes},
                      {"memory_planned_bytes", m.memory_planned_bytes},
                      {"skipped_steps", m.skipped_steps}};
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (!m.skipped.empty()) j["skipped"] = m.skipped;
  if (m.straggler_ratio > 0) j["slowest_over_median"] = m.straggler_ratio;
  if (m.straggler_rank >= 0) {
    j["straggler_rank"] = m.straggler_rank;
    j["straggler"] = m.straggler;
  }
  for (const auto& [source, loss] : m.val_loss_by_source) {
    j["val_loss_by_source"][source] = loss;
  }
  if (!m.expert_load.empty()) {
    j["moe_aux_loss"] = m.moe_aux_loss;
    j["moe_z_loss"] = m.moe_z_loss;
    for (const auto& [layer, load] : m.expert_load) {
      j["expert_load"][absl::StrCat(layer)] = load;
    }
  }
  errno = 0;
  out_ << j.dump() << "\n";
  out_.flush();
  if (out_) {
    whole_bytes_ = out_.tellp();
    return;
  }
  const std::string cause = errno != 0 ? std::strerror(errno) : "write failed";
  out_.close();
  // No half line: the file ends with the last step written whole.
  std::error_code ignored;
  if (std::filesystem::is_regular_file(path_, ignored)) {
    std::filesystem::resize_file(path_, static_cast<uintmax_t>(whole_bytes_),
                                 ignored);
  }
  failure_ = absl::StrCat("--metrics_file=", path_, " holds no step from ",
                          m.step, " on (", cause, ")");
  std::fprintf(stderr,
               "error: --metrics_file=%s: writing step %lld failed (%s); the "
               "file keeps the steps before it, training goes on, and the run "
               "will exit nonzero\n",
               path_.c_str(), static_cast<long long>(m.step), cause.c_str());
}

}  // namespace trellis
