// Programs that load a checkpoint build their model with
// ParameterFill::kZero: no initializer runs, the load writes the values.
// Every element must then be what initializing and loading gives, to the
// bit, on every tp piece of GPT-2 and Llama (padded vocabulary rows zero,
// key/value heads replicated over tp ranks, an untied head), in float32
// and bfloat16. The checkpoint's values are an initialization of another
// seed plus one, so no element can pass by holding its initial value or
// a zero it should not.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/communicator.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

constexpr uint64_t kSavedSeed = 5;
constexpr uint64_t kRunSeed = 1;

ChunkPlan Whole(const ModelConfig& c) {
  return ChunkPlan{0, c.n_layer, true, true};
}

// The model of seed kSavedSeed on tp rank `tp`, one added to every real
// element: what loading the saved checkpoint must give.
void BuildSaved(const ModelConfig& c, TpPlace tp, ParameterSet& params) {
  AddModelParameters(c, Whole(c), tp, kSavedSeed, Device::Cpu(), DType::kF32,
                     params);
  for (Parameter* p : params.all()) {
    float* v = p->value.data<float>();
    p->spec.ForEachElement([&](int64_t local, int64_t logical) {
      if (logical >= 0) v[local] += 1.0f;
    });
  }
}

std::string SaveWhole(const ModelConfig& c, const std::string& dir) {
  ParameterSet params;
  BuildSaved(c, TpPlace{}, params);
  SelfCommunicator world("world");
  TrainingState state;
  state.step = 1;
  state.model = c;
  state.tokenizer = "byte";
  const absl::Status saved =
      SaveCheckpoint(dir, state, params, nullptr, world, true);
  EXPECT_TRUE(saved.ok()) << saved;
  return dir + "/" + CheckpointName(1);
}

void ExpectSameBits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
}

// Loads `ckpt` into rank `tp` of models built both ways and compares them
// with each other and with what was saved; adds the padding elements seen
// to `padding`.
void ExpectLoadWithoutInitSame(const ModelConfig& c, const std::string& ckpt,
                               TpPlace tp, DType dtype, int64_t* padding) {
  ParameterSet initialized, zeroed, saved;
  AddModelParameters(c, Whole(c), tp, kRunSeed, Device::Cpu(), dtype,
                     initialized);
  AddModelParameters(c, Whole(c), tp, kRunSeed, Device::Cpu(), dtype, zeroed,
                     ParameterFill::kZero);
  BuildSaved(c, tp, saved);
  ASSERT_TRUE(LoadCheckpoint(ckpt, initialized, nullptr).ok());
  ASSERT_TRUE(LoadCheckpoint(ckpt, zeroed, nullptr).ok());
  ASSERT_EQ(zeroed.all().size(), initialized.all().size());
  for (const Parameter* p : zeroed.all()) {
    const std::string what = absl::StrCat(p->name, " tp ", tp.rank, "/",
                                          tp.size, " ", DTypeName(dtype));
    const Parameter& q = initialized.Get(p->name);
    ExpectSameBits(p->value, q.value, what + " value");
    if (dtype == DType::kBF16) ExpectSameBits(p->master, q.master, what);
    ExpectSameBits(p->weights(), saved.Get(p->name).value, what + " saved");
    p->spec.ForEachElement([&](int64_t local, int64_t logical) {
      if (logical < 0) {
        ++*padding;
        EXPECT_EQ(std::bit_cast<uint32_t>(p->weights().data<float>()[local]),
                  0u)
            << what << " padding " << local;
      }
    });
  }
}

void ExpectAllLayouts(const ModelConfig& c, const std::vector<int64_t>& tps) {
  const std::string ckpt = SaveWhole(c, test::ScratchDir());
  for (int64_t tp : tps) {
    int64_t padding = 0;
    for (int64_t t = 0; t < tp; ++t) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        ExpectLoadWithoutInitSame(c, ckpt, TpPlace{tp, t}, dtype, &padding);
      }
    }
    // GPT-2's vocabulary is padded (to 50304 rows at tp 1) on every layout.
    EXPECT_GT(padding, 0) << "tp " << tp;
  }
}

TEST(LoadWithoutInitTest, Gpt2EveryTpPieceEqualsInitializedThenLoaded) {
  ModelConfig c;
  c.vocab_size = 50257;
  c.n_layer = 2;
  c.d_model = 64;
  c.seq_len = 16;
  ExpectAllLayouts(c, {1, 2});
}

TEST(LoadWithoutInitTest, LlamaEveryTpPieceEqualsInitializedThenLoaded) {
  ModelConfig c;
  c.family = ModelFamilyKind::kLlama;
  c.vocab_size = 50257;
  c.n_layer = 2;
  c.n_head = 8;
  c.n_kv_heads = 2;  // at tp 4 each key/value head sits on two ranks
  c.d_model = 64;
  c.ffn_hidden = 96;
  c.seq_len = 16;
  c.tie_embeddings = false;  // an lm_head of its own
  ASSERT_TRUE(c.Validate().ok());
  ExpectAllLayouts(c, {1, 2, 4});
}

}  // namespace
}  // namespace trellis
