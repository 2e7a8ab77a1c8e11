// InitializeParameter fills large parameters on several threads, row by
// row: every element must get exactly the value the one-element-at-a-time
// walk (ShardSpec::ForEachElement) gives it, padding 0, for every kind of
// split; so must InitializeElements on any range of them. Materialize(kZero)
// must call no initializer and leave only zeros.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/kernels/elementwise.h"
#include "framework/rng.h"
#include "parallel/parameter.h"

namespace trellis {
namespace {

double ValueAt(int64_t i) { return 0.02 * NormalAt(7, 11, i); }

// The value every local element must hold: one element at a time.
std::vector<double> Expected(const ShardSpec& spec) {
  std::vector<double> want(NumElements(spec.LocalShape()), -1.0);
  spec.ForEachElement([&](int64_t local, int64_t logical) {
    want[local] = logical < 0 ? 0.0 : ValueAt(logical);
  });
  return want;
}

// Initializes a parameter of `spec` (its tensors dirty first, so no
// element may be skipped) and compares every element to the bit.
void ExpectSameAsElementWalk(const ShardSpec& spec, DType dtype) {
  ParameterSet params;
  Parameter& p = params.Add("w", spec, /*decay=*/true, Device::Cpu(), dtype);
  p.weights().Fill(123.0);
  InitializeParameter(p, ValueAt);
  const std::vector<double> want = Expected(spec);
  ASSERT_EQ(p.weights().numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    if (p.weights().dtype() == DType::kF64) {
      ASSERT_EQ(std::bit_cast<uint64_t>(p.weights().data<double>()[i]),
                std::bit_cast<uint64_t>(want[i]))
          << spec.DebugString() << " element " << i;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(p.weights().data<float>()[i]),
                std::bit_cast<uint32_t>(static_cast<float>(want[i])))
          << spec.DebugString() << " element " << i;
    }
  }
  if (dtype == DType::kBF16) {  // value is the master rounded
    Tensor rounded = Tensor::Empty(p.value.shape(), DType::kBF16);
    Convert(p.master, rounded);
    ASSERT_EQ(std::memcmp(rounded.raw(), p.value.raw(), p.value.nbytes()), 0);
  }
}

// Each spec holds well over two threads' worth of elements.
std::vector<ShardSpec> LargeSpecs() {
  return {
      ShardSpec::Replicated({300000}),
      ShardSpec::Replicated({600, 500}),
      // The vocabulary: rows split over tp, padded rows at the end.
      ShardSpec::Split({1000, 300}, 0, 2, 1, 1, 1024),
      ShardSpec::Split({1000, 300}, 0, 2, 0, 1, 1024),
      // c_attn: columns [Q | K | V], each third split.
      ShardSpec::Split({256, 3 * 512}, 1, 2, 1, 3),
      // Grouped-query qkv: key/value blocks replicated over rank pairs.
      ShardSpec::SplitGroups({512, 1024}, 1, 4, 3, {512, 256, 256}, {4, 2, 2}),
      // A small one (one thread) and an empty one.
      ShardSpec::Split({10, 7}, 1, 7, 3),
      ShardSpec::Replicated({0, 4}),
  };
}

TEST(ParameterInitTest, ParallelFillEqualsElementWalkToTheBit) {
  for (const ShardSpec& spec : LargeSpecs()) {
    ExpectSameAsElementWalk(spec, DType::kF32);
  }
}

TEST(ParameterInitTest, ParallelFillEqualsElementWalkForF64AndBf16) {
  const ShardSpec vocab = ShardSpec::Split({1000, 300}, 0, 2, 1, 1, 1024);
  ExpectSameAsElementWalk(vocab, DType::kF64);
  ExpectSameAsElementWalk(vocab, DType::kBF16);
}

// ZeRO-3 fills only its blocks of a parameter (InitializeElements): any
// range, starting and ending mid-row, must hold exactly the elements the
// whole parameter's fill gives there.
TEST(ParameterInitTest, ElementRangesEqualTheWholeFillToTheBit) {
  for (const ShardSpec& spec : LargeSpecs()) {
    const std::vector<double> want = Expected(spec);
    const int64_t n = static_cast<int64_t>(want.size());
    for (const DType dtype : {DType::kF32, DType::kF64}) {
      // Whole, a block of a quarter starting mid-row, one element, the end.
      for (const auto& [first, count] :
           std::vector<std::pair<int64_t, int64_t>>{
               {0, n}, {n / 4 + 3, n / 4}, {n / 2 + 1, 1}, {n - 5, 5}}) {
        if (first < 0 || count < 0 || first + count > n) continue;
        Tensor out = Tensor::Empty({count}, dtype);
        out.Fill(123.0);
        InitializeElements(spec, ValueAt, first, count, out);
        for (int64_t k = 0; k < count; ++k) {
          const double w = want[first + k];
          if (dtype == DType::kF64) {
            ASSERT_EQ(std::bit_cast<uint64_t>(out.data<double>()[k]),
                      std::bit_cast<uint64_t>(w))
                << spec.DebugString() << " element " << first + k;
          } else {
            ASSERT_EQ(std::bit_cast<uint32_t>(out.data<float>()[k]),
                      std::bit_cast<uint32_t>(static_cast<float>(w)))
                << spec.DebugString() << " element " << first + k;
          }
        }
      }
    }
  }
}

// Declarations taken (ZeRO-3 fills its blocks itself) are no longer made
// by Materialize.
TEST(ParameterInitTest, TakenDeclarationsAreNotMaterialized) {
  ParameterSet params;
  params.Declare("a", ShardSpec::Replicated({5}), /*decay=*/true, Device::Cpu(),
                 DType::kBF16, ValueAt);
  params.Declare("b", ShardSpec::Replicated({3}), /*decay=*/false,
                 Device::Cpu(), DType::kF32, ValueAt);
  const std::vector<ParameterDeclaration> taken = params.TakeDeclarations();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].parameter, &params.Get("a"));
  EXPECT_EQ(taken[0].dtype, DType::kBF16);
  EXPECT_EQ(taken[1].parameter, &params.Get("b"));
  EXPECT_EQ(taken[1].init(2), ValueAt(2));
  params.Materialize(/*grads=*/false);
  EXPECT_FALSE(params.Get("a").value.defined());
  EXPECT_FALSE(params.Get("b").value.defined());
  EXPECT_TRUE(params.TakeDeclarations().empty());
}

TEST(ParameterInitTest, MaterializeZeroCallsNoInitializerAndLeavesZeros) {
  ParameterSet params;
  int64_t calls = 0;
  for (int i = 0; i < 3; ++i) {
    params.Declare(absl::StrCat("w", i),
                   ShardSpec::Split({1000, 30}, 0, 2, 1, 1, 1024),
                   /*decay=*/true, Device::Cpu(),
                   i == 2 ? DType::kBF16 : DType::kF32, [&](int64_t) {
                     ++calls;
                     return 1.0;
                   });
  }
  params.Materialize(/*grads=*/false, ParameterFill::kZero);
  EXPECT_EQ(calls, 0);
  for (const Parameter* p : params.all()) {
    std::vector<Tensor> tensors = {p->value};
    if (p->master.defined()) tensors.push_back(p->master);
    for (const Tensor& t : tensors) {
      const std::vector<char> zeros(t.nbytes(), 0);
      EXPECT_EQ(std::memcmp(t.raw(), zeros.data(), t.nbytes()), 0) << p->name;
    }
  }
}

TEST(ParameterInitTest, MaterializeInitializeStillInitializes) {
  ParameterSet params;
  params.Declare("w", ShardSpec::Replicated({5}), /*decay=*/true, Device::Cpu(),
                 DType::kF32, ValueAt);
  params.Materialize(/*grads=*/false);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(params.Get("w").value.data<float>()[i],
              static_cast<float>(ValueAt(i)));
  }
}

}  // namespace
}  // namespace trellis
