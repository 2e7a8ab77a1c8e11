// ShapeOnlyGroups: process groups of a layout's sizes for one mesh
// coordinate, whose communicators carry no data. They let the trainer's
// own classes (StageModel, the chunks) be built for any rank of any layout
// in one process, to read what they would allocate (their memory plan)
// without allocating or communicating. Any collective or transfer on them
// is an invariant failure (TRELLIS_CHECK): planning never runs the model.
//
// Thread safety: none needed (the communicators are never used).
#ifndef TRELLIS_TOOLS_PLAN_SHAPE_ONLY_GROUPS_H_
#define TRELLIS_TOOLS_PLAN_SHAPE_ONLY_GROUPS_H_

#include <memory>
#include <vector>

#include "parallel/bootstrap.h"
#include "parallel/mesh.h"

namespace trellis {

class ShapeOnlyGroups {
 public:
  // Groups of rank `coord` in a dp × cp × tp × pp layout: the dp group
  // spans dp·cp ranks (coord.d in [0, dp·cp), as Mesh::WithContextParallel
  // folds cp into it) and, with cp > 1, the cp group is the cp ranks of
  // coord's replica; with ep > 1, the ep group of coord's ep ranks.
  // REQUIRES: sizes ≥ 1, coord inside them.
  ShapeOnlyGroups(int64_t dp, int64_t cp, int64_t tp, int64_t pp,
                  MeshCoord coord, int64_t ep = 1);
  ShapeOnlyGroups(const ShapeOnlyGroups&) = delete;
  ShapeOnlyGroups& operator=(const ShapeOnlyGroups&) = delete;

  const ProcessGroups& groups() const { return groups_; }

 private:
  std::vector<std::unique_ptr<Communicator>> owned_;
  ProcessGroups groups_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_SHAPE_ONLY_GROUPS_H_
