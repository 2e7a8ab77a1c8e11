// Generation with the key/value cache against generation without it and
// against the training forward, for both families: the same 32 tokens, and
// logits equal to 1e-5; and the requests trellis-generate refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/tools/generate_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/checkpoint_dir.h"
#include "tools/generate/generator.h"
#include "transformer/llama/llama_parameters.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

class GenerateTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = test::TinyCheckpoint(GetParam());
    ASSERT_FALSE(dir_.empty());
    GenerateOptions o;
    o.load = dir_;
    absl::StatusOr<std::unique_ptr<Generator>> g =
        Generator::Create(o, context_.groups());
    ASSERT_TRUE(g.ok()) << g.status();
    generator_ = std::move(*g);
  }

  GenerateRequest Request(const SamplingOptions& sampling, bool cache) {
    GenerateRequest r;
    absl::StatusOr<std::vector<int32_t>> prompt =
        generator_->Encode("hijk lmno pq");
    EXPECT_TRUE(prompt.ok()) << prompt.status();
    r.prompt = *prompt;
    r.max_new_tokens = 32;
    r.sampling = sampling;
    r.use_cache = cache;
    r.stop_at_eot = false;
    return r;
  }

  ParallelContext context_ = ParallelContext::Single();
  std::string dir_;
  std::unique_ptr<Generator> generator_;
};

void ExpectLogitsNear(const std::vector<float>& got,
                      const std::vector<double>& want, const std::string& at) {
  ASSERT_EQ(got.size(), want.size()) << at;
  for (size_t v = 0; v < want.size(); ++v) {
    ASSERT_NEAR(got[v], want[v], 1e-5 * std::max(1.0, std::abs(want[v])))
        << at << ", id " << v;
  }
}

TEST_P(GenerateTest, CachedGenerationEqualsUncachedTokenForToken) {
  SamplingOptions greedy;
  greedy.temperature = 0;
  SamplingOptions sampled;
  sampled.temperature = 1.3;  // flat enough that draws are not all argmax
  sampled.top_k = 40;
  sampled.top_p = 0.95;
  sampled.seed = 7;
  for (const SamplingOptions& s : {greedy, sampled}) {
    std::vector<std::vector<float>> cached_logits, uncached_logits;
    GenerateRequest cached = Request(s, true);
    cached.logits = &cached_logits;
    GenerateRequest uncached = Request(s, false);
    uncached.logits = &uncached_logits;
    absl::StatusOr<Generation> a = generator_->Generate(cached);
    absl::StatusOr<Generation> b = generator_->Generate(uncached);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    ASSERT_EQ(a->tokens.size(), 32u);
    EXPECT_EQ(a->tokens, b->tokens) << "temperature " << s.temperature;
    ASSERT_EQ(cached_logits.size(), uncached_logits.size());
    for (size_t i = 0; i < cached_logits.size(); ++i) {
      const std::vector<double> want(uncached_logits[i].begin(),
                                     uncached_logits[i].end());
      ExpectLogitsNear(cached_logits[i], want, absl::StrCat("new token ", i));
    }
    // A repeated request gives the same tokens (the cache was reset).
    absl::StatusOr<Generation> again = generator_->Generate(cached);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->tokens, a->tokens);
  }
}

// The final norm and the head in float64 on the training chunk's hidden
// rows: the full forward's logits (V of them) of row `row`.
std::vector<double> ReferenceLogits(const ModelConfig& config,
                                    const ParameterSet& params,
                                    const Tensor& hidden, int64_t row) {
  const bool gpt2 = config.family == ModelFamilyKind::kGpt2;
  const int64_t c = config.d_model;
  const float* x = hidden.data<float>() + row * c;
  const float* w =
      params.Find(gpt2 ? "ln_f.weight" : kLlamaNorm)->value.data<float>();
  const Parameter* head = params.Find(
      gpt2 ? "wte" : (config.tie_embeddings ? kLlamaEmbedding : kLlamaHead));
  double mean = 0, square = 0;
  for (int64_t i = 0; i < c; ++i) mean += x[i] / static_cast<double>(c);
  if (!gpt2) mean = 0;
  for (int64_t i = 0; i < c; ++i) {
    square += (x[i] - mean) * (x[i] - mean) / static_cast<double>(c);
  }
  const double eps = gpt2 ? 1e-5 : config.norm_eps;
  std::vector<double> normed(c);
  for (int64_t i = 0; i < c; ++i) {
    normed[i] = (x[i] - mean) / std::sqrt(square + eps) * w[i];
    if (gpt2) normed[i] += params.Find("ln_f.bias")->value.data<float>()[i];
  }
  std::vector<double> logits(config.vocab_size);
  for (int64_t v = 0; v < config.vocab_size; ++v) {
    const float* e = head->value.data<float>() + v * c;
    for (int64_t i = 0; i < c; ++i) logits[v] += normed[i] * e[i];
  }
  return logits;
}

TEST_P(GenerateTest, CachedLogitsEqualTheTrainingForward) {
  absl::StatusOr<std::string> step = ResolveResume(dir_, "");
  ASSERT_TRUE(step.ok()) << step.status();
  const ModelConfig config = generator_->model();
  const int64_t t = config.seq_len;
  ParameterSet params;
  AddModelParameters(config, ChunkPlan{0, config.n_layer, true, true},
                     TpPlace{}, 0, Device::Cpu(), DType::kF32, params);
  ASSERT_TRUE(LoadCheckpoint(*step, params, nullptr).ok());
  // The routers' selection biases, as trained ("moe-bias" only).
  absl::StatusOr<TrainingState> state = ReadTrainingState(*step);
  ASSERT_TRUE(state.ok()) << state.status();
  const ExpertBias& bias = state->expert_bias;
  EXPECT_EQ(bias.empty(), std::string(GetParam()) != "moe-bias");
  // A whole window through the training blocks (no head: the hidden rows).
  std::vector<int32_t> sequence(t);
  for (int64_t i = 0; i < t; ++i) {
    sequence[i] = static_cast<int32_t>((i * 37 + 11) % config.vocab_size);
  }
  ChunkSetup chunk_setup;
  chunk_setup.plan = ChunkPlan{0, config.n_layer, true, false};
  chunk_setup.tp_comm = context_.groups().tp;
  chunk_setup.params = &params;
  chunk_setup.device = Device::Cpu();
  std::unique_ptr<ModelChunk> chunk =
      FamilyOf(config).NewChunk(config, chunk_setup);
  Tensor tokens = Tensor::Empty({1, t}, DType::kI32);
  for (int64_t i = 0; i < t; ++i) tokens.data<int32_t>()[i] = sequence[i];
  Tensor hidden = Tensor::Empty({t, config.d_model}, DType::kF32);
  chunk->SetExpertBias(bias);
  chunk->Forward(0, tokens, Tensor(), Tensor(), 0, &hidden);
  chunk->Release(0);

  DecoderSetup setup{TpPlace{}, context_.groups().tp, &params, Device::Cpu(),
                     DType::kF32};
  std::unique_ptr<ModelDecoder> decoder =
      FamilyOf(config).NewDecoder(config, setup);
  decoder->SetExpertBias(bias);
  // Prefill 5 tokens, then one at a time to the end of the context.
  const int64_t prompt = 5;
  std::vector<float> logits =
      decoder->Forward(std::span<const int32_t>(sequence.data(), prompt));
  for (int64_t row = prompt - 1; row < t; ++row) {
    ExpectLogitsNear(logits, ReferenceLogits(config, params, hidden, row),
                     absl::StrCat("position ", row));
    if (row + 1 < t) {
      logits =
          decoder->Forward(std::span<const int32_t>(&sequence[row + 1], 1));
    }
  }
  EXPECT_EQ(decoder->length(), t);
  // Without the cache: the whole window in one forward.
  decoder->Reset();
  const std::vector<float> whole = decoder->Forward(sequence);
  ExpectLogitsNear(whole, ReferenceLogits(config, params, hidden, t - 1),
                   "prefill");
  if (bias.empty()) return;
  // A bias that decides (expert 2 of layer 1 first for every token):
  // the training forward and the decoder apply it alike, and it moves
  // the logits.
  const ExpertBias decisive({{}, {0, 0, 5, 0}});
  chunk->SetExpertBias(decisive);
  chunk->Forward(0, tokens, Tensor(), Tensor(), 0, &hidden);
  chunk->Release(0);
  decoder->Reset();
  decoder->SetExpertBias(decisive);
  const std::vector<float> decided = decoder->Forward(sequence);
  ExpectLogitsNear(decided, ReferenceLogits(config, params, hidden, t - 1),
                   "prefill, decisive bias");
  double moved = 0;
  for (size_t v = 0; v < whole.size(); ++v) {
    moved = std::max(moved, std::abs(double{whole[v]} - decided[v]));
  }
  EXPECT_GT(moved, 1e-4);
}

TEST_P(GenerateTest, RefusesRequestsThatDoNotFit) {
  SamplingOptions greedy;
  greedy.temperature = 0;
  GenerateRequest r = Request(greedy, true);
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  r.max_new_tokens = test::kGenerateContext - prompt + 1;
  absl::StatusOr<Generation> g = generator_->Generate(r);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("context of 48 tokens"));
  EXPECT_THAT(g.status().message(),
              HasSubstr(absl::StrCat("1 to ", 48 - prompt)));
  r.max_new_tokens = test::kGenerateContext - prompt;
  EXPECT_TRUE(generator_->Generate(r).ok());
  GenerateRequest long_prompt = r;
  long_prompt.prompt.assign(test::kGenerateContext, 97);
  long_prompt.max_new_tokens = 1;
  EXPECT_THAT(generator_->Generate(long_prompt).status().message(),
              HasSubstr("shorten it to at most 47 tokens"));
  r.sampling.top_p = 0;
  EXPECT_THAT(generator_->Generate(r).status().message(), HasSubstr("--top_p"));
  EXPECT_THAT(generator_->Encode("").status().message(),
              HasSubstr("--prompt is empty"));
}

TEST_P(GenerateTest, RefusesUnknownCheckpointsAndPipelineStages) {
  GenerateOptions o;
  o.load = dir_ + "/no_such_step";
  EXPECT_FALSE(Generator::Create(o, context_.groups()).ok());
  o.load = dir_;
  o.layout.pp = 2;
  absl::StatusOr<std::unique_ptr<Generator>> g =
      Generator::Create(o, context_.groups());
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("--pp=2"));
  o.layout.pp = 1;
  o.tokenizer = "gpt2";  // not what it was trained with
  EXPECT_THAT(Generator::Create(o, context_.groups()).status().message(),
              HasSubstr("another tokenizer"));
}

INSTANTIATE_TEST_SUITE_P(Families, GenerateTest,
                         ::testing::Values("gpt2", "llama", "moe", "moe-bias"));

}  // namespace
}  // namespace trellis
