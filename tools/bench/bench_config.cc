#include "tools/bench/bench_config.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "framework/status.h"
#include "transformer/config.h"

namespace trellis {
namespace {

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// The shapes of configs/gpt2-*.flags, with their micro batch on CPU and
// the one that ran fastest on one 80 GB H100 (seq_len 1024, bf16,
// recompute none; docs/performance.md, "The micro batch"): larger GEMMs and
// fewer weight-gradient read-modify-writes. gpt2-1558m's is the largest
// power of two whose memory plan fits 80 GB, not measured. llama-3.2-1b is
// configs/llama-3.2-1b.flags's shape (GQA, SwiGLU, RoPE, tied head, Llama
// 3's vocabulary) at its context of 2048, micro batch 16 (1.02x 8 on an
// H100, 64.6 GiB); the RoPE scaling, which costs nothing per step, is left
// out. moe-0.9b-a0.2b is a mixture of experts in OLMoE's manner at half
// its width and depth (16 layers of 1024, q/k norm, 32 experts of width
// 512, 4 per token, OLMoE's vocabulary): 0.92B parameters, 0.22B active
// per token; its CUDA micro batch of 32 is a guess, not measured.
struct Preset {
  const char* name;
  int64_t n_layer, n_head, d_model, micro_batch_size, cuda_micro_batch_size;
  ModelFamilyKind family = ModelFamilyKind::kGpt2;
  int64_t vocab_size = 50257;
  int64_t cuda_seq_len = 1024;
  int64_t n_kv_heads = 0, ffn_hidden = 0;
  double rope_theta = 10000.0;
  // A mixture of experts (family moe): its experts, those a token reaches,
  // their width; and Qwen3's and OLMoE's per-head q/k norm.
  int64_t experts = 0, experts_per_token = 0, moe_ffn_hidden = 0;
  bool qk_norm = false;
};
constexpr Preset kPresets[] = {
    {"gpt2-124m", 12, 12, 768, 8, 64},
    {"gpt2-350m", 24, 16, 1024, 8, 64},
    {"gpt2-774m", 36, 20, 1280, 4, 32},
    {"gpt2-1558m", 48, 25, 1600, 2, 16},
    {"llama-3.2-1b", 16, 32, 2048, 1, 16, ModelFamilyKind::kLlama, 128256, 2048,
     8, 8192, 500000.0},
    {"moe-0.9b-a0.2b", 16, 16, 1024, 1, 32, ModelFamilyKind("moe"), 50304, 1024,
     0, 0, 10000.0, 32, 4, 512, true},
};

// --name=value is at least `min`.
absl::Status AtLeast(const char* name, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return Bad(absl::StrCat("--", name, "=", value, " must be at least ", min));
}

// The value of flag --name parsed by `parse`, or an error naming the flag.
template <typename Parse>
auto Flag(const char* name, const std::string& value, Parse parse)
    -> decltype(parse(value)) {
  auto parsed = parse(value);
  if (!parsed.ok()) {
    return Bad(
        absl::StrCat("--", name, "=", value, ": ", parsed.status().message()));
  }
  return parsed;
}

// The preset named (nullptr for none), or an error listing the presets.
absl::StatusOr<const Preset*> FindPreset(const std::string& name) {
  const Preset* preset = nullptr;
  std::vector<std::string> names;
  for (const Preset& p : kPresets) {
    names.push_back(p.name);
    if (name == p.name) preset = &p;
  }
  if (!name.empty() && preset == nullptr) {
    return Bad(absl::StrCat("--preset=", name, " is not one of ",
                            absl::StrJoin(names, ", ")));
  }
  return preset;
}

// The model: the preset's shape (else the small CPU model), the flags
// overriding layers, heads, width and context; the vocabulary is set later.
ModelConfig ModelOf(const BenchFlags& f, const Preset* preset, bool cuda) {
  ModelConfig m;
  if (preset != nullptr) {
    m.family = preset->family;
    m.n_kv_heads = preset->n_kv_heads;
    m.ffn_hidden = preset->ffn_hidden;
    m.rope_theta = preset->rope_theta;
    if (preset->experts > 0) {
      m.experts = preset->experts;
      m.experts_per_token = preset->experts_per_token;
      m.moe_ffn_hidden = preset->moe_ffn_hidden;
      m.moe_first_dense = 0;
    }
    m.qk_norm = preset->qk_norm;
  }
  m.n_layer = f.n_layer.value_or(preset ? preset->n_layer : 6);
  m.n_head = f.n_head.value_or(preset ? preset->n_head : 6);
  m.d_model = f.d_model.value_or(preset ? preset->d_model : 384);
  m.seq_len =
      f.seq_len.value_or(cuda ? (preset ? preset->cuda_seq_len : 1024) : 256);
  return m;
}

// The flags of the measurement itself: steps, warmup, the peak the MFU is
// taken against and where the JSON goes.
absl::Status CheckRunFlags(const BenchFlags& f) {
  TRELLIS_RETURN_IF_ERROR(AtLeast("steps", f.steps, 1));
  TRELLIS_RETURN_IF_ERROR(AtLeast("warmup", f.warmup, 0));
  if (!(f.peak_tflops >= 0)) {
    return Bad(absl::StrCat("--peak_tflops=", f.peak_tflops,
                            " must be positive (0: the device's known peak)"));
  }
  if (!f.json.empty()) {
    const std::filesystem::path parent =
        std::filesystem::absolute(f.json).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec)) {
      return Bad(absl::StrCat("--json=", f.json, ": the directory ",
                              parent.string(), " does not exist"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BenchConfig> ResolveBenchConfig(const BenchFlags& f) {
  if (!f.positional.empty()) {
    return Bad(absl::StrCat("unexpected argument '", f.positional.front(),
                            "'; trellis-bench takes only flags"));
  }
  TRELLIS_ASSIGN_OR_RETURN(const DeviceType device,
                           Flag("device", f.device, ParseDeviceType));
  const bool cuda = device == DeviceType::kCUDA;
  TRELLIS_ASSIGN_OR_RETURN(
      const Precision precision,
      Flag("precision",
           f.precision.empty() ? (cuda ? "bf16" : "fp32") : f.precision,
           ParsePrecision));
  if (precision == Precision::kBf16 && !cuda) {
    return Bad(
        "--precision=bf16 needs --device=cuda (the CPU kernels compute in "
        "float32)");
  }
  TRELLIS_ASSIGN_OR_RETURN(
      const Recompute recompute,
      Flag("recompute", f.recompute, [](absl::string_view name) {
        return ParseRecompute(std::string(name));
      }));
  TRELLIS_ASSIGN_OR_RETURN(
      const AttentionPath attention,
      Flag("attention", f.attention,
           [](const std::string& name) { return ParseAttentionPath(name); }));
  const std::string preset_name =
      f.preset.empty() && cuda ? "gpt2-124m" : f.preset;
  TRELLIS_ASSIGN_OR_RETURN(const Preset* preset, FindPreset(preset_name));
  TRELLIS_RETURN_IF_ERROR(CheckRunFlags(f));

  BenchConfig c;
  c.preset = preset_name;
  c.timed_steps = f.steps;
  c.warmup = f.warmup;
  c.peak_tflops = f.peak_tflops;
  c.profile = f.profile;
  c.json = f.json;
  c.gemm_size = f.gemm_size.value_or(cuda ? 8192 : 2048);
  TRELLIS_RETURN_IF_ERROR(AtLeast("gemm_size", c.gemm_size, 1));

  TrainOptions& o = c.train;
  o.device = device;
  o.precision = precision;
  o.recompute = recompute;
  o.attention = attention;
  o.model = ModelOf(f, preset, cuda);
  const int64_t vocab =
      f.vocab_size.value_or(preset ? preset->vocab_size : 257);
  const int64_t preset_micro_batch = preset == nullptr ? 4
                                     : cuda ? preset->cuda_micro_batch_size
                                            : preset->micro_batch_size;
  o.micro_batch_size = f.micro_batch_size.value_or(preset_micro_batch);
  o.global_batch_size =
      f.global_batch_size.value_or(o.micro_batch_size * (cuda ? 4 : 2));
  if (f.loss_chunk_rows.has_value()) o.loss_chunk_rows = *f.loss_chunk_rows;
  o.bias_grad_epilogue = f.bias_grad_epilogue;
  o.residual_in_gemm = f.residual_in_gemm;
  o.gemm_autotune = f.gemm_autotune;
  o.steps = c.timed_steps + c.warmup;
  o.warmup_steps = 1;
  o.eval_every = 0;
  o.val_fraction = 0;
  // The trainer's own checks, on a copy: Resolve fills in derived fields
  // that Trainer::Create resolves again from the data file.
  TrainOptions check = o;
  check.data = "synthetic";  // written later, once the flags are good
  TRELLIS_RETURN_IF_ERROR(check.Resolve(/*world=*/1, vocab));
  o.model.vocab_size = vocab;
  return c;
}

}  // namespace trellis
