#include "transformer/gpt_family.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "transformer/gpt_chunk.h"
#include "transformer/gpt_decoder.h"
#include "transformer/gpt_parameters.h"

namespace trellis {
namespace {

class Gpt2 : public ModelFamily {
 public:
  ModelFamilyKind kind() const override { return ModelFamilyKind::kGpt2; }

  absl::Status Validate(const ModelConfig& config) const override {
    if (config.d_model % config.n_head != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--d_model=", config.d_model, " is not divisible by --n_head=",
          config.n_head, "; choose d_model a multiple of n_head"));
    }
    // Llama's options, and the ones GPT-2 fixes (its LayerNorm kernel
    // takes no eps; its head is always the tied wte).
    ChangedOption changed = FirstChangedOption(config, "llama:");
    const ModelConfig defaults;
    if (config.norm_eps != defaults.norm_eps) changed = {"norm_eps", "1e-05"};
    if (!config.tie_embeddings) changed = {"tie_embeddings", "true"};
    if (!changed.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", changed.name,
          " does not apply to --family=gpt2 (it takes only ",
          changed.default_value, "); drop the flag or use --family=llama"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckTensorParallel(const ModelConfig& config,
                                   int64_t tp) const override {
    // Heads split over tp (c_attn's columns), and with them the MLP's 4·C.
    if (config.n_head % tp != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--n_head=", config.n_head, " is not divisible by --tp=", tp,
          "; choose tp dividing the head count"));
    }
    return absl::OkStatus();
  }

  std::string TiedEmbedding(const ModelConfig&) const override { return "wte"; }

  void DeclareParameters(const ModelConfig& config, const ChunkPlan& plan,
                         TpPlace tp, uint64_t seed, Device device, DType dtype,
                         ParameterSet& params) const override {
    DeclareGptParameters(config, plan, tp, seed, device, dtype, params);
  }

  std::unique_ptr<ModelChunk> NewChunk(const ModelConfig& config,
                                       const ChunkSetup& s) const override {
    return std::make_unique<GptChunk>(config, s.plan, s.tp, *s.tp_comm,
                                      *s.params, s.micro_batch, s.device,
                                      s.dtype, s.options);
  }

  std::unique_ptr<ModelDecoder> NewDecoder(
      const ModelConfig& config, const DecoderSetup& setup) const override {
    return NewGptDecoder(config, setup);
  }
};

}  // namespace

const ModelFamily& Gpt2Family() {
  static const Gpt2 family;
  return family;
}

}  // namespace trellis
