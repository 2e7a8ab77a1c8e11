#include "tools/convert/llama_tensors.h"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "framework/float16.h"
#include "framework/status.h"
#include "framework/text_file.h"
#include "tools/convert/hf_config_keys.h"
#include "tools/convert/hf_tensors.h"
#include "transformer/llama/llama_parameters.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

using json = nlohmann::json;
using hf_config::Get;
using hf_config::Refuse;

absl::StatusOr<int64_t> Int(const json& j, const std::string& path,
                            const char* key, json fallback = nullptr) {
  const json v = Get(j, key, fallback);
  if (v.is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", key, " is missing; a LlamaForCausalLM config.json has it"));
  }
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return Refuse(path, key, v, "is not a positive integer");
  }
  return v.get<int64_t>();
}

absl::StatusOr<double> Number(const json& j, const std::string& path,
                              const char* key, json fallback = nullptr) {
  const json v = Get(j, key, fallback);
  if (v.is_null()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", key, " is missing"));
  }
  if (!v.is_number() || !(v.get<double>() > 0)) {
    return Refuse(path, key, v, "is not a positive number");
  }
  return v.get<double>();
}

absl::Status ReadRopeScaling(const json& j, const std::string& path,
                             ModelConfig& c) {
  const json s = Get(j, "rope_scaling", nullptr);
  if (s.is_null()) return absl::OkStatus();
  if (!s.is_object()) {
    return Refuse(path, "rope_scaling", s, "is neither null nor an object");
  }
  const json type = Get(s, "rope_type", Get(s, "type", "default"));
  if (type == "default") return absl::OkStatus();
  if (type != "llama3") {
    return Refuse(path, "rope_scaling.rope_type", type,
                  "is not implemented; trellis implements llama3 (or no "
                  "scaling)");
  }
  const std::string p = path + ": rope_scaling";
  c.rope_scaling = RopeScalingType::kLlama3;
  TRELLIS_ASSIGN_OR_RETURN(c.rope_factor, Number(s, p, "factor"));
  TRELLIS_ASSIGN_OR_RETURN(c.rope_low_freq_factor,
                           Number(s, p, "low_freq_factor"));
  TRELLIS_ASSIGN_OR_RETURN(c.rope_high_freq_factor,
                           Number(s, p, "high_freq_factor"));
  TRELLIS_ASSIGN_OR_RETURN(c.rope_original_max_positions,
                           Int(s, p, "original_max_position_embeddings"));
  return absl::OkStatus();
}

// What trellis's Llama does not compute.
absl::Status CheckSemantics(const json& j, const std::string& path,
                            const ModelConfig& c) {
  const json act = Get(j, "hidden_act", "silu");
  if (act != "silu") {
    return Refuse(path, "hidden_act", act, "is not supported; trellis: silu");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    const json b = Get(j, key, false);
    if (b != false) {
      return Refuse(path, key, b, "is not supported; trellis has no biases");
    }
  }
  if (c.n_head % c.kv_heads() != 0) {
    return Refuse(
        path, "num_key_value_heads", c.kv_heads(),
        absl::StrCat("does not divide num_attention_heads ", c.n_head));
  }
  return absl::OkStatus();
}

// A tensor the model does not use: inv_freq buffers pass, a tied lm_head
// must equal the embedding, anything else is an error.
absl::Status CheckExtra(const HfSafetensors& files, const std::string& name,
                        const std::string& architecture, WholeModel& model,
                        int64_t* buffers) {
  if (absl::EndsWith(name, ".rotary_emb.inv_freq")) {
    ++*buffers;
    return absl::OkStatus();
  }
  const Tensor& embedding = *model.Find(kLlamaEmbedding);
  if (name == kLlamaHead) {
    TRELLIS_ASSIGN_OR_RETURN(Tensor head, files.Read(name, embedding.shape()));
    head = ConvertTo(head, DType::kF32);
    if (std::memcmp(head.raw(), embedding.raw(), embedding.nbytes()) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          files.path(), ": tensor ", name, " differs from ", kLlamaEmbedding,
          " while config.json has tie_word_embeddings true; set it false"));
    }
    model.source.insert_or_assign("lm_head", std::string(1, '1'));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(files.path(), ": tensor ", name, " is not part of a ",
                   architecture, " of the shape config.json gives"));
}

// The layer of "model.layers.<i>...." names, -1 for the others.
int64_t LayerOf(const std::string& name) {
  constexpr absl::string_view kPrefix = "model.layers.";
  if (!absl::StartsWith(name, kPrefix)) return -1;
  int64_t layer = 0;
  for (size_t i = kPrefix.size(); i < name.size() && name[i] != '.'; ++i) {
    layer = 10 * layer + (name[i] - '0');
  }
  return layer;
}

}  // namespace

absl::StatusOr<ModelConfig> ReadHfLlamaConfig(const std::string& path) {
  TRELLIS_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a JSON object"));
  }
  ModelConfig c;
  c.family = ModelFamilyKind::kLlama;
  TRELLIS_ASSIGN_OR_RETURN(c.n_layer, Int(j, path, "num_hidden_layers"));
  TRELLIS_ASSIGN_OR_RETURN(c.n_head, Int(j, path, "num_attention_heads"));
  TRELLIS_ASSIGN_OR_RETURN(c.d_model, Int(j, path, "hidden_size"));
  TRELLIS_ASSIGN_OR_RETURN(c.n_kv_heads,
                           Int(j, path, "num_key_value_heads", c.n_head));
  // A head width of its own (Qwen3's 128 at any width), else 0: d_model /
  // n_head.
  if (!Get(j, "head_dim", nullptr).is_null()) {
    TRELLIS_ASSIGN_OR_RETURN(const int64_t width, Int(j, path, "head_dim"));
    if (c.d_model % c.n_head != 0 || width != c.d_model / c.n_head) {
      c.head_dim = width;
    }
  }
  TRELLIS_ASSIGN_OR_RETURN(c.ffn_hidden, Int(j, path, "intermediate_size"));
  TRELLIS_ASSIGN_OR_RETURN(c.seq_len,
                           Int(j, path, "max_position_embeddings", 2048));
  TRELLIS_ASSIGN_OR_RETURN(c.vocab_size, Int(j, path, "vocab_size"));
  TRELLIS_ASSIGN_OR_RETURN(c.norm_eps, Number(j, path, "rms_norm_eps", 1e-6));
  TRELLIS_ASSIGN_OR_RETURN(c.rope_theta, Number(j, path, "rope_theta", 1e4));
  const json tie = Get(j, "tie_word_embeddings", false);
  if (!tie.is_boolean()) {
    return Refuse(path, "tie_word_embeddings", tie, "is not true or false");
  }
  c.tie_embeddings = tie.get<bool>();
  TRELLIS_RETURN_IF_ERROR(ReadRopeScaling(j, path, c));
  TRELLIS_RETURN_IF_ERROR(CheckSemantics(j, path, c));
  const absl::Status valid = c.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", valid.message()));
  }
  return c;
}

std::string HfLlamaConfigJson(const ModelConfig& c, DType dtype,
                              const std::string& tokenizer,
                              const HfSpecialTokens& special) {
  const char* torch_dtype = dtype == DType::kBF16  ? "bfloat16"
                            : dtype == DType::kF16 ? "float16"
                                                   : "float32";
  nlohmann::ordered_json scaling = nullptr;
  if (c.rope_scaling == RopeScalingType::kLlama3) {
    scaling = {
        {"rope_type", "llama3"},
        {"factor", c.rope_factor},
        {"low_freq_factor", c.rope_low_freq_factor},
        {"high_freq_factor", c.rope_high_freq_factor},
        {"original_max_position_embeddings", c.rope_original_max_positions}};
  }
  nlohmann::ordered_json j = {{"architectures", {"LlamaForCausalLM"}},
                              {"model_type", "llama"},
                              {"attention_bias", false},
                              {"attention_dropout", 0.0},
                              {"head_dim", c.HeadDim()},
                              {"hidden_act", "silu"},
                              {"hidden_size", c.d_model},
                              {"initializer_range", 0.02},
                              {"intermediate_size", c.LlamaFfnHidden()},
                              {"max_position_embeddings", c.seq_len},
                              {"mlp_bias", false},
                              {"num_attention_heads", c.n_head},
                              {"num_hidden_layers", c.n_layer},
                              {"num_key_value_heads", c.kv_heads()},
                              {"pretraining_tp", 1},
                              {"rms_norm_eps", c.norm_eps},
                              {"rope_scaling", scaling},
                              {"rope_theta", c.rope_theta},
                              {"tie_word_embeddings", c.tie_embeddings},
                              {"torch_dtype", torch_dtype},
                              {"use_cache", true},
                              {"vocab_size", c.vocab_size},
                              {"trellis_tokenizer", tokenizer}};
  if (special.bos) j["bos_token_id"] = *special.bos;
  if (special.eos) j["eos_token_id"] = *special.eos;
  return j.dump(2) + "\n";
}

absl::StatusOr<WholeModel> ReadHfLlamaModel(const HfSafetensors& files,
                                            const ModelConfig& config,
                                            const ProgressFn& progress) {
  return ReadHfLlamaBlocksModel(files, config,
                                FamilyOf(config).HfTensors(config),
                                "LlamaForCausalLM", progress);
}

absl::StatusOr<WholeModel> ReadHfLlamaBlocksModel(
    const HfSafetensors& files, const ModelConfig& config,
    const std::vector<HfTensorMapping>& mappings,
    const std::string& architecture, const ProgressFn& progress) {
  WholeModel model;
  model.config = config;
  std::set<std::string> used;
  int64_t bytes = 0;
  for (const HfTensorMapping& m : mappings) {
    DType stored = DType::kF32;
    TRELLIS_ASSIGN_OR_RETURN(Tensor t,
                             ReadHfMapped(files, m, "", &stored, &bytes));
    if (m.logical == kLlamaEmbedding) model.source_dtype = stored;
    model.tensors.emplace_back(m.logical, std::move(t));
    for (const HfPart& p : m.parts) used.insert(p.name);
    if (progress) progress(model.tensors.size(), mappings.size(), bytes);
  }
  int64_t buffers = 0;
  for (const std::string& name : files.names()) {
    if (used.count(name) == 0) {
      TRELLIS_RETURN_IF_ERROR(
          CheckExtra(files, name, architecture, model, &buffers));
    }
  }
  if (buffers > 0) {
    model.notes.push_back(absl::StrCat(
        "skipped ", buffers,
        " rotary_emb.inv_freq buffers: they are not weights (trellis "
        "computes them from rope_theta and rope_scaling)"));
  }
  // The shapes are the family's parameters, in its order.
  const auto shapes = ModelTensorShapes(config);
  TRELLIS_CHECK(shapes.size() == model.tensors.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    TRELLIS_CHECK(shapes[i].first == model.tensors[i].first &&
                  shapes[i].second == model.tensors[i].second.shape())
        << shapes[i].first;
  }
  model.source["format"] = "hf";
  model.source["dtype"] = DTypeName(model.source_dtype);
  return model;
}

absl::StatusOr<std::vector<HfOutputTensor>> HfLlamaTensors(
    const WholeModel& model, DType dtype, bool lm_head) {
  return HfLlamaBlocksTensors(
      model, FamilyOf(model.config).HfTensors(model.config), dtype, lm_head);
}

absl::StatusOr<std::vector<HfOutputTensor>> HfLlamaBlocksTensors(
    const WholeModel& model, const std::vector<HfTensorMapping>& mappings,
    DType dtype, bool lm_head) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Hugging Face weights are float32, float16 or bfloat16, not ",
        DTypeName(dtype)));
  }
  std::vector<HfOutputTensor> out;
  auto add = [&](const HfTensorMapping& m, size_t k, const std::string& name) {
    const Tensor* t = model.Find(m.logical);
    TRELLIS_CHECK(t != nullptr) << m.logical;
    out.push_back(HfOutputPart(m, k, t, name, dtype));
  };
  // State-dict order: each layer's attention and MLP, then its norms.
  std::vector<const HfTensorMapping*> norms;
  auto flush = [&] {
    for (const HfTensorMapping* n : norms) add(*n, 0, n->logical);
    norms.clear();
  };
  for (const HfTensorMapping& m : mappings) {
    if (!norms.empty() && LayerOf(m.logical) != LayerOf(norms[0]->logical)) {
      flush();
    }
    if (absl::EndsWith(m.logical, "layernorm.weight")) {
      norms.push_back(&m);
      continue;
    }
    for (size_t k = 0; k < m.parts.size(); ++k) add(m, k, m.parts[k].name);
  }
  flush();
  if (model.config.tie_embeddings && lm_head) {
    add(mappings.front(), 0, kLlamaHead);
  }
  return out;
}

}  // namespace trellis
