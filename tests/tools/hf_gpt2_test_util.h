// A tiny Hugging Face GPT2LMHeadModel written byte by byte by the tests,
// independently of trellis's safetensors writer and of the converter:
// config.json and model.safetensors, with transformers' names
// ("transformer.h.0.attn.c_attn.weight", Conv1D weights stored (in, out))
// and the attention mask buffers a saved GPT2LMHeadModel may carry.
//
// The model: 2 layers, n_embd 32, 4 heads, n_positions 48, vocabulary 257
// (the byte tokenizer's), head tied to wte. Weights are a fixed
// pseudo-random sequence (TinyLlamaValue's) at scales where the blocks'
// outputs outweigh the token embedding (the tied head would otherwise
// repeat the last token) and the logits' top two stay apart, so greedy
// decoding varies and has no near-ties.
//
// Thread safety: none needed; each test calls these from its own thread.
#ifndef TRELLIS_TESTS_TOOLS_HF_GPT2_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_HF_GPT2_TEST_UTIL_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "framework/tensor.h"
#include "tests/tools/convert_test_util.h"
#include "tests/tools/hf_llama_test_util.h"

namespace trellis::test {

inline constexpr int64_t kTinyGpt2Layers = 2, kTinyGpt2Embd = 32,
                         kTinyGpt2Heads = 4, kTinyGpt2Positions = 48,
                         kTinyGpt2Vocab = 257;

// The HF tensors, in state-dict order, with the scale of their values
// (negative: 1 ± |scale|, for LayerNorm weights).
inline std::vector<std::pair<std::pair<std::string, Shape>, float>>
TinyGpt2Tensors() {
  const int64_t c = kTinyGpt2Embd;
  std::vector<std::pair<std::pair<std::string, Shape>, float>> t = {
      {{"transformer.wte.weight", {kTinyGpt2Vocab, c}}, 0.5f},
      {{"transformer.wpe.weight", {kTinyGpt2Positions, c}}, 0.25f}};
  for (int64_t l = 0; l < kTinyGpt2Layers; ++l) {
    const std::string p = absl::StrCat("transformer.h.", l, ".");
    t.push_back({{p + "ln_1.weight", {c}}, -0.2f});
    t.push_back({{p + "ln_1.bias", {c}}, 0.1f});
    t.push_back({{p + "attn.c_attn.weight", {c, 3 * c}}, 0.7f});
    t.push_back({{p + "attn.c_attn.bias", {3 * c}}, 0.1f});
    t.push_back({{p + "attn.c_proj.weight", {c, c}}, 0.6f});
    t.push_back({{p + "attn.c_proj.bias", {c}}, 0.1f});
    t.push_back({{p + "ln_2.weight", {c}}, -0.2f});
    t.push_back({{p + "ln_2.bias", {c}}, 0.1f});
    t.push_back({{p + "mlp.c_fc.weight", {c, 4 * c}}, 0.6f});
    t.push_back({{p + "mlp.c_fc.bias", {4 * c}}, 0.1f});
    t.push_back({{p + "mlp.c_proj.weight", {4 * c, c}}, 0.45f});
    t.push_back({{p + "mlp.c_proj.bias", {c}}, 0.1f});
  }
  t.push_back({{"transformer.ln_f.weight", {c}}, -0.2f});
  t.push_back({{"transformer.ln_f.bias", {c}}, 0.1f});
  return t;
}

// Writes the model, float32, into `dir` (which exists). With `positions`
// below kTinyGpt2Positions the position table keeps only its first rows
// (every other value as in the full model) and the config says so: the
// model a shorter context of the full one must equal.
inline void WriteTinyGpt2(const std::string& dir, int64_t positions) {
  auto tensors = TinyGpt2Tensors();
  tensors[1].first.second = {positions, kTinyGpt2Embd};
  std::vector<std::string> entries = {R"("__metadata__":{"format":"pt"})"};
  std::string data;
  auto entry = [&](const std::string& name, const Shape& shape, size_t begin) {
    entries.push_back(
        absl::StrCat("\"", name, "\":{\"dtype\":\"F32\",\"shape\":[",
                     absl::StrJoin(shape, ","), "],\"data_offsets\":[", begin,
                     ",", data.size(), "]}"));
  };
  for (size_t k = 0; k < tensors.size(); ++k) {
    const auto& [named, scale] = tensors[k];
    const size_t begin = data.size();
    for (int64_t i = 0; i < NumElements(named.second); ++i) {
      Append(data, TinyLlamaValue(static_cast<int64_t>(k) + 100, i, scale,
                                  DType::kF32));
    }
    entry(named.first, named.second, begin);
  }
  // The causal mask buffer of each layer, as older transformers saved it.
  for (int64_t l = 0; l < kTinyGpt2Layers; ++l) {
    const size_t begin = data.size();
    for (int64_t r = 0; r < positions; ++r) {
      for (int64_t col = 0; col < positions; ++col) {
        Append(data, col <= r ? 1.0f : 0.0f);
      }
    }
    entry(absl::StrCat("transformer.h.", l, ".attn.bias"),
          {1, 1, positions, positions}, begin);
  }
  WriteBytes(
      dir + "/model.safetensors",
      Safetensors(absl::StrCat("{", absl::StrJoin(entries, ","), "}"), data));
  const nlohmann::json config = {{"architectures", {"GPT2LMHeadModel"}},
                                 {"model_type", "gpt2"},
                                 {"activation_function", "gelu_new"},
                                 {"layer_norm_epsilon", 1e-5},
                                 {"n_layer", kTinyGpt2Layers},
                                 {"n_head", kTinyGpt2Heads},
                                 {"n_embd", kTinyGpt2Embd},
                                 {"n_positions", positions},
                                 {"n_ctx", positions},
                                 {"vocab_size", kTinyGpt2Vocab},
                                 {"tie_word_embeddings", true}};
  WriteBytes(dir + "/config.json", config.dump(2));
}

inline void WriteTinyGpt2(const std::string& dir) {
  WriteTinyGpt2(dir, kTinyGpt2Positions);
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_HF_GPT2_TEST_UTIL_H_
