#include "framework/memory_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace trellis {
namespace {

constexpr size_t kA = MemoryArena::kAlignment;

// Blocks taken from one arena, each held until dropped.
struct Blocks {
  explicit Blocks(std::shared_ptr<MemoryArena> a) : arena(std::move(a)) {}
  std::shared_ptr<MemoryArena> arena;
  std::vector<std::shared_ptr<void>> owners;
  std::vector<char*> data;

  char* Take(size_t bytes) {
    std::shared_ptr<void> owner;
    char* p = static_cast<char*>(arena->Allocate(bytes, &owner));
    if (p != nullptr) {
      owners.push_back(std::move(owner));
      data.push_back(p);
    }
    return p;
  }
  void Drop(size_t i) { owners[i].reset(); }
};

TEST(MemoryArenaTest, CarvesAlignedBlocksAndMergesFreedNeighbours) {
  Blocks b(MemoryArena::Create(10 * kA, Device::Cpu()));
  EXPECT_EQ(b.arena->capacity(), 10 * kA);
  char* first = b.Take(1);        // one aligned unit
  char* second = b.Take(kA + 1);  // two units
  char* third = b.Take(3 * kA);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  EXPECT_EQ(second, first + kA);
  EXPECT_EQ(third, first + 3 * kA);
  EXPECT_EQ(b.arena->stats().in_use, 6 * kA);
  EXPECT_EQ(b.arena->stats().largest_free, 4 * kA);

  // Freeing the middle block leaves a 2-unit hole that a 2-unit request
  // reuses (best fit), not the 4-unit tail.
  b.Drop(1);
  EXPECT_EQ(b.Take(2 * kA), second);
  b.Drop(3);
  // Freeing the first and the (re)used second block merges them with each
  // other; freeing the third merges everything back into one block.
  b.Drop(0);
  EXPECT_EQ(b.arena->stats().largest_free, 4 * kA);
  EXPECT_EQ(b.Take(3 * kA), first);  // the merged 3-unit hole at the start
  b.Drop(4);
  b.Drop(2);
  const MemoryArena::Stats s = b.arena->stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.blocks, 0u);
  EXPECT_EQ(s.largest_free, 10 * kA);
  EXPECT_EQ(s.peak_in_use, 6 * kA);
}

TEST(MemoryArenaTest, RefusesWhatDoesNotFit) {
  Blocks b(MemoryArena::Create(4 * kA, Device::Cpu()));
  ASSERT_NE(b.Take(2 * kA), nullptr);
  ASSERT_NE(b.Take(kA), nullptr);
  std::shared_ptr<void> owner;
  EXPECT_EQ(b.arena->Allocate(2 * kA, &owner), nullptr);
  EXPECT_EQ(owner, nullptr);
  EXPECT_NE(b.Take(kA), nullptr);
  EXPECT_EQ(b.arena->stats().largest_free, 0u);
}

// Random allocations and frees against a model of which bytes are live: no
// two live blocks overlap, every block lies inside the reservation, the
// counters match, and freeing everything restores one free block.
TEST(MemoryArenaTest, RandomTrafficKeepsBlocksDisjoint) {
  const size_t capacity = 1 << 20;
  Blocks b(MemoryArena::Create(capacity, Device::Cpu()));
  char* base = nullptr;
  {
    std::shared_ptr<void> probe;
    base = static_cast<char*>(b.arena->Allocate(1, &probe));
  }
  std::mt19937 rng(7);
  std::map<char*, size_t> live;  // data -> rounded size
  std::vector<std::pair<char*, std::shared_ptr<void>>> owners;
  size_t expected_in_use = 0;
  for (int i = 0; i < 5000; ++i) {
    if (owners.empty() || rng() % 3 != 0) {
      const size_t bytes = 1 + rng() % 20000;
      std::shared_ptr<void> owner;
      char* p = static_cast<char*>(b.arena->Allocate(bytes, &owner));
      if (p == nullptr) continue;
      const size_t rounded = (bytes + kA - 1) / kA * kA;
      ASSERT_GE(p, base);
      ASSERT_LE(p + rounded, base + capacity);
      auto next = live.lower_bound(p);
      if (next != live.end()) {
        ASSERT_LE(p + rounded, next->first);
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, p);
      }
      std::fill_n(p, bytes, static_cast<char>(i));
      live[p] = rounded;
      expected_in_use += rounded;
      owners.emplace_back(p, std::move(owner));
    } else {
      const size_t k = rng() % owners.size();
      expected_in_use -= live[owners[k].first];
      live.erase(owners[k].first);
      owners.erase(owners.begin() + static_cast<std::ptrdiff_t>(k));
    }
    ASSERT_EQ(b.arena->stats().in_use, expected_in_use);
  }
  owners.clear();
  EXPECT_EQ(b.arena->stats().in_use, 0u);
  EXPECT_EQ(b.arena->stats().largest_free, capacity);
}

TEST(MemoryArenaTest, ScopeRoutesTensorsAndFallsBackWhenFull) {
  auto arena = MemoryArena::Create(64 * 1024, Device::Cpu());
  Tensor inside, outside, after;
  {
    ArenaScope scope(arena);
    inside = Tensor::Zeros({1000}, DType::kF32);
    // Larger than the arena: served by the device allocator, counted.
    outside = Tensor::Zeros({100000}, DType::kF32);
    EXPECT_EQ(arena->stats().fallbacks, 1u);
    EXPECT_EQ(arena->stats().fallback_bytes, 400000u);
  }
  after = Tensor::Zeros({1000}, DType::kF32);
  // Only `inside` came from the arena: `outside` did not fit and `after`
  // was made once the scope had ended.
  EXPECT_TRUE(arena->Contains(inside.raw()));
  EXPECT_FALSE(arena->Contains(outside.raw()));
  EXPECT_FALSE(arena->Contains(after.raw()));
  const MemoryArena::Stats s = arena->stats();
  EXPECT_EQ(s.blocks, 1u);
  EXPECT_EQ(s.in_use, 4096u);
  // Tensors work wherever they came from.
  inside.Fill(2.0);
  outside.Fill(3.0);
  EXPECT_EQ(inside.data<float>()[999], 2.0f);
  EXPECT_EQ(outside.data<float>()[99999], 3.0f);
  // A block keeps the arena alive after its last other owner goes.
  arena.reset();
  inside.Fill(4.0);
  EXPECT_EQ(inside.data<float>()[0], 4.0f);
  inside = Tensor();
  EXPECT_EQ(after.numel(), 1000);
}

TEST(MemoryArenaTest, NewestScopeWinsAndScopesMayEndInAnyOrder) {
  auto a = MemoryArena::Create(1 << 16, Device::Cpu());
  auto b = MemoryArena::Create(1 << 16, Device::Cpu());
  auto sa = std::make_unique<ArenaScope>(a);
  auto sb = std::make_unique<ArenaScope>(b);
  Tensor tb = Tensor::Empty({10}, DType::kF32);
  EXPECT_EQ(b->stats().blocks, 1u);
  sa.reset();  // the older scope ends first
  Tensor tb2 = Tensor::Empty({10}, DType::kF32);
  EXPECT_EQ(b->stats().blocks, 2u);
  EXPECT_EQ(a->stats().blocks, 0u);
  sb.reset();
  Tensor none = Tensor::Empty({10}, DType::kF32);
  EXPECT_EQ(b->stats().blocks, 2u);
}

TEST(MemoryArenaTest, ThreadsShareOneArena) {
  auto arena = MemoryArena::Create(8 << 20, Device::Cpu());
  ArenaScope scope(arena);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 2000; ++i) {
        Tensor x = Tensor::Empty({1 + (i * 7 + t) % 500}, DType::kF32);
        x.Fill(static_cast<double>(t));
        ASSERT_EQ(x.data<float>()[0], static_cast<float>(t));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(arena->stats().in_use, 0u);
  EXPECT_EQ(arena->stats().largest_free, arena->capacity());
  EXPECT_EQ(arena->stats().fallbacks, 0u);
}

}  // namespace
}  // namespace trellis
