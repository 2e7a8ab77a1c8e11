// Tiny checkpoints of both families for the generation tests, trained once
// per test program by trellis-train on synthetic byte tokens: 2 layers, 32
// wide, 4 heads (Llama: 2 key/value heads), a context of 48 tokens, so 32
// new tokens follow a prompt of up to 16. 60 steps teach them the
// synthetic text's letter pattern, so greedy continuations vary.
#ifndef TRELLIS_TESTS_TOOLS_GENERATE_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_GENERATE_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/tools_test_util.h"

namespace trellis::test {

inline constexpr int64_t kGenerateContext = 48;

// The save directory of a tiny checkpoint of `family` ("gpt2" or
// "llama"), trained on first use in this process (empty after a failure,
// which the test reports).
inline std::string TinyCheckpoint(const std::string& family) {
  const std::filesystem::path root =
      std::filesystem::path(::testing::TempDir()) /
      absl::StrCat("trellis_generate.", ::getpid());
  const std::filesystem::path dir = root / family;
  if (std::filesystem::exists(dir / "latest")) return dir.string();
  std::filesystem::create_directories(root);
  const std::string data = (root / "tokens.h5").string();
  if (!std::filesystem::exists(data)) {
    const absl::Status written = WriteSyntheticTokens(data, kByteVocab, 6000);
    EXPECT_TRUE(written.ok()) << written;
  }
  TrainOptions o = TinyOptions(data);
  o.model.n_layer = 2;
  o.model.n_head = 4;
  o.model.d_model = 32;
  o.model.seq_len = kGenerateContext;
  o.steps = 60;
  o.eval_every = 0;
  const bool experts = family == "moe" || family == "moe-bias";
  if (family == "llama" || experts) {
    o.model.family = ModelFamilyKind::kLlama;
    o.model.n_kv_heads = 2;
    o.model.ffn_hidden = 64;
  }
  if (experts) {
    // A dense layer, then one of 4 experts, 2 per token, with Qwen3's
    // attention (q/k norms, heads 12 wide); "moe-bias" as DeepSeek-V3
    // balances by a selection bias instead of the auxiliary loss and adds a
    // shared expert.
    o.model.family = ModelFamilyKind("moe");
    o.model.qk_norm = true;
    o.model.head_dim = 12;
    o.model.experts = 4;
    o.model.experts_per_token = 2;
    o.model.moe_ffn_hidden = 32;
    o.model.moe_first_dense = 1;
    o.model.moe_aux_loss_coeff = family == "moe" ? 0.01 : 0.0;
    o.model.moe_bias_update_rate = family == "moe" ? 0.0 : 0.01;
    o.model.moe_shared_ffn_hidden = family == "moe" ? 0 : 16;
  }
  std::vector<std::string> train = {Program("train")};
  for (const std::string& flag : std::vector<std::string>(
           absl::StrSplit(o.ToFlagString(), '\n', absl::SkipEmpty()))) {
    train.push_back(flag);
  }
  train.push_back("--save_dir=" + dir.string());
  const std::string log = (root / (family + ".log")).string();
  EXPECT_EQ(RunProgram(train, log), 0) << ReadFile(log);
  return dir.string();
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_GENERATE_TEST_UTIL_H_
