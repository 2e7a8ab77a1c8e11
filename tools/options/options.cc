#include "tools/options/options.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "absl/flags/marshalling.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "framework/status.h"
#include "parallel/context_parallel.h"
#include "parallel/schedule.h"
#include "transformer/config.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

#ifdef TRELLIS_WITH_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

template <typename T>
bool NotFinite(const T& value) {
  if constexpr (std::is_floating_point_v<T>) {
    return !std::isfinite(value);
  } else {
    return false;
  }
}

// Every floating-point option must be finite: NaN passes most comparisons
// unnoticed and an infinite rate or clip trains on NaN weights.
absl::Status CheckFinite(const TrainOptions& o) {
  const TrainOptions defaults;
  absl::Status status;
#define TRELLIS_OPTION_FINITE(group, type, name, value, help)            \
  if (status.ok() && NotFinite(o.name)) {                                \
    status = Bad(absl::StrCat("--" #name "=", absl::UnparseFlag(o.name), \
                              " is not a finite number; give one (the "  \
                              "default is --" #name "=",                 \
                              absl::UnparseFlag(defaults.name), ")"));   \
  }
  TRELLIS_RUN_OPTIONS(TRELLIS_OPTION_FINITE)
  TRELLIS_PARALLEL_OPTIONS(TRELLIS_OPTION_FINITE)
#undef TRELLIS_OPTION_FINITE
  return status;
}

// The run's data, batch sizes, steps, learning-rate schedule, evaluation and
// checkpoint options.
absl::Status CheckRunScalars(const TrainOptions& o) {
  if (o.data.empty()) {
    return Bad("--data is required: a token file made by trellis-preprocess");
  }
  if (o.micro_batch_size < 1 || o.global_batch_size < 1) {
    return Bad(absl::StrCat("--micro_batch_size=", o.micro_batch_size,
                            " and --global_batch_size=", o.global_batch_size,
                            " must be positive"));
  }
  if (o.steps < 1)
    return Bad(absl::StrCat("--steps=", o.steps, " must be ≥ 1"));
  if (!(o.lr > 0) || o.min_lr < 0 || o.min_lr > o.lr) {
    return Bad(absl::StrCat("--lr=", o.lr, " and --min_lr=", o.min_lr,
                            " need 0 ≤ min_lr ≤ lr and lr > 0"));
  }
  if (o.warmup_steps < 0 || o.weight_decay < 0 || o.grad_clip < 0) {
    return Bad("--warmup_steps, --weight_decay and --grad_clip must be ≥ 0");
  }
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    return Bad(
        absl::StrCat("--val_fraction=", o.val_fraction, " must be in [0, 1)"));
  }
  if (o.eval_every > 0 && o.val_fraction == 0) {
    return Bad(absl::StrCat("--eval_every=", o.eval_every,
                            " needs validation windows but --val_fraction=0 "
                            "holds none out; set --val_fraction > 0 (e.g. "
                            "0.02) or --eval_every=0"));
  }
  if (o.save_every < 0 || o.eval_every < 0 || o.log_every < 1 ||
      o.keep_checkpoints < 0 || o.eval_windows < 1) {
    return Bad(
        "--save_every, --eval_every, --keep_checkpoints must be ≥ 0 "
        "and --log_every, --eval_windows ≥ 1");
  }
  return absl::OkStatus();
}

// The device, precision and memory options, and what the device can run.
absl::Status CheckDeviceScalars(const TrainOptions& o) {
  if (o.device == DeviceType::kCUDA && !kBuiltWithCuda) {
    return Bad(
        "--device=cuda: this build has no CUDA backend; rebuild on a machine "
        "with nvcc (scripts/build.sh, see docs/gpu.md) or use --device=cpu");
  }
  if (o.precision == Precision::kBf16 && o.device != DeviceType::kCUDA) {
    return Bad(
        "--precision=bf16 needs --device=cuda (the CPU kernels compute in "
        "float32); use --precision=fp32 on CPU");
  }
  TRELLIS_RETURN_IF_ERROR(FamilyOf(o.model).CheckDevice(o.model, o.device));
  if (o.document_mask && o.device == DeviceType::kCUDA) {
    return Bad(
        "--document_mask runs on --device=cpu only for now (the CUDA "
        "attention kernels have no document mask); drop it on cuda");
  }
  if (o.loss_chunk_rows < -1) {
    return Bad(absl::StrCat("--loss_chunk_rows=", o.loss_chunk_rows,
                            " must be ≥ 0 (0: a whole microbatch at once), "
                            "or -1 for the device's choice"));
  }
  // (CheckFinite has refused NaN and infinity already.)
  if (o.peak_tflops < 0) {
    return Bad(absl::StrCat("--peak_tflops=", o.peak_tflops,
                            " must be ≥ 0 (0: the device's known peak)"));
  }
  if (!(o.memory_budget_gb >= 0)) {
    return Bad(absl::StrCat("--memory_budget_gb=", o.memory_budget_gb,
                            " must be ≥ 0 (0: the device's memory)"));
  }
  return absl::OkStatus();
}

// The gradient buckets, ZeRO level, straggler and skipped-step watches,
// communication timeout and traced steps.
absl::Status CheckParallelAndWatchScalars(const TrainOptions& o) {
  if (o.dp_bucket_mb <= 0) return Bad("--dp_bucket_mb must be positive");
  if (o.straggler_every < 0 || !(o.straggler_threshold >= 1)) {
    return Bad(absl::StrCat("--straggler_every=", o.straggler_every,
                            " must be ≥ 0 and --straggler_threshold=",
                            o.straggler_threshold, " ≥ 1"));
  }
  if (o.max_skipped_steps < 0 || o.skip_spike_zscore < 0) {
    return Bad(absl::StrCat("--max_skipped_steps=", o.max_skipped_steps,
                            " and --skip_spike_zscore=", o.skip_spike_zscore,
                            " must be ≥ 0 (0: off)"));
  }
  if (o.comm_timeout_s < 0) {
    return Bad("--comm_timeout_s must be 0 (off) or positive");
  }
  if (o.zero < 0 || o.zero > 3) {
    return Bad(absl::StrCat("--zero=", o.zero, " must be 0, 1, 2 or 3"));
  }
  if (o.trace_dir.empty() != o.trace_steps.empty()) {
    return Bad(
        "--trace_dir and --trace_steps go together, e.g. "
        "--trace_dir=runs/trace --trace_steps=5,6");
  }
  for (int64_t step : o.trace_steps) {
    if (step < 1 || step > o.steps) {
      return Bad(absl::StrCat(
          "--trace_steps entry ", step,
          " is not a step of this run (1 to --steps=", o.steps, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckScalars(const TrainOptions& o) {
  TRELLIS_RETURN_IF_ERROR(CheckFinite(o));
  TRELLIS_RETURN_IF_ERROR(CheckRunScalars(o));
  TRELLIS_RETURN_IF_ERROR(CheckDeviceScalars(o));
  return CheckParallelAndWatchScalars(o);
}

// Refuses sizes whose memory plan could overflow int64, estimated
// generously in double: weights, gradients and moments of the whole model,
// and every window of a step's activations, attention scores and logits at
// once (what one rank would hold under GPipe on a single replica, the most
// any layout plans). The bound is 2^60 bytes, 8 times below int64's range,
// so the plan's exact sums cannot overflow for sizes that pass; whether a
// layout fits its devices is the memory plan's check, not this one (a
// Llama 70B step of 2048 windows of 8192 tokens counts about 1.6e16 bytes
// here, far more than a device holds, yet fits 1024 GPUs as a layout).
absl::Status CheckSizes(const TrainOptions& o) {
  const ModelConfig& c = o.model;
  const double d = c.d_model, layers = c.n_layer, t = c.seq_len;
  const double parameters = 12 * layers * d * d + (c.vocab_size + t + 13) * d;
  const double per_token =
      layers * (40 * d + 5 * static_cast<double>(c.n_head) * t) +
      static_cast<double>(c.vocab_size) + d;
  const double bytes =
      16 * parameters +
      4 * static_cast<double>(o.global_batch_size) * t * per_token;
  constexpr double kMaxBytes = 1152921504606846976.0;  // 2^60: 1 EiB
  if (bytes > kMaxBytes) {
    return Bad(absl::StrFormat(
        "--n_layer=%d --d_model=%d --seq_len=%d --global_batch_size=%d need "
        "about %.3g bytes, more than any device holds; choose smaller sizes",
        c.n_layer, c.d_model, c.seq_len, o.global_batch_size, bytes));
  }
  return absl::OkStatus();
}

// Expert parallelism: ep divides the dp·cp ranks a step's gradients are
// averaged over (the cp ranks of a window may hold different experts), the
// family splits its experts over ep, and what does not cover experts yet is
// refused.
absl::Status CheckExpertLayout(const TrainOptions& o) {
  const int64_t replicas = o.gradient_replicas();
  if (o.ep < 1 || replicas % o.ep != 0) {
    return Bad(absl::StrCat(
        "--ep=", o.ep, " must be at least 1 and divide dp",
        o.cp > 1 ? "·cp" : "", "=", replicas,
        " (experts are split over data-parallel ranks); choose ep dividing ",
        replicas));
  }
  TRELLIS_RETURN_IF_ERROR(FamilyOf(o.model).CheckExpertParallel(o.model, o.ep));
  return absl::OkStatus();
}

// Context parallelism: cp splits each window into 2·cp chunks; what does
// not cover it yet is refused.
absl::Status CheckContextLayout(const TrainOptions& o) {
  TRELLIS_RETURN_IF_ERROR(
      ContextSplit::Check(o.model.seq_len, static_cast<int>(o.cp)));
  TRELLIS_ASSIGN_OR_RETURN(const ContextComm comm, ParseContextComm(o.cp_comm));
  if (o.cp == 1) return absl::OkStatus();
  TRELLIS_RETURN_IF_ERROR(
      FamilyOf(o.model).CheckContextParallel(o.model, o.cp));
  // All-to-all gives each cp rank 1/cp of this tp rank's heads (key/value
  // heads fewer than tp are replicated, one per rank).
  const int64_t heads = o.model.n_head / o.tp;
  const int64_t kv_heads = std::max<int64_t>(1, o.model.kv_heads() / o.tp);
  if (comm == ContextComm::kAllToAll &&
      (heads % o.cp != 0 || kv_heads % o.cp != 0)) {
    return Bad(absl::StrCat(
        "--cp_comm=a2a splits each tensor-parallel rank's heads over --cp=",
        o.cp, ", but it holds ", heads, " query and ", kv_heads,
        " key/value heads (--n_head=", o.model.n_head,
        " --n_kv_heads=", o.model.kv_heads(), " over --tp=", o.tp,
        "); use --cp_comm=ring or a --cp dividing both"));
  }
  if (o.device == DeviceType::kCUDA) {
    return Bad(absl::StrCat(
        "--cp=", o.cp,
        " runs on --device=cpu only for now (the blockwise attention has no "
        "CUDA kernels yet); use --cp=1 on cuda"));
  }
  return absl::OkStatus();
}

absl::Status CheckLayout(const TrainOptions& o, int world) {
  if (o.tp < 1 || o.pp < 1 || o.dp < 0 || o.cp < 1 || o.virtual_stages < 1) {
    return Bad(absl::StrCat("--tp=", o.tp, " --pp=", o.pp, " --dp=", o.dp,
                            " --cp=", o.cp,
                            " --virtual_stages=", o.virtual_stages,
                            ": sizes must be ≥ 1 (dp may be 0: derived)"));
  }
  const int64_t model_parallel = o.cp * o.tp * o.pp;
  if (o.dp * model_parallel != world) {
    const std::string cp =
        o.cp > 1 ? absl::StrCat(" × cp=", o.cp) : std::string();
    return Bad(absl::StrCat(
        "layout dp=", o.dp, cp, " × tp=", o.tp, " × pp=", o.pp, " = ",
        o.dp * model_parallel, " does not match the world size ", world,
        "; launch ", o.dp * model_parallel, " ranks or choose sizes whose ",
        "product is ", world));
  }
  TRELLIS_RETURN_IF_ERROR(CheckContextLayout(o));
  TRELLIS_RETURN_IF_ERROR(FamilyOf(o.model).CheckTensorParallel(o.model, o.tp));
  TRELLIS_RETURN_IF_ERROR(CheckExpertLayout(o));
  const int64_t chunks = o.pp * o.virtual_stages;
  if (o.model.n_layer < chunks) {
    return Bad(absl::StrCat("--n_layer=", o.model.n_layer, " is fewer than ",
                            "pp × virtual_stages = ", chunks,
                            "; every stage needs at least one layer"));
  }
  if (!o.pp_layers.empty()) {
    int64_t total = 0;
    for (int64_t n : o.pp_layers) {
      if (n < 1) return Bad("--pp_layers entries must be ≥ 1");
      total += n;
    }
    if (static_cast<int64_t>(o.pp_layers.size()) != o.pp ||
        total != o.model.n_layer) {
      return Bad(absl::StrCat(
          "--pp_layers=", absl::StrJoin(o.pp_layers, ","), " must list ", o.pp,
          " stages whose layers sum to --n_layer=", o.model.n_layer));
    }
    if (o.virtual_stages > 1) {
      return Bad("--pp_layers cannot be combined with --virtual_stages > 1");
    }
  }
  if (o.sequence_parallel && o.tp < 2) {
    return Bad(
        absl::StrCat("--sequence_parallel needs --tp > 1 (it splits "
                     "rows over the tensor-parallel ranks); --tp=",
                     o.tp, ": raise --tp or drop --sequence_parallel"));
  }
  const int64_t rows = o.micro_batch_size * o.local_seq_len();
  if (o.sequence_parallel && rows % o.tp != 0) {
    return Bad(
        absl::StrCat("--sequence_parallel needs --micro_batch_size × --seq_len",
                     o.cp > 1 ? " / --cp" : "", " = ", o.micro_batch_size,
                     " × ", o.local_seq_len(), " = ", rows,
                     " rows divisible by --tp=", o.tp, "; change one of them"));
  }
  const int64_t per_step = o.dp * o.micro_batch_size;
  if (o.global_batch_size % per_step != 0) {
    return Bad(absl::StrCat(
        "--global_batch_size=", o.global_batch_size,
        " is not a multiple of dp × micro_batch_size = ", o.dp, " × ",
        o.micro_batch_size, " = ", per_step, "; use a multiple of ", per_step));
  }
  const int64_t m = o.global_batch_size / per_step;
  const bool interleaved = o.schedule == ScheduleKind::kInterleaved1F1B;
  if (interleaved && (o.virtual_stages < 2 || m % o.pp != 0)) {
    return Bad(absl::StrCat(
        "--schedule=", ScheduleKindName(o.schedule),
        " needs --virtual_stages ≥ 2 and a number of microbatches (", m,
        ") that is a multiple of --pp=", o.pp));
  }
  if (!interleaved && o.virtual_stages != 1) {
    return Bad("--virtual_stages > 1 needs --schedule=interleaved-1f1b");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TrainOptions::Resolve(int world, int64_t vocab_size) {
  model.vocab_size = vocab_size;
  TRELLIS_RETURN_IF_ERROR(model.Validate());
  TRELLIS_RETURN_IF_ERROR(CheckScalars(*this));
  TRELLIS_RETURN_IF_ERROR(CheckSizes(*this));
  if (dp == 0 && tp > 0 && pp > 0 && cp > 0) {
    const int64_t others = cp * tp * pp;
    if (world % others != 0) {
      const std::string factors =
          cp > 1 ? absl::StrCat("cp × tp × pp = ", cp, " × ", tp, " × ", pp)
                 : absl::StrCat("tp × pp = ", tp, " × ", pp);
      return Bad(absl::StrCat("the world size ", world, " is not divisible by ",
                              factors, "; launch a multiple of ", others,
                              " ranks"));
    }
    dp = world / others;
  }
  return CheckLayout(*this, world);
}

namespace {

// Each option as (group, name, value as its flag would give it), in list
// order: the model's shape, then the run's, then the layout's and device's.
std::vector<std::array<std::string, 3>> OptionValues(const TrainOptions& o) {
  std::vector<std::array<std::string, 3>> out;
#define TRELLIS_MODEL_VALUE(group, type, name, value, help) \
  out.push_back({#group, #name, absl::UnparseFlag(o.model.name)});
#define TRELLIS_OPTION_VALUE(group, type, name, value, help) \
  out.push_back({#group, #name, absl::UnparseFlag(o.name)});
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_MODEL_VALUE)
  TRELLIS_RUN_OPTIONS(TRELLIS_OPTION_VALUE)
  TRELLIS_PARALLEL_OPTIONS(TRELLIS_OPTION_VALUE)
#undef TRELLIS_MODEL_VALUE
#undef TRELLIS_OPTION_VALUE
  return out;
}

// Parses `value` into the option `name`; false (with `error`) when the
// value is bad, NotFound when no option has that name.
absl::Status SetOption(TrainOptions& o, absl::string_view name,
                       absl::string_view value) {
  std::string error;
  bool known = false, ok = false;
#define TRELLIS_MODEL_SET(group, type, option, value_, help) \
  if (!known && name == #option) {                           \
    known = true;                                            \
    ok = absl::ParseFlag(value, &o.model.option, &error);    \
  }
#define TRELLIS_OPTION_SET(group, type, option, value_, help) \
  if (!known && name == #option) {                            \
    known = true;                                             \
    ok = absl::ParseFlag(value, &o.option, &error);           \
  }
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_MODEL_SET)
  TRELLIS_RUN_OPTIONS(TRELLIS_OPTION_SET)
  TRELLIS_PARALLEL_OPTIONS(TRELLIS_OPTION_SET)
#undef TRELLIS_MODEL_SET
#undef TRELLIS_OPTION_SET
  if (!known) return Bad(absl::StrCat("unknown option --", name));
  if (!ok) {
    return Bad(absl::StrCat("--", name, "=", value, ": ", error));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TrainOptions::ToFlagString() const {
  std::string out;
  for (const auto& [group, name, value] : OptionValues(*this)) {
    absl::StrAppend(&out, "--", name, "=", value, "\n");
  }
  return out;
}

absl::Status TrainOptions::ApplyFlagString(const std::string& flags) {
  for (absl::string_view line : absl::StrSplit(flags, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (!absl::ConsumePrefix(&line, "--")) {
      return Bad(absl::StrCat("'", line, "' is not a --name=value option"));
    }
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return Bad(
          absl::StrCat("--", line, " has no value; write --", line, "=VALUE"));
    }
    TRELLIS_RETURN_IF_ERROR(
        SetOption(*this, line.substr(0, eq), line.substr(eq + 1)));
  }
  return absl::OkStatus();
}

std::string ConfigReport(const TrainOptions& options) {
  std::string out = "config:";
  std::string group;
  for (const auto& [g, name, value] : OptionValues(options)) {
    if (g != group) {
      group = g;
      absl::StrAppend(&out, "\n  ", absl::AsciiStrToLower(group), ":");
    }
    absl::StrAppend(&out, " ", name, "=", value.empty() ? "''" : value);
  }
  return out + "\n";
}

int64_t TrainOptions::head_chunk_rows() const {
  if (loss_chunk_rows >= 0) return loss_chunk_rows;
  constexpr int64_t kBlock = 1024;
  if (device != DeviceType::kCUDA) return kBlock;
  const int64_t bytes = precision == Precision::kBf16 ? 2 : 4;
  const int64_t row = PaddedVocab(model.vocab_size, tp) / tp * bytes;
  return std::max<int64_t>(1, kHeadChunkBytes / row / kBlock) * kBlock;
}

std::vector<int64_t> StageLayers(int64_t n_layer, int64_t pp,
                                 const std::vector<int64_t>& pp_layers) {
  if (!pp_layers.empty()) return pp_layers;
  std::vector<int64_t> layers(pp, n_layer / pp);
  for (int64_t s = 0; s < n_layer % pp; ++s) ++layers[s];
  return layers;
}

}  // namespace trellis
