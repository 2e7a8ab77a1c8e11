#include "tools/convert/moe_tensors.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "framework/status.h"
#include "framework/text_file.h"
#include "tools/convert/hf_config_keys.h"
#include "tools/convert/llama_tensors.h"
#include "transformer/model_family.h"
#include "transformer/moe/moe_family.h"
#include "transformer/moe/moe_parameters.h"

namespace trellis {
namespace {

using json = nlohmann::json;
using hf_config::Get;
using hf_config::Refuse;

absl::StatusOr<int64_t> PositiveInt(const json& j, const std::string& path,
                                    const char* key) {
  const json v = Get(j, key, nullptr);
  if (v.is_null()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", key,
                     " is missing; a MixtralForCausalLM config.json has it"));
  }
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return Refuse(path, key, v, "is not a positive integer");
  }
  return v.get<int64_t>();
}

// What trellis's mixture does not compute.
absl::Status CheckMixtralSemantics(const json& j, const std::string& path,
                                   const ModelConfig& c) {
  const json window = Get(j, "sliding_window", nullptr);
  if (!window.is_null() &&
      (!window.is_number_integer() || window.get<int64_t>() < c.seq_len)) {
    return Refuse(path, "sliding_window", window,
                  absl::StrCat("is not supported; trellis attends to the "
                               "whole context (null, or at least "
                               "max_position_embeddings ",
                               c.seq_len, ")"));
  }
  const json jitter = Get(j, "router_jitter_noise", 0.0);
  if (!jitter.is_number() || jitter.get<double>() != 0.0) {
    return Refuse(path, "router_jitter_noise", jitter,
                  "is not supported; trellis's router adds no noise (0)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ReadHfMixtralConfig(const std::string& path) {
  // Llama's keys, checks and defaults first.
  TRELLIS_ASSIGN_OR_RETURN(ModelConfig c, ReadHfLlamaConfig(path));
  TRELLIS_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  const json j = json::parse(text, nullptr, false);
  c.family = moe::kKind;
  TRELLIS_ASSIGN_OR_RETURN(c.experts,
                           PositiveInt(j, path, "num_local_experts"));
  TRELLIS_ASSIGN_OR_RETURN(c.experts_per_token,
                           PositiveInt(j, path, "num_experts_per_tok"));
  c.moe_ffn_hidden = c.ffn_hidden;
  c.moe_first_dense = 0;
  c.moe_layer_freq = 1;
  c.moe_sigmoid = false;
  c.moe_norm_topk = true;
  const json logits = Get(j, "output_router_logits", false);
  const json coef = Get(j, "router_aux_loss_coef", 0.0);
  if (!logits.is_boolean()) {
    return Refuse(path, "output_router_logits", logits, "is not true or false");
  }
  if (!coef.is_number() || coef.get<double>() < 0) {
    return Refuse(path, "router_aux_loss_coef", coef,
                  "is not a number of at least 0");
  }
  c.moe_aux_loss_coeff = logits.get<bool>() ? coef.get<double>() : 0.0;
  TRELLIS_RETURN_IF_ERROR(CheckMixtralSemantics(j, path, c));
  const absl::Status valid = c.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", valid.message()));
  }
  return c;
}

absl::Status CheckMixtralShape(const ModelConfig& c) {
  auto refuse = [](const std::string& option) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--to=hf writes a mixture of experts as MixtralForCausalLM, which "
        "routes every layer by a softmax over its experts and renormalizes "
        "the top k; this model has ",
        option, ", which Mixtral cannot express"));
  };
  if (c.moe_first_dense != 0) {
    return refuse(absl::StrCat("--moe_first_dense=", c.moe_first_dense));
  }
  if (c.moe_layer_freq != 1) {
    return refuse(absl::StrCat("--moe_layer_freq=", c.moe_layer_freq));
  }
  if (c.moe_shared_ffn_hidden != 0) {
    return refuse(
        absl::StrCat("--moe_shared_ffn_hidden=", c.moe_shared_ffn_hidden));
  }
  if (c.moe_sigmoid) return refuse("--moe_sigmoid=true");
  if (!c.moe_norm_topk) return refuse("--moe_norm_topk=false");
  return absl::OkStatus();
}

std::string HfMixtralConfigJson(const ModelConfig& c, DType dtype,
                                const std::string& tokenizer,
                                const HfSpecialTokens& special) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(
      HfLlamaConfigJson(c, dtype, tokenizer, special));
  j["architectures"] = {"MixtralForCausalLM"};
  j["model_type"] = "mixtral";
  j["intermediate_size"] = MoeFfnHidden(c);
  j.erase("mlp_bias");
  j.erase("pretraining_tp");
  j["num_local_experts"] = c.experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["output_router_logits"] = c.moe_aux_loss_coeff > 0;
  j["router_aux_loss_coef"] = c.moe_aux_loss_coeff;
  j["router_jitter_noise"] = 0.0;
  j["sliding_window"] = nullptr;
  return j.dump(2) + "\n";
}

std::vector<HfTensorMapping> MixtralHfTensors(const ModelConfig& config) {
  std::vector<HfTensorMapping> rows = FamilyOf(config).HfTensors(config);
  for (HfTensorMapping& row : rows) {
    for (HfPart& part : row.parts) {
      part.name = absl::StrReplaceAll(
          part.name, {{".mlp.gate.weight", ".block_sparse_moe.gate.weight"},
                      {".mlp.experts.", ".block_sparse_moe.experts."},
                      {".gate_proj.", ".w1."},
                      {".up_proj.", ".w3."},
                      {".down_proj.", ".w2."}});
    }
  }
  return rows;
}

}  // namespace trellis
