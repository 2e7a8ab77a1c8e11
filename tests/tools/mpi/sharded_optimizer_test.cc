// ShardedOptimizer (ZeRO-1) against Optimizer on the same parameters and
// gradients, on a dp group of the whole world, run under mpirun with 2, 3
// and 4 ranks: after each step the weights agree to 1e-6 relative, and the
// moments gathered for a checkpoint agree with the replicated ones. Also:
// each rank keeps 1/dp of the moments (to padding), and the reduce-scatter
// plus all-gather of the buckets counts as the all-reduce it replaces.
#include "tools/trainer/optim/sharded_optimizer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/data_parallel.h"
#include "parallel/mpi_communicator.h"
#include "tools/trainer/memory_plan.h"
#include "tools/trainer/optim/optimizer.h"

namespace trellis {
namespace {

// Parameter sizes: odd ones, so blocks cut parameters mid-way; 132 in all,
// a multiple of 2, 3 and 4.
const std::vector<std::vector<int64_t>> kShapes = {{7, 5}, {13},    {3, 11},
                                                   {1},    {17, 2}, {16}};

// A model of kShapes over `comm` (a dp group), with buckets of about
// `bucket_bytes`, the plain or the sharded optimizer.
struct Replica {
  Replica(MPI_Comm world, bool sharded, int64_t bucket_bytes) {
    MPI_Comm dup;
    TRELLIS_MPI_CHECK(MPI_Comm_dup(world, &dup));
    dp = std::make_unique<MpiCommunicator>("dp", dup, /*owned=*/true);
    for (size_t i = 0; i < kShapes.size(); ++i) {
      Parameter& p =
          params.Add(absl::StrCat("p", i), ShardSpec::Replicated(kShapes[i]),
                     /*decay=*/kShapes[i].size() == 2, Device::Cpu());
      p.primary = i != 3;  // one parameter the norm does not count
      for (int64_t j = 0; j < p.numel(); ++j) {
        p.value.data<float>()[j] = 0.01f * static_cast<float>((j * 5 + i) % 9);
      }
      order.push_back(&p);
    }
    buckets = std::make_unique<GradientBuckets>(
        order, bucket_bytes, *dp,
        sharded ? GradSync::kReduceScatter : GradSync::kAllReduce);
    OptimizerConfig config;
    config.schedule = {1e-2, 1e-3, 1, 10};
    config.grad_clip = 0.05;  // clips: the norm matters
    optimizer =
        sharded ? std::make_unique<ShardedOptimizer>(config, params, *buckets)
                : std::make_unique<Optimizer>(config, params);
  }

  // Each bucket's parameters: the parts checkpoint I/O walks.
  std::vector<std::vector<Parameter*>> Parts() const {
    std::vector<std::vector<Parameter*>> parts;
    for (int b = 0; b < buckets->num_buckets(); ++b) {
      parts.push_back(buckets->BucketParameters(b));
    }
    return parts;
  }

  // One step whose gradients depend on the rank, the step and the weights.
  StepReport Step(int step) {
    buckets->StartStep();
    const int rank = dp->rank();
    for (Parameter* p : order) {
      for (int64_t j = 0; j < p->numel(); ++j) {
        p->grad.data<float>()[j] =
            0.1f * static_cast<float>((j + rank * 3 + step) % 7) - 0.3f +
            p->value.data<float>()[j];
      }
      buckets->MarkReady(p);
    }
    buckets->Wait();
    return optimizer->Step(tp, pp);
  }

  ParameterSet params;
  std::vector<Parameter*> order;
  std::unique_ptr<MpiCommunicator> dp;
  SelfCommunicator tp{"tp"}, pp{"pp"};
  std::unique_ptr<GradientBuckets> buckets;
  std::unique_ptr<Optimizer> optimizer;
};

int WorldSize() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void ExpectClose(const Tensor& got, const Tensor& want,
                 const std::string& what) {
  for (int64_t j = 0; j < want.numel(); ++j) {
    const double w = want.data<float>()[j];
    ASSERT_NEAR(got.data<float>()[j], w, 1e-6 * std::max(1.0, std::abs(w)))
        << what << "[" << j << "]";
  }
}

TEST(ShardedOptimizerTest, StepsAsTheReplicatedOptimizerDoes) {
  for (int64_t bucket_bytes : {int64_t{64}, int64_t{1} << 20}) {
    SCOPED_TRACE(absl::StrCat("buckets of ", bucket_bytes, " bytes"));
    Replica plain(MPI_COMM_WORLD, /*sharded=*/false, bucket_bytes);
    Replica zero(MPI_COMM_WORLD, /*sharded=*/true, bucket_bytes);
    for (int step = 0; step < 5; ++step) {
      const StepReport a = plain.Step(step);
      const StepReport b = zero.Step(step);
      EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-9 * a.grad_norm);
      EXPECT_EQ(b.lr, a.lr);
      for (size_t i = 0; i < plain.order.size(); ++i) {
        ExpectClose(zero.order[i]->value, plain.order[i]->value,
                    absl::StrCat("step ", step, " p", i));
      }
    }
    // The moments, gathered whole for a checkpoint one bucket's part at a
    // time on the rank that saves them (every dp-th parameter's), and held
    // nowhere else: outside its part no moment is whole.
    zero.optimizer->BeginCheckpointIo(CheckpointIo::kSave);
    ASSERT_TRUE(zero.optimizer->SavesOwnMoments());
    ASSERT_TRUE(zero.optimizer->MomentsInParts());
    for (const std::vector<Parameter*>& part : zero.Parts()) {
      zero.optimizer->BeginCheckpointPart(CheckpointIo::kSave, part);
      for (size_t i = 0; i < plain.order.size(); ++i) {
        const bool in_part =
            std::count(part.begin(), part.end(), zero.order[i]) > 0;
        const bool saves = zero.optimizer->SavesMoments(i);
        EXPECT_EQ(saves, static_cast<int>(i) % WorldSize() == WorldRank());
        EXPECT_EQ(zero.optimizer->exp_avg(i).defined(), saves && in_part);
        if (!saves || !in_part) continue;
        ExpectClose(zero.optimizer->exp_avg(i), plain.optimizer->exp_avg(i),
                    absl::StrCat("exp_avg p", i));
        ExpectClose(zero.optimizer->exp_avg_sq(i),
                    plain.optimizer->exp_avg_sq(i),
                    absl::StrCat("exp_avg_sq p", i));
      }
      zero.optimizer->EndCheckpointPart(CheckpointIo::kSave, part);
    }
    zero.optimizer->EndCheckpointIo(CheckpointIo::kSave);
  }
}

TEST(ShardedOptimizerTest, LoadedMomentsContinueTheSameSteps) {
  // Moments moved from the replicated optimizer into a sharded one (as a
  // checkpoint does) continue on the same weights.
  Replica plain(MPI_COMM_WORLD, /*sharded=*/false, 64);
  Replica zero(MPI_COMM_WORLD, /*sharded=*/true, 64);
  for (int step = 0; step < 3; ++step) plain.Step(step);
  zero.optimizer->BeginCheckpointIo(CheckpointIo::kLoad);
  for (const std::vector<Parameter*>& part : zero.Parts()) {
    zero.optimizer->BeginCheckpointPart(CheckpointIo::kLoad, part);
    for (size_t i = 0; i < plain.order.size(); ++i) {
      if (std::count(part.begin(), part.end(), zero.order[i]) == 0) continue;
      zero.order[i]->value.CopyFrom(plain.order[i]->value);
      zero.optimizer->exp_avg(i).CopyFrom(plain.optimizer->exp_avg(i));
      zero.optimizer->exp_avg_sq(i).CopyFrom(plain.optimizer->exp_avg_sq(i));
    }
    zero.optimizer->EndCheckpointPart(CheckpointIo::kLoad, part);
  }
  zero.optimizer->EndCheckpointIo(CheckpointIo::kLoad);
  zero.optimizer->set_step(plain.optimizer->step());
  for (int step = 3; step < 6; ++step) {
    plain.Step(step);
    zero.Step(step);
    for (size_t i = 0; i < plain.order.size(); ++i) {
      ExpectClose(zero.order[i]->value, plain.order[i]->value,
                  absl::StrCat("step ", step, " p", i));
    }
  }
}

TEST(ShardedOptimizerTest, KeepsOneShardOfTheMoments) {
  const int dp = WorldSize();
  Replica zero(MPI_COMM_WORLD, /*sharded=*/true, 64);
  int64_t elements = 0;
  for (const Parameter* p : zero.order) elements += p->numel();
  const auto& sharded = dynamic_cast<const ShardedOptimizer&>(*zero.optimizer);
  // Each bucket pads to a multiple of dp: under dp elements per bucket.
  EXPECT_GE(sharded.shard_elements() * dp, elements);
  EXPECT_LT(sharded.shard_elements() * dp,
            elements + zero.buckets->num_buckets() * dp);
  EXPECT_EQ(sharded.shard_elements() * dp, zero.buckets->elements());
  // The plan's level-1 moments: 1/dp of level 0's.
  MemoryPlan plan;
  plan.optimizer = 2 * elements * 4;
  plan.gradients = elements * 4;
  const MemoryPlan one = ShardOverDp(plan, 1, dp);
  EXPECT_EQ(one.optimizer, (plan.optimizer + dp - 1) / dp);
  EXPECT_EQ(one.gradients, plan.gradients);
  EXPECT_EQ(ShardOverDp(plan, 0, dp).optimizer, plan.optimizer);
  // What the sharded optimizer holds is the plan, to the padding.
  EXPECT_LE(static_cast<size_t>(2 * sharded.shard_elements() * 4),
            one.optimizer + 2 * 4 * zero.buckets->num_buckets() * dp);
}

TEST(ShardedOptimizerTest, ScatterAndGatherCountAsTheAllReduce) {
  // Parameter sizes add up to a multiple of dp in one bucket: no padding.
  const int dp = WorldSize();
  Replica plain(MPI_COMM_WORLD, /*sharded=*/false, int64_t{1} << 20);
  Replica zero(MPI_COMM_WORLD, /*sharded=*/true, int64_t{1} << 20);
  const int64_t bytes = zero.buckets->elements() * 4;
  plain.dp->ResetStats();
  zero.dp->ResetStats();
  plain.Step(0);
  zero.Step(0);
  const CommStats& a = plain.dp->stats();
  const CommStats& b = zero.dp->stats();
  EXPECT_EQ(b.Calls(CommOp::kReduceScatter), zero.buckets->num_buckets());
  EXPECT_EQ(b.Calls(CommOp::kAllGather), zero.buckets->num_buckets());
  EXPECT_EQ(b.WireBytes(CommOp::kReduceScatter), (dp - 1) * bytes / dp);
  EXPECT_EQ(b.WireBytes(CommOp::kAllGather), (dp - 1) * bytes / dp);
  // The plain run's all-reduce of the same bucket (132 elements need no
  // padding); the sharded run's only all-reduce is the norm's.
  ASSERT_EQ(bytes, 132 * 4);
  EXPECT_EQ(
      b.WireBytes(CommOp::kReduceScatter) + b.WireBytes(CommOp::kAllGather),
      a.WireBytes(CommOp::kAllReduce));
  EXPECT_EQ(a.Calls(CommOp::kAllReduce), plain.buckets->num_buckets());
  EXPECT_EQ(b.Calls(CommOp::kAllReduce), 1);
  EXPECT_EQ(b.WireBytes(CommOp::kAllReduce), 2 * (dp - 1) * 8 / dp);
  EXPECT_EQ(
      b.WireBytes(CommOp::kReduceScatter) + b.WireBytes(CommOp::kAllGather),
      WireBytes(CommOp::kAllReduce, bytes, dp));
}

}  // namespace
}  // namespace trellis
