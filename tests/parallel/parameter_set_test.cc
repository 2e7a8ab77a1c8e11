// ParameterSet's name index: registration and lookup stay linear in the
// number of parameters (counted, not timed), duplicates still fail.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "parallel/parameter.h"

namespace trellis {
namespace {

// Declares `n` parameters, then finds each once and one missing name;
// returns the comparisons made (-1 when a lookup failed).
int64_t ComparisonsFor(int64_t n) {
  ParameterSet params;
  for (int64_t i = 0; i < n; ++i) {
    params.Declare(absl::StrCat("h.", i, ".ln_1.weight"),
                   ShardSpec::Replicated({4}), false, Device::Cpu(),
                   DType::kF32, [](int64_t) { return 0.0; });
  }
  for (int64_t i = 0; i < n; ++i) {
    const std::string name = absl::StrCat("h.", i, ".ln_1.weight");
    Parameter* p = params.Find(name);
    if (p == nullptr) {
      ADD_FAILURE() << name << " not found";
      return -1;
    }
    EXPECT_EQ(p->name, name);
  }
  EXPECT_EQ(params.Find("missing"), nullptr);
  EXPECT_EQ(static_cast<int64_t>(params.all().size()), n);
  return params.name_comparisons();
}

TEST(ParameterSetTest, RegistrationAndLookupAreLinear) {
  // A linear scan per registration would make about n^2 / 2 comparisons
  // (5e9 for 100,000); the index makes about one per lookup.
  const int64_t n = 100000;
  const auto start = std::chrono::steady_clock::now();
  const int64_t comparisons = ComparisonsFor(n);
  // Also a bound no index could miss on any machine, for a lookup that
  // bypasses the counting comparison: a scan takes minutes here.
  EXPECT_LT(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count(),
      20.0);
  EXPECT_GE(comparisons, 0);
  EXPECT_LE(comparisons, 3 * n) << comparisons << " name comparisons";
  EXPECT_LE(ComparisonsFor(2 * n), 2 * comparisons + 16);
}

TEST(ParameterSetTest, DuplicateNameFails) {
  ParameterSet params;
  params.Add("wte", ShardSpec::Replicated({2}), true, Device::Cpu());
  EXPECT_DEATH(
      params.Add("wte", ShardSpec::Replicated({2}), true, Device::Cpu()),
      "duplicate parameter wte");
  Parameter other;
  other.name = "wte";
  EXPECT_DEATH(params.AddShared(&other), "duplicate parameter wte");
}

}  // namespace
}  // namespace trellis
