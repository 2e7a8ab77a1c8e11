// --cp and --cp_comm (context parallelism): the data-parallel size is
// derived over cp, and every combination that cannot run is refused in one
// line that names the flags to change.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/tools/options_test_util.h"
#include "tools/options/options.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

TEST(ContextOptionsTest, DataParallelSizeIsWhatCpLeaves) {
  TrainOptions o = test::SmallValidOptions();
  o.cp = 2;
  o.tp = 2;
  ASSERT_TRUE(o.Resolve(8, 257).ok());
  EXPECT_EQ(o.dp, 2);
  EXPECT_EQ(o.gradient_replicas(), 4);
  EXPECT_EQ(o.local_seq_len(), 8);
  EXPECT_EQ(o.microbatches(), 4);  // 16 / (dp 2 · 2): cp ranks share windows
  o.cp_comm = "a2a";  // 4 heads over tp 2: 2 per rank, split over cp 2
  EXPECT_TRUE(o.Resolve(8, 257).ok());
}

struct Bad {
  std::string name;
  int world;
  std::function<void(TrainOptions&)> change;
  std::vector<std::string> parts;  // each must appear
};

TEST(ContextOptionsTest, BadCombinationsNameTheFlags) {
  const std::vector<Bad> cases = {
      {"window not in 2·cp chunks",
       2,
       [](TrainOptions& o) {
         o.cp = 2;
         o.model.seq_len = 6;
       },
       {"--seq_len=6", "--cp"}},
      {"world",
       3,
       [](TrainOptions& o) {
         o.cp = 2;
         o.dp = 1;
       },
       {"cp=2", "world size 3"}},
      {"not divisible",
       3,
       [](TrainOptions& o) { o.cp = 2; },
       {"cp × tp × pp = 2 × 1 × 1"}},
      {"experts over more ranks than dp·cp",
       2,
       [](TrainOptions& o) {
         o.model.family = ModelFamilyKind("moe");
         o.model.experts = 4;
         o.model.experts_per_token = 2;
         o.cp = 2;
         o.ep = 4;
       },
       {"--ep=4", "dp·cp=2"}},
      {"unknown way",
       2,
       [](TrainOptions& o) {
         o.cp = 2;
         o.cp_comm = "p2p";
       },
       {"--cp_comm=p2p", "ring", "a2a"}},
      {"a2a heads",
       4,
       [](TrainOptions& o) {
         o.cp = 4;
         o.model.n_head = 6;
         o.model.d_model = 48;
         o.cp_comm = "a2a";
       },
       {"--cp_comm=a2a", "--cp=4", "--n_head=6"}},
      {"cuda",
       2,
       [](TrainOptions& o) {
         o.cp = 2;
         o.device = DeviceType::kCUDA;
       },
       {"--cp=2", "--device=cpu"}},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    TrainOptions o = test::SmallValidOptions();
    c.change(o);
    const absl::Status status = o.Resolve(c.world, 257);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    const std::string message(status.message());
    for (const std::string& part : c.parts) {
      EXPECT_THAT(message, HasSubstr(part));
    }
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace trellis
