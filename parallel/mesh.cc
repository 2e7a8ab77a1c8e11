#include "parallel/mesh.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "framework/status.h"

namespace trellis {
namespace {

constexpr std::array<MeshAxis, 3> kAllAxes = {MeshAxis::kTp, MeshAxis::kDp,
                                              MeshAxis::kPp};

absl::StatusOr<std::array<MeshAxis, 3>> ParseOrder(const std::string& order) {
  const std::vector<std::string> parts = absl::StrSplit(order, '-');
  std::array<MeshAxis, 3> axes{};
  std::array<bool, 3> seen{};
  bool ok = parts.size() == 3;
  for (size_t i = 0; ok && i < parts.size(); ++i) {
    ok = false;
    for (MeshAxis axis : kAllAxes) {
      if (parts[i] == MeshAxisName(axis) && !seen[static_cast<int>(axis)]) {
        seen[static_cast<int>(axis)] = true;
        axes[i] = axis;
        ok = true;
      }
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh order \"", order,
                     "\" is not a permutation of tp, dp and pp joined by '-', "
                     "fastest first (e.g. \"tp-dp-pp\")"));
  }
  return axes;
}

absl::Status CheckFactor(const char* name, int value, int minimum) {
  if (value >= minimum) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("layout size ", name, "=", value, " must be at least ",
                   minimum, minimum == 0 ? " (0 derives it)" : ""));
}

// Resolves dp == 0 and checks that dp·tp·pp == world.
absl::StatusOr<int> ResolveDp(int world, int dp, int tp, int pp) {
  const int64_t model = static_cast<int64_t>(tp) * pp;
  if (dp == 0) {
    if (world % model != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layout tp=", tp, " × pp=", pp, " = ", model,
          " does not divide the world size ", world,
          " (dp=0 asks to derive dp = world / (tp·pp)); choose tp and pp "
          "whose product divides ",
          world));
    }
    return static_cast<int>(world / model);
  }
  const int64_t product = model * dp;
  if (product != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout dp=", dp, " × tp=", tp, " × pp=", pp, " = ",
                     product, " does not match the world size ", world,
                     "; choose sizes whose product is ", world));
  }
  return dp;
}

}  // namespace

const char* MeshAxisName(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kTp:
      return "tp";
    case MeshAxis::kDp:
      return "dp";
    case MeshAxis::kPp:
      return "pp";
  }
  return "?";
}

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp:
      return "tp";
    case GroupKind::kDp:
      return "dp";
    case GroupKind::kPp:
      return "pp";
    case GroupKind::kEmbed:
      return "embed";
    case GroupKind::kEp:
      return "ep";
    case GroupKind::kExpertDp:
      return "expert-dp";
    case GroupKind::kCp:
      return "cp";
  }
  return "?";
}

absl::StatusOr<Mesh> Mesh::Create(int world, int dp, int tp, int pp,
                                  const std::string& order) {
  if (world < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", world, " must be at least 1"));
  }
  TRELLIS_RETURN_IF_ERROR(CheckFactor("dp", dp, 0));
  TRELLIS_RETURN_IF_ERROR(CheckFactor("tp", tp, 1));
  TRELLIS_RETURN_IF_ERROR(CheckFactor("pp", pp, 1));
  using Axes = std::array<MeshAxis, 3>;
  TRELLIS_ASSIGN_OR_RETURN(const Axes axes, ParseOrder(order));
  TRELLIS_ASSIGN_OR_RETURN(const int resolved_dp, ResolveDp(world, dp, tp, pp));
  std::array<int, 3> sizes{};
  sizes[static_cast<int>(MeshAxis::kTp)] = tp;
  sizes[static_cast<int>(MeshAxis::kDp)] = resolved_dp;
  sizes[static_cast<int>(MeshAxis::kPp)] = pp;
  return Mesh(world, sizes, axes);
}

Mesh Mesh::Single() {
  return Mesh(1, {1, 1, 1}, {MeshAxis::kTp, MeshAxis::kDp, MeshAxis::kPp});
}

absl::StatusOr<Mesh> Mesh::WithExpertParallel(int ep) const {
  if (ep < 1 || dp() % ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ep=", ep, " must be at least 1 and divide --dp=", dp(),
        " (experts are split over data-parallel ranks); choose ep dividing ",
        dp()));
  }
  Mesh mesh = *this;
  mesh.ep_ = ep;
  return mesh;
}

absl::StatusOr<Mesh> Mesh::WithContextParallel(int cp) const {
  if (cp < 1 || dp() % cp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cp=", cp, " must be at least 1 and divide the ", dp(),
                     " ranks left for data parallelism (world / (tp·pp)); "
                     "launch dp·cp·tp·pp "
                     "ranks"));
  }
  Mesh mesh = *this;
  mesh.cp_ = cp;
  return mesh;
}

Mesh::Mesh(int world, std::array<int, 3> sizes, std::array<MeshAxis, 3> order)
    : world_(world), sizes_(sizes), order_(order) {
  int stride = 1;
  for (MeshAxis axis : order_) {
    strides_[static_cast<int>(axis)] = stride;
    stride *= sizes_[static_cast<int>(axis)];
  }
  TRELLIS_CHECK_EQ(stride, world_);
}

std::string Mesh::order() const {
  return absl::StrCat(MeshAxisName(order_[0]), "-", MeshAxisName(order_[1]),
                      "-", MeshAxisName(order_[2]));
}

std::string Mesh::DebugString() const {
  return absl::StrCat("dp=", dp(), " × tp=", tp(), " × pp=", pp(),
                      ep_ > 1 ? absl::StrCat(" (ep=", ep_, ")") : "",
                      cp_ > 1 ? absl::StrCat(" (cp=", cp_, ")") : "",
                      " (order ", order(), ")");
}

MeshCoord Mesh::Coord(int rank) const {
  TRELLIS_CHECK(rank >= 0 && rank < world_) << "rank " << rank;
  auto along = [&](MeshAxis axis) { return rank / Stride(axis) % Size(axis); };
  return MeshCoord{along(MeshAxis::kDp), along(MeshAxis::kTp),
                   along(MeshAxis::kPp)};
}

int Mesh::Rank(const MeshCoord& c) const {
  TRELLIS_CHECK(c.d >= 0 && c.d < dp() && c.t >= 0 && c.t < tp() && c.p >= 0 &&
                c.p < pp())
      << "coordinates (" << c.d << ", " << c.t << ", " << c.p << ") outside "
      << DebugString();
  return c.d * Stride(MeshAxis::kDp) + c.t * Stride(MeshAxis::kTp) +
         c.p * Stride(MeshAxis::kPp);
}

bool Mesh::InEmbedGroup(int rank) const {
  const int p = Coord(rank).p;
  return p == 0 || p == pp() - 1;
}

Mesh::GroupSlot Mesh::Slot(GroupKind kind, int rank) const {
  MeshCoord c = Coord(rank);
  GroupSlot slot;
  switch (kind) {
    case GroupKind::kTp:
      slot.key = c.t;
      c.t = 0;
      break;
    case GroupKind::kDp:
      slot.key = c.d;
      c.d = 0;
      break;
    case GroupKind::kPp:
      slot.key = c.p;
      c.p = 0;
      break;
    case GroupKind::kEmbed:
      if (c.p != 0 && c.p != pp() - 1) return GroupSlot{};
      slot.key = c.p == 0 ? 0 : 1;
      c.p = 0;
      break;
    case GroupKind::kEp:
      slot.key = c.d % ep_;
      c.d -= c.d % ep_;
      break;
    case GroupKind::kExpertDp:
      slot.key = c.d / ep_;
      c.d %= ep_;
      break;
    case GroupKind::kCp:
      slot.key = c.d % cp_;
      c.d -= c.d % cp_;
      break;
  }
  slot.color = Rank(c);
  return slot;
}

std::vector<int> Mesh::Group(GroupKind kind, int rank) const {
  const MeshCoord c = Coord(rank);
  std::vector<int> ranks;
  auto with = [&](MeshCoord member) { ranks.push_back(Rank(member)); };
  switch (kind) {
    case GroupKind::kTp:
      for (int t = 0; t < tp(); ++t) with({c.d, t, c.p});
      break;
    case GroupKind::kDp:
      for (int d = 0; d < dp(); ++d) with({d, c.t, c.p});
      break;
    case GroupKind::kPp:
      for (int p = 0; p < pp(); ++p) with({c.d, c.t, p});
      break;
    case GroupKind::kEmbed:
      if (c.p != 0 && c.p != pp() - 1) break;
      with({c.d, c.t, 0});
      if (pp() > 1) with({c.d, c.t, pp() - 1});
      break;
    case GroupKind::kEp:
      for (int i = 0; i < ep_; ++i) with({c.d - c.d % ep_ + i, c.t, c.p});
      break;
    case GroupKind::kExpertDp:
      for (int d = c.d % ep_; d < dp(); d += ep_) with({d, c.t, c.p});
      break;
    case GroupKind::kCp:
      for (int i = 0; i < cp_; ++i) with({c.d - c.d % cp_ + i, c.t, c.p});
      break;
  }
  return ranks;
}

}  // namespace trellis
