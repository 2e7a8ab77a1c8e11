// The counter-based generator's values are part of every checkpoint made
// from an initialized model and of the layout-equivalence invariant: they
// must never change. Golden bits, and the keyed form equal to the plain one.
#include "framework/rng.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

namespace trellis {
namespace {

struct Golden {
  uint64_t seed;
  const char* name;
  uint64_t index;
  uint64_t bits;  // of NormalAt(seed, HashName(name), index)
};

constexpr Golden kGolden[] = {
    {1337u, "wte", 0, 0xbff3977fc4ff05a1ULL},
    {1337u, "wte", 1, 0x3fe7d7df6be3d8a6ULL},
    {1337u, "wte", 12345, 0x3ff4cf261a1a3547ULL},
    {1337u, "wte", 77194752, 0xbfc931945a8448a5ULL},
    {1337u, "h.3.attn.c_attn.weight", 0, 0xbfb64c9980c95c6aULL},
    {1337u, "h.3.attn.c_attn.weight", 1, 0xbfd01c6253931d13ULL},
    {1337u, "h.3.attn.c_attn.weight", 12345, 0x3feb619ab19e07c1ULL},
    {1337u, "h.3.attn.c_attn.weight", 77194752, 0x3ff1f64f638a456bULL},
    {0u, "wte", 0, 0x3fe277f675346d2fULL},
    {0u, "wte", 1, 0x3fcac67d876f0387ULL},
    {0u, "wte", 12345, 0x3fe49f3af370e576ULL},
    {0u, "wte", 77194752, 0x3fd5cda431e3a3dbULL},
    {0u, "h.3.attn.c_attn.weight", 0, 0x3ffabf84f9621392ULL},
    {0u, "h.3.attn.c_attn.weight", 1, 0xbff4a59d777a8248ULL},
    {0u, "h.3.attn.c_attn.weight", 12345, 0x3fe631bbd83b2648ULL},
    {0u, "h.3.attn.c_attn.weight", 77194752, 0x3fe2a7a998847113ULL},
};

TEST(RngTest, NormalAtKeepsItsGoldenBits) {
  for (const Golden& g : kGolden) {
    const double v = NormalAt(g.seed, HashName(g.name), g.index);
    EXPECT_EQ(std::bit_cast<uint64_t>(v), g.bits)
        << g.seed << " " << g.name << " " << g.index;
  }
}

// SplitMix64 seeded with 0 yields these four numbers first (its published
// sequence): output k is SplitMix64 of state (k − 1)·γ.
TEST(RngTest, SplitMix64IsTheReferenceGenerator) {
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
  const uint64_t expected[] = {0xe220a8397b1dcdafULL, 0x6e789e6aa1b965f4ULL,
                               0x06c45d188009454fULL, 0xf88bb8a8724c81ecULL};
  for (uint64_t k = 0; k < 4; ++k) {
    EXPECT_EQ(SplitMix64(k * kGamma), expected[k]) << k;
    EXPECT_EQ(SplitMix64Finalize((k + 1) * kGamma), expected[k]) << k;
  }
  static_assert(SplitMix64Finalize(0) == 0);
}

TEST(RngTest, KeyedNormalEqualsPlainToTheBit) {
  for (const Golden& g : kGolden) {
    const uint64_t stream = HashName(g.name);
    const uint64_t key = StreamKey(g.seed, stream);
    for (uint64_t i = g.index; i < g.index + 64; ++i) {
      EXPECT_EQ(std::bit_cast<uint64_t>(NormalAtKey(key, i)),
                std::bit_cast<uint64_t>(NormalAt(g.seed, stream, i)))
          << g.name << " " << i;
    }
  }
}

TEST(RngTest, StreamsDiffer) {
  EXPECT_NE(StreamKey(1, HashName("wte")), StreamKey(1, HashName("wpe")));
  EXPECT_NE(StreamKey(1, HashName("wte")), StreamKey(2, HashName("wte")));
}

}  // namespace
}  // namespace trellis
