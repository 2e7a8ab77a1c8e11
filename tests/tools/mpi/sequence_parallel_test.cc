// --sequence_parallel, on 4 ranks: what it communicates and what it saves.
//
//  - A block (GPT-2's and Llama's) on its N/tp rows computes this rank's
//    rows of the block without it (output and input gradient), and issues an
//    all-gather and a reduce-scatter of N·C floats where it issued one
//    all-reduce: the same wire bytes, forward and backward.
//  - A training step's tp group moves the wire bytes of the run without it,
//    plus one all-reduce of the norms' gradients (partial sums over tp);
//    under ZeRO those sums carry the owned blocks only.
//  - The memory plan's activations fall by (1 − 1/tp) of the row tensors
//    that sequence parallelism splits (block inputs and outputs, residuals,
//    norm statistics, the head's d(ln_f)), its pipeline buffers by tp, and
//    the arena covers what a step allocates, as trainer_memory_test checks
//    without it; pipeline transfers carry 1/tp of the bytes.
//  - Every recompute mode trains to the same bits with it, and evaluation
//    gives the validation loss of the run without it.
// Losses against the run without it are layout_equivalence_llama_test's.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/memory_arena.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/comm_stats_test_util.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/trainer/trainer.h"
#include "transformer/decoder_block.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

using mpitest::Layout;
using mpitest::Since;
using mpitest::TotalWireBytes;

constexpr int64_t kFloat = 4;

ModelConfig BlockConfig(ModelFamilyKind family) {
  ModelConfig config;
  config.family = family;
  config.n_layer = 1;
  config.n_head = 4;
  config.d_model = 32;
  config.seq_len = 16;
  config.vocab_size = 257;
  if (family == ModelFamilyKind::kLlama) {
    config.n_kv_heads = 4;
    config.ffn_hidden = 64;
  }
  return config;
}

std::unique_ptr<DecoderBlock> MakeBlock(const ModelConfig& config, TpPlace tp,
                                        const ParameterSet& params,
                                        bool sequence_parallel) {
  BlockOptions options;
  options.defer_weight_grads = false;
  options.sequence_parallel = sequence_parallel;
  if (config.family == ModelFamilyKind::kLlama) {
    return std::make_unique<DecoderBlock>(config, 0, tp, params, options);
  }
  return std::make_unique<DecoderBlock>(config, 0, tp, params, options);
}

Tensor Filled(int64_t rows, int64_t cols, float scale, int period) {
  Tensor t = Tensor::Empty({rows, cols}, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] =
        scale * (static_cast<float>(i % period) - 0.5f * period);
  }
  return t;
}

// `got` (this rank's rows) against rows [first, first + rows) of `want`.
void ExpectRowsOf(const Tensor& got, const Tensor& want, int64_t first,
                  const std::string& what) {
  const int64_t width = got.dim(1);
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float w = want.data<float>()[first * width + i];
    ASSERT_NEAR(got.data<float>()[i], w, 1e-5 * (1 + std::abs(w)))
        << what << " element " << i;
  }
}

class SequenceParallelTest
    : public mpitest::SharedTokenFileTest<SequenceParallelTest> {
 public:
  static constexpr const char* kScratchTag = "seqpar";
  static constexpr int64_t kTokens = 12000;

 protected:
};

TEST_F(SequenceParallelTest, BlockMatchesItsRowsAndMovesWhatItsAllReducesDid) {
  for (ModelFamilyKind family :
       {ModelFamilyKind::kGpt2, ModelFamilyKind::kLlama}) {
    const ModelConfig config = BlockConfig(family);
    const int64_t batch = 2, n = batch * config.seq_len, c = config.d_model;
    for (int tp : {2, 4}) {
      SCOPED_TRACE(absl::StrCat(ModelFamilyName(family), " tp=", tp));
      absl::StatusOr<Mesh> mesh = Mesh::Create(mpitest::WorldSize(), 0, tp, 1);
      ASSERT_TRUE(mesh.ok()) << mesh.status();
      absl::StatusOr<ParallelContext> context =
          ParallelContext::Create(*runtime_, *mesh);
      ASSERT_TRUE(context.ok()) << context.status();
      Communicator& group = *context->groups().tp;
      const TpPlace place{tp, context->coord().t};
      const int64_t nl = n / tp, first = place.rank * nl;
      const Tensor x = Filled(n, c, 0.013f, 37);
      const Tensor dy = Filled(n, c, 0.021f, 11);
      // Without sequence parallelism: every row on every rank.
      ParameterSet whole_params;
      AddModelParameters(config, ChunkPlan{0, 1, false, false}, place, 7,
                         Device::Cpu(), DType::kF32, whole_params);
      std::unique_ptr<DecoderBlock> whole =
          MakeBlock(config, place, whole_params, false);
      DecoderBlock::State ws =
          whole->NewState(batch, DType::kF32, Device::Cpu());
      DecoderBlock::Workspace ww =
          whole->NewWorkspace(batch, DType::kF32, Device::Cpu());
      Tensor whole_dx = Tensor::Empty({n, c}, DType::kF32);
      CommStats before = group.stats();
      whole->Forward(group, x, ws, ww);
      const CommStats whole_forward = Since(group, before);
      before = group.stats();
      whole->BackwardInput(group, x, dy, ws, ww, whole_dx);
      const CommStats whole_backward = Since(group, before);
      // With it: this rank's rows in and out.
      ParameterSet params;
      AddModelParameters(config, ChunkPlan{0, 1, false, false}, place, 7,
                         Device::Cpu(), DType::kF32, params);
      std::unique_ptr<DecoderBlock> split =
          MakeBlock(config, place, params, true);
      DecoderBlock::State s =
          split->NewState(batch, DType::kF32, Device::Cpu());
      DecoderBlock::Workspace w =
          split->NewWorkspace(batch, DType::kF32, Device::Cpu());
      const Tensor xl = x.Narrow(first, nl), dyl = dy.Narrow(first, nl);
      Tensor dx = Tensor::Empty({nl, c}, DType::kF32);
      before = group.stats();
      split->Forward(group, xl, s, w);
      const CommStats forward = Since(group, before);
      before = group.stats();
      split->BackwardInput(group, xl, dyl, s, w, dx);
      const CommStats backward = Since(group, before);
      ExpectRowsOf(s.y, ws.y, first, "output");
      ExpectRowsOf(dx, whole_dx, first, "input gradient");
      // Column-parallel weights' gradients are whole-row sums either way.
      for (size_t i = 0; i < params.all().size(); ++i) {
        const Parameter& p = *params.all()[i];
        if (p.spec.replicated() && p.spec.logical_shape.size() == 1) continue;
        ExpectRowsOf(p.grad.View({1, p.grad.numel()}),
                     whole_params.all()[i]->grad.View({1, p.grad.numel()}), 0,
                     p.name);
      }
      for (const CommStats& st : {forward, backward}) {
        EXPECT_EQ(st.Calls(CommOp::kAllReduce), 0);
        EXPECT_EQ(st.Calls(CommOp::kAllGather), 2);
        EXPECT_EQ(st.Calls(CommOp::kReduceScatter), 2);
        EXPECT_EQ(st.Bytes(CommOp::kAllGather), 2 * n * c * kFloat);
        EXPECT_EQ(st.Bytes(CommOp::kReduceScatter), 2 * n * c * kFloat);
      }
      EXPECT_EQ(TotalWireBytes(forward), TotalWireBytes(whole_forward));
      EXPECT_EQ(TotalWireBytes(backward), TotalWireBytes(whole_backward));
      EXPECT_EQ(whole_forward.Calls(CommOp::kAllReduce), 2);
    }
  }
}

// A step's tp traffic and memory plan with and without sequence
// parallelism, on dp1·tp2·pp2 and dp1·tp4·pp1.
struct StepResult {
  CommStats tp, pp;
  MemoryPlan plan;
  int64_t partial_bytes = 0;  // the norms' gradients on this rank
  int64_t layers = 0;         // blocks on this rank
  bool first = false, last = false;
  int stage = 0;
};

StepResult RunSteps(const MpiRuntime& runtime, const Layout& layout,
                    TrainOptions options, int64_t steps, MPI_Comm comm) {
  StepResult r;
  const size_t live = StorageBytesLive(DeviceType::kCPU);
  absl::StatusOr<mpitest::LayoutRun> run =
      mpitest::StartLayout(runtime, layout, options, comm);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return r;
  Trainer& trainer = *run->trainer;
  run->context->groups().tp->ResetStats();
  run->context->groups().pp->ResetStats();
  for (int64_t step = 0; step < steps; ++step) {
    absl::StatusOr<StepMetrics> m = trainer.Step();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return r;
    if (step > 0) continue;
    // The plan against what the first step allocated, all in the arena.
    const size_t used = StorageBytesLive(DeviceType::kCPU) - live;
    const size_t planned = trainer.memory_plan().total();
    EXPECT_LE(planned, used);
    EXPECT_LE(used, planned + (256 << 10)) << trainer.memory_plan().Format();
    EXPECT_EQ(trainer.arena().stats().fallbacks, 0u);
    EXPECT_GE(trainer.arena().stats().peak_in_use, planned);
  }
  r.tp = run->context->groups().tp->stats();
  r.pp = run->context->groups().pp->stats();
  r.plan = trainer.memory_plan();
  for (const Parameter* p : trainer.model().TpPartialGradients()) {
    r.partial_bytes += p->grad.nbytes();
  }
  for (const ChunkPlan& plan : trainer.model().chunk_plans()) {
    r.layers += plan.num_layers;
    r.first |= plan.has_embedding;
    r.last |= plan.has_head;
  }
  r.stage = run->context->coord().p;
  return r;
}

TEST_F(SequenceParallelTest, StepTrafficAndMemoryPlan) {
  TrainOptions gpt = mpitest::TinyModelOptions(*data_);
  TrainOptions llama = gpt;
  llama.model.family = ModelFamilyKind::kLlama;
  llama.model.n_kv_heads = 2;
  llama.model.ffn_hidden = 64;
  for (const TrainOptions& base : {gpt, llama}) {
    for (const Layout& layout : {Layout{1, 2, 2}, Layout{1, 4, 1}}) {
      if (base.model.family == ModelFamilyKind::kLlama && layout.tp > 2) {
        continue;  // Two key/value heads split over at most 2 ranks.
      }
      SCOPED_TRACE(
          absl::StrCat(ModelFamilyName(base.model.family), " ", layout.Name()));
      constexpr int64_t kSteps = 2;
      StepResult without, with;
      mpitest::RunSideBySide({layout.world()}, [&](int, MPI_Comm comm) {
        TrainOptions o = base;
        without = RunSteps(*runtime_, layout, o, kSteps, comm);
        o.sequence_parallel = true;
        with = RunSteps(*runtime_, layout, o, kSteps, comm);
      });
      const int64_t tp = layout.tp;
      // Traffic: what the all-reduces moved, plus the norms' gradients.
      ASSERT_GT(with.partial_bytes, 0);
      EXPECT_EQ(TotalWireBytes(with.tp),
                TotalWireBytes(without.tp) +
                    kSteps * WireBytes(CommOp::kAllReduce, with.partial_bytes,
                                       static_cast<int>(tp)));
      EXPECT_EQ(with.tp.WireBytes(CommOp::kReduceScatter),
                with.tp.WireBytes(CommOp::kAllGather));
      EXPECT_GT(with.tp.Calls(CommOp::kReduceScatter), 0);
      EXPECT_EQ(without.partial_bytes, 0);
      // Memory: the rows that sequence parallelism splits.
      const int64_t n = base.micro_batch_size * base.model.seq_len;
      const int64_t nc = n * base.model.d_model;
      const bool gpt2 = base.model.family == ModelFamilyKind::kGpt2;
      // Per block: x2 and y (N·C), and the norms' statistics (mean and
      // rstd of two LayerNorms; rstd of two RMSNorms). Per chunk: its
      // input; on the last, d(ln_f) and the final norm's statistics.
      const int64_t per_block = 2 * nc + (gpt2 ? 4 : 2) * n;
      const int64_t per_state = with.layers * per_block + nc +
                                (with.last ? nc + (gpt2 ? 2 : 1) * n : 0);
      const int64_t m =
          base.global_batch_size / (layout.dp * base.micro_batch_size);
      const int64_t in_flight = std::min<int64_t>(layout.pp - with.stage, m);
      EXPECT_EQ(
          without.plan.activations - with.plan.activations,
          static_cast<size_t>(in_flight * kFloat * per_state / tp * (tp - 1)));
      EXPECT_EQ(with.plan.pipeline * tp, without.plan.pipeline);
      // Pipeline transfers carry this rank's rows only.
      for (CommOp op : {CommOp::kSend, CommOp::kRecv}) {
        EXPECT_EQ(with.pp.Bytes(op) * tp, without.pp.Bytes(op));
        EXPECT_EQ(with.pp.Calls(op), without.pp.Calls(op));
        if (layout.pp > 1) {
          EXPECT_GT(with.pp.Bytes(op), 0);
        }
      }
      EXPECT_EQ(with.plan.weights, without.plan.weights);
    }
  }
}

// Under ZeRO the sums over tp after the data-parallel sync (the norms'
// partial gradients, here also key/value heads replicated over tp) carry
// the owned blocks only: over a dp group the tp all-reduces of --zero=1
// and --zero=2 move, per step, (dp − 1) times those tensors' bytes less
// than the dp ranks of --zero=0 do, which sum them whole; the rest of the
// tp traffic is unchanged.
TEST_F(SequenceParallelTest, ZeroSumsOwnedBlocksOverTp) {
  TrainOptions o = mpitest::TinyModelOptions(*data_);
  o.model.family = ModelFamilyKind::kLlama;
  o.model.n_kv_heads = 1;  // replicated over tp 2
  o.model.ffn_hidden = 64;
  o.sequence_parallel = true;
  o.dp_bucket_mb = 0.01;  // blocks that cut through the tensors
  const Layout layout{2, 2, 1};
  constexpr int64_t kSteps = 2;
  mpitest::RunSideBySide({layout.world()}, [&](int, MPI_Comm comm) {
    std::vector<int64_t> bytes;  // the tp all-reduces' per level
    int64_t summed = 0;          // the tensors the sums carry whole
    for (int zero : {0, 1, 2}) {
      TrainOptions options = o;
      options.zero = zero;
      absl::StatusOr<mpitest::LayoutRun> run =
          mpitest::StartLayout(*runtime_, layout, options, comm);
      ASSERT_TRUE(run.ok()) << run.status();
      Communicator& tp = *run->context->groups().tp;
      tp.ResetStats();
      for (int64_t step = 0; step < kSteps; ++step) {
        ASSERT_TRUE(run->trainer->Step().ok());
      }
      Tensor mine = Tensor::Empty({1}, DType::kI64);
      mine.data<int64_t>()[0] = tp.stats().Bytes(CommOp::kAllReduce);
      run->context->groups().dp->AllReduce(mine, ReduceOp::kSum);
      bytes.push_back(mine.data<int64_t>()[0]);
      if (zero > 0) continue;
      for (const Parameter* p : run->trainer->model().TpPartialGradients()) {
        summed += kFloat * p->numel();
      }
      for (const Parameter* p : run->trainer->model().params().all()) {
        if (!p->spec.has_replicated_pieces()) continue;
        const int64_t across =
            p->numel() / p->spec.LocalShape()[p->spec.split_dim];
        for (const ShardSpec::ReplicatedPiece& r : p->spec.ReplicatedPieces()) {
          summed += kFloat * across * r.block_size;
        }
      }
    }
    ASSERT_GT(summed, 0);
    for (int zero : {1, 2}) {
      EXPECT_EQ(bytes[0] - bytes[zero], kSteps * (layout.dp - 1) * summed)
          << "--zero=" << zero;
    }
  });
}

// Recomputation reruns the gathers and reduce-scatters with the rows split:
// every mode trains to the same bits, under a schedule that keeps weight
// gradients for W (zb-h1) and one that does not.
TEST_F(SequenceParallelTest, RecomputeModesTrainToTheSameBits) {
  TrainOptions gpt = mpitest::TinyModelOptions(*data_);
  gpt.steps = 4;
  gpt.sequence_parallel = true;
  TrainOptions llama = gpt;
  llama.model.family = ModelFamilyKind::kLlama;
  llama.model.n_kv_heads = 2;
  llama.model.ffn_hidden = 64;
  for (const TrainOptions& base : {gpt, llama}) {
    for (const char* schedule : {"1f1b", "zb-h1"}) {
      const Layout layout{1, 2, 2, schedule};
      SCOPED_TRACE(
          absl::StrCat(ModelFamilyName(base.model.family), " ", layout.Name()));
      mpitest::RunSideBySide({layout.world()}, [&](int, MPI_Comm comm) {
        std::vector<double> reference;
        for (Recompute recompute :
             {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
          TrainOptions o = base;
          o.recompute = recompute;
          absl::StatusOr<mpitest::LayoutRun> run =
              mpitest::StartLayout(*runtime_, layout, o, comm);
          ASSERT_TRUE(run.ok()) << run.status();
          std::vector<double> losses;
          for (int64_t step = 0; step < o.steps; ++step) {
            absl::StatusOr<StepMetrics> m = run->trainer->Step();
            ASSERT_TRUE(m.ok()) << m.status();
            losses.push_back(m->loss);
          }
          if (recompute == Recompute::kNone) {
            reference = losses;
          } else {
            EXPECT_EQ(losses, reference) << "--recompute=" << recompute;
          }
        }
      });
    }
  }
}

// Evaluation runs the same chunks forward only (no d(ln_f) to
// reduce-scatter): the validation losses match the run without it.
TEST_F(SequenceParallelTest, EvaluationMatchesTheRunWithoutIt) {
  TrainOptions o = mpitest::TinyModelOptions(*data_);
  o.steps = 2;
  o.eval_windows = 8;
  const Layout layout{1, 2, 2};
  mpitest::RunSideBySide({layout.world()}, [&](int, MPI_Comm comm) {
    std::vector<double> val;
    for (const bool sequence_parallel : {false, true}) {
      TrainOptions options = o;
      options.sequence_parallel = sequence_parallel;
      absl::StatusOr<mpitest::LayoutRun> run =
          mpitest::StartLayout(*runtime_, layout, options, comm);
      ASSERT_TRUE(run.ok()) << run.status();
      for (int64_t step = 0; step < options.steps; ++step) {
        ASSERT_TRUE(run->trainer->Step().ok());
      }
      StepMetrics m;
      const absl::Status validated = run->trainer->Validate(m);
      ASSERT_TRUE(validated.ok()) << validated;
      ASSERT_TRUE(m.val_loss.has_value());
      val.push_back(*m.val_loss);
    }
    EXPECT_NEAR(val[1], val[0], 1e-6 * std::abs(val[0]));
  });
}

}  // namespace
}  // namespace trellis
