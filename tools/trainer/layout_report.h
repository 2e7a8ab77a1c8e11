// The layout printout rank 0 gives at start: the mesh, the ranks of every
// tensor-, data- and pipeline-parallel group, the layers of each pipeline
// stage, and (when hostnames are given) which node holds which coordinates,
// so users can see that tensor-parallel groups stayed inside nodes.
#ifndef TRELLIS_TOOLS_TRAINER_LAYOUT_REPORT_H_
#define TRELLIS_TOOLS_TRAINER_LAYOUT_REPORT_H_

#include <string>
#include <vector>

#include "parallel/mesh.h"
#include "tools/options/options.h"

namespace trellis {

// `hostnames[r]` is world rank r's host (may be empty: no node map).
std::string LayoutReport(const Mesh& mesh, const TrainOptions& options,
                         const std::vector<std::string>& hostnames);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_LAYOUT_REPORT_H_
