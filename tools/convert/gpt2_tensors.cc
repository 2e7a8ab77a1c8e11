#include "tools/convert/gpt2_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "framework/float16.h"
#include "framework/kernels/layernorm.h"
#include "framework/text_file.h"
#include "tools/convert/hf_tensors.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

constexpr char kHfPrefix[] = "transformer.";
constexpr char kLmHead[] = "lm_head.weight";

// The per-layer suffixes, in model order, and their llm.c tensor index
// (transposed: llm.c stores the weight (out, in)).
struct LayerTensor {
  const char* suffix;
  int llmc_index;
  bool transposed;
};
constexpr LayerTensor kLayerTensors[] = {
    {"ln_1.weight", 2, false},       {"ln_1.bias", 3, false},
    {"attn.c_attn.weight", 4, true}, {"attn.c_attn.bias", 5, false},
    {"attn.c_proj.weight", 6, true}, {"attn.c_proj.bias", 7, false},
    {"ln_2.weight", 8, false},       {"ln_2.bias", 9, false},
    {"mlp.c_fc.weight", 10, true},   {"mlp.c_fc.bias", 11, false},
    {"mlp.c_proj.weight", 12, true}, {"mlp.c_proj.bias", 13, false},
};

std::string LayerName(int64_t layer, const char* suffix) {
  return absl::StrCat("h.", layer, ".", suffix);
}

Tensor ToF32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  Tensor out = Tensor::Empty(t.shape(), DType::kF32);
  ConvertElements(t.raw(), t.dtype(), out.raw(), DType::kF32, t.numel());
  return out;
}

// (rows, cols) float32 at `src` → a new (cols, rows) tensor.
Tensor Transposed(const float* src, int64_t rows, int64_t cols) {
  Tensor out = Tensor::Empty({cols, rows}, DType::kF32);
  float* dst = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
  return out;
}

void TransposeInto(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
}

// Whether `name` (prefix removed) is a GPT-2 buffer, not a weight.
bool IsBuffer(const std::string& name) {
  const std::vector<std::string> parts = absl::StrSplit(name, '.');
  int64_t layer = 0;
  return parts.size() == 4 && parts[0] == "h" &&
         absl::SimpleAtoi(parts[1], &layer) && parts[2] == "attn" &&
         (parts[3] == "bias" || parts[3] == "masked_bias");
}

// Checks a tensor the model does not use: buffers pass, a tied lm_head
// must equal wte, anything else is an error.
absl::Status CheckExtraHfTensor(const HfSafetensors& file,
                                const std::string& name,
                                const std::string& prefix, WholeModel& model) {
  const std::string bare =
      name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
  if (IsBuffer(bare)) {
    model.source["buffers"] =
        absl::StrCat(std::atoi(model.source["buffers"].c_str()) + 1);
    return absl::OkStatus();
  }
  if (bare == kLmHead) {
    const Tensor& wte = *model.Find("wte");
    TRELLIS_ASSIGN_OR_RETURN(Tensor head, file.Read(name, wte.shape()));
    head = ToF32(head);
    if (std::memcmp(head.raw(), wte.raw(), wte.nbytes()) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor ", name,
          " differs from wte.weight; trellis ties the LM head to the token "
          "embedding and cannot hold an untied one"));
    }
    model.source["lm_head"] = "1";
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      file.path(), ": tensor ", name,
      " is not part of a GPT-2 model of the shape config.json gives; is "
      "this a GPT-2 checkpoint?"));
}

absl::StatusOr<int64_t> ConfigInt(const nlohmann::json& j,
                                  const std::string& path,
                                  std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (j.contains(key) && j.at(key).is_number_integer()) {
      return j.at(key).get<int64_t>();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": missing or non-integer field ", *keys.begin(),
      "; a GPT-2 config.json has n_layer, n_head, n_embd, n_positions and "
      "vocab_size"));
}

absl::Status CheckHfSemantics(const nlohmann::json& j, const std::string& path,
                              int64_t n_embd) {
  auto refuse = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", what,
        "; trellis computes GPT-2 as written (tanh GELU, "
        "LayerNorm epsilon 1e-5, MLP width 4·n_embd, tied embeddings)"));
  };
  if (j.contains("model_type") && j.at("model_type") != "gpt2") {
    return refuse("model_type is " + j.at("model_type").dump() + ", not gpt2");
  }
  if (j.contains("activation_function")) {
    const nlohmann::json& a = j.at("activation_function");
    if (a != "gelu_new" && a != "gelu_pytorch_tanh" && a != "gelu_fast") {
      return refuse("activation_function " + a.dump() + " is not supported");
    }
  }
  if (j.contains("layer_norm_epsilon")) {
    const nlohmann::json& e = j.at("layer_norm_epsilon");
    if (!e.is_number() || std::abs(e.get<double>() - kLayerNormEps) > 1e-12) {
      return refuse("layer_norm_epsilon " + e.dump() + " is not 1e-5");
    }
  }
  if (j.contains("n_inner") && !j.at("n_inner").is_null() &&
      j.at("n_inner") != 4 * n_embd) {
    return refuse("n_inner " + j.at("n_inner").dump() + " is not 4·n_embd");
  }
  if (j.contains("tie_word_embeddings") &&
      j.at("tie_word_embeddings") != true) {
    return refuse("tie_word_embeddings is false");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<LogicalTensor> GptLogicalTensors(const ModelConfig& config) {
  const int64_t c = config.d_model;
  std::vector<LogicalTensor> t = {{"wte", {config.vocab_size, c}},
                                  {"wpe", {config.seq_len, c}}};
  const Shape shapes[] = {{c}, {c}, {c, 3 * c}, {3 * c}, {c, c},     {c},
                          {c}, {c}, {c, 4 * c}, {4 * c}, {4 * c, c}, {c}};
  for (int64_t l = 0; l < config.n_layer; ++l) {
    for (size_t i = 0; i < std::size(kLayerTensors); ++i) {
      t.push_back({LayerName(l, kLayerTensors[i].suffix), shapes[i]});
    }
  }
  t.push_back({"ln_f.weight", {c}});
  t.push_back({"ln_f.bias", {c}});
  return t;
}

const Tensor* WholeModel::Find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

int64_t WholeModel::NumBytes() const {
  int64_t bytes = 0;
  for (const auto& [n, t] : tensors) bytes += t.nbytes();
  return bytes;
}

absl::StatusOr<ModelConfig> ReadHfConfig(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(
        absl::StrCat(path,
                     " not found; a Hugging Face model directory holds "
                     "config.json next to model.safetensors"));
  }
  TRELLIS_RETURN_IF_ERROR(text.status());
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a JSON object"));
  }
  ModelConfig config;
  TRELLIS_ASSIGN_OR_RETURN(config.n_layer, ConfigInt(j, path, {"n_layer"}));
  TRELLIS_ASSIGN_OR_RETURN(config.n_head, ConfigInt(j, path, {"n_head"}));
  TRELLIS_ASSIGN_OR_RETURN(config.d_model, ConfigInt(j, path, {"n_embd"}));
  TRELLIS_ASSIGN_OR_RETURN(config.seq_len,
                           ConfigInt(j, path, {"n_positions", "n_ctx"}));
  TRELLIS_ASSIGN_OR_RETURN(config.vocab_size,
                           ConfigInt(j, path, {"vocab_size"}));
  TRELLIS_RETURN_IF_ERROR(CheckHfSemantics(j, path, config.d_model));
  const absl::Status valid = config.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", valid.message()));
  }
  return config;
}

std::string HfConfigJson(const ModelConfig& config, DType dtype,
                         const std::string& tokenizer,
                         const HfSpecialTokens& special) {
  const char* torch_dtype = dtype == DType::kBF16  ? "bfloat16"
                            : dtype == DType::kF16 ? "float16"
                                                   : "float32";
  nlohmann::ordered_json j = {{"architectures", {"GPT2LMHeadModel"}},
                              {"model_type", "gpt2"},
                              {"activation_function", "gelu_new"},
                              {"layer_norm_epsilon", kLayerNormEps},
                              {"n_layer", config.n_layer},
                              {"n_head", config.n_head},
                              {"n_embd", config.d_model},
                              {"n_inner", nullptr},
                              {"n_positions", config.seq_len},
                              {"n_ctx", config.seq_len},
                              {"vocab_size", config.vocab_size},
                              {"tie_word_embeddings", true},
                              {"attn_pdrop", 0.0},
                              {"embd_pdrop", 0.0},
                              {"resid_pdrop", 0.0},
                              {"torch_dtype", torch_dtype},
                              {"trellis_tokenizer", tokenizer}};
  if (special.bos) j["bos_token_id"] = *special.bos;
  if (special.eos) j["eos_token_id"] = *special.eos;
  return j.dump(2) + "\n";
}

absl::StatusOr<WholeModel> ReadHfModel(const HfSafetensors& file,
                                       const ModelConfig& config,
                                       const ProgressFn& progress) {
  std::string prefix;
  const std::vector<std::string> names = file.names();
  for (const std::string& name : names) {
    if (name.rfind(kHfPrefix, 0) == 0) prefix = kHfPrefix;
  }
  WholeModel model;
  model.config = config;
  // The family's table: every tensor HF's, unchanged, under its HF name.
  const std::vector<HfTensorMapping> table = FamilyOf(config).HfTensors(config);
  std::set<std::string> used;
  int64_t bytes = 0;
  for (const HfTensorMapping& m : table) {
    DType stored = DType::kF32;
    TRELLIS_ASSIGN_OR_RETURN(Tensor value,
                             ReadHfMapped(file, m, prefix, &stored, &bytes));
    if (model.tensors.empty()) model.source_dtype = stored;
    model.tensors.emplace_back(m.logical, std::move(value));
    for (const HfPart& p : m.parts) used.insert(prefix + p.name);
    if (progress) progress(model.tensors.size(), table.size(), bytes);
  }
  for (const std::string& name : names) {
    if (used.count(name) == 0) {
      TRELLIS_RETURN_IF_ERROR(CheckExtraHfTensor(file, name, prefix, model));
    }
  }
  if (model.source.count("buffers")) {
    model.notes.push_back(absl::StrCat(
        "skipped ", model.source["buffers"],
        " attention buffers "
        "(h.*.attn.bias, h.*.attn.masked_bias): they are not weights"));
    model.source.erase("buffers");
  }
  model.source["format"] = "hf";
  model.source["prefix"] = prefix;
  model.source["dtype"] = DTypeName(model.source_dtype);
  return model;
}

absl::StatusOr<std::vector<HfOutputTensor>> HfGpt2Tensors(
    const WholeModel& model, DType dtype, const std::string& prefix,
    bool lm_head) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("Hugging Face weights are float32, float16 or bfloat16, "
                     "not ",
                     DTypeName(dtype)));
  }
  std::vector<HfOutputTensor> out;
  for (const HfTensorMapping& m :
       FamilyOf(model.config).HfTensors(model.config)) {
    const Tensor* t = model.Find(m.logical);
    TRELLIS_CHECK(t != nullptr) << m.logical;
    for (size_t k = 0; k < m.parts.size(); ++k) {
      out.push_back(HfOutputPart(m, k, t, prefix + m.parts[k].name, dtype));
    }
  }
  if (lm_head) {
    const Tensor* wte = model.Find("wte");
    out.push_back({kLmHead, wte->shape(), dtype,
                   [wte, dtype] { return ConvertTo(*wte, dtype); }});
  }
  return out;
}

absl::StatusOr<WholeModel> ReadLlmcModel(const LlmcReader& file,
                                         const ProgressFn& progress) {
  const LlmcHeader& h = file.header();
  WholeModel model;
  model.config.n_layer = h.n_layer;
  model.config.n_head = h.n_head;
  model.config.d_model = h.channels;
  model.config.seq_len = h.max_seq_len;
  model.config.vocab_size = h.vocab_size;
  model.source_dtype = h.dtype();
  const int64_t c = h.channels;
  std::map<std::string, Tensor> by_name;
  int64_t bytes = 0;
  for (int i = 0; i < kLlmcNumTensors; ++i) {
    TRELLIS_ASSIGN_OR_RETURN(Tensor stored, file.Read(i));
    bytes += stored.nbytes();
    const Tensor t = ToF32(stored);
    if (i == 0) {  // wte: drop the padding rows.
      by_name["wte"] = t.Narrow(0, h.vocab_size).Clone();
      const float* pad = t.data<float>() + h.vocab_size * c;
      const int64_t n = (h.padded_vocab_size - h.vocab_size) * c;
      if (std::any_of(pad, pad + n, [](float x) { return x != 0.0f; })) {
        model.notes.push_back(absl::StrCat(
            file.path(), ": wte's padding rows [", h.vocab_size, ", ",
            h.padded_vocab_size,
            ") are not zero; they are dropped (an llm.c file written back "
            "pads with zeros)"));
      }
    } else if (i == 1) {
      by_name["wpe"] = t;
    } else if (i >= 14) {
      by_name[i == 14 ? "ln_f.weight" : "ln_f.bias"] = t;
    } else {
      const LayerTensor& lt = kLayerTensors[i - 2];
      const int64_t per_layer = t.numel() / h.n_layer;
      for (int64_t l = 0; l < h.n_layer; ++l) {
        const float* src = t.data<float>() + l * per_layer;
        Tensor layer;
        if (lt.transposed) {
          layer = Transposed(src, t.dim(1), t.dim(2));
        } else {
          layer = Tensor::Empty({per_layer}, DType::kF32);
          std::memcpy(layer.raw(), src, per_layer * sizeof(float));
        }
        by_name[LayerName(l, lt.suffix)] = layer;
      }
    }
    if (progress) progress(i + 1, kLlmcNumTensors, bytes);
  }
  for (const LogicalTensor& t : GptLogicalTensors(model.config)) {
    TRELLIS_CHECK(by_name.count(t.name) && by_name[t.name].shape() == t.shape)
        << t.name << " " << c;
    model.tensors.emplace_back(t.name, by_name[t.name]);
  }
  model.source["format"] = "llmc";
  model.source["padded_vocab"] = absl::StrCat(h.padded_vocab_size);
  model.source["dtype"] = DTypeName(h.dtype());
  return model;
}

absl::StatusOr<std::pair<LlmcHeader, std::vector<Tensor>>> LlmcFor(
    const WholeModel& model, DType dtype, int64_t padded_vocab) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llm.c model files hold float32 (version 3) or bfloat16 (version 5), "
        "not ",
        DTypeName(dtype), "; pass --dtype=float32 or bfloat16"));
  }
  const ModelConfig& g = model.config;
  LlmcHeader h;
  h.version = dtype == DType::kBF16 ? kLlmcVersionBf16 : kLlmcVersionF32;
  h.max_seq_len = g.seq_len;
  h.vocab_size = g.vocab_size;
  h.n_layer = g.n_layer;
  h.n_head = g.n_head;
  h.channels = g.d_model;
  h.padded_vocab_size =
      padded_vocab > 0 ? padded_vocab : (g.vocab_size + 127) / 128 * 128;
  TRELLIS_RETURN_IF_ERROR(ValidateLlmcHeader(h, "llm.c output"));
  std::vector<Tensor> out;
  for (const LlmcTensor& lt : LlmcTensors(h)) {
    out.push_back(Tensor::Zeros(lt.shape, DType::kF32));
  }
  const Tensor& wte = *model.Find("wte");
  std::memcpy(out[0].raw(), wte.raw(), wte.nbytes());
  out[1].CopyFrom(*model.Find("wpe"));
  out[14].CopyFrom(*model.Find("ln_f.weight"));
  out[15].CopyFrom(*model.Find("ln_f.bias"));
  for (const LayerTensor& lt : kLayerTensors) {
    Tensor& stacked = out[lt.llmc_index];
    const int64_t per_layer = stacked.numel() / g.n_layer;
    for (int64_t l = 0; l < g.n_layer; ++l) {
      const Tensor& t = *model.Find(LayerName(l, lt.suffix));
      float* dst = stacked.data<float>() + l * per_layer;
      if (lt.transposed) {
        TransposeInto(t.data<float>(), t.dim(0), t.dim(1), dst);
      } else {
        std::memcpy(dst, t.raw(), t.nbytes());
      }
    }
  }
  for (Tensor& t : out) t = ConvertTo(t, dtype);
  return std::make_pair(h, std::move(out));
}

}  // namespace trellis
