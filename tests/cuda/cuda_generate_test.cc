// Generation on CUDA: the cached attention kernel against its CPU twin
// (prefill, then one token at a time, grouped-query heads), and both
// families' decoders against the CPU decoder on the same weights, with
// greedy tokens equal with and without the cache.
//
// Tolerances (max |gpu - cpu| / max |cpu|): the attention kernel 1e-5 in
// float32 and 1e-2 in bfloat16 (the outputs' rounding, 2^-8, on inputs
// already rounded); the decoders' logits 5e-3 in float32 (cuBLASLt GEMMs
// may sum in another order) and 5e-2 in bfloat16 (activations rounded at
// every layer).
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "framework/kernels/cached_attention.h"
#include "parallel/bootstrap.h"
#include "tests/cuda/cuda_test_util.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

using cuda_test::DTypeTest;
using cuda_test::Tolerance;

class CudaCachedAttentionTest : public DTypeTest {
 protected:
  // Appends `steps` rows at a time to an empty cache of `steps`' total rows
  // and compares each step's output, then the cached keys, with the CPU.
  void Check(int64_t heads, int64_t kv_heads, int64_t d,
             const std::vector<int64_t>& steps) {
    int64_t cap = 0;
    for (int64_t n : steps) cap += n;
    const int64_t w = (heads + 2 * kv_heads) * d;
    const Tensor qkv = Input({cap, w}, 17 + heads);
    Tensor k_cpu = Tensor::Zeros({cap, kv_heads * d}, DType::kF32);
    Tensor v_cpu = Tensor::Zeros({cap, kv_heads * d}, DType::kF32);
    Tensor k_gpu = DevEmpty({cap, kv_heads * d});
    Tensor v_gpu = DevEmpty({cap, kv_heads * d});
    const Tensor qkv_gpu = Dev(qkv);
    int64_t start = 0;
    for (int64_t n : steps) {
      Tensor out_cpu = Tensor::Empty({n, heads * d}, DType::kF32);
      Tensor out_gpu = DevEmpty({n, heads * d});
      CachedAttentionForward(qkv.Narrow(start, n), heads, kv_heads, start,
                             k_cpu, v_cpu, out_cpu);
      CachedAttentionForward(qkv_gpu.Narrow(start, n), heads, kv_heads, start,
                             k_gpu, v_gpu, out_gpu);
      cuda_test::ExpectClose(
          out_gpu, out_cpu, Tolerance(dtype(), 1e-5, 1e-2),
          "heads " + std::to_string(heads) + " start " + std::to_string(start));
      start += n;
    }
    cuda_test::ExpectClose(k_gpu.Narrow(0, start), k_cpu.Narrow(0, start), 0,
                           "cached keys");
  }
};

TEST_P(CudaCachedAttentionTest, AgreesWithCpuOverPrefillAndSteps) {
  // A prompt of 9, then 1, 1, 5 and the rest one at a time.
  const std::vector<int64_t> steps = {9, 1, 1, 5, 1, 1, 1, 1};
  Check(4, 2, 16, steps);
  Check(2, 2, 64, steps);
  Check(6, 1, 32, steps);
}

// More keys than the kernel's 128 threads and the widest head: every
// thread walks several keys and several output columns.
TEST_P(CudaCachedAttentionTest, LongContextAndWideHeads) {
  Check(8, 2, 128, {300, 1, 1, 7});
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaCachedAttentionTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         cuda_test::DTypeParamName);

ModelConfig TinyConfig(ModelFamilyKind family) {
  ModelConfig c;
  c.family = family;
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 64;
  c.seq_len = 32;
  c.vocab_size = 300;
  if (family != ModelFamilyKind::kGpt2) {
    c.n_kv_heads = 2;
    c.ffn_hidden = 128;
  }
  if (family == ModelFamilyKind("moe")) {
    // Qwen3-MoE's shape in small: q/k norm, heads wider than d_model /
    // n_head, a dense layer, then 4 experts, 2 per token.
    c.qk_norm = true;
    c.head_dim = 24;
    c.experts = 4;
    c.experts_per_token = 2;
    c.moe_ffn_hidden = 64;
    c.moe_first_dense = 1;
  }
  return c;
}

class CudaDecoderTest
    : public ::testing::TestWithParam<std::tuple<ModelFamilyKind, DType>> {
 protected:
  void SetUp() override { TRELLIS_REQUIRE_CUDA_DEVICE(); }
};

// The logits after each token of `sequence`: a prefill of 6, then one at a
// time.
std::vector<std::vector<float>> Logits(ModelDecoder& decoder,
                                       const std::vector<int32_t>& sequence) {
  std::vector<std::vector<float>> out;
  out.push_back(decoder.Forward(std::span<const int32_t>(sequence.data(), 6)));
  for (size_t i = 6; i < sequence.size(); ++i) {
    out.push_back(decoder.Forward(std::span<const int32_t>(&sequence[i], 1)));
  }
  return out;
}

TEST_P(CudaDecoderTest, AgreesWithTheCpuDecoder) {
  const auto [family, dtype] = GetParam();
  const ModelConfig config = TinyConfig(family);
  ParallelContext context = ParallelContext::Single();
  const ChunkPlan plan{0, config.n_layer, true, true};
  ParameterSet cpu_params, gpu_params;
  AddModelParameters(config, plan, TpPlace{}, 5, Device::Cpu(), DType::kF32,
                     cpu_params);
  AddModelParameters(config, plan, TpPlace{}, 5, cuda_test::Gpu(), dtype,
                     gpu_params);
  const ModelFamily& f = FamilyOf(config);
  std::unique_ptr<ModelDecoder> cpu = f.NewDecoder(
      config, DecoderSetup{TpPlace{}, context.groups().tp, &cpu_params,
                           Device::Cpu(), DType::kF32});
  std::unique_ptr<ModelDecoder> gpu =
      f.NewDecoder(config, DecoderSetup{TpPlace{}, context.groups().tp,
                                        &gpu_params, cuda_test::Gpu(), dtype});
  std::vector<int32_t> sequence;
  for (int32_t i = 0; i < 30; ++i) sequence.push_back((i * 53 + 7) % 300);
  const auto want = Logits(*cpu, sequence);
  const auto got = Logits(*gpu, sequence);
  ASSERT_EQ(want.size(), got.size());
  const double tolerance = dtype == DType::kF32 ? 5e-3 : 5e-2;
  for (size_t s = 0; s < want.size(); ++s) {
    double worst = 0, scale = 0;
    for (size_t v = 0; v < want[s].size(); ++v) {
      worst = std::max(worst, double{std::abs(got[s][v] - want[s][v])});
      scale = std::max(scale, double{std::abs(want[s][v])});
    }
    EXPECT_LE(worst, tolerance * scale) << "step " << s;
  }
  // Greedy tokens with the cache equal those without it (float32).
  if (dtype != DType::kF32) return;
  std::vector<int32_t> cached = {1, 2, 3}, uncached = {1, 2, 3};
  gpu->Reset();
  std::vector<float> logits = gpu->Forward(cached);
  for (int step = 0; step < 20; ++step) {
    const int32_t next = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
    cached.push_back(next);
    logits = gpu->Forward(std::span<const int32_t>(&next, 1));
  }
  for (int step = 0; step < 20; ++step) {
    gpu->Reset();
    logits = gpu->Forward(uncached);
    uncached.push_back(static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  EXPECT_EQ(cached, uncached);
}

std::string DecoderCaseName(
    const ::testing::TestParamInfo<std::tuple<ModelFamilyKind, DType>>& i) {
  return std::string(ModelFamilyName(std::get<0>(i.param))) +
         (std::get<1>(i.param) == DType::kF32 ? "F32" : "BF16");
}

INSTANTIATE_TEST_SUITE_P(
    Families, CudaDecoderTest,
    ::testing::Combine(::testing::Values(ModelFamilyKind::kGpt2,
                                         ModelFamilyKind::kLlama),
                       ::testing::Values(DType::kF32, DType::kBF16)),
    DecoderCaseName);

// A mixture of experts in float32 only: in bfloat16 a token whose second
// and third experts score within rounding of each other may route
// differently from the float32 CPU, and its logits then differ by more
// than any tolerance says about the kernels.
INSTANTIATE_TEST_SUITE_P(
    Mixture, CudaDecoderTest,
    ::testing::Combine(::testing::Values(ModelFamilyKind("moe")),
                       ::testing::Values(DType::kF32)),
    DecoderCaseName);

}  // namespace
}  // namespace trellis
