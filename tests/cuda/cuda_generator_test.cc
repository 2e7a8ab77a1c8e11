// trellis-generate's Generator on a GPU: a trained tiny checkpoint of each
// family loads onto the device and its greedy float32 tokens, with and
// without the cache, equal the CPU's; in bfloat16 it generates as many
// tokens, with the cache and without, all in the vocabulary.
#include <memory>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/tools/generate_test_util.h"
#include "tools/generate/generator.h"

namespace trellis {
namespace {

class CudaGeneratorTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { TRELLIS_REQUIRE_CUDA_DEVICE(); }

  // The greedy tokens of the checkpoint on `device` in `precision`.
  std::vector<int32_t> Greedy(DeviceType device, Precision precision,
                              bool cache) {
    GenerateOptions o;
    o.load = test::TinyCheckpoint(GetParam());
    o.layout.device = device;
    o.layout.precision = precision;
    absl::StatusOr<std::unique_ptr<Generator>> g =
        Generator::Create(o, context_.groups());
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) return {};
    GenerateRequest r;
    r.prompt = *(*g)->Encode("abcd efgh");
    r.max_new_tokens = 32;
    r.sampling.temperature = 0;
    r.use_cache = cache;
    r.stop_at_eot = false;
    absl::StatusOr<Generation> out = (*g)->Generate(r);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->tokens : std::vector<int32_t>{};
  }

  ParallelContext context_ = ParallelContext::Single();
};

TEST_P(CudaGeneratorTest, Float32TokensEqualTheCpus) {
  const std::vector<int32_t> cpu =
      Greedy(DeviceType::kCPU, Precision::kFp32, true);
  ASSERT_EQ(cpu.size(), 32u);
  EXPECT_EQ(Greedy(DeviceType::kCUDA, Precision::kFp32, true), cpu);
  EXPECT_EQ(Greedy(DeviceType::kCUDA, Precision::kFp32, false), cpu);
}

TEST_P(CudaGeneratorTest, Bfloat16Generates) {
  for (bool cache : {true, false}) {
    const std::vector<int32_t> tokens =
        Greedy(DeviceType::kCUDA, Precision::kBf16, cache);
    ASSERT_EQ(tokens.size(), 32u);
    for (int32_t t : tokens) {
      EXPECT_GE(t, 0);
      EXPECT_LT(t, 257);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaGeneratorTest,
                         ::testing::Values("gpt2", "llama"));

}  // namespace
}  // namespace trellis
