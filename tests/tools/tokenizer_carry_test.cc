// The hf tokenizer's file travels with the data and the model: preprocess
// keeps tokenizer.json in the token file, training writes it into every
// checkpoint, trellis-generate reads it from there (no --tokenizer), and
// trellis-convert --to=hf puts it beside the exported weights, so the
// export is a whole Hugging Face model directory. A checkpoint whose
// tokenizer.json is not the recorded one is refused, and so is a token
// file whose kept file does not hash to its tokenizer_sha256.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "data/token_dataset.h"
#include "data/tokenizer_file.h"
#include "framework/hdf5.h"
#include "framework/hdf5_bytes.h"
#include "tests/data/hf_tokenizer_test_util.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

class TokenizerCarryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    json_ = hf_testing::Llama3StyleJson();
    std::ofstream(dir_ + "/tokenizer.json", std::ios::binary) << json_;
    std::string text;
    for (const std::string& t : hf_testing::MixedTexts(200, {})) {
      text += t + "\n";
    }
    std::ofstream(dir_ + "/in.txt", std::ios::binary) << text;
  }

  int Run(const std::string& program, std::vector<std::string> flags,
          std::string* out) {
    flags.insert(flags.begin(), test::Program(program));
    const std::string log = dir_ + "/" + program + ".txt";
    std::filesystem::remove(log);
    const int code = test::RunProgram(flags, log);
    *out = test::ReadFile(log);
    return code;
  }

  // Preprocesses in.txt with the hf tokenizer, then trains a tiny Llama two
  // steps, saving each; returns the last checkpoint.
  std::string TrainedCheckpoint() {
    std::string out;
    EXPECT_EQ(Run("preprocess",
                  {"--input=" + dir_ + "/in.txt", "--output=" + data(),
                   "--tokenizer=hf:" + dir_ + "/tokenizer.json", "--split=line",
                   "--threads=1"},
                  &out),
              0)
        << out;
    TrainOptions o = test::TinyOptions(data());
    o.model.family = ModelFamilyKind::kLlama;
    o.model.n_kv_heads = 1;
    o.model.ffn_hidden = 32;
    o.steps = 2;
    o.eval_every = 0;
    o.val_fraction = 0;
    o.global_batch_size = 4;
    std::vector<std::string> flags =
        absl::StrSplit(o.ToFlagString(), '\n', absl::SkipEmpty());
    flags.push_back("--save_dir=" + dir_ + "/ckpt");
    flags.push_back("--save_every=1");
    EXPECT_EQ(Run("train", flags, &out), 0) << out;
    return dir_ + "/ckpt/step_00000002";
  }

  std::string data() const { return dir_ + "/data.h5"; }

  std::string dir_;
  std::string json_;
};

TEST_F(TokenizerCarryTest, TheTokenFileKeepsTheTokenizerFile) {
  TrainedCheckpoint();
  absl::StatusOr<TokenDataset> dataset = TokenDataset::Open(data());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  absl::StatusOr<std::optional<TokenizerFile>> kept =
      ReadTokenizerFile(data(), dataset->tokenizer_identity());
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(kept->has_value());
  EXPECT_EQ((*kept)->name, "tokenizer.json");
  EXPECT_EQ((*kept)->bytes, json_);
}

TEST_F(TokenizerCarryTest, CheckpointsHoldItAndGenerateAndExportUseIt) {
  const std::string checkpoint = TrainedCheckpoint();
  EXPECT_EQ(test::ReadFile(checkpoint + "/tokenizer.json"), json_);
  EXPECT_EQ(test::ReadFile(dir_ + "/ckpt/step_00000001/tokenizer.json"), json_);

  std::string out;
  EXPECT_EQ(Run("generate",
                {"--load=" + checkpoint, "--prompt=hello world",
                 "--max_new_tokens=4", "--temperature=0"},
                &out),
            0)
      << out;

  const std::string hf = dir_ + "/hf";
  EXPECT_EQ(Run("convert",
                {"--input=" + checkpoint, "--to=hf", "--output=" + hf}, &out),
            0)
      << out;
  EXPECT_EQ(test::ReadFile(hf + "/tokenizer.json"), json_);
  EXPECT_TRUE(std::filesystem::exists(hf + "/config.json"));

  // Back to trellis: the file comes along again.
  EXPECT_EQ(Run("convert",
                {"--input=" + checkpoint, "--to=trellis",
                 "--output=" + dir_ + "/again"},
                &out),
            0)
      << out;
  EXPECT_EQ(test::ReadFile(dir_ + "/again/step_00000002/tokenizer.json"),
            json_);
}

TEST_F(TokenizerCarryTest, AnotherTokenizerFileInTheCheckpointIsRefused) {
  const std::string checkpoint = TrainedCheckpoint();
  std::ofstream(checkpoint + "/tokenizer.json",
                std::ios::binary | std::ios::app)
      << " ";
  std::string out;
  EXPECT_NE(
      Run("generate",
          {"--load=" + checkpoint, "--prompt=hello", "--max_new_tokens=2"},
          &out),
      0);
  EXPECT_THAT(out, HasSubstr("is not the tokenizer"));
  EXPECT_NE(
      Run("convert",
          {"--input=" + checkpoint, "--to=hf", "--output=" + dir_ + "/hf"},
          &out),
      0);
  EXPECT_THAT(out, HasSubstr("is not the tokenizer"));
}

TEST_F(TokenizerCarryTest, AKeptFileThatIsNotTheTokenizersIsDataLoss) {
  TokenFileMetadata metadata{"hf", 300, 299, std::string(64, 'a')};
  const std::string path = dir_ + "/forged.h5";
  {
    absl::StatusOr<std::unique_ptr<TokenDatasetWriter>> writer =
        TokenDatasetWriter::Create(path, metadata);
    ASSERT_TRUE(writer.ok()) << writer.status();
    // The writer refuses a file that is not the tokenizer's...
    const absl::Status refused =
        (*writer)->KeepTokenizerFile({"tokenizer.json", json_});
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE((*writer)->AppendDocument(std::vector<uint32_t>{1, 2}).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  // ...and a reader one put there by other means.
  absl::StatusOr<hdf5::File> file =
      hdf5::File::Open(path, hdf5::OpenMode::kReadWrite);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE(hdf5::WriteBytes(*file, "tokenizer_file", json_).ok());
  ASSERT_TRUE(file->Close().ok());
  absl::StatusOr<std::optional<TokenizerFile>> kept =
      ReadTokenizerFile(path, metadata.identity());
  EXPECT_EQ(kept.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(kept.status().message()),
              HasSubstr("does not hash to the tokenizer_sha256"));
}

}  // namespace
}  // namespace trellis
