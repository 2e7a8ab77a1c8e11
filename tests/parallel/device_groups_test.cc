// The rule DeviceGroups::Create applies before NCCL: no two ranks of a node
// on one physical GPU, whatever each rank sees.
#include "parallel/device_groups.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(DeviceGroupsTest, AcceptsRanksOnDistinctGpus) {
  EXPECT_EQ(CheckOneRankPerGpu({}), absl::OkStatus());
  EXPECT_EQ(CheckOneRankPerGpu({{3, "0000:3B:00.0"}}), absl::OkStatus());
  EXPECT_EQ(CheckOneRankPerGpu({{0, "0000:18:00.0"}, {1, "0000:2A:00.0"}}),
            absl::OkStatus());
}

// srun --gpus-per-task=1 --gpu-bind=per_task:1 (slurm/train.sbatch): each
// of a node's 8 ranks sees one device, cuda:0, and each one is another GPU.
// Eight ranks over one visible device each is no reason to refuse.
TEST(DeviceGroupsTest, AcceptsSlurmRanksThatEachSeeTheirOwnGpu) {
  const std::vector<std::string> buses = {"18", "2A", "3A", "5D",
                                          "9A", "AB", "BA", "DB"};
  std::vector<RankGpu> node;
  for (int local = 0; local < 8; ++local) {
    node.push_back({8 + local, "0000:" + buses[local] + ":00.0"});
  }
  EXPECT_EQ(CheckOneRankPerGpu(node), absl::OkStatus());
}

TEST(DeviceGroupsTest, RefusesTwoRanksOnOneGpu) {
  const absl::Status status = CheckOneRankPerGpu(
      {{4, "0000:18:00.0"}, {5, "0000:3B:00.0"}, {6, "0000:3B:00.0"}});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("ranks 5 and 6 of one node share GPU "
                              "0000:3B:00.0;"),
                    HasSubstr("at most one rank per GPU"),
                    HasSubstr("SLURM_LOCALID"), HasSubstr("--gpus-per-task=1"),
                    HasSubstr("--gpu_comm=host"), Not(HasSubstr("more GPU"))));
  EXPECT_EQ(status.message().find('\n'), std::string::npos);
}

// No local rank in the environment: every rank takes cuda:0 of the same
// devices, so the count of visible devices (8) would pass.
TEST(DeviceGroupsTest, RefusesRanksThatAllTookDeviceZero) {
  std::vector<RankGpu> node;
  for (int rank = 0; rank < 8; ++rank) node.push_back({rank, "0000:18:00.0"});
  const absl::Status status = CheckOneRankPerGpu(node);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("ranks 0, 1, 2, 3, 4, 5, 6 and 7 of one node share "
                        "GPU 0000:18:00.0;"));
}

TEST(DeviceGroupsTest, NamesTheFirstSharedGpuAndCountsTheOthers) {
  const absl::Status status = CheckOneRankPerGpu({{0, "a"},
                                                  {1, "b"},
                                                  {2, "c"},
                                                  {3, "b"},
                                                  {4, "a"},
                                                  {5, "c"},
                                                  {6, "d"},
                                                  {7, "e"}});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("ranks 0 and 4 of one node share GPU a (and 2 more "
                        "GPUs are shared);"));
  EXPECT_THAT(
      CheckOneRankPerGpu({{0, "a"}, {1, "b"}, {2, "b"}, {3, "a"}}).message(),
      HasSubstr("share GPU a (and 1 more GPU is shared);"));
}

}  // namespace
}  // namespace trellis
