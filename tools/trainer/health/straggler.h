// StragglerMonitor: names the rank that holds the others up.
//
// Each rank adds up its own compute time per step: reading its data plus
// the pipeline's busy time (its F, B and W; on a GPU the device's time),
// not the time it waits for others (receives, the data-parallel gradient
// sync, the optimizer's reductions). Every `every` steps the ranks
// all-gather those sums over the world communicator (one small collective)
// and, when the slowest exceeds the median by `threshold`×, every rank
// learns who it is: rank, node, (dp, tp, pp) coordinates and its time
// against the median. Rank 0 logs that and the metrics record it.
//
// Tensor-parallel collectives run inside the computes, so a straggler's tp
// peers wait inside theirs and look about as slow: the report names the
// slowest of the group, which the others then match closely.
//
// Tests only: TRELLIS_TEST_SLOW_RANK=RANK:MS makes world rank RANK sleep MS
// milliseconds in each step's data phase (counted as its compute time).
//
// Construction and EndStep are collective over the world. Thread safety:
// none; one thread per rank.
#ifndef TRELLIS_TOOLS_TRAINER_HEALTH_STRAGGLER_H_
#define TRELLIS_TOOLS_TRAINER_HEALTH_STRAGGLER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/communicator.h"
#include "parallel/mesh.h"

namespace trellis {

// The slowest rank of an exchange, when it exceeded the threshold.
struct Straggler {
  int rank = -1;
  std::string host;
  MeshCoord coord;
  double seconds = 0;         // its compute time over the window
  double median_seconds = 0;  // the ranks' median over the same steps
  double ratio() const { return seconds / median_seconds; }
  // "rank 3 (node1, dp 1 tp 0 pp 1): 412.3 ms of compute over the last 10
  // steps against a median of 120.1 ms (3.43×)".
  std::string Describe(int64_t steps) const;
};

// The median of `values` (the mean of the middle two for an even count).
// REQUIRES: values not empty.
double Median(std::vector<double> values);

// The rank whose time exceeds threshold × the median, the slowest if
// several; nullopt if none.
std::optional<int> FindStraggler(const std::vector<double>& seconds,
                                 double threshold);

// TRELLIS_TEST_SLOW_RANK's value, "" when it is unset.
std::string SlowRankTestHook();

class StragglerMonitor {
 public:
  // Collective over `world`: learns every rank's node name and coordinates.
  // `every` 0 turns the exchanges off. `slow_hook` is a test's "RANK:MS"
  // (SlowRankTestHook(); "" for none): that rank sleeps MS ms in each
  // EndStep, counted as its compute; InvalidArgument names a malformed
  // one.
  static absl::StatusOr<std::unique_ptr<StragglerMonitor>> Create(
      Communicator& world, MeshCoord coord, int64_t every, double threshold,
      const std::string& slow_hook);

  // Adds this step's compute time; every `every` calls exchanges the sums
  // (collective) and returns the straggler, if any, then starts a new
  // window. The ratio of the slowest to the median is in `slowest_ratio`
  // after an exchange (0 between exchanges).
  std::optional<Straggler> EndStep(double compute_seconds,
                                   double* slowest_ratio);
  int64_t every() const { return every_; }

 private:
  StragglerMonitor(Communicator& world, int64_t every, double threshold)
      : world_(world), every_(every), threshold_(threshold) {}

  Communicator& world_;
  int64_t every_;
  double threshold_;
  int slow_rank_ = -1;
  int slow_ms_ = 0;
  std::vector<std::string> hosts_;  // by world rank
  std::vector<MeshCoord> coords_;   // by world rank
  double window_seconds_ = 0;
  int64_t window_steps_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_HEALTH_STRAGGLER_H_
