// The master test: the same seed, data and global batch train to the same
// losses and gradients under every (dp, tp, pp) layout and pipeline
// schedule as in one process; the same holds for a blend of two files, for
// Llama, and for document masking and EOT loss masking in both families.
//
// Every rank first trains the reference itself (ParallelContext::Single(),
// 20 steps) and keeps its per-step losses and its gradients after step 1 as
// whole logical tensors. Then each layout runs on a sub-world of ranks
// [first, first + dp·tp·pp) (layouts smaller than the world run side by
// side) and must match: each step's loss and gradient norm to 1e-4
// relative, and after step 1 each rank's gradient shard, element by element
// through its ShardSpec, to 1e-4 of the tensor's largest reference gradient
// (padded vocabulary rows exactly zero). The tied `wte` is checked on the first
// and the last stage.
//
// With TRELLIS_TEST_PIPELINE_P2P=rendezvous in the environment every
// layout's pp group sends as NCCL does (MpiP2P::kRendezvous: synchronous
// sends, no tags, each batch of transfers completing before the next is
// posted), so the executor's exact transfer order must be free of the
// cycles that would hang GPUs; a cycle hangs this run.
//
// Built with TRELLIS_LAYOUT_ON_GPU the layouts run with --device=cuda and
// --gpu_comm=host, all ranks sharing one GPU, against the same CPU
// reference: float32 GPU kernels sum in other orders than the CPU's, so
// the tolerance is 2e-3 there; a wrong layout is off by far more. Without a
// GPU that build skips.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/device_info.h"
#include "framework/memory_arena.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/mesh.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

#ifdef TRELLIS_LAYOUT_ON_GPU
constexpr bool kOnGpu = true;
constexpr double kTolerance = 2e-3;
#else
constexpr bool kOnGpu = false;
constexpr double kTolerance = 1e-4;
#endif

using mpitest::Layout;

// The pp groups' transfer semantics, from TRELLIS_TEST_PIPELINE_P2P.
MpiP2P PipelineP2P() {
  const char* mode = std::getenv("TRELLIS_TEST_PIPELINE_P2P");
  return mode != nullptr && std::string(mode) == "rendezvous"
             ? MpiP2P::kRendezvous
             : MpiP2P::kEager;
}

Layout L(int dp, int tp, int pp, const std::string& schedule = "1f1b",
         int virtual_stages = 1) {
  return Layout{dp, tp, pp, schedule, virtual_stages};
}

// A layout with pp > 1 under both GPipe and 1F1B.
std::vector<Layout> BothSchedules(int dp, int tp, int pp) {
  return {L(dp, tp, pp, "gpipe"), L(dp, tp, pp, "1f1b")};
}

// What every layout is held to.
struct Reference {
  std::vector<double> losses;                        // per step
  std::vector<double> grad_norms;                    // per step
  std::map<std::string, std::vector<double>> grads;  // after step 1, whole
  // After the last step: the loss over these windows (when any).
  std::vector<int64_t> eval_starts;
  double eval_loss = 0.0;
};

// A parameter's gradient placed into its whole logical tensor.
std::vector<double> LogicalGrad(const Parameter& p) {
  std::vector<double> whole(NumElements(p.spec.logical_shape), 0.0);
  const Tensor host =
      p.grad.device().is_cpu() ? p.grad : p.grad.To(Device::Cpu());
  const float* grad = host.data<float>();
  p.spec.ForEachElement([&](int64_t local, int64_t logical) {
    if (logical >= 0) whole[logical] = grad[local];
  });
  return whole;
}

class LayoutEquivalenceTest : public ::testing::Test {
 protected:
  // On a GPU build's run: skipped only when no GPU is visible and none is
  // expected; a GPU that CUDA cannot use fails in SetUp.
  static bool Skipped() {
    if (!kOnGpu) return false;
    const absl::StatusOr<int> gpus = VisibleCudaDevices();
    return gpus.ok() && *gpus == 0;
  }

  void SetUp() override {
    if (kOnGpu) {
      const absl::StatusOr<int> gpus = VisibleCudaDevices();
      ASSERT_TRUE(gpus.ok()) << gpus.status().message();
    }
    if (Skipped()) GTEST_SKIP() << "no CUDA device";
  }

  static void SetUpTestSuite() {
    runtime_ = new MpiRuntime(nullptr, nullptr);
    if (Skipped()) return;
    dir_ = new std::string(
        mpitest::SharedScratchDir(kOnGpu ? "layouts-gpu" : "layouts"));
    const std::string data = *dir_ + "/tokens.h5";
    ASSERT_TRUE(mpitest::WriteSharedTokenFile(data, 12000));
    options_ = new TrainOptions(mpitest::TinyModelOptions(data));
    reference_ = new Reference(ComputeReference(*options_));
  }

  static void TearDownTestSuite() {
    if (dir_ != nullptr) mpitest::RemoveSharedScratchDir(*dir_);
    delete reference_;
    delete options_;
    delete dir_;
    delete runtime_;
  }

  static Reference ComputeReference(TrainOptions options,
                                    std::vector<int64_t> eval_starts = {}) {
    Reference ref;
    ref.eval_starts = std::move(eval_starts);
    ParallelContext single = ParallelContext::Single();
    absl::StatusOr<std::unique_ptr<Trainer>> trainer =
        Trainer::Create(options, single.groups(), single.coord());
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return ref;
    for (int64_t step = 0; step < options.steps; ++step) {
      absl::StatusOr<StepMetrics> m = (*trainer)->Step();
      EXPECT_TRUE(m.ok()) << m.status();
      if (!m.ok()) return ref;
      ref.losses.push_back(m->loss);
      ref.grad_norms.push_back(m->grad_norm);
      if (step > 0) continue;
      for (const Parameter* p : (*trainer)->model().params().all()) {
        ref.grads[p->name] = LogicalGrad(*p);
      }
    }
    if (!ref.eval_starts.empty()) {
      absl::StatusOr<double> loss = (*trainer)->Evaluate(ref.eval_starts);
      EXPECT_TRUE(loss.ok()) << loss.status();
      if (loss.ok()) ref.eval_loss = *loss;
    }
    return ref;
  }

  // Runs every layout, as many side by side as the world holds, with the
  // LM head taking `loss_chunk_rows` rows at a time (the reference uses the
  // default, which covers a whole microbatch).
  static void RunAll(const std::vector<Layout>& layouts,
                     int64_t loss_chunk_rows = TrainOptions{}.loss_chunk_rows) {
    std::vector<int> sizes;
    for (const Layout& layout : layouts) sizes.push_back(layout.world());
    mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
      CheckLayout(layouts[job], loss_chunk_rows, comm);
    });
  }

  static void CheckLayout(const Layout& layout, int64_t loss_chunk_rows,
                          MPI_Comm comm);
  static void ExpectGradsMatch(const ParameterSet& params);
  static void ExpectEveryElementHeld(const ParameterSet& params,
                                     const Layout& layout, Communicator& world);
  static void ExpectReplicasIdentical(const ParameterSet& params,
                                      Communicator& tp);
  static void ExpectTpReplicatedIdentical(const ParameterSet& params,
                                          Communicator& tp);

  static MpiRuntime* runtime_;
  static std::string* dir_;
  static TrainOptions* options_;
  static Reference* reference_;
};

MpiRuntime* LayoutEquivalenceTest::runtime_ = nullptr;
std::string* LayoutEquivalenceTest::dir_ = nullptr;
TrainOptions* LayoutEquivalenceTest::options_ = nullptr;
Reference* LayoutEquivalenceTest::reference_ = nullptr;

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
    if (spec.replicated()) {
      held.data<int64_t>()[0] += NumElements(spec.logical_shape);
      continue;
    }
    // The runs a checkpoint writes: pieces replicated over a sub-group of
    // tp count on their owner only, padding nowhere.
    const int64_t across =
        NumElements(spec.logical_shape) / spec.logical_shape[spec.split_dim];
    for (const ShardSpec::Run& run : spec.OwnedRuns()) {
      held.data<int64_t>()[0] += run.length * across;
    }
  }
  world.AllReduce(held, ReduceOp::kSum);
  EXPECT_EQ(held.data<int64_t>()[0], layout.dp * total);
}

TEST_F(LayoutEquivalenceTest, OneAndTwoRankLayoutsMatchOneProcess) {
  std::vector<Layout> layouts = {L(1, 1, 1), L(2, 1, 1), L(1, 2, 1)};
  for (const Layout& l : BothSchedules(1, 1, 2)) layouts.push_back(l);
  layouts.push_back(L(1, 1, 2, "interleaved-1f1b", 2));
  layouts.push_back(L(1, 1, 2, "zb-h1"));
  RunAll(layouts);
}

TEST_F(LayoutEquivalenceTest, ChunkedHeadLayoutsMatchOneProcess) {
  // N = 16 rows per microbatch in head chunks of 5, 5, 5 and 1, the
  // vocabulary split over tp = 2 in two of them.
  ASSERT_EQ(options_->micro_batch_size * options_->model.seq_len, 16);
  RunAll({L(1, 1, 1), L(1, 2, 1), L(1, 2, 2, "zb-h1")}, 5);
}

TEST_F(LayoutEquivalenceTest, FourRankLayoutsMatchOneProcess) {
  std::vector<Layout> layouts = {L(2, 2, 1), L(1, 1, 4, "zb-h1")};
  for (const auto& [dp, tp, pp] :
       std::vector<std::array<int, 3>>{{1, 1, 4}, {1, 2, 2}, {2, 1, 2}}) {
    for (const Layout& l : BothSchedules(dp, tp, pp)) layouts.push_back(l);
  }
  RunAll(layouts);
}

TEST_F(LayoutEquivalenceTest, EightRankLayoutsMatchOneProcess) {
  std::vector<Layout> layouts;
  for (const auto& [dp, tp, pp] :
       std::vector<std::array<int, 3>>{{2, 2, 2}, {1, 4, 2}, {4, 1, 2}}) {
    for (const Layout& l : BothSchedules(dp, tp, pp)) layouts.push_back(l);
  }
  layouts.push_back(L(2, 2, 2, "interleaved-1f1b", 2));
  layouts.push_back(L(2, 2, 2, "zb-h1"));
  RunAll(layouts);
}

// Many microbatches through the few buffers between stages that the
// schedules need (parallel/pipeline_buffers.h), under every schedule kind
// over pp 4, then an evaluation through the forward-only schedules. Each
// message (560 rows × 32 floats, 70 KiB) is above Open MPI's eager limits, so a
// send reads its buffer after it is posted: a buffer overwritten before its
// send completed would train to other losses.
TEST_F(LayoutEquivalenceTest,
       ManyMicrobatchesThroughFewBuffersMatchOneProcess) {
  const std::string data = *dir_ + "/tokens_many.h5";
  ASSERT_TRUE(mpitest::WriteSharedTokenFile(data, 60000));
  TrainOptions many = *options_;
  many.data = data;
  many.model.n_layer = 8;  // 8 chunks under interleaving with v = 2
  many.model.seq_len = 112;
  many.micro_batch_size = 5;
  many.global_batch_size = 60;  // m = 12 at dp 1, 6 at dp 2
  many.steps = 6;
  // Then 67 windows evaluated: 14 microbatches at dp 1 (runs of 12 and 2)
  // and 7 at dp 2 (6 and 1).
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < 67; ++i) starts.push_back(i * 797);
  Reference many_reference = ComputeReference(many, starts);
  TrainOptions* const saved_options = options_;
  Reference* const saved_reference = reference_;
  options_ = &many;
  reference_ = &many_reference;
  RunAll({L(1, 1, 4, "1f1b"), L(1, 1, 4, "gpipe"), L(1, 1, 4, "zb-h1"),
          L(1, 1, 4, "interleaved-1f1b", 2), L(2, 1, 4, "1f1b")});
  options_ = saved_options;
  reference_ = saved_reference;
}

// ZeRO-1, 2 and 3 (--zero=1, 2, 3) against the replicated optimizer
// (--zero=0) under the same layout, with small buckets (several per
// stage): the same losses to 1e-6 relative at every step (the elementwise
// numbers are the same; the gradient norm's summation order differs, and
// ZeRO-2 and 3 sum the microbatches' averages instead of averaging their
// sum), and each level's memory plan and dp traffic as documented. A
// global batch of 12 splits over dp 2, 3 and 4.
TEST_F(LayoutEquivalenceTest, ZeroLevelsMatchTheReplicatedOptimizer) {
  // ZB-H1 writes weight gradients in W, the others in B.
  const std::vector<Layout> layouts = {
      L(2, 1, 1), L(4, 1, 1),          L(2, 2, 2),
      L(3, 1, 2), L(2, 2, 2, "zb-h1"), L(2, 1, 2, "interleaved-1f1b", 2)};
  std::vector<int> sizes;
  for (const Layout& layout : layouts) sizes.push_back(layout.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Layout& layout = layouts[job];
    SCOPED_TRACE(layout.Name());
    constexpr int kLevels = 4;
    std::vector<std::vector<double>> losses(kLevels);
    std::vector<MemoryPlan> plans(kLevels);
    std::vector<CommStats> dp_stats(kLevels);
    std::vector<MemoryArena::Stats> arenas(kLevels);
    size_t peak_bound = 0, peak_gathered = 0;
    int64_t microbatches = 0, gathers = 0;
    // ZeRO-3's all-gathers per microbatch and compute pass: every gather
    // unit's buckets (their wire bytes), summed over the stage's units.
    int64_t unit_gathers = 0, unit_wire_bytes = 0, passes = 0;
    int64_t buckets3 = 0;  // ZeRO-3's buckets (one starts at each group)
    for (int zero = 0; zero < kLevels; ++zero) {
      SCOPED_TRACE(absl::StrCat("--zero=", zero));
      TrainOptions options = *options_;
      options.global_batch_size = 12;
      options.steps = 8;
      options.zero = zero;
      options.dp_bucket_mb = 0.01;
      if (kOnGpu) {
        options.device = DeviceType::kCUDA;
        options.gpu_comm = DeviceTransport::kHostStaged;
      }
      absl::StatusOr<mpitest::LayoutRun> run =
          mpitest::StartLayout(*runtime_, layout, options, comm);
      ASSERT_TRUE(run.ok()) << run.status();
      run->context->groups().dp->ResetStats();
      for (int64_t step = 0; step < options.steps; ++step) {
        absl::StatusOr<StepMetrics> m = run->trainer->Step();
        ASSERT_TRUE(m.ok()) << m.status();
        losses[zero].push_back(m->loss);
      }
      plans[zero] = run->trainer->memory_plan();
      dp_stats[zero] = run->context->groups().dp->stats();
      arenas[zero] = run->trainer->arena().stats();
      microbatches = run->trainer->options().microbatches();
      if (zero == 2) peak_bound = run->trainer->buckets().peak_bound_bytes();
      if (zero == 3) {
        const ShardedParameters* sharded = run->trainer->sharded_parameters();
        ASSERT_NE(sharded, nullptr);
        peak_gathered = sharded->peak_gathered_bytes();
        gathers = sharded->gathers();
        const GradientBuckets& buckets = run->trainer->buckets();
        buckets3 = buckets.num_buckets();
        for (const auto& unit : run->trainer->model().GatherUnits()) {
          std::vector<int> seen;
          for (const Parameter* p : unit) {
            const int b = buckets.BucketOf(p);
            if (std::count(seen.begin(), seen.end(), b) > 0) continue;
            seen.push_back(b);
            ++unit_gathers;
            unit_wire_bytes += WireBytes(
                CommOp::kAllGather, buckets.bucket_elements(b) * 4, layout.dp);
          }
        }
        // F and B; W reads the weights again where it is deferred.
        passes = layout.schedule == "zb-h1" ? 3 : 2;
      }
    }
    // On a GPU the runs' kernels may also sum in other orders.
    const double tolerance = kOnGpu ? kTolerance : 1e-6;
    for (int zero = 1; zero < kLevels; ++zero) {
      SCOPED_TRACE(absl::StrCat("--zero=", zero));
      for (size_t step = 0; step < losses[0].size(); ++step) {
        EXPECT_NEAR(losses[zero][step], losses[0][step],
                    tolerance * std::abs(losses[0][step]))
            << "step " << step + 1;
      }
      EXPECT_LT(losses[zero].back(), losses[zero].front() - 0.05);
      EXPECT_EQ(plans[zero].optimizer,
                (plans[0].optimizer + layout.dp - 1) / layout.dp);
      // Everything lies in the arena the plan sized.
      EXPECT_EQ(arenas[zero].fallbacks, 0u);
    }
    // Memory: ZeRO-1 keeps whole gradient buckets; ZeRO-2 the owned 1/dp
    // plus the buckets in flight, which the plan bounds (this model is too
    // shallow for that to be much less than whole; see
    // tools_zero_memory_mpi_test for the ratios).
    // (On CPU ranks MPI reduce-scatters through scratch blocks: ZeRO-1
    // holds every bucket's at once, 1/dp of the gradients.)
    const size_t owned = (plans[0].gradients + layout.dp - 1) / layout.dp;
    EXPECT_EQ(plans[1].gradients, plans[0].gradients + (kOnGpu ? 0 : owned));
    ASSERT_GT(plans[2].gradients, owned);
    EXPECT_GT(peak_bound, 0u);
    EXPECT_LE(peak_bound, plans[2].gradients - owned);
    // ZeRO-3: level 2's gradients (over buckets that break at each weight
    // group); the owned 1/dp of the weights plus at most two gather units'
    // whole values (here, with the embedding a large share of a shallow
    // model, about the whole weights; tools_zero_memory_mpi_test checks
    // the ratios on a deeper one).
    EXPECT_GT(plans[3].gradients, owned);
    const size_t owned_weights = (plans[0].weights + layout.dp - 1) / layout.dp;
    ASSERT_GT(plans[3].weights, owned_weights);
    EXPECT_LE(plans[3].weights, owned_weights + plans[0].weights);
    EXPECT_GT(peak_gathered, 0u);
    EXPECT_LE(peak_gathered, plans[3].weights - owned_weights);
    // Traffic. The replicated run all-reduces each bucket and the step's
    // loss (one double); ZeRO-1 reduce-scatters and all-gathers each
    // (padded) bucket once per step, and all-reduces the loss and the
    // gradient norm: the all-reduce's bytes, to padding under dp elements
    // per bucket. ZeRO-2 reduce-scatters each bucket once per microbatch
    // and gathers as ZeRO-1: m + 1 halves of an all-reduce.
    const int64_t steps = static_cast<int64_t>(losses[0].size());
    const int64_t scalar = WireBytes(CommOp::kAllReduce, 8, layout.dp);
    const int64_t replicated =
        dp_stats[0].WireBytes(CommOp::kAllReduce) - steps * scalar;
    const int64_t sharded = dp_stats[1].WireBytes(CommOp::kReduceScatter) +
                            dp_stats[1].WireBytes(CommOp::kAllGather);
    const int64_t buckets = dp_stats[1].Calls(CommOp::kAllGather) / steps;
    for (int zero = 1; zero < kLevels; ++zero) {
      EXPECT_EQ(dp_stats[zero].WireBytes(CommOp::kAllReduce),
                2 * steps * scalar);
    }
    EXPECT_GE(sharded, replicated);
    EXPECT_LE(sharded, replicated + steps * buckets * 2 * layout.dp * 4);
    EXPECT_EQ(dp_stats[2].Calls(CommOp::kReduceScatter),
              microbatches * dp_stats[1].Calls(CommOp::kReduceScatter));
    EXPECT_EQ(dp_stats[2].WireBytes(CommOp::kReduceScatter),
              microbatches * dp_stats[1].WireBytes(CommOp::kReduceScatter));
    EXPECT_EQ(dp_stats[2].WireBytes(CommOp::kAllGather),
              dp_stats[1].WireBytes(CommOp::kAllGather));
    // ZeRO-3 reduce-scatters as ZeRO-2, gathers each unit's weights before
    // each of its computes (F, B, and a deferred W) and none after the
    // step: passes · m gathers of the units per step. Where every bucket
    // lies in one unit (no stage holding both ends of a tied embedding)
    // that is passes · m times the all-gather of ZeRO-1 and 2.
    EXPECT_EQ(dp_stats[3].Calls(CommOp::kReduceScatter),
              steps * microbatches * buckets3);
    EXPECT_NEAR(
        static_cast<double>(dp_stats[3].WireBytes(CommOp::kReduceScatter)),
        static_cast<double>(dp_stats[2].WireBytes(CommOp::kReduceScatter)),
        static_cast<double>(steps * microbatches * buckets3 * layout.dp * 4));
    EXPECT_EQ(dp_stats[3].Calls(CommOp::kAllGather),
              steps * microbatches * passes * unit_gathers);
    EXPECT_EQ(gathers, steps * microbatches * passes * unit_gathers);
    EXPECT_EQ(dp_stats[3].WireBytes(CommOp::kAllGather),
              steps * microbatches * passes * unit_wire_bytes);
    // (ZeRO-3's buckets break at each unit: padding, under dp elements of
    // 4 bytes per bucket, may differ.)
    if (layout.pp > 1) {
      EXPECT_NEAR(
          static_cast<double>(dp_stats[3].WireBytes(CommOp::kAllGather)),
          static_cast<double>(microbatches * passes *
                              dp_stats[2].WireBytes(CommOp::kAllGather)),
          static_cast<double>(steps * microbatches * passes * unit_gathers *
                              layout.dp * 4));
    }
  });
}

// ZeRO-3 (--zero=3) layouts against one process, as every layout: losses,
// gradient norms, evaluation through the gathered weights, and the arena's
// peak within the plan.
TEST_F(LayoutEquivalenceTest, ZeroThreeLayoutsMatchOneProcess) {
  TrainOptions sharded = *options_;
  sharded.zero = 3;
  sharded.dp_bucket_mb = 0.01;
  TrainOptions* const saved_options = options_;
  options_ = &sharded;
  // (dp3 is in ZeroLevelsMatchTheReplicatedOptimizer: its global batch
  // of 12 splits over 3.)
  RunAll({L(2, 1, 1), L(4, 1, 1), L(2, 2, 2), L(2, 2, 2, "zb-h1"),
          L(2, 1, 2, "interleaved-1f1b", 2)});
  options_ = saved_options;
}

// A blend of two files (data/blend.h): every layout draws the same windows
// from each source at each step, so it trains to the same losses.
TEST_F(LayoutEquivalenceTest, BlendLayoutsMatchOneProcess) {
  const std::string second = *dir_ + "/tokens_b.h5";
  ASSERT_TRUE(mpitest::WriteSharedTokenFile(second, 7000));
  TrainOptions blended = *options_;
  blended.data = absl::StrCat("0.6:", options_->data, ",0.4:", second);
  Reference blend_reference = ComputeReference(blended);
  ASSERT_EQ(blend_reference.losses.size(), reference_->losses.size());
  EXPECT_NE(blend_reference.losses, reference_->losses);
  TrainOptions* const saved_options = options_;
  Reference* const saved_reference = reference_;
  options_ = &blended;
  reference_ = &blend_reference;
  RunAll({L(1, 1, 1), L(2, 1, 1), L(4, 1, 1), L(2, 2, 2)});
  options_ = saved_options;
  reference_ = saved_reference;
}

// --sequence_parallel against the same layout without it, for both
// families: each step's loss to 1e-6 relative (kTolerance on a GPU), and,
// like every layout, the one-process losses and every gradient after step 1
// (the norms' gradients, partial sums over tp until the trainer sums them,
// included). tp 2 and 4 split the 16 rows of a microbatch into blocks of 8
// and 4; dp2·tp2·pp2 sends those blocks between stages; zb-h1 keeps the
// gathered output gradients for W; with --zero=1 the norms' gradients are
// summed over tp after the buckets' reduce-scatter (losses only there).
TEST_F(LayoutEquivalenceTest, SequenceParallelMatchesTensorParallel) {
  TrainOptions llama = *options_;
  llama.model.family = ModelFamilyKind::kLlama;
  llama.model.n_kv_heads = 2;
  llama.model.ffn_hidden = 64;
  llama.model.rope_theta = 500.0;
  llama.model.tie_embeddings = false;
  Reference llama_reference = ComputeReference(llama);
  struct Case {
    const TrainOptions* options;
    Reference* reference;
    Layout layout;
    int zero = 0;
  };
  const std::vector<Case> cases = {
      {options_, reference_, L(1, 2, 1)},
      {options_, reference_, L(2, 2, 2)},
      {options_, reference_, L(1, 4, 1)},
      {options_, reference_, L(1, 2, 2, "zb-h1")},
      {&llama, &llama_reference, L(1, 2, 1)},
      {&llama, &llama_reference, L(2, 2, 2)},
      {&llama, &llama_reference, L(1, 2, 2, "zb-h1")},
      // The norms' gradients summed over tp after ZeRO-1's reduce-scatter.
      {options_, reference_, L(2, 2, 2), 1},
      {&llama, &llama_reference, L(2, 2, 2), 1},
  };
  std::vector<int> sizes;
  for (const Case& c : cases) sizes.push_back(c.layout.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Case& c = cases[job];
    SCOPED_TRACE(absl::StrCat(c.layout.Name(), ", ",
                              ModelFamilyName(c.options->model.family),
                              ", --zero=", c.zero));
    std::vector<std::vector<double>> losses(2);
    for (const bool sequence_parallel : {false, true}) {
      TrainOptions options = *c.options;
      options.sequence_parallel = sequence_parallel;
      options.zero = c.zero;
      if (kOnGpu) {
        options.device = DeviceType::kCUDA;
        options.gpu_comm = DeviceTransport::kHostStaged;
      }
      absl::StatusOr<mpitest::LayoutRun> run = mpitest::StartLayout(
          *runtime_, c.layout, options, comm, PipelineP2P());
      ASSERT_TRUE(run.ok()) << run.status();
      for (int64_t step = 0; step < options.steps; ++step) {
        absl::StatusOr<StepMetrics> m = run->trainer->Step();
        ASSERT_TRUE(m.ok()) << m.status();
        losses[sequence_parallel].push_back(m->loss);
        // Under ZeRO-1 only the owned blocks of the buckets are current.
        if (step > 0 || !sequence_parallel || c.zero > 0) continue;
        // ExpectGradsMatch reads the case's reference.
        Reference* const saved = reference_;
        reference_ = c.reference;
        ExpectGradsMatch(run->trainer->model().params());
        reference_ = saved;
      }
    }
    const double tolerance = kOnGpu ? kTolerance : 1e-6;
    for (size_t step = 0; step < losses[1].size(); ++step) {
      EXPECT_NEAR(losses[1][step], losses[0][step],
                  tolerance * std::abs(losses[0][step]))
          << "step " << step + 1;
      const double want = c.reference->losses[step];
      EXPECT_NEAR(losses[1][step], want, kTolerance * std::abs(want))
          << "step " << step + 1;
    }
    EXPECT_LT(losses[1].back(), losses[1].front() - 0.05);
  });
}

// Llama (grouped-query attention, RoPE, RMSNorm, SwiGLU) under every
// schedule and each kind of split: heads and key/value heads over tp, the
// untied lm_head over the vocabulary, layers over pp. The tied variant
// checks that the first and last stage sum the embedding's gradients.
TEST_F(LayoutEquivalenceTest, LlamaLayoutsMatchOneProcess) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TrainOptions llama = *options_;
    llama.model.family = ModelFamilyKind::kLlama;
    llama.model.n_kv_heads = 2;
    llama.model.ffn_hidden = 64;
    llama.model.rope_theta = 500.0;
    llama.model.tie_embeddings = tied;
    Reference llama_reference = ComputeReference(llama);
    ASSERT_EQ(llama_reference.losses.size(), reference_->losses.size());
    TrainOptions* const saved_options = options_;
    Reference* const saved_reference = reference_;
    options_ = &llama;
    reference_ = &llama_reference;
    if (tied) {
      RunAll({L(1, 2, 2, "1f1b"), L(2, 2, 2, "zb-h1")});
    } else {
      std::vector<Layout> layouts = {L(2, 1, 1), L(1, 2, 1), L(2, 2, 2)};
      for (const Layout& l : BothSchedules(1, 1, 2)) layouts.push_back(l);
      layouts.push_back(L(1, 1, 2, "interleaved-1f1b", 2));
      layouts.push_back(L(1, 2, 2, "zb-h1"));
      RunAll(layouts);
    }
    // Parameters sharded over dp (ZeRO-3).
    llama.zero = 3;
    RunAll(
        {L(2, 1, 1), L(2, 2, 2, "zb-h1"), L(2, 1, 2, "interleaved-1f1b", 2)});
    llama.zero = 0;
    options_ = saved_options;
    reference_ = saved_reference;
  }
}

// Key/value heads fewer than tp ranks, each replicated over tp / n_kv_heads
// ranks (Megatron's way): one head under tp 2 and under dp2·tp2·pp2, two
// heads under tp 4, and one head under dp2·tp2 with ZeRO-1. Besides the
// losses and gradients, every layout ends with bit-identical replicas
// (CheckLayout), and each logical element is held once by its owner.
TEST_F(LayoutEquivalenceTest, LlamaReplicatedKeyValueHeadsMatchOneProcess) {
  for (const int64_t kv : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("n_kv_heads=", kv));
    TrainOptions llama = *options_;
    llama.model.family = ModelFamilyKind::kLlama;
    llama.model.n_kv_heads = kv;
    llama.model.ffn_hidden = 64;
    llama.model.rope_theta = 500.0;
    llama.model.tie_embeddings = false;
    Reference llama_reference = ComputeReference(llama);
    ASSERT_EQ(llama_reference.losses.size(), reference_->losses.size());
    TrainOptions* const saved_options = options_;
    Reference* const saved_reference = reference_;
    options_ = &llama;
    reference_ = &llama_reference;
    if (kv == 1) {
      RunAll({L(1, 2, 1), L(2, 2, 2, "1f1b")});
      llama.zero = 1;
      RunAll({L(2, 2, 1), L(1, 4, 1, "1f1b")});
    } else {
      RunAll({L(1, 4, 1), L(1, 4, 2, "zb-h1")});
    }
    options_ = saved_options;
    reference_ = saved_reference;
  }
}

// The Llama settings of LlamaLayoutsMatchOneProcess, untied.
TrainOptions Llama(TrainOptions options) {
  options.model.family = ModelFamilyKind::kLlama;
  options.model.n_kv_heads = 2;
  options.model.ffn_hidden = 64;
  options.model.rope_theta = 500.0;
  options.model.tie_embeddings = false;
  return options;
}

// The sums over tp that follow the data-parallel sync (the
// sequence-parallel norms' partial gradients, key/value heads replicated
// over sub-groups of tp) under ZeRO, where they run on the owned blocks of
// the buckets: --zero=1, 2 and 3 against --zero=0 on the same layout,
// with small buckets whose blocks cut through the norms and the
// replicated key/value columns (under --zero=3 a bucket starts at each
// weight group besides). Each step's loss and gradient norm to 1e-6
// relative (the norm counts each replicated element once, on its owner,
// from the owned blocks), --zero=0 against one process, the replicated
// key/value pieces and the tensors whole on every tp rank bit-identical at
// the end (under --zero=3, where only the owned blocks were stepped, the
// gathered weights), and the arena within the plan.
TEST_F(LayoutEquivalenceTest, ZeroLevelsSumOverTpOnTheOwnedBlocks) {
  TrainOptions kv1 = Llama(*options_);
  kv1.model.n_kv_heads = 1;  // replicated over tp 2
  const Reference llama_reference = ComputeReference(Llama(*options_));
  const Reference kv1_reference = ComputeReference(kv1);
  const TrainOptions llama = Llama(*options_);
  struct Case {
    const TrainOptions* options;
    const Reference* reference;
    Layout layout;
    bool sequence_parallel;
    const char* what;
  };
  const std::vector<Case> cases = {
      {options_, reference_, L(2, 2, 1), true, "gpt2, sequence parallel"},
      {options_, reference_, L(2, 2, 2), true, "gpt2, sequence parallel"},
      {&llama, &llama_reference, L(2, 2, 1), true, "llama, sequence parallel"},
      {&llama, &llama_reference, L(2, 2, 2, "zb-h1"), true,
       "llama, sequence parallel"},
      {&kv1, &kv1_reference, L(2, 2, 1), false, "llama, kv heads replicated"},
      {&kv1, &kv1_reference, L(2, 2, 2), false, "llama, kv heads replicated"},
      {&kv1, &kv1_reference, L(2, 2, 1), true,
       "llama, kv heads replicated, sequence parallel"},
  };
  // The first half of the reference's steps (its learning-rate schedule).
  constexpr int64_t kSteps = 10;
  std::vector<int> sizes;
  for (const Case& c : cases) sizes.push_back(c.layout.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Case& c = cases[job];
    SCOPED_TRACE(absl::StrCat(c.layout.Name(), ", ", c.what));
    constexpr int kLevels = 4;
    std::vector<std::vector<double>> losses(kLevels), norms(kLevels);
    for (int zero = 0; zero < kLevels; ++zero) {
      SCOPED_TRACE(absl::StrCat("--zero=", zero));
      TrainOptions options = *c.options;
      options.zero = zero;
      options.sequence_parallel = c.sequence_parallel;
      options.dp_bucket_mb = 0.01;
      if (kOnGpu) {
        options.device = DeviceType::kCUDA;
        options.gpu_comm = DeviceTransport::kHostStaged;
      }
      absl::StatusOr<mpitest::LayoutRun> run = mpitest::StartLayout(
          *runtime_, c.layout, options, comm, PipelineP2P());
      ASSERT_TRUE(run.ok()) << run.status();
      for (int64_t step = 0; step < kSteps; ++step) {
        absl::StatusOr<StepMetrics> m = run->trainer->Step();
        ASSERT_TRUE(m.ok()) << m.status();
        losses[zero].push_back(m->loss);
        norms[zero].push_back(m->grad_norm);
      }
      // The sums' buffers too came from the arena the plan sized.
      const MemoryArena::Stats arena = run->trainer->arena().stats();
      EXPECT_EQ(arena.fallbacks, 0u);
      if (!kOnGpu) {
        EXPECT_LE(arena.peak_in_use,
                  run->trainer->memory_plan().total() + (256 << 10))
            << run->trainer->memory_plan().Format();
      }
      // ZeRO-3 keeps only the owned blocks: the weights are compared whole
      // (every tp replica stepped its block with the same summed gradient).
      auto* sharded =
          const_cast<ShardedParameters*>(run->trainer->sharded_parameters());
      ASSERT_EQ(sharded != nullptr, zero == 3);
      if (sharded != nullptr) sharded->GatherAll();
      const ParameterSet& params = run->trainer->model().params();
      Communicator& tp = *run->context->groups().tp;
      ExpectReplicasIdentical(params, tp);
      ExpectTpReplicatedIdentical(params, tp);
      if (sharded != nullptr) sharded->ShardAll(/*keep=*/false);
    }
    for (int64_t step = 0; step < kSteps; ++step) {
      const double want = c.reference->losses[step];
      EXPECT_NEAR(losses[0][step], want, kTolerance * std::abs(want))
          << "--zero=0, step " << step + 1;
      const double norm = c.reference->grad_norms[step];
      EXPECT_NEAR(norms[0][step], norm, kTolerance * norm)
          << "--zero=0 gradient norm, step " << step + 1;
    }
    const double tolerance = kOnGpu ? kTolerance : 1e-6;
    for (int zero = 1; zero < kLevels; ++zero) {
      for (int64_t step = 0; step < kSteps; ++step) {
        EXPECT_NEAR(losses[zero][step], losses[0][step],
                    tolerance * std::abs(losses[0][step]))
            << "--zero=" << zero << ", step " << step + 1;
        EXPECT_NEAR(norms[zero][step], norms[0][step],
                    tolerance * norms[0][step])
            << "--zero=" << zero << " gradient norm, step " << step + 1;
      }
      EXPECT_LT(losses[zero].back(), losses[zero].front() - 0.05);
    }
  });
}

// --document_mask and --eod_mask_loss, together and each alone, for GPT-2
// and Llama: every layout masks the same attention scores and divides by
// the same count of the global batch's counted targets, so it trains to the
// same losses; middle stages (pp 4, interleaved chunks) read the document
// starts too. CPU only: the CUDA attention kernels have no document mask
// yet.
TEST_F(LayoutEquivalenceTest, DocumentMaskLayoutsMatchOneProcess) {
  if (kOnGpu) GTEST_SKIP() << "--document_mask runs on cpu only";
  struct Case {
    const char* name;
    bool llama, document_mask, eod_mask_loss;
    std::vector<Layout> layouts;
    bool sequence_parallel = false;  // the layouts' tp ranks split the rows
  };
  const std::vector<Case> cases = {
      {"gpt2, both",
       false,
       true,
       true,
       {L(2, 1, 1), L(4, 1, 1), L(1, 2, 1), L(1, 1, 4, "1f1b"),
        L(1, 1, 2, "interleaved-1f1b", 2), L(2, 2, 2, "zb-h1")}},
      {"gpt2, document mask",
       false,
       true,
       false,
       {L(1, 2, 2, "gpipe"), L(1, 1, 4, "zb-h1")}},
      {"gpt2, EOT loss mask",
       false,
       false,
       true,
       {L(4, 1, 1), L(2, 2, 2, "1f1b")}},
      {"llama, both",
       true,
       true,
       true,
       {L(2, 1, 1), L(1, 2, 1), L(1, 1, 4, "1f1b"),
        L(1, 1, 2, "interleaved-1f1b", 2), L(2, 2, 2, "zb-h1")}},
      {"gpt2, both, sequence parallel",
       false,
       true,
       true,
       {L(1, 2, 1), L(2, 2, 2, "1f1b")},
       true},
      {"llama, both, sequence parallel",
       true,
       true,
       true,
       {L(1, 2, 2, "zb-h1")},
       true},
  };
  TrainOptions* const saved_options = options_;
  Reference* const saved_reference = reference_;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainOptions plain = c.llama ? Llama(*saved_options) : *saved_options;
    TrainOptions masked = plain;
    masked.document_mask = c.document_mask;
    masked.eod_mask_loss = c.eod_mask_loss;
    const Reference plain_reference =
        c.llama ? ComputeReference(plain) : *saved_reference;
    Reference masked_reference = ComputeReference(masked);
    // The one-process reference has no tp to split rows over.
    masked.sequence_parallel = c.sequence_parallel;
    if (masked_reference.losses.size() != saved_reference->losses.size()) {
      ADD_FAILURE() << "the one-process reference did not train";
      continue;
    }
    // The masks change what is trained.
    EXPECT_NE(masked_reference.losses, plain_reference.losses);
    options_ = &masked;
    reference_ = &masked_reference;
    RunAll(c.layouts);
  }
  options_ = saved_options;
  reference_ = saved_reference;
}

}  // namespace
}  // namespace trellis
