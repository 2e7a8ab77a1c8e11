// Tokenizer identity: what it compares, and that token files keep it (and
// that files written without a tokenizer hash still open).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/hf_tokenizer.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "framework/hdf5.h"
#include "tests/data/hf_tokenizer_test_util.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

TEST(TokenizerIdentityTest, MismatchNamesWhatDiffers) {
  const TokenizerIdentity a{"hf", 1000, 999, "aa"};
  EXPECT_EQ(IdentityMismatch(a, a), "");
  EXPECT_THAT(IdentityMismatch(a, {"gpt2", 1000, 999, "aa"}),
              HasSubstr("tokenizer 'hf' vs 'gpt2'"));
  EXPECT_THAT(IdentityMismatch(a, {"hf", 1001, 999, "aa"}),
              HasSubstr("vocab_size 1000 vs 1001"));
  EXPECT_THAT(IdentityMismatch(a, {"hf", 1000, 0, "aa"}),
              HasSubstr("eot_token 999 vs 0"));
  EXPECT_THAT(IdentityMismatch(a, {"hf", 1000, 999, "bb"}),
              HasSubstr("sha256 aa vs bb"));
  // A side without a recorded hash matches any hash.
  EXPECT_EQ(IdentityMismatch(a, {"hf", 1000, 999, ""}), "");
}

TEST(TokenizerIdentityTest, HfIdentityHashesTheFile) {
  const std::string json = hf_testing::Llama3StyleJson();
  const std::string path = hf_testing::WriteTemp("identity.json", json);
  auto t = MakeTokenizer("hf:" + path, "");
  ASSERT_TRUE(t.ok()) << t.status();
  const TokenizerIdentity id = TokenizerIdentity::Of(**t);
  EXPECT_EQ(id.kind, "hf");
  EXPECT_EQ(id.vocab_size, (*t)->vocab_size());
  EXPECT_EQ(id.eot_token, (*t)->eot_token());
  EXPECT_EQ(id.sha256.size(), 64u);
  // One byte more is another tokenizer.
  const std::string other = hf_testing::WriteTemp("identity2.json", json + " ");
  auto t2 = MakeTokenizer("hf:" + other, "");
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_NE(TokenizerIdentity::Of(**t2).sha256, id.sha256);
  // Fixed tokenizers have no file to hash.
  EXPECT_EQ(TokenizerIdentity::Of(**MakeTokenizer("byte", "")).sha256, "");
}

void WriteOneDocument(const std::string& path,
                      const TokenFileMetadata& metadata) {
  auto writer = TokenDatasetWriter::Create(path, metadata);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::vector<uint32_t> doc = {3, 4, 5};
  ASSERT_TRUE((*writer)->AppendDocument(doc).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
}

TEST(TokenizerIdentityTest, TokenFileStoresAndReturnsIt) {
  const std::string path = TempPath("identity_tokens.h5");
  const std::string sha(64, 'c');
  WriteOneDocument(path, {"sentencepiece", 2000, 2, sha});
  auto dataset = TokenDataset::Open(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const TokenizerIdentity id = dataset->tokenizer_identity();
  EXPECT_EQ(id.kind, "sentencepiece");
  EXPECT_EQ(id.vocab_size, 2000);
  EXPECT_EQ(id.eot_token, 2);
  EXPECT_EQ(id.sha256, sha);
}

TEST(TokenizerIdentityTest, FilesWithoutAHashStillOpen) {
  const std::string path = TempPath("identity_old.h5");
  WriteOneDocument(path, {"gpt2", 50257, 50256});
  {
    auto file = hdf5::File::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_FALSE(file->HasAttribute("tokenizer_sha256"));
  }
  auto dataset = TokenDataset::Open(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->tokenizer_identity().sha256, "");
  EXPECT_EQ(dataset->tokenizer_identity().kind, "gpt2");
}

}  // namespace
}  // namespace trellis
