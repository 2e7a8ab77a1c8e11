// Checkpoints: what --resume resolves to, pruning, crashed saves, and the
// errors of loading a checkpoint into a model it does not fit.
#include "tools/checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint_files.h"
#include "tools/checkpoint/shard_io.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A tiny "model" of whole tensors: a (rows, 3) weight and, optionally, a
// bias; layouts are shard_io_test's business, this file tests the files.
void AddModel(ParameterSet& params, int64_t rows, bool with_bias = true) {
  Parameter& w =
      params.Add("h.0.mlp.c_fc.weight", ShardSpec::Replicated({rows, 3}),
                 /*decay=*/true, Device::Cpu());
  for (int64_t i = 0; i < w.numel(); ++i) w.value.data<float>()[i] = i + 1.0f;
  if (with_bias) {
    Parameter& b = params.Add("h.0.mlp.c_fc.bias", ShardSpec::Replicated({3}),
                              /*decay=*/false, Device::Cpu());
    for (int64_t i = 0; i < 3; ++i) b.value.data<float>()[i] = -1.0f - i;
  }
}

void Save(const std::string& save_dir, int64_t step,
          const ParameterSet& params) {
  SelfCommunicator world("world");
  TrainingState state;
  state.step = step;
  state.samples_consumed = 16 * step;
  state.tokenizer = "byte";
  ASSERT_TRUE(
      SaveCheckpoint(save_dir, state, params, nullptr, world, true).ok());
}

// A training checkpoint: weights and moments (the moments hold the weights;
// only their presence matters here).
void SaveTraining(const std::string& save_dir, int64_t step,
                  const ParameterSet& params) {
  SelfCommunicator world("world");
  TrainingState state;
  state.step = step;
  CheckpointShards shards;
  for (const Parameter* p : params.all()) {
    shards.model.push_back({p->name, p->spec, p->value});
    shards.exp_avg.push_back({p->name, p->spec, p->value});
    shards.exp_avg_sq.push_back({p->name, p->spec, p->value});
  }
  shards.optimizer_step = step;
  ASSERT_TRUE(SaveShards(save_dir, state, shards, world, true).ok());
}

std::vector<std::string> Listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(ResolveResumeTest, EmptyMeansFreshStart) {
  EXPECT_EQ(*ResolveResume("", "/nonexistent"), "");
}

TEST(ResolveResumeTest, AutoNeedsSaveDir) {
  const absl::StatusOr<std::string> r = ResolveResume("auto", "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("--save_dir"));
}

TEST(ResolveResumeTest, AutoWithoutLatestIsFreshStart) {
  const std::string dir = test::ScratchDir();
  EXPECT_EQ(*ResolveResume("auto", dir), "");
  EXPECT_EQ(*ResolveResume("auto", dir + "/not_yet_created"), "");
}

TEST(ResolveResumeTest, FollowsLatestOrTakesStepDirectory) {
  const std::string dir = test::ScratchDir();
  ParameterSet params;
  AddModel(params, 2);
  Save(dir, 3, params);
  Save(dir, 7, params);
  EXPECT_EQ(ReadText(fs::path(dir) / "latest"), "step_00000007\n");
  const std::string step7 = (fs::path(dir) / "step_00000007").string();
  const std::string step3 = (fs::path(dir) / "step_00000003").string();
  EXPECT_EQ(*ResolveResume("auto", dir), step7);
  EXPECT_EQ(*ResolveResume(dir, ""), step7);
  EXPECT_EQ(*ResolveResume(step3, "ignored"), step3);
  const absl::StatusOr<TrainingState> state = ReadTrainingState(step3);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->step, 3);
  EXPECT_EQ(state->samples_consumed, 48);
  EXPECT_EQ(state->tokenizer, "byte");
}

TEST(ResolveResumeTest, StaleLatestIsAClearError) {
  const std::string dir = test::ScratchDir();
  WriteText(fs::path(dir) / "latest", "step_00000042\n");
  for (const std::string& resume : {std::string("auto"), dir}) {
    const absl::StatusOr<std::string> r = ResolveResume(resume, dir);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << resume;
    EXPECT_THAT(std::string(r.status().message()),
                AllOf(HasSubstr(dir + "/latest"), HasSubstr("step_00000042"),
                      HasSubstr("--resume")));
  }
}

TEST(ResolveResumeTest, AutoWithUnreadableLatestTakesNewestComplete) {
  const std::string dir = test::ScratchDir();
  ParameterSet params;
  AddModel(params, 2);
  SaveTraining(dir, 3, params);
  SaveTraining(dir, 7, params);
  // Newer, but weights only: not a checkpoint training resumes from.
  Save(dir, 9, params);
  for (const char* latest :
       std::initializer_list<const char*>{"", "  \n\t", nullptr}) {
    if (latest == nullptr) {
      fs::remove(fs::path(dir) / "latest");
    } else {
      WriteText(fs::path(dir) / "latest", latest);
    }
    const absl::StatusOr<ResumePoint> point = FindResumePoint("auto", dir);
    ASSERT_TRUE(point.ok()) << point.status();
    EXPECT_EQ(point->dir, dir + "/step_00000007");
    EXPECT_THAT(point->note, AllOf(HasSubstr(dir + "/latest"),
                                   HasSubstr(dir + "/step_00000007")));
  }
}

TEST(ResolveResumeTest, AutoPrefersANewerCompleteCheckpointToLatest) {
  // A save that died after publishing its directory, before `latest`.
  const std::string dir = test::ScratchDir();
  ParameterSet params;
  AddModel(params, 2);
  SaveTraining(dir, 3, params);
  SaveTraining(dir, 7, params);
  WriteText(fs::path(dir) / "latest", "step_00000003\n");
  const absl::StatusOr<ResumePoint> point = FindResumePoint("auto", dir);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->dir, dir + "/step_00000007");
  EXPECT_THAT(point->note, HasSubstr("step_00000003"));
  // Named outright, the checkpoint is taken as named.
  EXPECT_EQ(*ResolveResume(dir + "/step_00000003", dir),
            dir + "/step_00000003");
}

TEST(ResolveResumeTest, AutoSaysWhenItStartsFresh) {
  const std::string dir = test::ScratchDir();
  const absl::StatusOr<ResumePoint> point = FindResumePoint("auto", dir);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->dir, "");
  EXPECT_EQ(point->note, "starting fresh: no checkpoint in " + dir);
}

TEST(CheckNoLaterCheckpointsTest, NamesTheCheckpointsAStartWouldShadow) {
  const std::string dir = test::ScratchDir();
  EXPECT_TRUE(CheckNoLaterCheckpoints(dir + "/absent", 0).ok());
  ParameterSet params;
  AddModel(params, 2);
  for (int64_t step : {3, 7, 12}) SaveTraining(dir, step, params);
  fs::create_directory(fs::path(dir) / ".step_00000020.tmp");
  EXPECT_THAT(CheckpointSteps(dir), ElementsAre(3, 7, 12));
  const absl::Status status = CheckNoLaterCheckpoints(dir, 3);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(status.message());
  EXPECT_THAT(message, AllOf(HasSubstr("--save_dir=" + dir),
                             HasSubstr("step_00000007, step_00000012"),
                             HasSubstr("--resume=auto")));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("step_00000003")));
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_TRUE(CheckNoLaterCheckpoints(dir, 12).ok());
  EXPECT_TRUE(CheckNoLaterCheckpoints("", 0).ok());
}

TEST(ResolveResumeTest, NeitherCheckpointNorSaveDirIsAClearError) {
  const std::string dir = test::ScratchDir();
  const absl::StatusOr<std::string> r = ResolveResume(dir + "/nothing", "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()),
              AllOf(HasSubstr(dir + "/nothing"), HasSubstr("--resume")));
}

// A `latest` that is a directory was found only when the run's last save
// failed; one naming a checkpoint outside the save directory was followed.
TEST(ResolveResumeTest, LatestMustBeAFileNamingACheckpointOfTheDirectory) {
  const std::string dir = test::ScratchDir() + "/run";
  ParameterSet params;
  AddModel(params, 2);
  const std::string elsewhere = test::ScratchDir() + "/other";
  Save(elsewhere, 3, params);
  fs::create_directories(fs::path(dir) / "latest");
  for (const std::string& resume : {std::string("auto"), dir}) {
    const absl::StatusOr<std::string> r = ResolveResume(resume, dir);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(r.status().message()),
                AllOf(HasSubstr(dir + "/latest"), HasSubstr("not a file")));
  }
  EXPECT_THAT(std::string(CheckLatestPointer(dir).message()),
              HasSubstr("remove or rename it"));
  fs::remove(fs::path(dir) / "latest");
  for (const std::string& name :
       {elsewhere + "/step_00000003", std::string("../x/step_00000003")}) {
    WriteText(fs::path(dir) / "latest", name + "\n");
    const absl::StatusOr<std::string> r = ResolveResume("auto", dir);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(r.status().message()),
                AllOf(HasSubstr("names '" + name + "'"),
                      HasSubstr("--resume=<checkpoint directory>")));
  }
  fs::remove(fs::path(dir) / "latest");
  EXPECT_TRUE(CheckLatestPointer(dir).ok());
}

TEST(ReadTrainingStateTest, CorruptStateNamesTheFile) {
  const std::string dir = test::ScratchDir();
  WriteText(fs::path(dir) / "state.json", "{\"step\": ");
  absl::StatusOr<TrainingState> s = ReadTrainingState(dir);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr(dir + "/state.json"));
  WriteText(fs::path(dir) / "state.json", "{\"step\": 3}");
  s = ReadTrainingState(dir);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.status().message()),
              AllOf(HasSubstr(dir + "/state.json"), HasSubstr("missing")));
}

// A state.json whose fields parse but make no model or run: refused in
// one line naming the field. The model was used unchecked (a Llama's
// n_head 0 divided by zero when trellis-convert listed the model's
// tensors, and n_layer 10^12 listed them until memory ran out), and
// integers were read from floats (found with tests/fuzz/state_json_fuzz.cc).
TEST(ReadTrainingStateTest, ImpossibleModelOrCountsAreRefused) {
  const std::string dir = test::ScratchDir();
  const std::string model =
      R"({"n_layer": 2, "n_head": 2, "d_model": 8, "seq_len": 16,
          "vocab_size": 10)";
  struct Case {
    std::string model, rest;
    const char* what;
  };
  for (const Case& c : {
           Case{model + R"(, "family": "llama", "n_head": 0})", "",
                "model is invalid"},
           Case{model + R"(, "n_layer": 1000000000000})", "",
                "--n_layer=1000000000000"},
           Case{model + "}", R"(, "step": -5)", "step -5"},
           // Floats were cast to int64_t: undefined past its range.
           Case{model + "}", R"(, "step": 2.5)",
                R"("step" is 2.5, not a 64-bit integer)"},
           Case{model + "}", R"(, "layout": {"dp": 1e30, "tp": 1, "pp": 1})",
                R"("dp" is 1e+30, not a 64-bit integer)"},
           Case{model + "}", R"(, "seed": -1)", R"("seed" is -1)"},
           Case{model + "}", R"(, "layout": {"dp": 0, "tp": 1, "pp": 1})",
                "layout dp 0"},
           Case{model + "}",
                R"(, "data_sources": [{"path": "a", "weight": 2,
                                        "samples_consumed": 1}])",
                "data source a has weight 2"},
       }) {
    SCOPED_TRACE(c.what);
    // Later keys win in nlohmann::json: `rest` overrides the defaults.
    WriteText(fs::path(dir) / "state.json",
              R"({"step": 1, "samples_consumed": 8, "seed": 3,
                  "layout": {"dp": 1, "tp": 1, "pp": 1}, "model": )" +
                  c.model + c.rest + "}");
    const absl::StatusOr<TrainingState> s = ReadTrainingState(dir);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.status().message()),
                AllOf(HasSubstr(dir + "/state.json"), HasSubstr(c.what)));
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos);
  }
  WriteText(fs::path(dir) / "state.json",
            R"({"step": 1, "samples_consumed": 8, "seed": 3,
                "layout": {"dp": 1, "tp": 1, "pp": 1}, "model": )" +
                model + "}}");
  EXPECT_TRUE(ReadTrainingState(dir).ok());
}

// The routers' selection biases (--moe_bias_update_rate) must fit the
// model: a row per layer, each empty or one finite number per expert,
// and only for a model that moves them.
TEST(ReadTrainingStateTest, ExpertBiasMustFitTheModel) {
  const std::string dir = test::ScratchDir();
  const std::string moe =
      R"({"family": "moe", "n_layer": 2, "n_head": 2, "d_model": 8,
          "seq_len": 16, "vocab_size": 10, "n_kv_heads": 1,
          "ffn_hidden": 24, "experts": 4, "moe_bias_update_rate": 0.01)";
  auto state = [&](const std::string& model, const std::string& bias) {
    WriteText(fs::path(dir) / "state.json",
              R"({"step": 1, "samples_consumed": 8, "seed": 3,
                  "layout": {"dp": 1, "tp": 1, "pp": 1}, "model": )" +
                  model + R"(, "expert_bias": )" + bias + "}");
    return ReadTrainingState(dir);
  };
  absl::StatusOr<TrainingState> good =
      state(moe + "}", "[[], [0.01, -0.02, 0, 0.03]]");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->expert_bias, ExpertBias({{}, {0.01, -0.02, 0, 0.03}}));
  struct Case {
    std::string model, bias;
    const char* what;
  };
  for (const Case& c : {
           Case{moe + "}", "[[0.1, 0.2, 0.3, 0.4]]",
                "1 layers' rows but the model has 2"},
           Case{moe + "}", "[[], [0.1, 0.2]]",
                "layer 1 has 2 values but the model has 4 experts"},
           Case{moe + "}", R"([[], ["a", 0.2, 0.3, 0.4]])", "expert_bias"},
           Case{moe + R"(, "moe_bias_update_rate": 0})",
                "[[], [0.1, 0.2, 0.3, 0.4]]", "no moe_bias_update_rate"},
       }) {
    SCOPED_TRACE(c.what);
    const absl::StatusOr<TrainingState> s = state(c.model, c.bias);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.status().message()),
                AllOf(HasSubstr(dir + "/state.json"), HasSubstr(c.what)));
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos);
  }
}

TEST(PruneCheckpointsTest, KeepsTheNewest) {
  const std::string dir = test::ScratchDir();
  ParameterSet params;
  AddModel(params, 2);
  for (int64_t step : {2, 4, 6, 8, 10}) Save(dir, step, params);
  fs::create_directory(fs::path(dir) / ".step_00000012.tmp");
  ASSERT_TRUE(PruneCheckpoints(dir, 2).ok());
  EXPECT_THAT(Listing(dir), ElementsAre(".step_00000012.tmp", "latest",
                                        "step_00000008", "step_00000010"));
  ASSERT_TRUE(PruneCheckpoints(dir, 5).ok());
  EXPECT_THAT(Listing(dir), ElementsAre(".step_00000012.tmp", "latest",
                                        "step_00000008", "step_00000010"));
  EXPECT_EQ(*ResolveResume("auto", dir), dir + "/step_00000010");
}

TEST(PruneCheckpointsTest, NeverDeletesBeyondTheStepJustSaved) {
  const std::string dir = test::ScratchDir();
  ParameterSet params;
  AddModel(params, 2);
  for (int64_t step : {2, 4, 6, 8}) Save(dir, step, params);
  WriteText(fs::path(dir) / "latest", "step_00000004\n");
  ASSERT_TRUE(PruneCheckpoints(dir, 1, /*saved_step=*/4).ok());
  EXPECT_THAT(Listing(dir), ElementsAre("latest", "step_00000004",
                                        "step_00000006", "step_00000008"));
}

TEST(CrashedSaveTest, LeftoverTemporaryDirectoryLeavesLatestIntact) {
  const std::string dir = test::ScratchDir();
  ParameterSet saved;
  AddModel(saved, 2);
  Save(dir, 3, saved);
  // A save of step 4 that died midway: a partial directory, no rename.
  const fs::path tmp = fs::path(dir) / ".step_00000004.tmp";
  fs::create_directory(tmp);
  WriteText(tmp / "model.h5", "half a file");
  EXPECT_EQ(*ResolveResume("auto", dir), dir + "/step_00000003");
  ParameterSet loaded;
  AddModel(loaded, 2);
  for (Parameter* p : loaded.all()) p->value.data<float>()[0] = 99;
  ASSERT_TRUE(LoadCheckpoint(dir + "/step_00000003", loaded, nullptr).ok());
  EXPECT_EQ(loaded.Find("h.0.mlp.c_fc.weight")->value.data<float>()[0], 1.0f);
  EXPECT_EQ(loaded.Find("h.0.mlp.c_fc.bias")->value.data<float>()[2], -3.0f);

  // The next save of that step replaces the leftover and publishes.
  Save(dir, 4, saved);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(*ResolveResume("auto", dir), dir + "/step_00000004");
  ParameterSet again;
  AddModel(again, 2);
  EXPECT_TRUE(LoadCheckpoint(dir + "/step_00000004", again, nullptr).ok());
}

TEST(LoadCheckpointTest, AnotherModelSizeNamesFileAndTensor) {
  const std::string dir = test::ScratchDir();
  ParameterSet saved;
  AddModel(saved, 2);
  Save(dir, 1, saved);
  ParameterSet bigger;
  AddModel(bigger, 5);
  const absl::Status status =
      LoadCheckpoint(dir + "/step_00000001", bigger, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr(dir + "/step_00000001/model.h5"),
                    HasSubstr("h.0.mlp.c_fc.weight"), HasSubstr("(2, 3)"),
                    HasSubstr("(5, 3)")));
}

TEST(LoadCheckpointTest, MissingTensorNamesFileAndTensor) {
  const std::string dir = test::ScratchDir();
  ParameterSet saved;
  AddModel(saved, 2, /*with_bias=*/false);
  Save(dir, 1, saved);
  ParameterSet wanted;
  AddModel(wanted, 2, /*with_bias=*/true);
  const absl::Status status =
      LoadCheckpoint(dir + "/step_00000001", wanted, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr(dir + "/step_00000001/model.h5"),
                    HasSubstr("h.0.mlp.c_fc.bias")));
}

TEST(LoadCheckpointTest, MissingModelFileNamesIt) {
  const std::string dir = test::ScratchDir();
  ParameterSet params;
  AddModel(params, 2);
  const absl::Status status = LoadCheckpoint(dir, params, nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir + "/model.h5"));
}

// ZeRO-3's weights exist one group at a time: a save by WeightGroups reads
// each group only while it is open (one open at once, every group opened
// once, in order, its checksums taken while it is open and stored after
// the bytes), and writes what a save of the whole weights writes,
// checksums included; LoadCheckpointPart fills just the parameters it is
// given.
TEST(WeightGroupsTest, SavesGroupByGroupAndLoadsPartByPart) {
  const std::string dir = test::ScratchDir();
  ParameterSet params;
  AddModel(params, 4);
  Parameter& extra = params.Add("ln_f.weight", ShardSpec::Replicated({5}),
                                /*decay=*/false, Device::Cpu());
  for (int64_t i = 0; i < 5; ++i) extra.value.data<float>()[i] = 0.5f * i;
  std::vector<Tensor> kept;  // the weights, while their group is closed
  for (Parameter* p : params.all()) {
    kept.push_back(p->value);
    p->value = Tensor();
  }
  WeightGroups groups;
  groups.groups = {{params.all()[0], params.all()[1]}, {params.all()[2]}};
  std::vector<std::string> calls;
  int open = 0;
  auto index = [&](const Parameter* p) {
    return std::find(params.all().begin(), params.all().end(), p) -
           params.all().begin();
  };
  groups.open = [&](const std::vector<Parameter*>& g) {
    calls.push_back(absl::StrCat("open ", g.size()));
    ASSERT_EQ(open++, 0) << "two groups open at once";
    for (Parameter* p : g) p->value = kept[index(p)];
  };
  groups.close = [&](const std::vector<Parameter*>& g) {
    calls.push_back(absl::StrCat("close ", g.size()));
    --open;
    for (Parameter* p : g) p->value = Tensor();
  };
  SelfCommunicator world("world");
  TrainingState state;
  state.step = 3;
  state.tokenizer = "byte";
  ASSERT_TRUE(SaveCheckpoint(dir, state, params, nullptr, world,
                             /*writer=*/true, &groups)
                  .ok());
  EXPECT_THAT(calls, ElementsAre("open 2", "close 2", "open 1", "close 1"));
  {
    absl::StatusOr<TensorFileReader> reader =
        TensorFileReader::Open(dir + "/step_00000003/" + kModelFile);
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (const std::vector<Parameter*>& g : groups.groups) {
      for (const Parameter* p : g) {
        absl::StatusOr<TensorLocation> where = reader->Locate(p->name);
        ASSERT_TRUE(where.ok()) << where.status();
        EXPECT_TRUE(where->checksum.has_value()) << p->name;
      }
    }
  }
  // Read back whole (checksums verified) and part by part.
  ParameterSet whole;
  AddModel(whole, 4);
  whole.Add("ln_f.weight", ShardSpec::Replicated({5}), false, Device::Cpu());
  for (Parameter* p : whole.all()) p->value.Zero();
  ASSERT_TRUE(LoadCheckpoint(dir + "/step_00000003", whole, nullptr).ok());
  ParameterSet parts;
  AddModel(parts, 4);
  parts.Add("ln_f.weight", ShardSpec::Replicated({5}), false, Device::Cpu());
  for (Parameter* p : parts.all()) p->value.Zero();
  ASSERT_TRUE(LoadCheckpointPart(dir + "/step_00000003", parts,
                                 {parts.all()[2]}, nullptr)
                  .ok());
  EXPECT_EQ(parts.all()[0]->value.data<float>()[0], 0.0f)
      << "a parameter outside the part was read";
  ASSERT_TRUE(LoadCheckpointPart(dir + "/step_00000003", parts,
                                 {parts.all()[0], parts.all()[1]}, nullptr)
                  .ok());
  for (size_t i = 0; i < kept.size(); ++i) {
    for (const ParameterSet* loaded : {&whole, &parts}) {
      const Tensor& got = loaded->all()[i]->value;
      ASSERT_EQ(got.nbytes(), kept[i].nbytes());
      EXPECT_EQ(std::memcmp(got.raw(), kept[i].raw(), got.nbytes()), 0)
          << loaded->all()[i]->name;
    }
  }
}

}  // namespace
}  // namespace trellis
