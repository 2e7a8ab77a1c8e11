#include "transformer/moe/moe_family.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/kernels/router.h"
#include "transformer/llama/llama_family.h"
#include "transformer/llama/llama_parameters.h"
#include "transformer/moe/moe_hf.h"
#include "transformer/moe/moe_mlp.h"
#include "transformer/moe/moe_parameters.h"

namespace trellis {
namespace moe {
namespace {

// The most experts a layer may have, and the widest expert
// (ModelConfig::Validate's bound on widths).
constexpr int64_t kMaxExperts = int64_t{1} << 16;
constexpr int64_t kMaxWidth = int64_t{1} << 20;

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

absl::Status ValidateExperts(const ModelConfig& c) {
  if (c.experts < 1 || c.experts > kMaxExperts) {
    return Bad(absl::StrCat("--experts=", c.experts, " is not between 1 and ",
                            kMaxExperts, "; set the experts per layer"));
  }
  if (c.experts_per_token < 1 || c.experts_per_token > c.experts) {
    return Bad(absl::StrCat("--experts_per_token=", c.experts_per_token,
                            " is not between 1 and --experts=", c.experts,
                            "; route each token to at most every expert"));
  }
  if (c.moe_ffn_hidden < 0 || MoeFfnHidden(c) < 1 ||
      MoeFfnHidden(c) > kMaxWidth) {
    return Bad(absl::StrCat("--moe_ffn_hidden=", c.moe_ffn_hidden,
                            " is not between 1 and ", kMaxWidth,
                            " (0: the dense MLP's width); set the expert "
                            "width"));
  }
  if (c.moe_shared_ffn_hidden < 0 || c.moe_shared_ffn_hidden > kMaxWidth) {
    return Bad(absl::StrCat("--moe_shared_ffn_hidden=", c.moe_shared_ffn_hidden,
                            " is not between 0 and ", kMaxWidth,
                            " (0: no shared expert); set the shared "
                            "expert's width"));
  }
  if (c.moe_first_dense < 0 || c.moe_layer_freq < 1) {
    return Bad(absl::StrCat("--moe_first_dense=", c.moe_first_dense,
                            " --moe_layer_freq=", c.moe_layer_freq,
                            ": the dense lead must be 0 or more and the "
                            "frequency 1 or more"));
  }
  for (const auto& [flag, value] :
       {std::pair{"--moe_aux_loss_coeff", c.moe_aux_loss_coeff},
        std::pair{"--moe_z_loss_coeff", c.moe_z_loss_coeff},
        std::pair{"--moe_bias_update_rate", c.moe_bias_update_rate}}) {
    if (!(value >= 0 && std::isfinite(value))) {
      return Bad(absl::StrCat(flag, "=", value,
                              " must be a finite number of 0 or more"));
    }
  }
  return absl::OkStatus();
}

class Moe : public ModelFamily {
 public:
  ModelFamilyKind kind() const override { return kKind; }
  std::vector<std::string> OptionTags() const override {
    return {"llama:", "moe:"};
  }

  absl::Status Validate(const ModelConfig& c) const override {
    if (absl::Status llama = llama::ValidateLlamaConfig(c); !llama.ok()) {
      return llama;
    }
    return ValidateExperts(c);
  }

  absl::Status CheckTensorParallel(const ModelConfig& c,
                                   int64_t tp) const override {
    if (absl::Status heads = llama::CheckLlamaAttentionTp(c, tp); !heads.ok()) {
      return heads;
    }
    if (MoeFfnHidden(c) % tp != 0) {
      return Bad(absl::StrCat("--tp=", tp, " does not divide the expert width ",
                              MoeFfnHidden(c),
                              "; choose tp dividing it or set "
                              "--moe_ffn_hidden"));
    }
    if (c.moe_shared_ffn_hidden % tp != 0) {
      return Bad(absl::StrCat("--tp=", tp,
                              " does not divide the shared expert width ",
                              c.moe_shared_ffn_hidden,
                              "; choose tp dividing it or set "
                              "--moe_shared_ffn_hidden"));
    }
    if (MoeLayers(c) < c.n_layer && c.LlamaFfnHidden() % tp != 0) {
      return Bad(absl::StrCat(
          "--tp=", tp, " does not divide the dense MLP width ",
          c.LlamaFfnHidden(), "; choose tp dividing it or set --ffn_hidden"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckExpertParallel(const ModelConfig& c,
                                   int64_t ep) const override {
    if (ep >= 1 && c.experts % ep == 0) return absl::OkStatus();
    return Bad(absl::StrCat("--ep=", ep, " does not divide --experts=",
                            c.experts, "; choose ep dividing the experts"));
  }

  absl::Status CheckDevice(const ModelConfig& c,
                           DeviceType device) const override {
    if (device != DeviceType::kCUDA || c.experts <= kMaxCudaRouterExperts) {
      return absl::OkStatus();
    }
    return Bad(absl::StrCat("--experts=", c.experts,
                            ": the CUDA router takes at most ",
                            kMaxCudaRouterExperts,
                            " experts a layer; use fewer experts or "
                            "--device=cpu"));
  }

  std::string TiedEmbedding(const ModelConfig& c) const override {
    return c.tie_embeddings ? kLlamaEmbedding : "";
  }

  void DeclareParameters(const ModelConfig& config, const ChunkPlan& plan,
                         TpPlace tp, uint64_t seed, Device device, DType dtype,
                         ParameterSet& params) const override {
    DeclareMoeParameters(config, plan, tp, seed, device, dtype, params);
  }

  BlockParts NewBlockParts(const ModelConfig& c, int64_t layer, TpPlace tp,
                           const ParameterSet& params) const override {
    TRELLIS_CHECK(CheckTensorParallel(c, tp.size).ok());
    BlockParts parts = llama::LlamaBlockParts(c, layer, tp, params);
    if (!IsMoeLayer(c, layer)) {
      parts.mlp = llama::LlamaDenseMlp(c.LlamaFfnHidden() / tp.size, layer,
                                       "mlp.", params);
      return parts;
    }
    // The experts this rank holds: a run of E / ep of them
    // (DeclareMoeParameters), which tells its place in the ep group.
    std::vector<Parameter*> gate_up, down;
    int64_t first = -1;
    for (int64_t e = 0; e < c.experts; ++e) {
      const std::string prefix = LlamaLayerName(layer, ExpertPrefix(e).c_str());
      if (params.Find(prefix + "down_proj.weight") == nullptr) continue;
      if (first < 0) first = e;
      gate_up.push_back(&params.Get(prefix + "gate_up_proj.weight"));
      down.push_back(&params.Get(prefix + "down_proj.weight"));
    }
    const auto local = static_cast<int64_t>(down.size());
    TRELLIS_CHECK(local > 0 && c.experts % local == 0 && first % local == 0)
        << "layer " << layer << " holds " << local << " experts from " << first;
    SharedExpert shared;
    if (c.moe_shared_ffn_hidden > 0) {
      const std::string prefix = LlamaLayerName(layer, kSharedExpertPrefix);
      shared = {&params.Get(prefix + "gate_up_proj.weight"),
                &params.Get(prefix + "down_proj.weight")};
    }
    const MoeMlpSpec spec{
        .experts = c.experts,
        .ep = c.experts / local,
        .ep_rank = first / local,
        .width = MoeFfnHidden(c) / tp.size,
        .shared_width = c.moe_shared_ffn_hidden / tp.size,
        .router = {.top_k = c.experts_per_token,
                   .score = c.moe_sigmoid ? RouterScore::kSigmoid
                                          : RouterScore::kSoftmax,
                   .normalize = c.moe_norm_topk},
        .aux_loss_coeff = c.moe_aux_loss_coeff,
        .z_loss_coeff = c.moe_z_loss_coeff,
        .router_input_grad = tp.rank == 0};
    parts.mlp = NewMoeMlp(spec, params.Get(RouterName(layer)),
                          std::move(gate_up), std::move(down), shared);
    return parts;
  }

  ChunkEnds Ends(const ModelConfig& c, const ChunkPlan& plan,
                 const ParameterSet& params) const override {
    return llama::LlamaEnds(c, plan, params);
  }

  std::vector<HfTensorMapping> HfTensors(
      const ModelConfig& config) const override {
    return MoeHfTensors(config);
  }

  int64_t LayerClass(const ModelConfig& c, int64_t layer) const override {
    return IsMoeLayer(c, layer) ? 1 : 0;
  }

  int64_t ActiveParameters(const ModelConfig& c) const override {
    // The experts a token is not routed to: (E - k) of each MoE layer's E.
    const int64_t expert = 3 * c.d_model * MoeFfnHidden(c);
    return c.NumParameters() -
           MoeLayers(c) * (c.experts - c.experts_per_token) * expert;
  }
};

}  // namespace

const ModelFamily& Family() {
  static const Moe family;
  return family;
}

}  // namespace moe
}  // namespace trellis
