// The layout-equivalence fixture, the master test: the same seed, data and
// global batch train to the same losses and gradients under every (dp, tp, pp)
// layout and pipeline schedule as in one process; the same holds for a blend of
// two files, for Llama, and for document masking and EOT loss masking in both
// families.
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
//
// The cases live in four files of one binary
// (tools_layout_equivalence_mpi_test; cuda_layout_equivalence_mpi_test
// builds the same files): layout_equivalence_test.cc (dense
// layouts, many microbatches, blends, document masks),
// layout_equivalence_zero_test.cc (the ZeRO levels),
// layout_equivalence_llama_test.cc (Llama, replicated key/value heads,
// sequence parallelism) and layout_equivalence_moe_test.cc (mixtures of
// experts). They share this fixture, so it lives in a named
// namespace: GoogleTest requires one fixture type per suite.
//
// The suite's static state (the runtime, the scratch directory, the
// options and the reference) is set up once per suite; a case that swaps
// options_ or reference_ for its own restores them before it returns.
// Thread safety: one thread per rank; every rank runs every case in the
// same order.
#ifndef TRELLIS_TESTS_TOOLS_MPI_LAYOUT_EQUIVALENCE_FIXTURE_H_
#define TRELLIS_TESTS_TOOLS_MPI_LAYOUT_EQUIVALENCE_FIXTURE_H_

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "framework/device_info.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/mpi_communicator.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/trainer/trainer.h"

namespace trellis::layout_test {

#ifdef TRELLIS_LAYOUT_ON_GPU
inline constexpr bool kOnGpu = true;
inline constexpr double kTolerance = 2e-3;
#else
inline constexpr bool kOnGpu = false;
inline constexpr double kTolerance = 1e-4;
#endif

using mpitest::Layout;

// The pp groups' transfer semantics, from TRELLIS_TEST_PIPELINE_P2P.
inline MpiP2P PipelineP2P() {
  const char* mode = std::getenv("TRELLIS_TEST_PIPELINE_P2P");
  return mode != nullptr && std::string(mode) == "rendezvous"
             ? MpiP2P::kRendezvous
             : MpiP2P::kEager;
}

inline Layout L(int dp, int tp, int pp, const std::string& schedule = "1f1b",
                int virtual_stages = 1) {
  return Layout{dp, tp, pp, schedule, virtual_stages};
}

// A layout with pp > 1 under both GPipe and 1F1B.
inline std::vector<Layout> BothSchedules(int dp, int tp, int pp) {
  return {L(dp, tp, pp, "gpipe"), L(dp, tp, pp, "1f1b")};
}

// What every layout is held to.
struct Reference {
  std::vector<double> losses;                        // per step
  std::vector<double> grad_norms;                    // per step
  std::vector<StepMetrics> metrics;                  // per step
  std::map<std::string, std::vector<double>> grads;  // after step 1, whole
  // After the last step: the loss over these windows (when any).
  std::vector<int64_t> eval_starts;
  double eval_loss = 0.0;
};

// A parameter's gradient placed into its whole logical tensor.
inline std::vector<double> LogicalGrad(const Parameter& p) {
  std::vector<double> whole(NumElements(p.spec.logical_shape), 0.0);
  const Tensor host =
      p.grad.device().is_cpu() ? p.grad : p.grad.To(Device::Cpu());
  const float* grad = host.data<float>();
  p.spec.ForEachElement([&](int64_t local, int64_t logical) {
    if (logical >= 0) whole[logical] = grad[local];
  });
  return whole;
}

// The Llama settings of LlamaLayoutsMatchOneProcess, untied.
inline TrainOptions Llama(TrainOptions options) {
  options.model.family = ModelFamilyKind::kLlama;
  options.model.n_kv_heads = 2;
  options.model.ffn_hidden = 64;
  options.model.rope_theta = 500.0;
  options.model.tie_embeddings = false;
  return options;
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
      ref.metrics.push_back(*m);
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

  // While alive, RunAll trains `options` (which may change in between)
  // against `reference` (the suite's when null) instead of the suite's
  // options and reference; they are back when it ends.
  class UseOptions {
   public:
    explicit UseOptions(TrainOptions& options, Reference* reference = nullptr)
        : options_before_(options_), reference_before_(reference_) {
      options_ = &options;
      if (reference != nullptr) reference_ = reference;
    }
    ~UseOptions() {
      options_ = options_before_;
      reference_ = reference_before_;
    }
    UseOptions(const UseOptions&) = delete;
    UseOptions& operator=(const UseOptions&) = delete;

   private:
    TrainOptions* const options_before_;
    Reference* const reference_before_;
  };

  static inline MpiRuntime* runtime_ = nullptr;
  static inline std::string* dir_ = nullptr;
  static inline TrainOptions* options_ = nullptr;
  static inline Reference* reference_ = nullptr;
};

}  // namespace trellis::layout_test

#endif  // TRELLIS_TESTS_TOOLS_MPI_LAYOUT_EQUIVALENCE_FIXTURE_H_
