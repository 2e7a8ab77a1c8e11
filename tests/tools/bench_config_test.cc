// trellis-bench's flags resolved into a run: a preset's micro batch is its
// CPU one on the CPU and the one measured fastest on an 80 GB H100 on
// CUDA, a flag overrides either, and the default batch is four micro
// batches on CUDA.
#include "tools/bench/bench_config.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace trellis {
namespace {

BenchConfig Resolve(const std::string& device, const std::string& preset,
                    std::optional<int64_t> micro_batch = std::nullopt) {
  BenchFlags f;
  f.device = device;
  f.preset = preset;
  f.micro_batch_size = micro_batch;
  auto config = ResolveBenchConfig(f);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : BenchConfig{};
}

TEST(BenchConfigTest, PresetsTakeTheirDevicesMicroBatch) {
  EXPECT_EQ(Resolve("cpu", "gpt2-124m").train.micro_batch_size, 8);
  const BenchConfig cuda = Resolve("cuda", "gpt2-124m");
  EXPECT_EQ(cuda.train.micro_batch_size, 64);
  EXPECT_EQ(cuda.train.global_batch_size, 256);
  EXPECT_EQ(Resolve("cuda", "gpt2-350m").train.micro_batch_size, 64);
  EXPECT_EQ(Resolve("cuda", "gpt2-774m").train.micro_batch_size, 32);
  EXPECT_EQ(Resolve("cuda", "gpt2-1558m").train.micro_batch_size, 16);
  EXPECT_EQ(Resolve("cpu", "gpt2-1558m").train.micro_batch_size, 2);
  EXPECT_EQ(Resolve("cuda", "gpt2-124m", 8).train.micro_batch_size, 8);
  EXPECT_EQ(Resolve("cpu", "").train.micro_batch_size, 4);
}

}  // namespace
}  // namespace trellis
