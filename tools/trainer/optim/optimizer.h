// Optimizer: AdamW over one rank's parameters, with the learning-rate
// schedule and global-norm gradient clipping.
//
// The global gradient norm counts every logical parameter element once: each
// rank sums the squares of its primary parameters (Parameter::primary),
// less the pieces replicated over sub-groups of tp it does not own
// (parallel/replicas.h), and the sums are all-reduced over the tensor- and
// pipeline-parallel groups. Data-parallel replicas hold identical (averaged)
// gradients, so the norm is not reduced over dp. Weight decay applies to 2-D
// weights only.
//
// AdamW steps each parameter's full-precision weights (the float32 master
// of a bfloat16 value, which is then refreshed from it), all parameters in
// one multi-tensor call (AdamWStepMany: one launch per 256 on a GPU).
// Moments are float32 and follow the parameters' shapes (and so the layout);
// checkpoints store them whole under the parameters' logical names.
#ifndef TRELLIS_TOOLS_TRAINER_OPTIM_OPTIMIZER_H_
#define TRELLIS_TOOLS_TRAINER_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include "framework/kernels/adamw.h"
#include "framework/lr_schedule.h"
#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"

namespace trellis {

struct OptimizerConfig {
  LrSchedule schedule;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0: no clipping.
};

struct StepReport {
  double lr = 0;
  double grad_norm = 0;  // Before clipping.
};

// Checkpoint I/O reads and writes whole per-parameter moments
// (exp_avg(i), exp_avg_sq(i)); an optimizer that keeps them otherwise
// (ShardedOptimizer, ZeRO) materializes them between BeginCheckpointIo and
// EndCheckpointIo. Both are collective over the optimizer's groups.
enum class CheckpointIo { kSave, kLoad };

class Optimizer {
 public:
  Optimizer(OptimizerConfig config, const ParameterSet& params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // sqrt of the sum of squares of every logical gradient element, reduced
  // over `tp` and `pp`: sqrt of StageGradSquares summed over `pp`.
  double GlobalGradNorm(Communicator& tp, Communicator& pp) const;
  // The sum of squares of this pipeline stage's logical gradient elements,
  // reduced over `tp` (and, where the gradients are sharded, over dp):
  // what the stages add up for the global norm.
  virtual double StageGradSquares(Communicator& tp) const;
  // Under expert parallelism: the ep group, over which the experts'
  // squares are summed (its ranks hold different experts). REQUIRES:
  // outlives the optimizer.
  void set_expert_group(Communicator* ep) { expert_group_ = ep; }
  // Clips, steps every parameter, advances the step count.
  StepReport Step(Communicator& tp, Communicator& pp) {
    return Apply(GlobalGradNorm(tp, pp));
  }
  // Step's update for a norm already taken (GlobalGradNorm): the caller
  // may decide between the two not to update at all (StepGuard).
  virtual StepReport Apply(double grad_norm);
  // Test hook (StepGuard's injected NaN): writes NaN into one element of a
  // gradient that this rank's next GlobalGradNorm and Apply read: the first
  // primary parameter's here, a piece of the reduced block this rank owns
  // under ZeRO.
  virtual void PoisonGradient();

  int64_t step() const { return step_; }
  // The learning rate the next update would use.
  double next_lr() const { return LearningRate(config_.schedule, step_); }
  void set_step(int64_t step) { step_ = step; }
  // First and second moments of params.all()[i], in the parameter's shape.
  Tensor& exp_avg(size_t i) { return m_[i]; }
  Tensor& exp_avg_sq(size_t i) { return v_[i]; }
  // kSave: fills exp_avg/exp_avg_sq; kLoad: allocates them to be read into.
  virtual void BeginCheckpointIo(CheckpointIo) {}
  // kLoad: takes the moments read; both: releases what Begin made.
  virtual void EndCheckpointIo(CheckpointIo) {}
  // Checkpoint I/O in parts (ZeRO saves and loads one group of parameters
  // at a time): inside BeginCheckpointIo(io) ... End, a caller that walks
  // the parameters part by part brackets each part's reads or writes with
  // these, and an optimizer may hold only that part's moments whole
  // (ShardedOptimizer does: for kSave the part's moments this rank saves,
  // gathered; for kLoad the part's, to be read). Collective like
  // BeginCheckpointIo for kSave. By default every moment stays as
  // BeginCheckpointIo made it.
  virtual void BeginCheckpointPart(CheckpointIo /*io*/,
                                   const std::vector<Parameter*>& /*part*/) {}
  virtual void EndCheckpointPart(CheckpointIo /*io*/,
                                 const std::vector<Parameter*>& /*part*/) {}
  // Whether each rank saves the moments it is given (SavesMoments), not
  // the model's writers all of them: a sharded optimizer spreads them over
  // its dp group. Between BeginCheckpointIo(kSave) and End, exp_avg(i) is
  // defined exactly where SavesMoments(i).
  virtual bool SavesOwnMoments() const { return false; }
  // Whether whole moments exist only inside BeginCheckpointPart ... End:
  // then checkpoint I/O must walk the parameters in parts.
  virtual bool MomentsInParts() const { return false; }
  virtual bool SavesMoments(size_t /*i*/) const { return true; }

 protected:
  // Without moments: a subclass keeps its own (m_, v_ stay empty until it
  // fills them).
  struct NoMoments {};
  Optimizer(OptimizerConfig config, const ParameterSet& params, NoMoments);
  // The learning rate and the clipping factor for a gradient norm; advances
  // the step count and fills `hyper` (its grad_scale included).
  StepReport BeginStep(double grad_norm, AdamWHyper& hyper);

  const OptimizerConfig& config() const { return config_; }
  const ParameterSet& params() const { return params_; }
  std::vector<Tensor>& m() { return m_; }
  std::vector<Tensor>& v() { return v_; }

 private:
  Communicator* expert_group_ = nullptr;
  OptimizerConfig config_;
  const ParameterSet& params_;
  std::vector<Tensor> m_, v_;
  int64_t step_ = 0;  // Steps taken.
};

// float32 moments, or float64 for float64 parameters (tests).
DType MomentType(const Parameter& p);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_OPTIM_OPTIMIZER_H_
