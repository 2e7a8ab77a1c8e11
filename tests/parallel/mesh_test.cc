#include "parallel/mesh.h"

#include <array>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<std::string> kAllOrders = {
    "tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};

// The mesh rebuilt by enumeration: ranks handed out by a counter while the
// coordinates run with the first-named axis fastest.
struct BruteForce {
  std::vector<MeshCoord> coord;              // by rank
  std::vector<std::vector<int>> tp, dp, pp;  // groups, indexed as below
  int dp_size, tp_size, pp_size;

  int TpIndex(const MeshCoord& c) const { return c.d * pp_size + c.p; }
  int DpIndex(const MeshCoord& c) const { return c.t * pp_size + c.p; }
  int PpIndex(const MeshCoord& c) const { return c.d * tp_size + c.t; }
};

BruteForce Enumerate(int dp, int tp, int pp, const std::string& order) {
  BruteForce b{{}, {}, {}, {}, dp, tp, pp};
  std::array<int, 3> sizes{};
  std::array<char, 3> names{};
  for (int i = 0; i < 3; ++i) {
    const char axis = order[i * 3];  // 't', 'd' or 'p'
    names[i] = axis;
    sizes[i] = axis == 't' ? tp : axis == 'd' ? dp : pp;
  }
  b.coord.resize(static_cast<size_t>(dp) * tp * pp);
  int counter = 0;
  for (int i2 = 0; i2 < sizes[2]; ++i2) {
    for (int i1 = 0; i1 < sizes[1]; ++i1) {
      for (int i0 = 0; i0 < sizes[0]; ++i0) {
        MeshCoord c;
        const std::array<int, 3> index = {i0, i1, i2};
        for (int i = 0; i < 3; ++i) {
          (names[i] == 't' ? c.t : names[i] == 'd' ? c.d : c.p) = index[i];
        }
        b.coord[counter++] = c;
      }
    }
  }
  b.tp.assign(dp * pp, std::vector<int>(tp));
  b.dp.assign(tp * pp, std::vector<int>(dp));
  b.pp.assign(dp * tp, std::vector<int>(pp));
  for (int r = 0; r < counter; ++r) {
    const MeshCoord& c = b.coord[r];
    b.tp[b.TpIndex(c)][c.t] = r;
    b.dp[b.DpIndex(c)][c.d] = r;
    b.pp[b.PpIndex(c)][c.p] = r;
  }
  return b;
}

// Returns a reference into `b`, or into `scratch` for embed groups.
const std::vector<int>& ExpectedGroup(const BruteForce& b, GroupKind kind,
                                      int rank, std::vector<int>& scratch) {
  const MeshCoord& c = b.coord[rank];
  switch (kind) {
    case GroupKind::kTp:
      return b.tp[b.TpIndex(c)];
    case GroupKind::kDp:
      return b.dp[b.DpIndex(c)];
    case GroupKind::kPp:
      return b.pp[b.PpIndex(c)];
    case GroupKind::kEmbed: {
      const std::vector<int>& stages = b.pp[b.PpIndex(c)];
      scratch.clear();
      if (c.p == 0 || c.p == b.pp_size - 1) scratch.push_back(stages.front());
      if (!scratch.empty() && b.pp_size > 1) scratch.push_back(stages.back());
      return scratch;
    }
    case GroupKind::kEp:
    case GroupKind::kExpertDp:
    case GroupKind::kCp:
      // Checked by ExpertGroupsFoldIntoDataParallel and
      // ContextGroupsFoldIntoDataParallel.
      break;
  }
  return scratch;
}

// Checks one layout against the enumeration. Group vectors are compared for
// every rank on small meshes and for a stride of ranks on large ones; the
// O(1) slots are compared for every rank.
void CheckLayout(int dp, int tp, int pp, const std::string& order) {
  SCOPED_TRACE(testing::Message() << "dp=" << dp << " tp=" << tp << " pp=" << pp
                                  << " order=" << order);
  const int world = dp * tp * pp;
  absl::StatusOr<Mesh> mesh = Mesh::Create(world, dp, tp, pp, order);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  ASSERT_EQ(mesh->order(), order);
  const BruteForce b = Enumerate(dp, tp, pp, order);
  const int full_check_stride = world <= 1024 ? 1 : 97;
  std::vector<int> scratch;
  for (GroupKind kind :
       {GroupKind::kTp, GroupKind::kDp, GroupKind::kPp, GroupKind::kEmbed}) {
    SCOPED_TRACE(GroupKindName(kind));
    std::vector<int> times_seen(world, 0);
    for (int r = 0; r < world; ++r) {
      const Mesh::GroupSlot slot = mesh->Slot(kind, r);
      const std::vector<int>& expected = ExpectedGroup(b, kind, r, scratch);
      if (expected.empty()) {
        ASSERT_EQ(slot.color, -1) << "rank " << r;
        ASSERT_FALSE(mesh->InEmbedGroup(r));
        continue;
      }
      // Members are listed by coordinate, so the first is the smallest rank.
      ASSERT_EQ(slot.color, expected.front()) << "rank " << r;
      ASSERT_LT(slot.key, static_cast<int>(expected.size()));
      ASSERT_EQ(expected[slot.key], r);
      if (r % full_check_stride == 0) {
        ASSERT_EQ(mesh->Group(kind, r), expected) << "rank " << r;
      }
      if (slot.key == 0) {  // The group's first member counts its members.
        for (int member : mesh->Group(kind, r)) ++times_seen[member];
      }
    }
    for (int r = 0; r < world; ++r) {
      const bool in_group = !ExpectedGroup(b, kind, r, scratch).empty();
      const int expected_times = in_group ? 1 : 0;
      ASSERT_EQ(times_seen[r], expected_times) << "rank " << r;
    }
  }
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(mesh->Coord(r), b.coord[r]) << "rank " << r;
    ASSERT_EQ(mesh->Rank(b.coord[r]), r);
  }
}

std::vector<int> Divisors(int n) {
  std::vector<int> divisors;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) divisors.push_back(i);
  }
  return divisors;
}

TEST(MeshTest, MatchesEnumerationForEveryFactorizationOfSmallWorlds) {
  for (int world = 1; world <= 64; ++world) {
    for (int tp : Divisors(world)) {
      for (int pp : Divisors(world / tp)) {
        for (const std::string& order : kAllOrders) {
          CheckLayout(world / tp / pp, tp, pp, order);
          if (testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(MeshTest, MatchesEnumerationForLargeWorlds) {
  for (int world : {96, 384, 1000, 1536, 4096, 16384}) {
    for (int tp : Divisors(world)) {
      if (tp > 64) continue;
      for (int pp : Divisors(world / tp)) {
        if (pp > 128) continue;
        CheckLayout(world / tp / pp, tp, pp, "tp-dp-pp");
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
  for (const std::string& order : kAllOrders) {
    CheckLayout(64, 8, 32, order);
    CheckLayout(1, 16384, 1, order);
    CheckLayout(16384, 1, 1, order);
    CheckLayout(1, 1, 16384, order);
    CheckLayout(3, 7, 11, order);
  }
}

TEST(MeshTest, DefaultOrderPutsTpFastest) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(16, 2, 4, 2);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->order(), "tp-dp-pp");
  for (int r = 0; r < 16; ++r) {
    const MeshCoord c = mesh->Coord(r);
    EXPECT_EQ(r, c.t + 4 * (c.d + 2 * c.p));
    const std::vector<int> tp = mesh->TpGroup(r);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(tp[i], tp[0] + i);
  }
  EXPECT_THAT(mesh->TpGroup(5), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(mesh->DpGroup(5), ElementsAre(1, 5));
  EXPECT_THAT(mesh->PpGroup(5), ElementsAre(5, 13));
  EXPECT_THAT(mesh->EmbedGroup(5), ElementsAre(5, 13));
}

TEST(MeshTest, EmbedGroupIsFirstAndLastStage) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(8, 1, 2, 4);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_THAT(mesh->EmbedGroup(1), ElementsAre(1, 7));
  EXPECT_THAT(mesh->EmbedGroup(7), ElementsAre(1, 7));
  EXPECT_TRUE(mesh->EmbedGroup(3).empty());
  EXPECT_EQ(mesh->Slot(GroupKind::kEmbed, 5).color, -1);
  absl::StatusOr<Mesh> flat = Mesh::Create(4, 2, 2, 1);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_THAT(flat->EmbedGroup(3), ElementsAre(3));
}

TEST(MeshTest, DerivesDataParallelSize) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(24, 0, 2, 3);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->dp(), 4);
  EXPECT_EQ(mesh->DebugString(), "dp=4 × tp=2 × pp=3 (order tp-dp-pp)");
}

TEST(MeshTest, SingleIsOneRank) {
  const Mesh mesh = Mesh::Single();
  EXPECT_EQ(mesh.world(), 1);
  EXPECT_THAT(mesh.TpGroup(0), ElementsAre(0));
  EXPECT_THAT(mesh.EmbedGroup(0), ElementsAre(0));
}

TEST(MeshTest, RejectsBadLayoutsWithEveryFactor) {
  auto error = [](int world, int dp, int tp, int pp,
                  const std::string& order = "tp-dp-pp") {
    absl::StatusOr<Mesh> mesh = Mesh::Create(world, dp, tp, pp, order);
    EXPECT_FALSE(mesh.ok());
    EXPECT_EQ(mesh.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(mesh.status().message());
  };
  EXPECT_EQ(error(8, 3, 2, 2),
            "layout dp=3 × tp=2 × pp=2 = 12 does not match the world size 8; "
            "choose sizes whose product is 8");
  EXPECT_THAT(error(8, 0, 3, 1),
              HasSubstr("layout tp=3 × pp=1 = 3 does not divide the world "
                        "size 8"));
  EXPECT_THAT(error(8, 1, 0, 8), HasSubstr("tp=0 must be at least 1"));
  EXPECT_THAT(error(8, 8, 1, -1), HasSubstr("pp=-1 must be at least 1"));
  EXPECT_THAT(error(8, -2, 1, 1), HasSubstr("dp=-2 must be at least 0"));
  EXPECT_THAT(error(0, 1, 1, 1), HasSubstr("world size 0"));
  EXPECT_THAT(error(8, 0, 2, 2, "tp-tp-pp"), HasSubstr("\"tp-tp-pp\""));
  EXPECT_THAT(error(8, 0, 2, 2, "tp-dp"), HasSubstr("permutation"));
  EXPECT_THAT(error(8, 0, 2, 2, "tp-dp-pp-"), HasSubstr("permutation"));
  EXPECT_THAT(error(1 << 30, 1 << 20, 1 << 20, 1 << 20),
              HasSubstr("= 1152921504606846976 does not match"));
}

}  // namespace
}  // namespace trellis

namespace trellis {
namespace {

// Expert parallelism cuts each dp group (ordered by d) into ep groups of
// consecutive replicas and expert-data groups of replicas ep apart; the
// slots agree with the groups, and ep must divide dp.
TEST(MeshTest, ExpertGroupsFoldIntoDataParallel) {
  absl::StatusOr<Mesh> base = Mesh::Create(16, 4, 2, 2);
  ASSERT_TRUE(base.ok()) << base.status();
  for (const int ep : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << "ep=" << ep);
    absl::StatusOr<Mesh> mesh = base->WithExpertParallel(ep);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    EXPECT_EQ(mesh->ep(), ep);
    for (int rank = 0; rank < mesh->world(); ++rank) {
      const std::vector<int> dp = mesh->DpGroup(rank);
      const int d = mesh->Coord(rank).d;
      std::vector<int> want_ep, want_edp;
      for (int i = 0; i < ep; ++i) want_ep.push_back(dp[d - d % ep + i]);
      for (int i = d % ep; i < 4; i += ep) want_edp.push_back(dp[i]);
      EXPECT_EQ(mesh->Group(GroupKind::kEp, rank), want_ep) << rank;
      EXPECT_EQ(mesh->Group(GroupKind::kExpertDp, rank), want_edp) << rank;
      for (const GroupKind kind : {GroupKind::kEp, GroupKind::kExpertDp}) {
        const Mesh::GroupSlot slot = mesh->Slot(kind, rank);
        const std::vector<int> group = mesh->Group(kind, rank);
        EXPECT_EQ(slot.color, group.front());
        EXPECT_EQ(group[slot.key], rank);
      }
    }
  }
  for (const int ep : {0, 3, 8}) {
    const absl::StatusOr<Mesh> bad = base->WithExpertParallel(ep);
    EXPECT_FALSE(bad.ok()) << ep;
    EXPECT_NE(bad.status().message().find("--ep="), std::string::npos);
  }
}

// Context parallelism cuts each dp group into runs of cp consecutive
// ranks (one replica's window split); the dp group keeps all of them for
// the gradients. cp must divide dp; with ep both cut the same dp axis,
// each its own way.
TEST(MeshTest, ContextGroupsFoldIntoDataParallel) {
  absl::StatusOr<Mesh> base = Mesh::Create(16, 4, 2, 2);
  ASSERT_TRUE(base.ok()) << base.status();
  for (const int cp : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << "cp=" << cp);
    absl::StatusOr<Mesh> mesh = base->WithContextParallel(cp);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    EXPECT_EQ(mesh->cp(), cp);
    for (int rank = 0; rank < mesh->world(); ++rank) {
      const std::vector<int> dp = mesh->DpGroup(rank);
      ASSERT_EQ(dp.size(), 4u);
      const int d = mesh->Coord(rank).d;
      std::vector<int> want;
      for (int i = 0; i < cp; ++i) want.push_back(dp[d - d % cp + i]);
      EXPECT_EQ(mesh->Group(GroupKind::kCp, rank), want) << rank;
      const Mesh::GroupSlot slot = mesh->Slot(GroupKind::kCp, rank);
      EXPECT_EQ(slot.color, want.front());
      EXPECT_EQ(want[slot.key], rank);
    }
  }
  for (const int cp : {0, 3, 8}) {
    const absl::StatusOr<Mesh> bad = base->WithContextParallel(cp);
    EXPECT_FALSE(bad.ok()) << cp;
    EXPECT_NE(bad.status().message().find("--cp="), std::string::npos);
  }
  absl::StatusOr<Mesh> experts = base->WithExpertParallel(4);
  ASSERT_TRUE(experts.ok());
  absl::StatusOr<Mesh> both = experts->WithContextParallel(2);
  ASSERT_TRUE(both.ok()) << both.status();
  // Rank 0's replica: dp ranks 0 and 1 split its windows; ranks 0..3 of
  // the dp group exchange tokens with their four experts' holders.
  const std::vector<int> dp = both->DpGroup(0);
  EXPECT_EQ(both->Group(GroupKind::kCp, 0), (std::vector<int>{dp[0], dp[1]}));
  EXPECT_EQ(both->Group(GroupKind::kEp, 0),
            (std::vector<int>{dp[0], dp[1], dp[2], dp[3]}));
  EXPECT_EQ(both->Group(GroupKind::kExpertDp, 0), (std::vector<int>{dp[0]}));
}

}  // namespace
}  // namespace trellis
