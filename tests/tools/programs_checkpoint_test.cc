// Checkpoints through the real programs: resuming or evaluating one with
// another model size, vocabulary, tokenizer, seed or batch, from a damaged
// or corrupt checkpoint, or into a save directory that holds later steps.
// Each refusal ends with a nonzero exit status and one stderr line,
// "<program>: error: ...", naming the file, tensor or flag at fault
// (ProgramsTest, programs_test_util.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/tools/programs_test_util.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/shard_io.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using programs_test::ProgramResult;
using programs_test::ProgramsTest;
using programs_test::ReadFile;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST_F(ProgramsTest, TrainResumeOfAnotherModelSize) {
  const std::string ckpt = MakeCheckpoint();
  Train({"--resume=" + ckpt, "--d_model=32"},
        {ckpt, "d_model=16", "d_model=32"});
}

TEST_F(ProgramsTest, TrainResumeWithAnotherVocabulary) {
  const std::string ckpt = MakeCheckpoint();
  const std::string gpt2 = dir_ + "/gpt2.h5";
  test::WriteTokenFile(gpt2, test::kGpt2Vocab, 2000);
  Train({"--resume=" + ckpt, "--data=" + gpt2},
        {ckpt, "vocab_size=257", "vocab_size=50257"});
}

TEST_F(ProgramsTest, TrainResumeFromDamagedCheckpoints) {
  const std::string ckpt = MakeCheckpoint();
  const std::string step = ckpt + "/step_00000002";
  Train({"--resume=" + dir_ + "/nothing"}, {"--resume=" + dir_ + "/nothing"});
  // A stale `latest`: it names a checkpoint that is gone.
  std::ofstream(ckpt + "/latest", std::ios::trunc) << "step_00000009\n";
  Train({"--resume=" + ckpt}, {ckpt + "/latest", "step_00000009"});
  const std::string model = step + "/model.h5";
  fs::resize_file(model, fs::file_size(model) / 2);
  Train({"--resume=" + step}, {model});
  std::ofstream(step + "/state.json", std::ios::trunc) << "{\"step\": 2";
  Train({"--resume=" + step}, {step + "/state.json"});
}

TEST_F(ProgramsTest, TrainResumeAutoWithUnreadableLatestTakesNewest) {
  const std::string save = dir_ + "/ckpt";
  const std::vector<std::string> keep = {"--save_dir=" + save,
                                         "--keep_checkpoints=1"};
  ProgramResult r = TrainOk({keep[0], keep[1], "--resume=auto"});
  EXPECT_THAT(r.out,
              HasSubstr("resume: starting fresh: no checkpoint in " + save))
      << r.out;
  int64_t step = 2;
  for (const char* latest :
       std::initializer_list<const char*>{"", " \n", nullptr}) {
    if (latest == nullptr) {
      fs::remove(save + "/latest");
    } else {
      std::ofstream(save + "/latest", std::ios::trunc) << latest;
    }
    const std::string from = save + "/" + absl::StrFormat("step_%08d", step);
    step += 2;
    r = TrainOk(
        {keep[0], keep[1], "--resume=auto", absl::StrCat("--steps=", step)});
    EXPECT_THAT(r.out, AllOf(HasSubstr(save + "/latest is missing or empty"),
                             HasSubstr("resumed from " + from)))
        << r.out;
    // The checkpoint it resumed from was older: only the new one is kept.
    EXPECT_FALSE(fs::exists(from));
    EXPECT_TRUE(fs::exists(save + absl::StrFormat("/step_%08d", step)));
  }
}

TEST_F(ProgramsTest, TrainIntoASaveDirWithLaterCheckpointsIsRefused) {
  const std::string save = dir_ + "/ckpt";
  TrainOk({"--save_dir=" + save, "--steps=4", "--save_every=2"});
  // Resuming from step 2 into the same directory would save step 4 over
  // nothing: the first run's step 4 stays and this run's weights are lost.
  Train({"--save_dir=" + save, "--steps=4",
         "--resume=" + save + "/step_00000002"},
        {"--save_dir=" + save, "step_00000004", "--resume=auto"});
  // So would a fresh start (no --resume) into it.
  Train({"--save_dir=" + save, "--steps=4"},
        {"step_00000002, step_00000004", "beyond step 0"});
  EXPECT_EQ(ReadFile(save + "/latest"), "step_00000004\n");
  EXPECT_TRUE(fs::exists(save + "/step_00000002/model.h5"));
  // Continuing from the newest is fine.
  const ProgramResult r =
      TrainOk({"--save_dir=" + save, "--steps=6", "--resume=auto"});
  EXPECT_THAT(r.out, HasSubstr("resumed from " + save + "/step_00000004"));
  EXPECT_EQ(ReadFile(save + "/latest"), "step_00000006\n");
}

TEST_F(ProgramsTest, TrainResumeWithAnotherSeedOrBatchIsRefused) {
  const std::string ckpt = MakeCheckpoint();
  Train({"--resume=" + ckpt, "--steps=4", "--seed=7"},
        {ckpt, "--seed=1337", "--seed=7"});
  Train({"--resume=" + ckpt, "--steps=4", "--global_batch_size=8"},
        {ckpt, "--global_batch_size=4", "--global_batch_size=8"});
  TrainOk({"--resume=" + ckpt, "--steps=4"});
}

TEST_F(ProgramsTest, EvalWithAnotherVocabulary) {
  const std::string ckpt = MakeCheckpoint();
  const std::string gpt2 = dir_ + "/gpt2.h5";
  test::WriteTokenFile(gpt2, test::kGpt2Vocab, 2000);
  ExpectError("eval", {"--load=" + ckpt, "--data=" + gpt2},
              {ckpt, "vocab_size=257", "vocab_size=50257"});
}

// Same vocabulary size, another tokenizer: the ids mean other strings.
TEST_F(ProgramsTest, ResumeAndEvalWithAnotherTokenizer) {
  const std::string ckpt = MakeCheckpoint();
  const std::string other = dir_ + "/other.h5";
  test::WriteTokenFile(other, {"other-bytes", 257, 256}, 6000);
  Train({"--resume=" + ckpt, "--data=" + other},
        {ckpt, "'byte'", "'other-bytes'", "--tokenizer=byte"});
  ExpectError("eval", {"--load=" + ckpt, "--data=" + other},
              {ckpt, "'byte'", "'other-bytes'"});
}

// Flips one byte in the middle of tensor `path`'s data in `file`.
void FlipTensorByte(const std::string& file, const std::string& path) {
  int64_t at = 0;
  {
    absl::StatusOr<TensorFileReader> r = TensorFileReader::Open(file);
    ASSERT_TRUE(r.ok()) << r.status();
    absl::StatusOr<TensorLocation> where = r->Locate(path);
    ASSERT_TRUE(where.ok() && where->offset > 0) << where.status();
    at = where->offset + NumElements(where->shape) * 2 + 1;
  }
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char c = static_cast<char>(f.get() ^ 0x10);
  f.seekp(at);
  f.put(c);
}

// A corrupt tensor stops eval, resume and convert, naming the tensor.
TEST_F(ProgramsTest, CorruptCheckpointTensorsAreRefusedByName) {
  const std::string step = MakeCheckpoint() + "/step_00000002";
  const std::string model = step + "/model.h5";
  const std::string copy = dir_ + "/model.h5.good";
  fs::copy_file(model, copy);
  FlipTensorByte(model, "h.0.mlp.c_fc.weight");
  const std::vector<std::string> names = {model, "h.0.mlp.c_fc.weight",
                                          "checksum"};
  ExpectError("eval", {"--load=" + step, "--data=" + byte_data_}, names);
  Train({"--resume=" + step}, names);
  ExpectError("convert",
              {"--input=" + step, "--output=" + dir_ + "/hf", "--to=hf"},
              names);
  fs::copy_file(copy, model, fs::copy_options::overwrite_existing);
  const std::string opt = step + "/optimizer.h5";
  FlipTensorByte(opt, "exp_avg_sq/wte");
  Train({"--resume=" + step}, {opt, "exp_avg_sq/wte"});
  ExpectError("convert",
              {"--input=" + step, "--output=" + dir_ + "/t", "--to=trellis"},
              {opt, "exp_avg_sq/wte"});
}

}  // namespace
}  // namespace trellis
