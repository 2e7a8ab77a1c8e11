// The layout-equivalence fixture's checks: one layout's run against the
// reference, and the gradients, replicas and owned elements it must hold.
#include "tests/tools/mpi/layout_equivalence_fixture.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "framework/memory_arena.h"

namespace trellis::layout_test {

void LayoutEquivalenceTest::CheckLayout(const Layout& layout,
                                        int64_t loss_chunk_rows,
                                        MPI_Comm comm) {
  const MpiP2P p2p = PipelineP2P();
  SCOPED_TRACE(layout.Name() +
               absl::StrCat(", head chunks of ", loss_chunk_rows, " rows",
                            p2p == MpiP2P::kRendezvous ? ", rendezvous" : ""));
  TrainOptions options = *options_;
  options.loss_chunk_rows = loss_chunk_rows;
  if (kOnGpu) {
    options.device = DeviceType::kCUDA;
    options.gpu_comm =
        DeviceTransport::kHostStaged;  // The ranks share one GPU.
  }
  absl::StatusOr<mpitest::LayoutRun> run =
      mpitest::StartLayout(*runtime_, layout, options, comm, p2p);
  ASSERT_TRUE(run.ok()) << run.status();
  Trainer& trainer = *run->trainer;
  ASSERT_EQ(reference_->losses.size(),
            static_cast<size_t>(trainer.options().steps));
  for (int64_t step = 0; step < trainer.options().steps; ++step) {
    absl::StatusOr<StepMetrics> m = trainer.Step();
    ASSERT_TRUE(m.ok()) << m.status();
    if (step == 0) {
      // Under ZeRO the gradient buffers carry the all-gathered weights once
      // the step is over.
      if (options.zero == 0) ExpectGradsMatch(trainer.model().params());
      ExpectEveryElementHeld(trainer.model().params(), layout,
                             *run->context->groups().world);
    }
    const double want = reference_->losses[step];
    EXPECT_NEAR(m->loss, want, kTolerance * std::abs(want))
        << "step " << step + 1;
    // Each logical gradient element counted once, whatever holds it.
    const double norm = reference_->grad_norms[step];
    EXPECT_NEAR(m->grad_norm, norm, kTolerance * norm)
        << "gradient norm, step " << step + 1;
    // A mixture of experts' routing: statistics of the same microbatches.
    const StepMetrics& one = reference_->metrics[step];
    EXPECT_NEAR(m->moe_aux_loss, one.moe_aux_loss,
                kTolerance * one.moe_aux_loss)
        << "step " << step + 1;
    EXPECT_NEAR(m->moe_z_loss, one.moe_z_loss, kTolerance * one.moe_z_loss)
        << "step " << step + 1;
    EXPECT_EQ(m->expert_load, one.expert_load) << "step " << step + 1;
  }
  // Training did something: the loss moved.
  EXPECT_LT(reference_->losses.back(), reference_->losses.front() - 0.05);
  ExpectReplicasIdentical(trainer.model().params(), *run->context->groups().tp);
  if (!reference_->eval_starts.empty()) {
    // The forward-only schedules, through the same buffers.
    absl::StatusOr<double> loss = trainer.Evaluate(reference_->eval_starts);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_NEAR(*loss, reference_->eval_loss,
                kTolerance * std::abs(reference_->eval_loss));
  }
  // Everything the steps held (the buffers between stages among it) came
  // from the arena the plan sized, and on CPU at its peak within the plan
  // but for the per-step bookkeeping (token batches, scalars); on a GPU,
  // cuDNN's call-long workspaces use the arena's headroom (docs/gpu.md).
  const MemoryArena::Stats arena = trainer.arena().stats();
  EXPECT_EQ(arena.fallbacks, 0u) << trainer.memory_plan().Format();
  if (!kOnGpu) {
    EXPECT_LE(arena.peak_in_use, trainer.memory_plan().total() + (256 << 10))
        << trainer.memory_plan().Format();
  }
}

// Every piece replicated over a sub-group of tp (key/value heads fewer than
// tp ranks) holds the same bits on each of its ranks: its weights and its
// last gradient. Per logical element, the largest and the smallest value
// over the ranks holding it must both be this rank's.
void LayoutEquivalenceTest::ExpectReplicasIdentical(const ParameterSet& params,
                                                    Communicator& tp) {
  for (const Parameter* p : params.all()) {
    if (!p->spec.has_replicated_pieces()) continue;
    for (const Tensor* t : {&p->weights(), &p->grad}) {
      // ZeRO-2 keeps no whole gradient past the step.
      if (!t->defined()) continue;
      const Tensor host = t->device().is_cpu() ? *t : t->To(Device::Cpu());
      const int64_t n = NumElements(p->spec.logical_shape);
      // [max over holders | max of the negation], -inf where not held.
      Tensor extremes = Tensor::Empty({2 * n}, DType::kF64);
      double* e = extremes.data<double>();
      std::fill(e, e + 2 * n, -INFINITY);
      p->spec.ForEachElement([&](int64_t local, int64_t logical) {
        if (logical < 0) return;
        e[logical] = host.data<float>()[local];
        e[n + logical] = -host.data<float>()[local];
      });
      tp.AllReduce(extremes, ReduceOp::kMax);
      int64_t differing = 0;
      p->spec.ForEachElement([&](int64_t local, int64_t logical) {
        if (logical < 0) return;
        const double mine = host.data<float>()[local];
        differing += e[logical] != mine || -e[n + logical] != mine;
      });
      EXPECT_EQ(differing, 0)
          << p->name << (t == &p->grad ? " gradient" : " weights")
          << ": replicas differ";
    }
  }
}

// Every tensor whole on each tp rank (norms, biases of row-parallel
// layers, position embeddings) holds the same weights on all of them: under
// --sequence_parallel the norms' gradients are partial sums that each rank
// must sum over tp before stepping.
void LayoutEquivalenceTest::ExpectTpReplicatedIdentical(
    const ParameterSet& params, Communicator& tp) {
  if (tp.size() == 1) return;
  for (const Parameter* p : params.all()) {
    if (!p->spec.replicated()) continue;
    const Tensor& w = p->weights();
    ASSERT_TRUE(w.defined()) << p->name;
    const Tensor host = w.device().is_cpu() ? w : w.To(Device::Cpu());
    const int64_t n = host.numel();
    // [max over the ranks | max of the negation].
    Tensor extremes = Tensor::Empty({2 * n}, DType::kF64);
    double* e = extremes.data<double>();
    const float* mine = host.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      e[i] = mine[i];
      e[n + i] = -mine[i];
    }
    tp.AllReduce(extremes, ReduceOp::kMax);
    int64_t differing = 0;
    for (int64_t i = 0; i < n; ++i) {
      differing += e[i] != mine[i] || -e[n + i] != mine[i];
    }
    EXPECT_EQ(differing, 0) << p->name << " weights differ over tp";
  }
}

void LayoutEquivalenceTest::ExpectGradsMatch(const ParameterSet& params) {
  for (const Parameter* p : params.all()) {
    auto it = reference_->grads.find(p->name);
    ASSERT_NE(it, reference_->grads.end()) << p->name;
    const std::vector<double>& want = it->second;
    double scale = 0;
    for (double g : want) scale = std::max(scale, std::abs(g));
    ASSERT_GT(scale, 0) << p->name << " has no gradient in the reference";
    double worst = 0;
    int64_t worst_at = -1, padded_nonzero = 0;
    const Tensor host =
        p->grad.device().is_cpu() ? p->grad : p->grad.To(Device::Cpu());
    const float* grad = host.data<float>();
    p->spec.ForEachElement([&](int64_t local, int64_t logical) {
      if (logical < 0) {
        padded_nonzero += grad[local] != 0.0f;
        return;
      }
      const double error = std::abs(grad[local] - want[logical]);
      if (error > worst) {
        worst = error;
        worst_at = logical;
      }
    });
    EXPECT_LE(worst, kTolerance * scale)
        << p->name << " (" << p->spec.DebugString() << "): element " << worst_at
        << " is off by " << worst << "; largest gradient " << scale;
    EXPECT_EQ(padded_nonzero, 0) << p->name << ": padded rows got gradient";
  }
}

// Over the layout's ranks, the primary copies (tp-replicated tensors on tp
// rank 0, the tied embedding where it embeds, pieces replicated over a
// sub-group of tp on its first rank) hold every logical element of every
// reference parameter exactly once per data-parallel replica.
void LayoutEquivalenceTest::ExpectEveryElementHeld(const ParameterSet& params,
                                                   const Layout& layout,
                                                   Communicator& world) {
  int64_t total = 0;
  for (const auto& [name, grad] : reference_->grads) {
    total += static_cast<int64_t>(grad.size());
  }
  Tensor held = Tensor::Zeros({1}, DType::kI64);
  for (const Parameter* p : params.all()) {
    if (!p->primary) continue;
    const ShardSpec& spec = p->spec;
    // Under expert parallelism each expert is held by dp / ep replicas
    // (one rank of each ep group): it counts ep times, once per replica
    // that would hold it without.
    const int64_t copies = p->expert ? layout.ep : 1;
    if (spec.replicated()) {
      held.data<int64_t>()[0] += copies * NumElements(spec.logical_shape);
      continue;
    }
    // The runs a checkpoint writes: pieces replicated over a sub-group of
    // tp count on their owner only, padding nowhere.
    const int64_t across =
        NumElements(spec.logical_shape) / spec.logical_shape[spec.split_dim];
    for (const ShardSpec::Run& run : spec.OwnedRuns()) {
      held.data<int64_t>()[0] += copies * run.length * across;
    }
  }
  world.AllReduce(held, ReduceOp::kSum);
  // Each replica's cp ranks hold the whole model each.
  EXPECT_EQ(held.data<int64_t>()[0], layout.dp * layout.cp * total);
}

}  // namespace trellis::layout_test
