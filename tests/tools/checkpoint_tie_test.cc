// A checkpoint's files belong together: state.json names the digests of
// the model.h5 and optimizer.h5 it was saved with, so files of another
// save in the same directory are refused at load (two runs sharing one
// --save_dir once published one run's state beside the other's weights).
// And a save of a step already on disk replaces it only when it is the
// same step at a later data position (a run that gave up twice).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/checkpoint_files.h"
#include "tools/checkpoint/file_tie.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A model of one (4, 3) weight filled with `base` + i, with moments.
ParameterSet Model(float base) {
  ParameterSet params;
  Parameter& w = params.Add("h.0.mlp.c_fc.weight",
                            ShardSpec::Replicated({4, 3}), true, Device::Cpu());
  for (int64_t i = 0; i < w.numel(); ++i) {
    w.value.data<float>()[i] = base + static_cast<float>(i);
  }
  return params;
}

// Weights and both moments, all sharing each parameter's values.
CheckpointShards TrainingShards(const ParameterSet& params) {
  CheckpointShards shards;
  for (const Parameter* p : params.all()) {
    shards.model.push_back({p->name, p->spec, p->value});
    shards.exp_avg.push_back({p->name, p->spec, p->value});
    shards.exp_avg_sq.push_back({p->name, p->spec, p->value});
  }
  return shards;
}

// Saves `params` (its values as both moments too) as step `step` having
// consumed `samples` windows; returns the checkpoint's directory.
std::string Save(const std::string& save_dir, const ParameterSet& params,
                 int64_t step, int64_t samples) {
  SelfCommunicator world("world");
  TrainingState state;
  state.step = step;
  state.samples_consumed = samples;
  CheckpointShards shards = TrainingShards(params);
  shards.optimizer_step = step;
  EXPECT_TRUE(SaveShards(save_dir, state, shards, world, true).ok());
  return save_dir + "/" + CheckpointName(step);
}

// Loads checkpoint `dir` (weights and moments) into a fresh model.
absl::Status Load(const std::string& dir) {
  ParameterSet params = Model(0);
  CheckpointShards shards = TrainingShards(params);
  return LoadShards(dir, shards);
}

TEST(CheckpointTieTest, StateRecordsItsFilesAndLoadsThem) {
  const std::string dir = Save(test::ScratchDir(), Model(1), 2, 8);
  absl::StatusOr<TrainingState> state = ReadTrainingState(dir);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->files.size(), 2u);
  EXPECT_THAT(state->files.at(kModelFile), HasSubstr("sha256:"));
  EXPECT_NE(state->files.at(kModelFile), state->files.at(kOptimizerFile));
  EXPECT_TRUE(Load(dir).ok()) << Load(dir);
}

TEST(CheckpointTieTest, FilesOfAnotherSaveAreRefusedNamingBoth) {
  const std::string root = test::ScratchDir();
  const std::string mine = Save(root + "/a", Model(1), 2, 8);
  const std::string other = Save(root + "/b", Model(100), 2, 8);
  for (const char* name : {kModelFile, kOptimizerFile}) {
    SCOPED_TRACE(name);
    const std::string keep = root + "/kept";
    fs::copy_file(mine + "/" + name, keep,
                  fs::copy_options::overwrite_existing);
    fs::copy_file(other + "/" + name, mine + "/" + name,
                  fs::copy_options::overwrite_existing);
    const absl::Status loaded = Load(mine);
    EXPECT_EQ(loaded.code(), absl::StatusCode::kDataLoss) << loaded;
    EXPECT_THAT(loaded.message(), HasSubstr(mine + "/" + name));
    EXPECT_THAT(loaded.message(), HasSubstr(mine + "/state.json"));
    EXPECT_THAT(loaded.message(), HasSubstr("two saves"));
    fs::copy_file(keep, mine + "/" + name,
                  fs::copy_options::overwrite_existing);
    EXPECT_TRUE(Load(mine).ok());
  }
}

// A load in parts (trellis-convert reads one tensor at a time, ZeRO one
// group at a time) digests each file once, not once per part: the digest
// reads every tensor's metadata, so per part it was quadratic in the
// tensors. A file replaced since is digested (and refused) again.
TEST(CheckpointTieTest, ALoadInPartsDigestsEachFileOnce) {
  const std::string root = test::ScratchDir();
  const std::string mine = Save(root + "/a", Model(1), 2, 8);
  const int64_t before = FileTieDigests();
  for (int part = 0; part < 5; ++part) ASSERT_TRUE(Load(mine).ok());
  EXPECT_EQ(FileTieDigests() - before, 2);  // model.h5 and optimizer.h5
  const std::string other = Save(root + "/b", Model(100), 2, 8);
  fs::copy_file(other + "/" + kModelFile, mine + "/" + kModelFile,
                fs::copy_options::overwrite_existing);
  EXPECT_EQ(Load(mine).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(FileTieDigests() - before, 3);
}

TEST(CheckpointTieTest, CheckpointsWithoutDigestsStillLoad) {
  const std::string dir = Save(test::ScratchDir(), Model(1), 2, 8);
  absl::StatusOr<TrainingState> state = ReadTrainingState(dir);
  ASSERT_TRUE(state.ok());
  // An older checkpoint: state.json without "files".
  std::ifstream in(dir + "/state.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const size_t at = text.find("\"files\"");
  ASSERT_NE(at, std::string::npos);
  const size_t end = text.find('}', at);
  text.erase(at, end + 2 - at);
  std::ofstream(dir + "/state.json", std::ios::trunc) << text;
  state = ReadTrainingState(dir);
  ASSERT_TRUE(state.ok()) << state.status() << "\n" << text;
  EXPECT_TRUE(state->files.empty());
  EXPECT_TRUE(Load(dir).ok());
}

// A run that gave up at step 2 (its steps skipped) and, resumed, gave up
// again at step 2 further into the data kept the first save: the second's
// position was lost.
TEST(CheckpointTieTest, ALaterPositionOfTheSameStepReplacesTheSave) {
  const std::string save_dir = test::ScratchDir();
  const std::string dir = Save(save_dir, Model(1), 2, 8);
  Save(save_dir, Model(2), 2, 16);
  absl::StatusOr<TrainingState> state = ReadTrainingState(dir);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->samples_consumed, 16);
  EXPECT_TRUE(Load(dir).ok());
  // An earlier position never replaces a later one.
  Save(save_dir, Model(3), 2, 12);
  state = ReadTrainingState(dir);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->samples_consumed, 16);
  // Nothing of the replaced save is left behind.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(save_dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", CheckpointName(2)}));
}

}  // namespace
}  // namespace trellis
