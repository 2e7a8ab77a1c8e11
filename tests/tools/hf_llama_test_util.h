// A tiny Hugging Face LlamaForCausalLM written byte by byte by the tests,
// independently of trellis's safetensors writer and of the converter:
// config.json, and model.safetensors or shards with
// model.safetensors.index.json.
//
// The model: 2 layers, hidden 32, 4 heads of 8 (GQA: 2 key/value heads
// unless told), MLP 64, max_position_embeddings 16, vocabulary 257 (the
// byte tokenizer's); or, with `experts`, a MixtralForCausalLM of that
// shape whose every MLP is a mixture of experts 64 wide; or, with `qwen3`,
// a Qwen3ForCausalLM (heads 12 wide, q/k norms), a Qwen3MoeForCausalLM
// with experts too. Weights are a fixed
// pseudo-random sequence, large enough that attention is peaked and the loss
// depends on every detail of the forward pass (RoPE pairing included), rounded
// to the stored dtype.
//
// Thread safety: none needed; each test calls these from its own thread.
#ifndef TRELLIS_TESTS_TOOLS_HF_LLAMA_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_HF_LLAMA_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "framework/float16.h"
#include "framework/tensor.h"
#include "tests/tools/convert_test_util.h"

namespace trellis::test {

inline constexpr int64_t kLlamaLayers = 2, kLlamaHidden = 32, kLlamaHeads = 4,
                         kLlamaFfn = 64, kLlamaSeq = 16, kLlamaVocab = 257,
                         kQwenHeadDim = 12;

struct TinyLlama {
  DType dtype = DType::kF32;
  int64_t kv_heads = 2;
  bool tied = false;
  bool lm_head_in_file = false;  // Tied models: write lm_head.weight too.
  bool llama3 = false;           // rope_scaling llama3, rope_theta 500.
  int shards = 1;                // > 1: that many files and the index.
  // > 0: a MixtralForCausalLM with that many experts of width kLlamaFfn
  // in every layer, `experts_per_token` per token.
  int64_t experts = 0;
  int64_t experts_per_token = 2;
  // A Qwen3ForCausalLM (Qwen3MoeForCausalLM with `experts`, each
  // kLlamaFfn / 2 wide, but in `dense_layers`): q/k norms and heads
  // kQwenHeadDim wide.
  bool qwen3 = false;
  std::vector<int64_t> dense_layers = {};
  // For the error cases: tensors left out or given another shape, and
  // config.json keys overridden (a null value removes the key).
  std::vector<std::string> drop = {};
  std::map<std::string, Shape> reshape = {};
  nlohmann::json config_patch = nlohmann::json::object();
};

// The HF tensors, in state-dict order, with the scale of their values.
inline std::vector<std::pair<std::pair<std::string, Shape>, float>>
TinyLlamaTensors(const TinyLlama& m) {
  const int64_t c = kLlamaHidden;
  const int64_t d = m.qwen3 ? kQwenHeadDim : kLlamaHidden / kLlamaHeads;
  const int64_t q = kLlamaHeads * d, kv = m.kv_heads * d, f = kLlamaFfn;
  const int64_t v = kLlamaVocab;
  std::vector<std::pair<std::pair<std::string, Shape>, float>> t = {
      {{"model.embed_tokens.weight", {v, c}}, 1.0f}};
  auto swiglu = [&](const std::string& p, const char* gate, const char* up,
                    const char* down, int64_t width) {
    t.push_back({{p + gate, {width, c}}, 0.3f});
    if (gate[1] == '1') {  // Mixtral's order: w1, w2, w3
      t.push_back({{p + down, {c, width}}, 0.2f});
      t.push_back({{p + up, {width, c}}, 0.3f});
      return;
    }
    t.push_back({{p + up, {width, c}}, 0.3f});
    t.push_back({{p + down, {c, width}}, 0.2f});
  };
  for (int64_t l = 0; l < kLlamaLayers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t.push_back({{p + "self_attn.q_proj.weight", {q, c}}, 0.35f});
    t.push_back({{p + "self_attn.k_proj.weight", {kv, c}}, 0.35f});
    t.push_back({{p + "self_attn.v_proj.weight", {kv, c}}, 0.3f});
    t.push_back({{p + "self_attn.o_proj.weight", {c, q}}, 0.2f});
    if (m.qwen3) {
      t.push_back({{p + "self_attn.q_norm.weight", {d}}, -0.3f});
      t.push_back({{p + "self_attn.k_norm.weight", {d}}, -0.3f});
    }
    const bool dense = m.experts == 0 || std::count(m.dense_layers.begin(),
                                                    m.dense_layers.end(), l);
    if (dense) {
      swiglu(p + "mlp.", "gate_proj.weight", "up_proj.weight",
             "down_proj.weight", f);
    } else if (m.qwen3) {
      t.push_back({{p + "mlp.gate.weight", {m.experts, c}}, 0.6f});
      for (int64_t e = 0; e < m.experts; ++e) {
        swiglu(absl::StrCat(p, "mlp.experts.", e, "."), "gate_proj.weight",
               "up_proj.weight", "down_proj.weight", f / 2);
      }
    } else {
      // Router logits of a few units: every expert is chosen somewhere.
      const std::string moe = p + "block_sparse_moe.";
      t.push_back({{moe + "gate.weight", {m.experts, c}}, 0.6f});
      for (int64_t e = 0; e < m.experts; ++e) {
        swiglu(absl::StrCat(moe, "experts.", e, "."), "w1.weight", "w3.weight",
               "w2.weight", f);
      }
    }
    t.push_back({{p + "input_layernorm.weight", {c}}, -0.2f});
    t.push_back({{p + "post_attention_layernorm.weight", {c}}, -0.2f});
  }
  t.push_back({{"model.norm.weight", {c}}, -0.2f});
  if (!m.tied || m.lm_head_in_file) {
    t.push_back({{"lm_head.weight", {v, c}}, m.tied ? 1.0f : 0.3f});
  }
  return t;
}

// Element i of tensor k: uniform in [-scale, scale), or 1 ± |scale| for a
// negative scale (norm weights); a tied lm_head repeats the embedding.
inline float TinyLlamaValue(int64_t k, int64_t i, float scale, DType dtype) {
  uint64_t s = static_cast<uint64_t>(k) * 0x9E3779B97F4A7C15ULL +
               static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ULL + 1;
  s ^= s >> 31;
  s *= 0x94D049BB133111EBULL;
  s ^= s >> 29;
  const float u = static_cast<float>(s >> 40) / static_cast<float>(1 << 24);
  float v = scale < 0 ? 1.0f + -scale * (2 * u - 1) : scale * (2 * u - 1);
  if (dtype == DType::kBF16) v = Bf16ToFloat(FloatToBf16(v));
  if (dtype == DType::kF16) v = HalfToFloat(FloatToHalf(v));
  return v;
}

inline nlohmann::json TinyLlamaConfig(const TinyLlama& m) {
  nlohmann::json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", kLlamaHidden},
      {"intermediate_size", kLlamaFfn},
      {"num_attention_heads", kLlamaHeads},
      {"num_hidden_layers", kLlamaLayers},
      {"num_key_value_heads", m.kv_heads},
      {"max_position_embeddings", kLlamaSeq},
      {"vocab_size", kLlamaVocab},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", m.llama3 ? 500.0 : 10000.0},
      {"rope_scaling", nullptr},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", m.tied},
      {"torch_dtype", m.dtype == DType::kBF16 ? "bfloat16" : "float32"}};
  if (m.qwen3) {
    j["architectures"] = {m.experts > 0 ? "Qwen3MoeForCausalLM"
                                        : "Qwen3ForCausalLM"};
    j["model_type"] = m.experts > 0 ? "qwen3_moe" : "qwen3";
    j["head_dim"] = kQwenHeadDim;
    j["use_sliding_window"] = false;
  }
  if (m.qwen3 && m.experts > 0) {
    j["num_experts"] = m.experts;
    j["num_experts_per_tok"] = m.experts_per_token;
    j["moe_intermediate_size"] = kLlamaFfn / 2;
    j["norm_topk_prob"] = true;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = m.dense_layers;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.001;
  } else if (m.experts > 0) {
    j["architectures"] = {"MixtralForCausalLM"};
    j["model_type"] = "mixtral";
    j["num_local_experts"] = m.experts;
    j["num_experts_per_tok"] = m.experts_per_token;
    j["router_aux_loss_coef"] = 0.02;
    j["output_router_logits"] = false;
    j["sliding_window"] = nullptr;
  }
  if (m.llama3) {
    // Wavelengths 6.3, 30, 140, 660 against 32/4 and 32/1: every branch.
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 32}};
  }
  for (const auto& [key, value] : m.config_patch.items()) {
    if (value.is_null()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
  }
  return j;
}

// Writes the model into `dir` (which exists).
inline void WriteTinyLlama(const std::string& dir, const TinyLlama& m) {
  const auto tensors = TinyLlamaTensors(m);
  const char* dtype = m.dtype == DType::kBF16  ? "BF16"
                      : m.dtype == DType::kF16 ? "F16"
                                               : "F32";
  const size_t per_file = (tensors.size() + m.shards - 1) / m.shards;
  nlohmann::json weight_map = nlohmann::json::object();
  int64_t total = 0;
  for (int s = 0; s < m.shards; ++s) {
    const std::string file =
        m.shards == 1 ? "model.safetensors"
                      : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1,
                                        m.shards);
    std::vector<std::string> entries = {R"("__metadata__":{"format":"pt"})"};
    std::string data;
    const size_t end = std::min(tensors.size(), (s + 1) * per_file);
    for (size_t k = s * per_file; k < end; ++k) {
      const auto& [named, scale] = tensors[k];
      const std::string& name = named.first;
      if (std::count(m.drop.begin(), m.drop.end(), name)) continue;
      const Shape shape =
          m.reshape.count(name) ? m.reshape.at(name) : named.second;
      // A tied lm_head in the file holds the embedding's values.
      const int64_t key = name == "lm_head.weight" && m.tied ? 0 : k;
      const size_t begin = data.size();
      for (int64_t i = 0; i < NumElements(shape); ++i) {
        const float v = TinyLlamaValue(key, i, scale, m.dtype);
        if (m.dtype == DType::kBF16) {
          Append(data, FloatToBf16(v));
        } else if (m.dtype == DType::kF16) {
          Append(data, FloatToHalf(v));
        } else {
          Append(data, v);
        }
      }
      entries.push_back(
          absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":[",
                       absl::StrJoin(shape, ","), "],\"data_offsets\":[", begin,
                       ",", data.size(), "]}"));
      weight_map[name] = file;
    }
    total += static_cast<int64_t>(data.size());
    WriteBytes(
        dir + "/" + file,
        Safetensors(absl::StrCat("{", absl::StrJoin(entries, ","), "}"), data));
  }
  if (m.shards > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
    WriteBytes(dir + "/model.safetensors.index.json", index.dump(2));
  }
  WriteBytes(dir + "/config.json", TinyLlamaConfig(m).dump(2));
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_HF_LLAMA_TEST_UTIL_H_
