// Helpers shared by the trainer tests: a fresh scratch directory per test,
// small synthetic token files, and the options of a tiny model that trains
// in milliseconds.
//
// Thread safety: none needed; each test calls these from its own thread.
#ifndef TRELLIS_TESTS_TOOLS_TOOLS_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_TOOLS_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/token_dataset.h"
#include "parallel/bootstrap.h"
#include "tools/options/options.h"
#include "tools/trainer/trainer.h"

namespace trellis::test {

// An empty directory that belongs to the running test alone (ctest runs
// tests of this binary in parallel, each in its own process).
inline std::string ScratchDir() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      absl::StrCat("trellis_", info->test_suite_name(), ".", info->name(), ".",
                   ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// The byte tokenizer's vocabulary: 257 ids, which no tp > 1 divides, so
// the embedding is padded in memory.
inline const TokenFileMetadata kByteVocab{"byte", 257, 256};
inline const TokenFileMetadata kGpt2Vocab{"gpt2", 50257, 50256};

// Writes a token file of about `num_tokens` tokens: documents of 40 to 100
// tokens from a fixed linear congruential sequence, so the text has
// structure a model can learn a little of and every run sees the same data.
inline absl::Status WriteSyntheticTokens(const std::string& path,
                                         const TokenFileMetadata& metadata,
                                         int64_t num_tokens) {
  auto writer = TokenDatasetWriter::Create(path, metadata);
  if (!writer.ok()) return writer.status();
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  };
  for (int64_t written = 0; written < num_tokens;) {
    std::vector<uint32_t> doc(40 + next() % 61);
    for (size_t i = 0; i < doc.size(); ++i) {
      // Mostly a repeating alphabet, sometimes a random id.
      doc[i] = next() % 8 == 0
                   ? next() % static_cast<uint32_t>(metadata.eot_token)
                   : static_cast<uint32_t>(97 + (i * 7 + doc.size()) % 26);
    }
    absl::Status appended = (*writer)->AppendDocument(doc);
    if (!appended.ok()) return appended;
    written += static_cast<int64_t>(doc.size()) + 1;
  }
  return (*writer)->Finish();
}

inline void WriteTokenFile(const std::string& path,
                           const TokenFileMetadata& metadata,
                           int64_t num_tokens = 6000) {
  const absl::Status written = WriteSyntheticTokens(path, metadata, num_tokens);
  ASSERT_TRUE(written.ok()) << written;
}

// A 2-layer, 16-wide model on windows of 16 tokens, 16 windows per step in
// microbatches of 4, no evaluation, no logging noise.
inline TrainOptions TinyOptions(const std::string& data) {
  TrainOptions o;
  o.model.n_layer = 2;
  o.model.n_head = 2;
  o.model.d_model = 16;
  o.model.seq_len = 16;
  o.data = data;
  o.val_fraction = 0.05;
  o.micro_batch_size = 4;
  o.global_batch_size = 16;
  o.steps = 10;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.warmup_steps = 2;
  o.log_every = 1000;
  return o;
}

// `o`'s model as a small mixture of experts: 3 layers, a dense one then
// two of 4 SwiGLU experts 16 wide, 2 per token, with the Switch aux loss.
inline TrainOptions TinyMixture(TrainOptions o) {
  o.model.family = ModelFamilyKind("moe");
  o.model.n_layer = 3;
  o.model.n_kv_heads = o.model.n_head / 2;
  o.model.ffn_hidden = 32;
  o.model.experts = 4;
  o.model.experts_per_token = 2;
  o.model.moe_ffn_hidden = 16;
  o.model.moe_first_dense = 1;
  o.model.moe_aux_loss_coeff = 0.01;
  return o;
}

// A trainer for `o` on `context`'s ranks, or null after a test failure
// naming why it could not be made.
inline std::unique_ptr<Trainer> MakeTrainer(const TrainOptions& o,
                                            const ParallelContext& context) {
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(o, context.groups(), context.coord());
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? std::move(*trainer) : nullptr;
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_TOOLS_TEST_UTIL_H_
