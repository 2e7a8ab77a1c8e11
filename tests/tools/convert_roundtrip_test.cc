// trellis-convert's conversions on files assembled byte by byte here:
// Hugging Face → trellis → Hugging Face and llm.c → trellis → llm.c give back
// the input's tensors bit for bit, the trellis tensors hold the right values
// (transposes included), and bad inputs name the file and the tensor.
// trellis → trellis and shards are convert_trellis_test's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "framework/float16.h"
#include "framework/safetensors.h"
#include "tests/tools/convert_roundtrip_test_util.h"
#include "tests/tools/convert_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/convert/convert.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using test::ConvertTo;
using test::Scratch;
using test::TrellisTensor;
using test::WriteBytes;
using ::testing::AllOf;
using ::testing::HasSubstr;

// n_layer 2, n_head 2, n_embd 8, n_positions 4, vocab 11.
constexpr int64_t kL = 2, kC = 8, kT = 4, kV = 11;

// The GPT-2 state dict, written out by hand (not from the code under test).
std::vector<std::pair<std::string, Shape>> HfTensors() {
  std::vector<std::pair<std::string, Shape>> t = {{"wte.weight", {kV, kC}},
                                                  {"wpe.weight", {kT, kC}}};
  for (int64_t l = 0; l < kL; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    t.push_back({h + "ln_1.weight", {kC}});
    t.push_back({h + "ln_1.bias", {kC}});
    t.push_back({h + "attn.c_attn.weight", {kC, 3 * kC}});
    t.push_back({h + "attn.c_attn.bias", {3 * kC}});
    t.push_back({h + "attn.c_proj.weight", {kC, kC}});
    t.push_back({h + "attn.c_proj.bias", {kC}});
    t.push_back({h + "ln_2.weight", {kC}});
    t.push_back({h + "ln_2.bias", {kC}});
    t.push_back({h + "mlp.c_fc.weight", {kC, 4 * kC}});
    t.push_back({h + "mlp.c_fc.bias", {4 * kC}});
    t.push_back({h + "mlp.c_proj.weight", {4 * kC, kC}});
    t.push_back({h + "mlp.c_proj.bias", {kC}});
  }
  t.push_back({"ln_f.weight", {kC}});
  t.push_back({"ln_f.bias", {kC}});
  return t;
}

// Element i of tensor k, as a float the stored dtype holds exactly.
float HfValue(int k, int64_t i, DType dtype) {
  const float v = static_cast<float>((k * 131 + i * 7) % 1000) / 997.0f - 0.5f;
  if (dtype == DType::kBF16) return Bf16ToFloat(FloatToBf16(v));
  if (dtype == DType::kF16) return HalfToFloat(FloatToHalf(v));
  return v;
}

void AppendValue(std::string& data, float v, DType dtype) {
  if (dtype == DType::kBF16) {
    test::Append(data, FloatToBf16(v));
  } else if (dtype == DType::kF16) {
    test::Append(data, FloatToHalf(v));
  } else {
    test::Append(data, v);
  }
}

struct HfCase {
  DType dtype;
  std::string prefix;
  bool lm_head;
};

// A tensor beyond HfTensors(), all zero bytes.
struct Extra {
  std::string name;
  std::string dtype;
  Shape shape;
  int64_t element_size;
};

// A model.safetensors of HfTensors() but `drop`, plus `extras`, data in
// reverse order, and its config.json, in `dir`.
void WriteHfModel(const std::string& dir, const HfCase& c,
                  const std::vector<std::string>& drop = {},
                  const std::vector<Extra>& extras = {}) {
  const char* dtype = DTypeToSafetensors(c.dtype);
  std::vector<std::pair<std::string, Shape>> tensors = HfTensors();
  std::vector<std::string> entries;
  std::string data;
  for (int k = static_cast<int>(tensors.size()) - 1; k >= 0; --k) {
    const auto& [name, shape] = tensors[k];
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
    const size_t begin = data.size();
    for (int64_t i = 0; i < NumElements(shape); ++i) {
      AppendValue(data, HfValue(k, i, c.dtype), c.dtype);
    }
    entries.push_back(
        absl::StrCat("\"", c.prefix, name, "\":{\"dtype\":\"", dtype,
                     "\",\"shape\":[", absl::StrJoin(shape, ","),
                     "],\"data_offsets\":[", begin, ",", data.size(), "]}"));
  }
  if (c.lm_head) {
    const size_t begin = data.size();
    for (int64_t i = 0; i < kV * kC; ++i) {
      AppendValue(data, HfValue(0, i, c.dtype), c.dtype);
    }
    entries.push_back(absl::StrCat(
        "\"lm_head.weight\":{\"dtype\":\"", dtype, "\",\"shape\":[", kV, ",",
        kC, "],\"data_offsets\":[", begin, ",", data.size(), "]}"));
  }
  for (const Extra& e : extras) {
    const size_t begin = data.size();
    data.append(NumElements(e.shape) * e.element_size, '\0');
    entries.push_back(
        absl::StrCat("\"", e.name, "\":{\"dtype\":\"", e.dtype,
                     "\",\"shape\":[", absl::StrJoin(e.shape, ","),
                     "],\"data_offsets\":[", begin, ",", data.size(), "]}"));
  }
  const std::string header =
      absl::StrCat("{\"__metadata__\":{\"format\":\"pt\"},",
                   absl::StrJoin(entries, ","), "}");
  WriteBytes(dir + "/model.safetensors", test::Safetensors(header, data));
  WriteBytes(dir + "/config.json",
             absl::StrCat(R"({"model_type": "gpt2", "n_layer": )", kL,
                          R"(, "n_head": 2, "n_embd": )", kC,
                          R"(, "n_positions": )", kT, R"(, "vocab_size": )", kV,
                          R"(, "activation_function": "gelu_new", )"
                          R"("layer_norm_epsilon": 1e-05, "n_inner": null})"));
}

void PrintTo(const HfCase& c, std::ostream* os) {
  *os << DTypeName(c.dtype) << " prefix '" << c.prefix << "'"
      << (c.lm_head ? " lm_head" : "");
}

class HfRoundTripTest : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfRoundTripTest, ReproducesEveryTensorBitForBit) {
  const HfCase& c = GetParam();
  const std::string dir = Scratch();
  fs::create_directories(dir + "/in");
  WriteHfModel(dir + "/in", c);
  absl::StatusOr<ConvertSummary> in =
      ConvertTo(dir + "/in", "trellis", dir + "/ckpt");
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->from, "hf");
  absl::StatusOr<ConvertSummary> out =
      ConvertTo(dir + "/ckpt", "hf", dir + "/out");
  ASSERT_TRUE(out.ok()) << out.status();

  absl::StatusOr<SafetensorsReader> a =
      SafetensorsReader::Open(dir + "/in/model.safetensors");
  absl::StatusOr<SafetensorsReader> b =
      SafetensorsReader::Open(dir + "/out/model.safetensors");
  ASSERT_TRUE(a.ok() && b.ok());
  std::set<std::string> names_a, names_b;
  for (const SafetensorsEntry& e : a->tensors()) names_a.insert(e.name);
  for (const SafetensorsEntry& e : b->tensors()) names_b.insert(e.name);
  EXPECT_EQ(names_a, names_b);
  for (const SafetensorsEntry& e : a->tensors()) {
    const SafetensorsEntry* f = b->Find(e.name);
    ASSERT_NE(f, nullptr) << e.name;
    EXPECT_EQ(f->dtype, e.dtype) << e.name;
    EXPECT_EQ(f->shape, e.shape) << e.name;
    std::string x(e.nbytes(), '\0'), y(f->nbytes(), '\0');
    ASSERT_TRUE(a->ReadBytes(e, x.data()).ok());
    ASSERT_TRUE(b->ReadBytes(*f, y.data()).ok());
    EXPECT_EQ(test::FirstDifference(x, y), -1) << e.name;
  }
  // The trellis checkpoint holds the values, float32, under logical names.
  const std::vector<std::pair<std::string, Shape>> hf = HfTensors();
  for (int k : {0, 4, 13, 27}) {
    std::string logical = hf[k].first;
    if (logical == "wte.weight") logical = "wte";
    const std::vector<float> got =
        TrellisTensor(dir + "/ckpt/step_00000000", logical);
    ASSERT_EQ(static_cast<int64_t>(got.size()), NumElements(hf[k].second));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], HfValue(k, i, c.dtype)) << logical << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, HfRoundTripTest,
    ::testing::Values(HfCase{DType::kF32, "", false},
                      HfCase{DType::kF16, "transformer.", true},
                      HfCase{DType::kBF16, "transformer.", false},
                      HfCase{DType::kBF16, "", true}),
    [](const ::testing::TestParamInfo<HfCase>& info) {
      return absl::StrCat(DTypeName(info.param.dtype),
                          info.param.prefix.empty() ? "" : "_prefixed",
                          info.param.lm_head ? "_lm_head" : "");
    });

TEST(HfConvertTest, ShardedOutputReadsBackBitForBit) {
  // Above --max_shard_size the model goes to several files and an index;
  // reading those gives back the same checkpoint.
  const std::string dir = Scratch();
  fs::create_directories(dir + "/in");
  WriteHfModel(dir + "/in", {DType::kBF16, "transformer.", true});
  ASSERT_TRUE(ConvertTo(dir + "/in", "trellis", dir + "/a").ok());
  ConvertOptions o;
  o.input = dir + "/a";
  o.to = "hf";
  o.output = dir + "/sharded";
  o.max_shard_size = 300;  // Bytes: the c_fc weights (512) alone each.
  absl::StatusOr<ConvertSummary> out = Convert(o);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(fs::exists(dir + "/sharded/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir + "/sharded/model.safetensors"));
  const nlohmann::json index = nlohmann::json::parse(
      test::ReadBytes(dir + "/sharded/model.safetensors.index.json"));
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    files.insert(file.get<std::string>());
  }
  EXPECT_GE(files.size(), 3u);
  for (const std::string& file : files) {
    EXPECT_TRUE(fs::exists(dir + "/sharded/" + file)) << file;
  }
  absl::StatusOr<ConvertSummary> back =
      ConvertTo(dir + "/sharded", "trellis", dir + "/b");
  ASSERT_TRUE(back.ok()) << back.status();
  for (const auto& [name, shape] : HfTensors()) {
    const std::string logical = name == "wte.weight"   ? "wte"
                                : name == "wpe.weight" ? "wpe"
                                                       : name;
    EXPECT_EQ(TrellisTensor(dir + "/b/step_00000000", logical),
              TrellisTensor(dir + "/a/step_00000000", logical))
        << logical;
  }
}

TEST(HfConvertTest, BuffersAreSkipped) {
  const std::string dir = Scratch();
  WriteHfModel(dir, {DType::kF32, "", false}, {},
               {{"h.0.attn.bias", "F32", {1, 1, kT, kT}, 4},
                {"h.1.attn.masked_bias", "F32", {}, 4}});
  const absl::StatusOr<ConvertSummary> r =
      ConvertTo(dir, "trellis", dir + "/ckpt");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_THAT(r->notes[0], HasSubstr("skipped 2 attention buffers"));
}

TEST(HfConvertTest, BadInputsNameTheFileAndTensor) {
  const std::string dir = Scratch();
  const std::string file = dir + "/model.safetensors";
  struct Case {
    std::vector<std::string> drop;
    std::vector<Extra> extras;
    const char* expect;
  };
  const Case cases[] = {
      {{"h.1.ln_2.bias"}, {}, "has no tensor h.1.ln_2.bias"},
      {{"h.0.ln_1.bias"},
       {{"h.0.ln_1.bias", "F32", {9}, 4}},
       "tensor h.0.ln_1.bias has shape (9)"},
      {{"ln_f.bias"},
       {{"ln_f.bias", "I32", {kC}, 4}},
       "tensor ln_f.bias is I32"},
      {{},
       {{"score.weight", "F32", {1}, 4}},
       "tensor score.weight is not part of a GPT-2 model"},
      {{}, {{"lm_head.weight", "F32", {kV, kC}, 4}}, "untied"},
  };
  for (const Case& c : cases) {
    WriteHfModel(dir, {DType::kF32, "", false}, c.drop, c.extras);
    const absl::StatusOr<ConvertSummary> r =
        ConvertTo(dir, "trellis", dir + "/x");
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_THAT(std::string(r.status().message()),
                AllOf(HasSubstr(file), HasSubstr(c.expect)));
  }
  // config.json asking for what trellis does not compute.
  WriteBytes(dir + "/config.json",
             R"({"n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 4,)"
             R"( "vocab_size": 11, "activation_function": "relu"})");
  const absl::StatusOr<ConvertSummary> relu =
      ConvertTo(dir, "trellis", dir + "/y");
  EXPECT_THAT(
      std::string(relu.status().message()),
      AllOf(HasSubstr(dir + "/config.json"), HasSubstr("activation_function")));
  WriteBytes(dir + "/config.json", R"({"n_layer": 2, "n_head": 2})");
  const absl::StatusOr<ConvertSummary> missing =
      ConvertTo(dir, "trellis", dir + "/y");
  EXPECT_THAT(std::string(missing.status().message()),
              AllOf(HasSubstr(dir + "/config.json"), HasSubstr("n_embd")));
  // More layers than the weights hold, refused before any is laid out
  // (10^9 grew memory without bound; ModelConfig::Validate now refuses
  // that many outright, so 10^5, within its bound).
  WriteHfModel(dir, {DType::kF32, "", false});
  WriteBytes(dir + "/config.json",
             absl::StrCat(R"({"model_type": "gpt2", "n_layer": 100000,)",
                          R"( "n_head": 2, "n_embd": )", kC,
                          R"(, "n_positions": )", kT, R"(, "vocab_size": )", kV,
                          R"(, "activation_function": "gelu_new"})"));
  const absl::StatusOr<ConvertSummary> deep =
      ConvertTo(dir, "trellis", dir + "/z");
  ASSERT_FALSE(deep.ok());
  EXPECT_THAT(std::string(deep.status().message()),
              AllOf(HasSubstr("100000 layers"),
                    HasSubstr(absl::StrCat("weights of ", kL))));
}

// A NaN or an infinity in the weights is refused at import, naming the
// file, the tensor, the element and the value (such a checkpoint used to be
// written, then refused by every program that loaded it).
TEST(HfConvertTest, NonFiniteWeightsAreRefusedNamingTheTensor) {
  const std::string dir = Scratch();
  const std::string file = dir + "/model.safetensors";
  const struct {
    float value;
    const char* name;
  } cases[] = {{std::nanf(""), "NaN"},
               {std::numeric_limits<float>::infinity(), "+inf"},
               {-std::numeric_limits<float>::infinity(), "-inf"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    WriteHfModel(dir, {DType::kF32, "", false});
    uint64_t header = 0;
    std::string bytes = test::ReadBytes(file);
    std::memcpy(&header, bytes.data(), sizeof(header));
    absl::StatusOr<SafetensorsReader> reader = SafetensorsReader::Open(file);
    ASSERT_TRUE(reader.ok()) << reader.status();
    const SafetensorsEntry* e = reader->Find("h.1.mlp.c_fc.weight");
    ASSERT_NE(e, nullptr);
    std::memcpy(bytes.data() + 8 + header + e->begin + 3 * sizeof(float),
                &c.value, sizeof(float));
    WriteBytes(file, bytes);
    const absl::StatusOr<ConvertSummary> r =
        ConvertTo(dir, "trellis", dir + "/ckpt");
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(std::string(r.status().message()),
                AllOf(HasSubstr(file), HasSubstr("'h.1.mlp.c_fc.weight'"),
                      HasSubstr(absl::StrCat(c.name, " at element"))));
    EXPECT_FALSE(fs::exists(dir + "/ckpt"));
  }
}

TEST(LlmcRoundTripTest, ReproducesTheFileBitForBit) {
  for (int32_t version : {kLlmcVersionF32, kLlmcVersionBf16}) {
    const std::string dir = Scratch();
    const LlmcHeader h = test::TinyHeader(version);
    const std::string bytes = test::LlmcBytes(h);
    WriteBytes(dir + "/in.bin", bytes);
    ASSERT_TRUE(ConvertTo(dir + "/in.bin", "trellis", dir + "/ckpt").ok());
    ASSERT_TRUE(ConvertTo(dir + "/ckpt", "llmc", dir + "/out.bin").ok());
    EXPECT_EQ(test::FirstDifference(test::ReadBytes(dir + "/out.bin"), bytes),
              -1)
        << version;
    // Through Hugging Face and back as well.
    ASSERT_TRUE(ConvertTo(dir + "/ckpt", "hf", dir + "/hf").ok());
    ASSERT_TRUE(ConvertTo(dir + "/hf", "trellis", dir + "/ckpt2").ok());
    // Hugging Face keeps no padded vocabulary: name it.
    ConvertOptions back;
    back.input = dir + "/ckpt2";
    back.to = "llmc";
    back.output = dir + "/again.bin";
    back.dtype = version == kLlmcVersionBf16 ? DType::kBF16 : DType::kF32;
    back.padded_vocab = h.padded_vocab_size;
    ASSERT_TRUE(Convert(back).ok());
    EXPECT_EQ(test::FirstDifference(test::ReadBytes(dir + "/again.bin"), bytes),
              -1)
        << version;
  }
}

// llm.c element i of tensor k is k + i/1024 (test::LlmcBytes).
float LlmcValue(int k, int64_t i) {
  return static_cast<float>(k) + static_cast<float>(i) / 1024.0f;
}

TEST(LlmcConvertTest, TransposesWeightsAndDropsPadding) {
  const std::string dir = Scratch();
  const LlmcHeader h = test::TinyHeader(kLlmcVersionF32);
  WriteBytes(dir + "/in.bin", test::LlmcBytes(h));
  ASSERT_TRUE(ConvertTo(dir + "/in.bin", "trellis", dir + "/ckpt").ok());
  const std::string step = dir + "/ckpt/step_00000000";
  const int64_t c = h.channels, v = h.vocab_size;
  const std::vector<float> wte = TrellisTensor(step, "wte");
  ASSERT_EQ(static_cast<int64_t>(wte.size()), v * c);
  EXPECT_EQ(wte[v * c - 1], LlmcValue(0, v * c - 1));
  // c_attn.weight (C, 3C)[r][col] = qkvw[l] (3C, C)[col][r].
  const std::vector<float> qkv = TrellisTensor(step, "h.1.attn.c_attn.weight");
  for (int64_t r = 0; r < c; ++r) {
    for (int64_t col = 0; col < 3 * c; ++col) {
      ASSERT_EQ(qkv[r * 3 * c + col], LlmcValue(4, 3 * c * c + col * c + r));
    }
  }
  // mlp.c_proj.weight (4C, C)[r][col] = fcprojw[l] (C, 4C)[col][r].
  const std::vector<float> proj = TrellisTensor(step, "h.0.mlp.c_proj.weight");
  EXPECT_EQ(proj[5 * c + 3], LlmcValue(12, 3 * 4 * c + 5));
  EXPECT_EQ(TrellisTensor(step, "h.1.ln_2.bias")[2], LlmcValue(9, c + 2));
  EXPECT_EQ(TrellisTensor(step, "ln_f.weight")[3], LlmcValue(14, 3));
  const absl::StatusOr<TrainingState> state = ReadTrainingState(step);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->model.vocab_size, v);
  EXPECT_EQ(state->source.at("format"), "llmc");
  EXPECT_EQ(state->source.at("padded_vocab"), "8");

  // Padding rows that are not zero cannot come back: the user is told.
  std::string odd = test::LlmcBytes(h);
  odd[kLlmcHeaderBytes + v * c * 4 + 3] = 0x3f;
  WriteBytes(dir + "/odd.bin", odd);
  const absl::StatusOr<ConvertSummary> r =
      ConvertTo(dir + "/odd.bin", "trellis", dir + "/odd");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_THAT(r->notes[0], AllOf(HasSubstr(dir + "/odd.bin"),
                                 HasSubstr("padding rows [5, 8)")));
}

}  // namespace
}  // namespace trellis
