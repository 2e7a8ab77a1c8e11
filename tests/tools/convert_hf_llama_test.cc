// trellis-convert on Hugging Face Llama checkpoints written here byte by
// byte: hf → trellis → hf and trellis → hf → trellis give back every tensor
// bit for bit (float32, and bfloat16 in → bfloat16 out), single-file and
// sharded; the trellis tensors are HF's transposed and stacked as
// llama_parameters.h says, q/k rows unpermuted; --to=hf shards above
// --max_shard_size with an index; what trellis cannot hold is refused in
// one line naming the key and its value (Mixtral's and Qwen3's keys
// included; their conversions: convert_hf_moe_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/tokenizer.h"
#include "framework/hdf5.h"
#include "parallel/communicator.h"
#include "tests/data/hf_tokenizer_test_util.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/hf_convert_test_util.h"
#include "tests/tools/hf_llama_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/convert/convert.h"
#include "tools/convert/hf_files.h"
#include "transformer/model_family.h"
#include "transformer/moe/moe_family.h"

namespace trellis {
namespace {

using test::ConvertTo;
using test::ExpectSameTensors;
using test::ReadJson;
using test::TrellisTensor;
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::SizeIs;

struct RoundTripCase {
  const char* name;
  test::TinyLlama model;
};
void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << c.name; }

class HfLlamaRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(HfLlamaRoundTripTest, HfToTrellisToHfIsBitExact) {
  const test::TinyLlama& m = GetParam().model;
  const std::string dir = test::Scratch();
  fs::create_directories(dir + "/in");
  test::WriteTinyLlama(dir + "/in", m);
  absl::StatusOr<ConvertSummary> in =
      ConvertTo(dir + "/in", "trellis", dir + "/ckpt");
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->from, "hf");
  // Sharded inputs come back sharded: a limit of about a third.
  const int64_t limit = m.shards > 1 ? 60'000 : 0;
  absl::StatusOr<ConvertSummary> out =
      ConvertTo(dir + "/ckpt", "hf", dir + "/out", limit);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectSameTensors(dir + "/in", dir + "/out");
  EXPECT_EQ(fs::exists(dir + "/out/model.safetensors.index.json"),
            m.shards > 1);
  // config.json: the keys LlamaForCausalLM reads, the same.
  const nlohmann::json a = ReadJson(dir + "/in/config.json");
  const nlohmann::json b = ReadJson(dir + "/out/config.json");
  for (const char* key :
       {"model_type", "architectures", "hidden_size", "intermediate_size",
        "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
        "max_position_embeddings", "vocab_size", "rms_norm_eps", "rope_theta",
        "rope_scaling", "tie_word_embeddings", "torch_dtype", "hidden_act"}) {
    EXPECT_EQ(b.value(key, nlohmann::json()), a.value(key, nlohmann::json()))
        << key;
  }
}

TEST_P(HfLlamaRoundTripTest, TrellisTensorsAreHfsTransposedAndStacked) {
  const test::TinyLlama& m = GetParam().model;
  const std::string dir = test::Scratch();
  test::WriteTinyLlama(dir, m);
  ASSERT_TRUE(ConvertTo(dir, "trellis", dir + "/ckpt").ok());
  const std::string step = dir + "/ckpt/step_00000000";
  const auto hf = test::TinyLlamaTensors(m);
  auto value = [&](const std::string& name, int64_t i) {
    for (size_t k = 0; k < hf.size(); ++k) {
      if (hf[k].first.first == name) {
        return test::TinyLlamaValue(k, i, hf[k].second, m.dtype);
      }
    }
    ADD_FAILURE() << name;
    return 0.0f;
  };
  const int64_t c = test::kLlamaHidden, d = c / test::kLlamaHeads;
  const int64_t q = c, kv = m.kv_heads * d, width = q + 2 * kv;
  const std::vector<float> qkv =
      TrellisTensor(step, "model.layers.1.self_attn.qkv_proj.weight");
  ASSERT_THAT(qkv, SizeIs(c * width));
  for (int64_t col = 0; col < c; ++col) {
    for (int64_t r = 0; r < kv; ++r) {
      // k_proj row r (rotate-half order, unpermuted) is column q + r.
      ASSERT_EQ(qkv[col * width + q + r],
                value("model.layers.1.self_attn.k_proj.weight", r * c + col));
      ASSERT_EQ(qkv[col * width + q + kv + r],
                value("model.layers.1.self_attn.v_proj.weight", r * c + col));
    }
    ASSERT_EQ(qkv[col * width + 3],
              value("model.layers.1.self_attn.q_proj.weight", 3 * c + col));
  }
  const std::vector<float> gate_up =
      TrellisTensor(step, "model.layers.0.mlp.gate_up_proj.weight");
  ASSERT_THAT(gate_up, SizeIs(c * 2 * test::kLlamaFfn));
  EXPECT_EQ(gate_up[5 * 2 * test::kLlamaFfn + test::kLlamaFfn + 7],
            value("model.layers.0.mlp.up_proj.weight", 7 * c + 5));
  const std::vector<float> down =
      TrellisTensor(step, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(down[9 * c + 2], value("model.layers.0.mlp.down_proj.weight",
                                   2 * test::kLlamaFfn + 9));
}

INSTANTIATE_TEST_SUITE_P(
    Models, HfLlamaRoundTripTest,
    ::testing::Values(
        RoundTripCase{"f32_untied", {}},
        RoundTripCase{"bf16_tied", {.dtype = DType::kBF16, .tied = true}},
        RoundTripCase{"bf16_tied_head_in_file_mqa",
                      {.dtype = DType::kBF16,
                       .kv_heads = 1,
                       .tied = true,
                       .lm_head_in_file = true}},
        RoundTripCase{"f32_llama3_sharded", {.llama3 = true, .shards = 3}}),
    [](const ::testing::TestParamInfo<RoundTripCase>& info) {
      return std::string(info.param.name);
    });

TEST(HfLlamaConvertTest, TrellisToHfToTrellisIsBitExactAndShards) {
  // A trellis Llama of trellis's own defaults (MLP width rule, tied) but
  // untied and with llama3 RoPE, initialized as the trainer does.
  ModelConfig config;
  config.family = ModelFamilyKind::kLlama;
  config.n_layer = 2;
  config.n_head = 4;
  config.n_kv_heads = 2;
  config.d_model = 16;
  config.seq_len = 8;
  config.vocab_size = 19;
  config.tie_embeddings = false;
  config.rope_scaling = RopeScalingType::kLlama3;
  const std::string dir = test::Scratch();
  ParameterSet params;
  AddModelParameters(config, ChunkPlan{0, config.n_layer, true, true},
                     TpPlace{}, 5, Device::Cpu(), DType::kF32, params);
  TrainingState state;
  state.model = config;
  state.tokenizer = "byte";
  SelfCommunicator world("world");
  ASSERT_TRUE(
      SaveCheckpoint(dir + "/a", state, params, nullptr, world, true).ok());
  // Shards of at most 10 kB: the 256-wide MLP weights are 16 kB each.
  absl::StatusOr<ConvertSummary> hf =
      ConvertTo(dir + "/a", "hf", dir + "/hf", 10'000);
  ASSERT_TRUE(hf.ok()) << hf.status();
  const nlohmann::json index =
      ReadJson(dir + "/hf/model.safetensors.index.json");
  ASSERT_TRUE(index.is_object());
  EXPECT_FALSE(fs::exists(dir + "/hf/model.safetensors"));
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    files.insert(file.get<std::string>());
  }
  EXPECT_GT(files.size(), 3u);
  int64_t total = 0;
  for (const std::string& file : files) {
    absl::StatusOr<SafetensorsReader> r =
        SafetensorsReader::Open(dir + "/hf/" + file);
    ASSERT_TRUE(r.ok()) << r.status();
    int64_t bytes = 0;
    for (const SafetensorsEntry& e : r->tensors()) bytes += e.nbytes();
    EXPECT_TRUE(bytes <= 10'000 || r->tensors().size() == 1) << file;
    total += bytes;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  const nlohmann::json cfg = ReadJson(dir + "/hf/config.json");
  EXPECT_EQ(cfg["intermediate_size"], config.LlamaFfnHidden());
  EXPECT_EQ(cfg["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(cfg["tie_word_embeddings"], false);

  ASSERT_TRUE(ConvertTo(dir + "/hf", "trellis", dir + "/b").ok());
  for (const auto& [name, shape] : ModelTensorShapes(config)) {
    EXPECT_EQ(TrellisTensor(dir + "/b/step_00000000", name),
              TrellisTensor(dir + "/a/step_00000000", name))
        << name;
  }
}

TEST(HfLlamaConvertTest, ParsesShardSizesAsSavePretrainedDoes) {
  EXPECT_EQ(ParseByteSize("5GB").value_or(0), 5'000'000'000);
  EXPECT_EQ(ParseByteSize("2GiB").value_or(0), int64_t{2} << 30);
  EXPECT_EQ(ParseByteSize("500MB").value_or(0), 500'000'000);
  EXPECT_EQ(ParseByteSize("8kib").value_or(0), 8192);
  EXPECT_EQ(ParseByteSize("1000").value_or(0), 1000);
  for (const char* bad : {"0", "-1", "5XB", "GB", "", "99999999999GB"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
}

TEST(HfLlamaConvertTest, AnIndexMustMapTensorsToFilesBesideItThatHoldThem) {
  const std::string dir = test::Scratch();
  test::WriteTinyLlama(dir, {.shards = 2});
  const std::string path = dir + "/model.safetensors.index.json";
  const nlohmann::json index = ReadJson(path);
  const std::string norm = "model.norm.weight";
  const std::string other =
      index["weight_map"][norm] == "model-00001-of-00002.safetensors"
          ? "model-00002-of-00002.safetensors"
          : "model-00001-of-00002.safetensors";
  struct Case {
    nlohmann::json index;
    std::string expect;
  };
  std::vector<Case> cases = {{index, "does not hold it"},
                             {index, "must name a file of the same directory"},
                             {{{"metadata", index["metadata"]}}, "weight_map"}};
  cases[0].index["weight_map"][norm] = other;
  cases[1].index["weight_map"][norm] = "../" + other;
  for (const Case& c : cases) {
    test::WriteBytes(path, c.index.dump());
    const absl::StatusOr<ConvertSummary> r =
        ConvertTo(dir, "trellis", dir + "/out");
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_THAT(std::string(r.status().message()),
                ::testing::AllOf(HasSubstr(path), HasSubstr(c.expect)));
  }
}

// trellis-convert run as a user runs it: exit status and output.
struct Refusal {
  const char* name;
  test::TinyLlama model;
  std::vector<std::string> expect;  // Substrings of the one line.
  std::vector<std::string> flags = {};
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

class HfLlamaRefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(HfLlamaRefusalTest, IsOneLineNamingTheKeyAndValue) {
  const Refusal& r = GetParam();
  const std::string dir = test::Scratch();
  test::WriteTinyLlama(dir, r.model);
  std::vector<std::string> argv = {test::Program("convert"), "--input=" + dir,
                                   "--to=trellis", "--output=" + dir + "/out",
                                   "--progress=false"};
  argv.insert(argv.end(), r.flags.begin(), r.flags.end());
  const std::string log = dir + "/log.txt";
  EXPECT_NE(test::RunProgram(argv, log), 0);
  const std::string text = test::ReadFile(log);
  const std::vector<std::string> lines =
      absl::StrSplit(text, '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(1)) << text;
  EXPECT_THAT(lines[0], HasSubstr("trellis-convert: error: "));
  for (const std::string& s : r.expect) EXPECT_THAT(lines[0], HasSubstr(s));
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

INSTANTIATE_TEST_SUITE_P(
    Configs, HfLlamaRefusalTest,
    ::testing::Values(
        Refusal{"unknown_model_type",
                {.config_patch = {{"model_type", "mistral"}}},
                {"config.json", "model_type \"mistral\""}},
        Refusal{"rope_scaling_type",
                {.config_patch = {{"rope_scaling",
                                   {{"rope_type", "linear"}, {"factor", 2}}}}},
                {"rope_scaling.rope_type \"linear\"", "not implemented"}},
        Refusal{
            "llama3_without_factor",
            {.config_patch = {{"rope_scaling",
                               {{"rope_type", "llama3"},
                                {"low_freq_factor", 1.0},
                                {"high_freq_factor", 4.0},
                                {"original_max_position_embeddings", 32}}}}},
            {"rope_scaling: factor is missing"}},
        Refusal{"heads_not_divisible",
                {.config_patch = {{"num_key_value_heads", 3}}},
                {"num_key_value_heads 3", "num_attention_heads 4"}},
        // 10^12 layers: their tensors were listed until memory ran out.
        Refusal{
            "absurd_layer_count",
            {.config_patch = {{"num_hidden_layers", 1000000000000}}},
            {"config.json", "--n_layer=1000000000000 is beyond the 131072"}},
        Refusal{"missing_tensor",
                {.drop = {"model.layers.1.mlp.up_proj.weight"}},
                {"model.safetensors", "model.layers.1.mlp.up_proj.weight"}},
        Refusal{"missing_tensor_sharded",
                {.shards = 2, .drop = {"model.norm.weight"}},
                {"model.safetensors.index.json", "model.norm.weight"}},
        Refusal{
            "shape_mismatch",
            {.reshape = {{"model.layers.0.self_attn.k_proj.weight", {8, 32}}}},
            {"model.layers.0.self_attn.k_proj.weight", "(8, 32)", "(16, 32)"}},
        Refusal{"architecture",
                {.config_patch = {{"architectures",
                                   {"LlamaForSequenceClassification"}}}},
                {"architectures", "LlamaForSequenceClassification"}},
        Refusal{"activation",
                {.config_patch = {{"hidden_act", "gelu"}}},
                {"hidden_act \"gelu\""}},
        Refusal{"missing_key",
                {.config_patch = {{"intermediate_size", nullptr}}},
                {"intermediate_size is missing"}},
        Refusal{"other_head_in_tied_model",
                {.config_patch = {{"tie_word_embeddings", true}}},
                {"lm_head.weight differs", "tie_word_embeddings"}},
        Refusal{"mixtral_sliding_window",
                {.experts = 4, .config_patch = {{"sliding_window", 8}}},
                {"sliding_window 8", "max_position_embeddings 16"}},
        Refusal{"mixtral_jitter",
                {.experts = 4, .config_patch = {{"router_jitter_noise", 0.1}}},
                {"router_jitter_noise 0.1"}},
        Refusal{
            "mixtral_without_experts",
            {.experts = 4, .config_patch = {{"num_local_experts", nullptr}}},
            {"num_local_experts is missing"}},
        Refusal{"mixtral_architecture",
                {.experts = 4,
                 .config_patch = {{"architectures", {"LlamaForCausalLM"}}}},
                {"architectures", "MixtralForCausalLM"}},
        Refusal{
            "mixtral_missing_expert",
            {.experts = 4,
             .drop = {"model.layers.1.block_sparse_moe.experts.2.w3.weight"}},
            {"model.layers.1.block_sparse_moe.experts.2.w3.weight"}},
        Refusal{"qwen3_sliding_window",
                {.qwen3 = true, .config_patch = {{"use_sliding_window", true}}},
                {"use_sliding_window true"}},
        Refusal{"qwen3_moe_layer_pattern",
                {.experts = 4,
                 .qwen3 = true,
                 .config_patch = {{"num_hidden_layers", 4},
                                  {"mlp_only_layers", {1}}}},
                {"mlp_only_layers [1]", "places experts where trellis cannot"}},
        Refusal{"qwen3_moe_without_experts",
                {.experts = 4,
                 .qwen3 = true,
                 .config_patch = {{"mlp_only_layers", {0, 1}}}},
                {"mlp_only_layers [0,1]", "no layer of experts"}},
        Refusal{"qwen3_moe_missing_q_norm",
                {.experts = 4,
                 .qwen3 = true,
                 .drop = {"model.layers.1.self_attn.q_norm.weight"}},
                {"model.layers.1.self_attn.q_norm.weight"}},
        Refusal{"bad_shard_size",
                {},
                {"--max_shard_size: 'lots'"},
                {"--to=hf", "--max_shard_size=lots"}}),
    [](const ::testing::TestParamInfo<Refusal>& info) {
      return std::string(info.param.name);
    });

// The tokenizer a Llama checkpoint converted from Hugging Face records: the
// tokenizer.json beside the weights, as trellis-preprocess records
// --tokenizer=hf:PATH (a converted Llama 3 used to record gpt2 and then
// refuse data tokenized with its own tokenizer), the file itself kept in the
// checkpoint; gpt2, said in a note, when
// there is none; --tokenizer when given; and a tokenizer.json that cannot be
// read is one error naming the flag.
TEST(HfLlamaConvertTest, RecordsTheTokenizerBesideTheWeights) {
  const std::string dir = test::Scratch();
  fs::create_directories(dir + "/in");
  test::WriteTinyLlama(dir + "/in", {});
  const auto convert = [&](const std::string& output,
                           const std::string& tokenizer) {
    ConvertOptions o;
    o.input = dir + "/in";
    o.to = "trellis";
    o.output = dir + "/" + output;
    o.tokenizer = tokenizer;
    return Convert(o);
  };
  const auto recorded = [&](const std::string& output) {
    absl::StatusOr<TrainingState> state =
        ReadTrainingState(dir + "/" + output + "/step_00000000");
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *state : TrainingState();
  };

  absl::StatusOr<ConvertSummary> none = convert("none", "");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(recorded("none").tokenizer, "gpt2");
  EXPECT_THAT(none->notes, testing::Contains(HasSubstr("no tokenizer.json")));

  const std::string file = dir + "/in/tokenizer.json";
  test::WriteBytes(file, hf_testing::Llama3StyleJson());
  absl::StatusOr<ConvertSummary> beside = convert("beside", "");
  ASSERT_TRUE(beside.ok()) << beside.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      MakeTokenizer("hf:" + file, "");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const TrainingState state = recorded("beside");
  EXPECT_EQ(state.tokenizer, (*tokenizer)->name());
  EXPECT_EQ(state.tokenizer_identity.ToString(),
            TokenizerIdentity::Of(**tokenizer).ToString());
  EXPECT_FALSE(state.tokenizer_identity.sha256.empty());
  EXPECT_THAT(beside->notes, testing::Contains(HasSubstr(file)));
  // The checkpoint holds the file itself, for generation and export.
  std::ifstream held(dir + "/beside/step_00000000/tokenizer.json",
                     std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(held), {}),
            hf_testing::Llama3StyleJson());
  EXPECT_FALSE(fs::exists(dir + "/given/step_00000000/tokenizer.json"));

  ASSERT_TRUE(convert("given", "byte").ok());
  EXPECT_EQ(recorded("given").tokenizer, "byte");

  test::WriteBytes(file, "{not json");
  absl::StatusOr<ConvertSummary> bad = convert("bad", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              testing::AllOf(HasSubstr(file), HasSubstr("--tokenizer")));
}

}  // namespace
}  // namespace trellis
