// StepGuard: decides, after the backward pass and before the optimizer,
// whether a step's update is applied, so that a run left alone survives a
// rare bad batch and stops cleanly when training has really gone wrong.
//
// A step is skipped when its loss or global gradient norm is not finite
// (NaN or infinity), or, with --skip_spike_zscore=Z > 0, when either is an
// upward Z-sigma outlier of the values of the last kSpikeWindow steps
// (SpikeDetector). A skipped step changes nothing but the data position:
// no parameter moves, AdamW's step count and moments stay, and the
// learning-rate schedule (a function of that step count) does not advance;
// the batch it drew stays consumed. After --max_skipped_steps consecutive
// skips (0: never) the trainer saves and gives up.
//
// Invariant: every rank of the world reaches the same verdict. Judge takes
// the loss and norm the ranks already agree on and, in case some rank saw
// otherwise (a NaN that reached only its model-parallel group), all-reduces
// the verdict over the world with MAX: if any rank skips, all skip. The
// trainer does the same with Assess and Record around its one per-step
// reduction of the world's MAX scalars.
//
// Tests only: TRELLIS_TEST_INJECT_NAN=STEP:RANK (or STEP+:RANK) makes world
// rank RANK write a NaN into a gradient its optimizer reads (the first
// counted one; under --zero=1 or 2 a piece of its own reduced block) on the
// first attempt of optimizer step STEP (1-based, as logged; with '+', on
// every attempt of every step from STEP on), after the gradients are
// synchronized and before the norm is taken. Only that rank's gradient is
// bad, so the world agreement is what makes the others skip too.
//
// Thread safety: none; one thread per rank drives it.
#ifndef TRELLIS_TOOLS_TRAINER_HEALTH_STEP_GUARD_H_
#define TRELLIS_TOOLS_TRAINER_HEALTH_STEP_GUARD_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "parallel/communicator.h"

namespace trellis {

// Running z-score of a series over a window of its last `window` finite
// values (llm.c's outlier detector, one-sided). REQUIRES: window >= 2.
class SpikeDetector {
 public:
  explicit SpikeDetector(int window);
  // (value − mean) / standard deviation of the window; nullopt while the
  // window is not yet full (the warm-up: the first `window` finite values),
  // when it does not vary, or when `value` is not finite.
  std::optional<double> ZScore(double value) const;
  // Adds a finite `value` (others are ignored); the oldest value leaves a
  // full window. The guard adds the values of steps it skipped as spikes
  // too, so a lasting change of level becomes the new normal within a few
  // steps instead of ending the run.
  void Add(double value);

 private:
  int window_;
  std::deque<double> values_;
};

// Why a step was skipped. Ordered: a larger reason wins the world's MAX.
enum class SkipReason { kNone = 0, kSpike = 1, kNonFinite = 2 };

struct StepGuardConfig {
  int64_t max_skipped_steps = 10;  // consecutive skips that end a run; 0: off
  double spike_zscore = 0;         // 0: no spike detection
  // Test hook (see above): the step, whether every later one too, the rank.
  int64_t inject_nan_step = 0;  // 0: none
  bool inject_nan_onwards = false;
  int inject_nan_rank = -1;

  // Sets the inject_nan fields from TRELLIS_TEST_INJECT_NAN when it is set
  // (ParseInjectNan); InvalidArgument names a malformed value.
  absl::Status ReadTestFaults();
};

// Parses TRELLIS_TEST_INJECT_NAN's value ("STEP:RANK" or "STEP+:RANK") into
// `config`; an empty value changes nothing.
absl::Status ParseInjectNan(const std::string& value, StepGuardConfig& config);

class StepGuard {
 public:
  // The steps of kSpikeWindow finite values that spike detection compares
  // each step with; it judges nothing before that many steps (its warm-up).
  static constexpr int kSpikeWindow = 100;

  StepGuard(StepGuardConfig config, int world_rank);

  // Test hook: whether this rank poisons a gradient at `step` (the step
  // being attempted, 1-based; Optimizer::PoisonGradient does it). A one-off
  // injection answers true once.
  bool InjectNanDue(int64_t step);

  // Collective over `world`: the verdict for the step whose (world-agreed)
  // loss and gradient norm are given, identical on every rank. Updates the
  // skip counts. Assess, then Record the world's MAX of the assessments.
  SkipReason Judge(double loss, double grad_norm, Communicator& world);
  // This rank's verdict, before the ranks agree (MAX over the world).
  SkipReason Assess(double loss, double grad_norm) const;
  // Takes the world's `agreed` verdict for the step of `loss` and
  // `grad_norm`: updates the spike windows and the skip counts.
  void Record(SkipReason agreed, double loss, double grad_norm);

  int64_t skipped_total() const { return skipped_total_; }
  int64_t consecutive_skips() const { return consecutive_; }
  // True once max_skipped_steps consecutive steps were skipped.
  bool GaveUp() const;

 private:
  StepGuardConfig config_;
  int world_rank_;
  int64_t injected_step_ = 0;  // the step a one-off injection hit
  SpikeDetector loss_spikes_{kSpikeWindow};
  SpikeDetector norm_spikes_{kSpikeWindow};
  int64_t skipped_total_ = 0;
  int64_t consecutive_ = 0;
};

const char* SkipReasonName(SkipReason reason);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_HEALTH_STEP_GUARD_H_
