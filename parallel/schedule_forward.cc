// BuildForwardOnlySchedules: evaluation's schedules (see schedule.h).
#include <algorithm>
#include <vector>

#include "framework/status.h"
#include "parallel/schedule.h"

namespace trellis {

std::vector<std::vector<Action>> BuildForwardOnlySchedules(int num_stages,
                                                           int num_microbatches,
                                                           int virtual_stages) {
  TRELLIS_CHECK_GE(num_stages, 1);
  TRELLIS_CHECK_GE(num_microbatches, 1);
  TRELLIS_CHECK_GE(virtual_stages, 1);
  std::vector<Action> order;
  for (int first = 0; first < num_microbatches; first += num_stages) {
    const int end = std::min(num_microbatches, first + num_stages);
    for (int v = 0; v < virtual_stages; ++v) {
      for (int mb = first; mb < end; ++mb) {
        order.push_back(Action{ActionType::kForward, mb, v});
      }
    }
  }
  const std::vector<std::vector<Action>> computes(num_stages, order);
  return PlaceTransfers(computes, virtual_stages);
}

}  // namespace trellis
