// Mesh: the arithmetic of a (dp, tp, pp) layout over a world of ranks.
//
// A mesh maps each world rank to coordinates (d, t, p) — its data-parallel
// replica, tensor-parallel slice and pipeline stage — and back, and names the
// ranks of each group a rank belongs to:
//   - tp group: the ranks with the same (d, p), ordered by t;
//   - dp group: the ranks with the same (t, p), ordered by d;
//   - pp group: the ranks with the same (d, t), ordered by p;
//   - embed group: the first and the last pipeline stage of the same (d, t)
//     (one rank when pp == 1), which share the tied embedding. Middle stages
//     belong to no embed group;
//   - with expert parallelism over ep ranks (WithExpertParallel; ep divides
//     dp, Megatron's folding of experts into data parallelism), each dp
//     group is cut into runs of ep consecutive replicas: the ep group of
//     (d, t, p) is the replicas [d - d % ep, d - d % ep + ep), ordered by
//     d % ep (they exchange tokens and hold different experts), and its
//     expert-data group the replicas with the same d % ep, ordered by
//     d / ep (they hold the same experts and average their gradients);
//   - with context parallelism over cp ranks (WithContextParallel; cp
//     divides dp), the dp axis holds dp/cp replicas of cp ranks each, the
//     cp ranks of a replica consecutive along it: the cp group of (d, t, p)
//     is [d - d % cp, d - d % cp + cp), ordered by d % cp (they split each
//     window's tokens), and the replica is d / cp. The dp group spans
//     both, so gradients are averaged and ZeRO shards over dp × cp.
//
// The order names the axes fastest first. The default "tp-dp-pp" gives
//   rank = t + tp·(d + dp·p),
// so a tensor-parallel group is a run of contiguous ranks (inside one node
// when tp divides the ranks per node). Any permutation of tp, dp and pp
// joined by '-' is accepted.
//
// A mesh is pure arithmetic: no MPI, no allocation beyond the group vectors it
// returns. Invariants: world == dp·tp·pp; every rank lies in exactly one
// group of each kind (except embed, see above); groups agree across members.
//
// Thread safety: immutable after Create; safe to share between threads.
#ifndef TRELLIS_PARALLEL_MESH_H_
#define TRELLIS_PARALLEL_MESH_H_

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trellis {

// The three parallel axes.
enum class MeshAxis { kTp = 0, kDp = 1, kPp = 2 };
const char* MeshAxisName(MeshAxis axis);

// The groups a rank belongs to. kEmbed is not an axis: see the file comment.
enum class GroupKind { kTp, kDp, kPp, kEmbed, kEp, kExpertDp, kCp };
const char* GroupKindName(GroupKind kind);

struct MeshCoord {
  int d = 0;  // data-parallel replica, in [0, dp)
  int t = 0;  // tensor-parallel slice, in [0, tp)
  int p = 0;  // pipeline stage, in [0, pp)
  bool operator==(const MeshCoord&) const = default;
};

class Mesh {
 public:
  static constexpr const char* kDefaultOrder = "tp-dp-pp";

  // Validates the layout and builds the mesh. `dp` may be 0: it is then
  // derived as world / (tp·pp). Errors (InvalidArgument) print every factor,
  // e.g. "layout dp=3 × tp=2 × pp=2 = 12 does not match the world size 8;
  // choose sizes whose product is 8".
  static absl::StatusOr<Mesh> Create(int world, int dp, int tp, int pp,
                                     const std::string& order = kDefaultOrder);

  // A mesh of one rank (dp = tp = pp = 1).
  static Mesh Single();
  // This mesh with experts split over `ep` ranks of each dp group. Fails
  // (InvalidArgument, naming --ep and --dp) unless ep >= 1 divides dp.
  absl::StatusOr<Mesh> WithExpertParallel(int ep) const;
  int ep() const { return ep_; }
  // This mesh with each window split over `cp` consecutive ranks of each
  // dp group (the file comment). Fails (InvalidArgument, naming --cp) unless
  // cp >= 1 divides dp. With expert parallelism the ep groups cut the same
  // axis: a window's cp ranks may hold different experts.
  absl::StatusOr<Mesh> WithContextParallel(int cp) const;
  int cp() const { return cp_; }

  int world() const { return world_; }
  int dp() const { return Size(MeshAxis::kDp); }
  int tp() const { return Size(MeshAxis::kTp); }
  int pp() const { return Size(MeshAxis::kPp); }
  int Size(MeshAxis axis) const { return sizes_[static_cast<int>(axis)]; }
  // The canonical order string, fastest axis first, e.g. "tp-dp-pp".
  std::string order() const;
  // "dp=2 × tp=4 × pp=2 (order tp-dp-pp)".
  std::string DebugString() const;

  // REQUIRES: 0 <= rank < world().
  MeshCoord Coord(int rank) const;
  // REQUIRES: coordinates within their sizes.
  int Rank(const MeshCoord& coord) const;

  // The ranks of `rank`'s group of `kind`, in group-rank order (by the
  // coordinate along the axis; for embed: first stage, then last stage).
  // Empty for kEmbed when `rank` is a middle pipeline stage.
  // REQUIRES: 0 <= rank < world().
  std::vector<int> Group(GroupKind kind, int rank) const;
  std::vector<int> TpGroup(int rank) const {
    return Group(GroupKind::kTp, rank);
  }
  std::vector<int> DpGroup(int rank) const {
    return Group(GroupKind::kDp, rank);
  }
  std::vector<int> PpGroup(int rank) const {
    return Group(GroupKind::kPp, rank);
  }
  std::vector<int> EmbedGroup(int rank) const {
    return Group(GroupKind::kEmbed, rank);
  }

  // The same group as an O(1) pair, for splitting communicators: `color` is
  // equal for exactly the members of one group (the smallest world rank in
  // it) and `key` is the member's position in Group(kind, rank). For kEmbed
  // on a middle stage, color is -1.
  struct GroupSlot {
    int color = -1;
    int key = 0;
  };
  GroupSlot Slot(GroupKind kind, int rank) const;

  // True when `rank` holds the first or the last pipeline stage.
  bool InEmbedGroup(int rank) const;

 private:
  Mesh(int world, std::array<int, 3> sizes, std::array<MeshAxis, 3> order);
  int Stride(MeshAxis axis) const { return strides_[static_cast<int>(axis)]; }

  int world_;
  std::array<int, 3> sizes_;       // indexed by MeshAxis
  std::array<int, 3> strides_;     // indexed by MeshAxis
  std::array<MeshAxis, 3> order_;  // fastest first
  int ep_ = 1;
  int cp_ = 1;
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_MESH_H_
