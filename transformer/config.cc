#include "transformer/config.h"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/parameter.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

// The largest sizes ModelConfig::Validate accepts: far beyond the models in
// use (d_model 16384, 126 layers, 128256 tokens, 131072 positions), and
// small enough that every shape, the parameter count and the FLOPs stay
// well inside int64 and a model's tensors are listed in moments. Past them
// a size is a typo or a corrupt file.
constexpr int64_t kMaxLayers = int64_t{1} << 17;
constexpr int64_t kMaxWidth = int64_t{1} << 20;  // also of heads, the MLP
constexpr int64_t kMaxPositions = int64_t{1} << 24;
constexpr int64_t kMaxVocab = int64_t{1} << 24;

std::string OptionText(int64_t value) { return absl::StrCat(value); }
std::string OptionText(double value) { return absl::StrCat(value); }
std::string OptionText(bool value) { return value ? "true" : "false"; }
std::string OptionText(ModelFamilyKind value) { return ModelFamilyName(value); }
std::string OptionText(RopeScalingType value) {
  return std::string(RopeScalingTypeName(value));
}

// "llama:" for an option's help "llama: ...": the one word before a colon
// that opens it; "" when it opens otherwise.
std::string OptionTag(std::string_view help) {
  const size_t colon = help.find(':');
  if (colon == std::string_view::npos || colon == 0) return "";
  const std::string_view word = help.substr(0, colon);
  if (word.find(' ') != std::string_view::npos) return "";
  return std::string(help.substr(0, colon + 1));
}

// Logical elements of the parameters `plan`'s part of the model declares.
int64_t DeclaredElements(const ModelConfig& config, const ChunkPlan& plan) {
  ParameterSet params;
  FamilyOf(config).DeclareParameters(config, plan, TpPlace{}, /*seed=*/0,
                                     Device::Cpu(), DType::kF32, params);
  int64_t n = 0;
  for (const Parameter* p : params.all())
    n += NumElements(p->spec.logical_shape);
  return n;
}

}  // namespace

std::string ModelFamilyName(ModelFamilyKind kind) {
  return std::string(kind.name());
}

int64_t ModelConfig::NumParameters() const {
  // The ends of the model, then one layer of each class (layers of a class
  // declare the same parameters): the declarations are O(classes), not
  // O(n_layer).
  const ModelFamily& family = FamilyOf(*this);
  int64_t n = DeclaredElements(*this, ChunkPlan{0, 0, true, true});
  std::map<int64_t, int64_t> class_elements;
  for (int64_t l = 0; l < n_layer; ++l) {
    const int64_t c = family.LayerClass(*this, l);
    auto it = class_elements.find(c);
    if (it == class_elements.end()) {
      it = class_elements
               .emplace(c,
                        DeclaredElements(*this, ChunkPlan{l, 1, false, false}))
               .first;
    }
    n += it->second;
  }
  return n;
}

int64_t ModelConfig::LlamaFfnHidden() const {
  if (ffn_hidden > 0) return ffn_hidden;
  const int64_t two_thirds = 2 * 4 * d_model / 3;
  const auto scaled = static_cast<int64_t>(ffn_dim_multiplier *
                                           static_cast<double>(two_thirds));
  const int64_t m = ffn_multiple_of > 0 ? ffn_multiple_of : 1;
  return (scaled + m - 1) / m * m;
}

RopeScaling ModelConfig::Scaling() const {
  RopeScaling s;
  s.type = rope_scaling;
  s.factor = rope_factor;
  s.low_freq_factor = rope_low_freq_factor;
  s.high_freq_factor = rope_high_freq_factor;
  s.original_max_position_embeddings =
      static_cast<double>(rope_original_max_positions);
  return s;
}

double ModelConfig::TrainingFlopsPerToken() const {
  return 6.0 * static_cast<double>(FamilyOf(*this).ActiveParameters(*this)) +
         6.0 * static_cast<double>(n_layer * AttentionWidth() * seq_len);
}

absl::Status ModelConfig::Validate() const {
  if (n_layer < 1 || n_head < 1 || d_model < 1 || seq_len < 1 ||
      vocab_size < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model sizes must be positive: ", DebugString(),
        "; set --n_layer, --n_head, --d_model, --seq_len to positive values"));
  }
  const struct {
    const char* flag;
    int64_t value, max;
  } sizes[] = {{"--n_layer", n_layer, kMaxLayers},
               {"--d_model", d_model, kMaxWidth},
               {"--n_kv_heads", n_kv_heads, kMaxWidth},
               {"--head_dim", head_dim, kMaxWidth},
               {"--ffn_hidden", ffn_hidden, kMaxWidth},
               {"--ffn_multiple_of", ffn_multiple_of, kMaxWidth},
               {"--seq_len", seq_len, kMaxPositions},
               {"--rope_original_max_positions", rope_original_max_positions,
                kMaxPositions},
               {"vocab_size", vocab_size, kMaxVocab}};
  for (const auto& size : sizes) {
    if (size.value > size.max) {
      return absl::InvalidArgumentError(
          absl::StrCat(size.flag, "=", size.value, " is beyond the ", size.max,
                       " trellis builds; choose smaller sizes"));
    }
  }
  return FamilyOf(*this).Validate(*this);
}

std::string ModelConfig::DebugString() const {
  std::string out;
  // A family holds the options of other families at their defaults (it
  // refuses other values), so they would say nothing about its model.
  const std::vector<std::string> tags = FamilyOf(*this).OptionTags();
  auto reads = [&](std::string_view help) {
    const std::string tag = OptionTag(help);
    return tag.empty() ||
           std::find(tags.begin(), tags.end(), tag) != tags.end();
  };
#define TRELLIS_MODEL_CONFIG_TEXT(group, type, name, value, help) \
  if (reads(help)) {                                              \
    absl::StrAppend(&out, out.empty() ? "" : " ", #name "=",      \
                    OptionText(name));                            \
  }
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_MODEL_CONFIG_TEXT)
#undef TRELLIS_MODEL_CONFIG_TEXT
  absl::StrAppend(&out, " vocab_size=", vocab_size);
  return out;
}

ChangedOption FirstChangedOption(const ModelConfig& config,
                                 const std::string& prefix) {
  const ModelConfig defaults;
#define TRELLIS_MODEL_CONFIG_CHANGED(group, type, name, value, help) \
  if (std::string(help).rfind(prefix, 0) == 0 &&                     \
      !(config.name == defaults.name)) {                             \
    return ChangedOption{#name, OptionText(defaults.name)};          \
  }
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_MODEL_CONFIG_CHANGED)
#undef TRELLIS_MODEL_CONFIG_CHANGED
  return ChangedOption{};
}

int64_t PaddedVocab(int64_t vocab_size, int64_t tp) {
  auto round_up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  const int64_t wide = round_up(vocab_size, 128 * tp);
  if ((wide - vocab_size) * 100 <= vocab_size) return wide;
  return round_up(vocab_size, tp);
}

}  // namespace trellis
