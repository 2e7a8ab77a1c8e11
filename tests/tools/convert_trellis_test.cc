// trellis-convert from a trellis checkpoint to trellis and to shards: the
// logical tensors are the model's parameters, trellis → trellis changes the
// dtype and drops or keeps the optimizer (for either family), and the
// shards hold each rank's tensors as the trainer cuts them, replicated
// key/value pieces included. Checkpoints come from SaveCheckpoint on a tiny
// model; tensors are read back through plain HDF5.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/float16.h"
#include "framework/hdf5.h"
#include "tests/tools/convert_roundtrip_test_util.h"
#include "tests/tools/convert_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/convert/convert.h"
#include "tools/convert/gpt2_tensors.h"
#include "tools/trainer/optim/optimizer.h"
#include "transformer/gpt2/gpt2_parameters.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

using test::ConvertTo;
using test::Scratch;
using test::TrellisTensor;
using ::testing::HasSubstr;

TEST(ConvertTest, LogicalTensorsAreTheModelsParameters) {
  ModelConfig config;
  config.n_layer = 3;
  config.d_model = 16;
  ParameterSet params;
  AddModelParameters(config, ChunkPlan{0, 3, true, true}, TpPlace{}, 1,
                     Device::Cpu(), DType::kF32, params);
  const std::vector<LogicalTensor> logical = GptLogicalTensors(config);
  ASSERT_EQ(logical.size(), params.all().size());
  for (size_t i = 0; i < logical.size(); ++i) {
    EXPECT_EQ(logical[i].name, params.all()[i]->name);
    EXPECT_EQ(logical[i].shape, params.all()[i]->spec.logical_shape);
  }
}

// A training checkpoint of a tiny model with optimizer state: moments are
// m = value/2 and v = value², step 7.
std::string SaveTrained(const std::string& save_dir,
                        const ModelConfig& config) {
  ParameterSet params;
  AddModelParameters(config, ChunkPlan{0, config.n_layer, true, true},
                     TpPlace{}, 5, Device::Cpu(), DType::kF32, params);
  Optimizer optimizer(OptimizerConfig{}, params);
  for (size_t i = 0; i < params.all().size(); ++i) {
    const float* w = params.all()[i]->value.data<float>();
    for (int64_t j = 0; j < params.all()[i]->numel(); ++j) {
      optimizer.exp_avg(i).data<float>()[j] = w[j] / 2;
      optimizer.exp_avg_sq(i).data<float>()[j] = w[j] * w[j];
    }
  }
  optimizer.set_step(7);
  TrainingState state;
  state.step = 7;
  state.model = config;
  state.tokenizer = "byte";
  SelfCommunicator world("world");
  EXPECT_TRUE(
      SaveCheckpoint(save_dir, state, params, &optimizer, world, true).ok());
  return save_dir + "/step_00000007";
}

ModelConfig TinyConfig() {
  ModelConfig config;
  config.n_layer = 2;
  config.n_head = 2;
  config.d_model = 8;
  config.seq_len = 4;
  config.vocab_size = 11;
  return config;
}

TEST(TrellisConvertTest, ChangesDtypeAndKeepsOrDropsTheOptimizer) {
  const std::string dir = Scratch();
  const std::string original = SaveTrained(dir + "/a", TinyConfig());
  ASSERT_TRUE(ConvertTo(dir + "/a", "trellis", dir + "/b", DType::kBF16).ok());
  const std::string bf16 = dir + "/b/step_00000007";
  absl::StatusOr<DType> stored = StoredModelDType(bf16);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(*stored, DType::kBF16);
  const std::vector<float> w = TrellisTensor(original, "h.1.mlp.c_fc.weight");
  // Load through the checkpoint reader: bf16 widened to float32.
  CheckpointShards shards;
  const ShardSpec spec = ShardSpec::Replicated({8, 32});
  shards.model.push_back(
      {"h.1.mlp.c_fc.weight", spec, Tensor::Empty({8, 32}, DType::kF32)});
  shards.exp_avg.push_back(
      {"h.1.mlp.c_fc.weight", spec, Tensor::Empty({8, 32}, DType::kF32)});
  shards.exp_avg_sq.push_back(
      {"h.1.mlp.c_fc.weight", spec, Tensor::Empty({8, 32}, DType::kF32)});
  ASSERT_TRUE(LoadShards(bf16, shards).ok());
  EXPECT_EQ(shards.optimizer_step, 7);
  for (size_t j = 0; j < w.size(); ++j) {
    ASSERT_EQ(shards.model[0].tensor.data<float>()[j],
              Bf16ToFloat(FloatToBf16(w[j])));
    ASSERT_EQ(shards.exp_avg[0].tensor.data<float>()[j], w[j] / 2);
  }
  const absl::StatusOr<TrainingState> state = ReadTrainingState(bf16);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->step, 7);
  EXPECT_EQ(state->tokenizer, "byte");

  ASSERT_TRUE(
      ConvertTo(original, "trellis", dir + "/c", std::nullopt, true).ok());
  const std::string weights = dir + "/c/step_00000007";
  EXPECT_FALSE(HasOptimizerState(weights));
  EXPECT_EQ(TrellisTensor(weights, "h.1.mlp.c_fc.weight"), w);
  const absl::Status resume = LoadShards(weights, shards);
  EXPECT_EQ(resume.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(resume.message()), HasSubstr("weights only"));
  // The output is never overwritten.
  EXPECT_EQ(ConvertTo(original, "trellis", dir + "/c").status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(TrellisConvertTest, ConvertsAnotherFamilysCheckpointByItsParameters) {
  // A Llama checkpoint: trellis to trellis keeps every tensor under its
  // own name; llm.c, GPT-2 only, refuses it in one line.
  ModelConfig config = TinyConfig();
  config.family = ModelFamilyKind::kLlama;
  config.n_kv_heads = 1;
  config.ffn_hidden = 12;
  config.tie_embeddings = false;
  const std::string dir = Scratch();
  const std::string original = SaveTrained(dir + "/a", config);
  ASSERT_TRUE(ConvertTo(dir + "/a", "trellis", dir + "/b").ok());
  const std::string copy = dir + "/b/step_00000007";
  for (const auto& [name, shape] : ModelTensorShapes(config)) {
    EXPECT_EQ(TrellisTensor(copy, name), TrellisTensor(original, name)) << name;
  }
  EXPECT_EQ(ModelTensorShapes(config).size(), 2u + 2u * 6u + 1u);
  const absl::StatusOr<ConvertSummary> refused =
      ConvertTo(dir + "/a", "llmc", dir + "/llmc");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("holds a llama model"));
}

TEST(TrellisConvertTest, ShardsHoldEachRanksTensorsAsTheTrainerCutsThem) {
  const std::string dir = Scratch();
  const ModelConfig config = TinyConfig();
  const std::string original = SaveTrained(dir + "/a", config);
  ConvertOptions o;
  o.input = original;
  o.to = "shards";
  o.output = dir + "/shards";
  o.tp = 2;
  o.pp = 2;
  ASSERT_TRUE(Convert(o).ok());
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t t = 0; t < 2; ++t) {
      const std::string file =
          absl::StrCat(o.output, "/shard_tp", t, "_pp", p, ".h5");
      absl::StatusOr<hdf5::File> f = hdf5::File::Open(file);
      ASSERT_TRUE(f.ok()) << f.status();
      EXPECT_EQ(*f->ReadInt64Attribute("tp_rank"), t);
      ParameterSet params;
      AddModelParameters(config, ChunkPlan{p, 1, p == 0, p == 1}, TpPlace{2, t},
                         0, Device::Cpu(), DType::kF32, params);
      absl::StatusOr<std::vector<std::string>> members = f->ListMembers();
      ASSERT_TRUE(members.ok());
      EXPECT_EQ(members->size(), params.all().size()) << file;
      for (const Parameter* param : params.all()) {
        absl::StatusOr<hdf5::Dataset> d = f->OpenDataset(param->name);
        ASSERT_TRUE(d.ok()) << file << " " << param->name;
        EXPECT_EQ(d->shape(), param->value.shape());
        EXPECT_EQ(*d->ReadInt64Attribute("split_dim"), param->spec.split_dim);
        const Tensor local = *d->ReadAll(DType::kF32);
        const std::vector<float> whole = TrellisTensor(original, param->name);
        param->spec.ForEachElement([&](int64_t l, int64_t g) {
          ASSERT_EQ(local.data<float>()[l], g < 0 ? 0.0f : whole[g])
              << file << " " << param->name << " " << l;
        });
      }
    }
  }
}

// One key/value head over tp 2: both ranks' shard files hold it (the
// trainer's replicated cut) and their attributes say so.
TEST(TrellisConvertTest, ShardsNameReplicatedKeyValuePieces) {
  const std::string dir = Scratch();
  ModelConfig config = TinyConfig();
  config.family = ModelFamilyKind::kLlama;
  config.n_kv_heads = 1;
  config.ffn_hidden = 12;
  config.tie_embeddings = false;
  const std::string original = SaveTrained(dir + "/a", config);
  ConvertOptions o;
  o.input = original;
  o.to = "shards";
  o.output = dir + "/shards";
  o.tp = 2;
  ASSERT_TRUE(Convert(o).ok());
  const std::string name = "model.layers.1.self_attn.qkv_proj.weight";
  const std::vector<float> whole = TrellisTensor(original, name);
  for (int64_t t = 0; t < 2; ++t) {
    const std::string file = absl::StrCat(o.output, "/shard_tp", t, "_pp0.h5");
    absl::StatusOr<hdf5::File> f = hdf5::File::Open(file);
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<hdf5::Dataset> d = f->OpenDataset(name);
    ASSERT_TRUE(d.ok()) << file;
    EXPECT_EQ(*d->ReadStringAttribute("group_sizes"), "[8,4,4]");
    EXPECT_EQ(*d->ReadStringAttribute("group_parts"), "[2,1,1]");
    // Columns: this rank's 4 query columns, then the whole K and V.
    EXPECT_EQ(d->shape(), (Shape{8, 12}));
    const Tensor local = *d->ReadAll(DType::kF32);
    for (int64_t row = 0; row < 8; ++row) {
      for (int64_t col = 0; col < 12; ++col) {
        const int64_t logical = col < 4 ? 4 * t + col : col + 4;
        ASSERT_EQ(local.data<float>()[row * 12 + col],
                  whole[row * 16 + logical])
            << file << " " << row << "," << col;
      }
    }
  }
}

}  // namespace
}  // namespace trellis
