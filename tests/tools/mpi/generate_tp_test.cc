// Generation's cached forward under tensor parallelism: on 4 ranks, tp
// groups of 1, 2 and 4 give every rank the logits one rank computes alone,
// to 1e-5, for every family (Llama with 4 key/value heads split over tp
// up to 4, 2 split over tp 2 and replicated over tp 4, and 1 replicated;
// Llama with Qwen3's q/k norms; a mixture of experts with them), prefill
// and one token at a time; and tp groups return the same logits on each of
// their ranks.
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

// GPT-2, Llama, or (qwen3) Llama with Qwen3's attention, or (experts) a
// mixture of experts with it: a dense layer, then 4 experts, 2 per token.
ModelConfig Config(ModelFamilyKind family, int64_t kv_heads, bool qwen3 = false,
                   bool experts = false) {
  ModelConfig c;
  c.family = family;
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 32;
  c.seq_len = 24;
  c.vocab_size = 257;  // No tp > 1 divides it: the head is padded.
  if (family == ModelFamilyKind::kLlama) {
    c.n_kv_heads = kv_heads;
    c.ffn_hidden = 64;
  }
  if (qwen3) {
    c.qk_norm = true;
    c.head_dim = 12;
  }
  if (experts) {
    c.family = ModelFamilyKind("moe");
    c.experts = 4;
    c.moe_ffn_hidden = 32;
    c.moe_first_dense = 1;
  }
  return c;
}

// Logits after each token of a 20-token sequence: a prefill of 4, then one
// at a time.
std::vector<std::vector<float>> DecodeLogits(const ModelConfig& config,
                                             Communicator& tp) {
  const TpPlace place{tp.size(), tp.rank()};
  ParameterSet params;
  AddModelParameters(config, ChunkPlan{0, config.n_layer, true, true}, place,
                     /*seed=*/9, Device::Cpu(), DType::kF32, params);
  std::unique_ptr<ModelDecoder> decoder = FamilyOf(config).NewDecoder(
      config, DecoderSetup{place, &tp, &params, Device::Cpu(), DType::kF32});
  std::vector<int32_t> sequence;
  for (int32_t i = 0; i < 20; ++i) sequence.push_back((i * 61 + 5) % 257);
  std::vector<std::vector<float>> out;
  out.push_back(decoder->Forward(std::span<const int32_t>(sequence.data(), 4)));
  for (size_t i = 4; i < sequence.size(); ++i) {
    out.push_back(decoder->Forward(std::span<const int32_t>(&sequence[i], 1)));
  }
  return out;
}

class GenerateTpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runtime_ = new MpiRuntime(nullptr, nullptr); }
  static void TearDownTestSuite() { delete runtime_; }
  static MpiRuntime* runtime_;
};

MpiRuntime* GenerateTpTest::runtime_ = nullptr;

TEST_F(GenerateTpTest, EveryTpGivesOneRanksLogits) {
  ASSERT_EQ(mpitest::WorldSize(), 4) << "run with 4 ranks";
  const ParallelContext single = ParallelContext::Single();
  const ModelFamilyKind llama = ModelFamilyKind::kLlama;
  for (const ModelConfig& config :
       {Config(ModelFamilyKind::kGpt2, 4), Config(llama, 4), Config(llama, 2),
        Config(llama, 1), Config(llama, 1, /*qwen3=*/true),
        Config(llama, 2, /*qwen3=*/true, /*experts=*/true)}) {
    const ModelFamilyKind family = config.family;
    const int64_t kv_heads = config.kv_heads();
    const auto want = DecodeLogits(config, *single.groups().tp);
    for (int tp : {1, 2, 4}) {
      // Key/value heads split over tp, or replicated when tp exceeds them.
      if (kv_heads % tp != 0 && tp % kv_heads != 0) continue;
      absl::StatusOr<Mesh> mesh = Mesh::Create(4, 4 / tp, tp, 1);
      ASSERT_TRUE(mesh.ok()) << mesh.status();
      absl::StatusOr<ParallelContext> context =
          ParallelContext::Create(*runtime_, *mesh);
      ASSERT_TRUE(context.ok()) << context.status();
      const auto got = DecodeLogits(config, *context->groups().tp);
      ASSERT_EQ(got.size(), want.size());
      const std::string what = absl::StrCat(ModelFamilyName(family),
                                            config.qk_norm ? " qk_norm" : "",
                                            " kv ", kv_heads, " tp ", tp);
      for (size_t s = 0; s < want.size(); ++s) {
        ASSERT_EQ(got[s].size(), 257u) << what;
        for (size_t v = 0; v < want[s].size(); ++v) {
          ASSERT_NEAR(got[s][v], want[s][v], 1e-5)
              << what << " step " << s << " id " << v;
        }
      }
    }
  }
}

}  // namespace
}  // namespace trellis
