#include "tools/convert/qwen3_tensors.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
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
                     " is missing; a Qwen3MoeForCausalLM config.json has it"));
  }
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return Refuse(path, key, v, "is not a positive integer");
  }
  return v.get<int64_t>();
}

absl::StatusOr<bool> Bool(const json& j, const std::string& path,
                          const char* key, bool fallback) {
  const json v = Get(j, key, fallback);
  if (!v.is_boolean()) return Refuse(path, key, v, "is not true or false");
  return v.get<bool>();
}

absl::StatusOr<json> ParseObject(const std::string& path) {
  TRELLIS_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a JSON object"));
  }
  return j;
}

absl::Status Validated(const std::string& path, const ModelConfig& c) {
  const absl::Status valid = c.Validate();
  if (valid.ok()) return valid;
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", valid.message()));
}

// Qwen3-MoE's expert layers as trellis's rule: the first, then a fixed
// step, with the dense ones before.
absl::Status ReadLayerPattern(const json& j, const std::string& path,
                              ModelConfig& c) {
  const json step = Get(j, "decoder_sparse_step", 1);
  if (!step.is_number_integer() || step.get<int64_t>() < 1) {
    return Refuse(path, "decoder_sparse_step", step,
                  "is not a positive integer");
  }
  const json only = Get(j, "mlp_only_layers", json::array());
  std::set<int64_t> dense;
  if (!only.is_array()) {
    return Refuse(path, "mlp_only_layers", only, "is not a list of layers");
  }
  for (const json& l : only) {
    if (!l.is_number_integer()) {
      return Refuse(path, "mlp_only_layers", only, "is not a list of layers");
    }
    dense.insert(l.get<int64_t>());
  }
  std::vector<int64_t> experts;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    if (dense.count(l) == 0 && (l + 1) % step.get<int64_t>() == 0) {
      experts.push_back(l);
    }
  }
  if (experts.empty()) {
    return Refuse(path, "mlp_only_layers", only,
                  "leaves no layer of experts; a model without experts is "
                  "model_type qwen3");
  }
  c.moe_first_dense = experts[0];
  c.moe_layer_freq = experts.size() > 1 ? experts[1] - experts[0] : c.n_layer;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const bool want =
        std::find(experts.begin(), experts.end(), l) != experts.end();
    if (IsMoeLayer(c, l) != want) {
      return Refuse(
          path, "mlp_only_layers", only,
          absl::StrCat("with decoder_sparse_step ", step.dump(),
                       " places experts where trellis cannot (it takes a "
                       "first layer of experts, then every Nth)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ReadHfQwen3Config(const std::string& path) {
  TRELLIS_ASSIGN_OR_RETURN(ModelConfig c, ReadHfLlamaConfig(path));
  TRELLIS_ASSIGN_OR_RETURN(const json j, ParseObject(path));
  TRELLIS_ASSIGN_OR_RETURN(const bool window,
                           Bool(j, path, "use_sliding_window", false));
  if (window) {
    return Refuse(path, "use_sliding_window", true,
                  "is not supported; trellis attends to the whole context");
  }
  c.qk_norm = true;
  TRELLIS_RETURN_IF_ERROR(Validated(path, c));
  return c;
}

absl::StatusOr<ModelConfig> ReadHfQwen3MoeConfig(const std::string& path) {
  TRELLIS_ASSIGN_OR_RETURN(ModelConfig c, ReadHfQwen3Config(path));
  TRELLIS_ASSIGN_OR_RETURN(const json j, ParseObject(path));
  c.family = moe::kKind;
  TRELLIS_ASSIGN_OR_RETURN(c.experts, PositiveInt(j, path, "num_experts"));
  TRELLIS_ASSIGN_OR_RETURN(c.experts_per_token,
                           PositiveInt(j, path, "num_experts_per_tok"));
  TRELLIS_ASSIGN_OR_RETURN(c.moe_ffn_hidden,
                           PositiveInt(j, path, "moe_intermediate_size"));
  TRELLIS_ASSIGN_OR_RETURN(c.moe_norm_topk,
                           Bool(j, path, "norm_topk_prob", false));
  TRELLIS_ASSIGN_OR_RETURN(const bool logits,
                           Bool(j, path, "output_router_logits", false));
  const json coef = Get(j, "router_aux_loss_coef", 0.0);
  if (!coef.is_number() || coef.get<double>() < 0) {
    return Refuse(path, "router_aux_loss_coef", coef,
                  "is not a number of at least 0");
  }
  c.moe_aux_loss_coeff = logits ? coef.get<double>() : 0.0;
  c.moe_sigmoid = false;
  TRELLIS_RETURN_IF_ERROR(ReadLayerPattern(j, path, c));
  TRELLIS_RETURN_IF_ERROR(Validated(path, c));
  return c;
}

absl::Status CheckQwen3Shape(const ModelConfig& c) {
  if (c.moe_shared_ffn_hidden != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--to=hf writes a mixture of experts with q/k norms as "
        "Qwen3MoeForCausalLM, which has no shared expert; this model has "
        "--moe_shared_ffn_hidden=",
        c.moe_shared_ffn_hidden, ", which Qwen3-MoE cannot express"));
  }
  if (!c.moe_sigmoid) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "--to=hf writes a mixture of experts with q/k norms as "
      "Qwen3MoeForCausalLM, which routes by a softmax; this model has "
      "--moe_sigmoid=true, which Qwen3-MoE cannot express");
}

std::string HfQwen3ConfigJson(const ModelConfig& c, DType dtype,
                              const std::string& tokenizer,
                              const HfSpecialTokens& special) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(
      HfLlamaConfigJson(c, dtype, tokenizer, special));
  const bool experts = c.family == moe::kKind;
  j["architectures"] = {experts ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"};
  j["model_type"] = experts ? "qwen3_moe" : "qwen3";
  j.erase("mlp_bias");
  j.erase("pretraining_tp");
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = c.n_layer;
  if (!experts) return j.dump(2) + "\n";
  j["num_experts"] = c.experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["moe_intermediate_size"] = MoeFfnHidden(c);
  j["norm_topk_prob"] = c.moe_norm_topk;
  j["decoder_sparse_step"] = 1;
  nlohmann::ordered_json dense = nlohmann::ordered_json::array();
  for (int64_t l = 0; l < c.n_layer; ++l) {
    if (!IsMoeLayer(c, l)) dense.push_back(l);
  }
  j["mlp_only_layers"] = dense;
  j["output_router_logits"] = c.moe_aux_loss_coeff > 0;
  j["router_aux_loss_coef"] = c.moe_aux_loss_coeff;
  return j.dump(2) + "\n";
}

}  // namespace trellis
