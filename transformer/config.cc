#include "transformer/config.h"

#include "absl/strings/str_cat.h"
#include "parallel/parameter.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

std::string OptionText(int64_t value) { return absl::StrCat(value); }
std::string OptionText(ModelFamilyKind value) { return ModelFamilyName(value); }

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

const char* ModelFamilyName(ModelFamilyKind kind) {
  switch (kind) {
    case ModelFamilyKind::kGpt2:
      return "gpt2";
  }
  return "?";
}

absl::StatusOr<ModelFamilyKind> ParseModelFamily(const std::string& name) {
  if (name == "gpt2") return ModelFamilyKind::kGpt2;
  return absl::InvalidArgumentError(
      absl::StrCat("--family=", name, " is not a model family: use gpt2"));
}

int64_t ModelConfig::NumParameters() const {
  // The ends of the model, then one layer (every layer has the same
  // parameters): O(1) in n_layer.
  const int64_t ends = DeclaredElements(*this, ChunkPlan{0, 0, true, true});
  const int64_t with_layer =
      DeclaredElements(*this, ChunkPlan{0, 1, true, true});
  return ends + n_layer * (with_layer - ends);
}

double ModelConfig::TrainingFlopsPerToken() const {
  return 6.0 * static_cast<double>(NumParameters()) +
         6.0 * static_cast<double>(n_layer * d_model * seq_len);
}

absl::Status ModelConfig::Validate() const {
  if (n_layer < 1 || n_head < 1 || d_model < 1 || seq_len < 1 ||
      vocab_size < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model sizes must be positive: ", DebugString(),
        "; set --n_layer, --n_head, --d_model, --seq_len to positive values"));
  }
  return FamilyOf(*this).Validate(*this);
}

std::string ModelConfig::DebugString() const {
  std::string out;
#define TRELLIS_MODEL_CONFIG_TEXT(group, type, name, value, help) \
  absl::StrAppend(&out, out.empty() ? "" : " ", #name "=", OptionText(name));
  TRELLIS_MODEL_CONFIG_OPTIONS(TRELLIS_MODEL_CONFIG_TEXT)
#undef TRELLIS_MODEL_CONFIG_TEXT
  absl::StrAppend(&out, " vocab_size=", vocab_size);
  return out;
}

int64_t PaddedVocab(int64_t vocab_size, int64_t tp) {
  auto round_up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  const int64_t wide = round_up(vocab_size, 128 * tp);
  if ((wide - vocab_size) * 100 <= vocab_size) return wide;
  return round_up(vocab_size, tp);
}

}  // namespace trellis
