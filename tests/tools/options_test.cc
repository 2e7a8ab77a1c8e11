// TrainOptions::Resolve: every invalid combination is refused with a
// message that names the flags to change.
#include "tools/options/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/tools/options_test_util.h"

namespace trellis {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TrainOptions Valid() { return test::SmallValidOptions(); }

TEST(TrainOptionsTest, ResolvesDataParallelSizeFromWorld) {
  TrainOptions o = Valid();
  o.tp = 2;
  o.pp = 2;
  ASSERT_TRUE(o.Resolve(8, 257).ok());
  EXPECT_EQ(o.dp, 2);
  EXPECT_EQ(o.model.vocab_size, 257);
  EXPECT_EQ(o.microbatches(), 4);  // 16 / (2 · 2)
  EXPECT_THAT(o.ToFlagString(), AllOf(HasSubstr("--dp=2"), HasSubstr("--tp=2"),
                                      HasSubstr("--global_batch_size=16")));
}

// The LM head's chunk: as given, else 1024 rows on CPU and on CUDA the
// whole 1024-row blocks of this rank's logits that fit in 2 GiB.
TEST(TrainOptionsTest, HeadChunkRowsAreTheFlagsOrTheDevicesChoice) {
  TrainOptions o = Valid();
  o.model.vocab_size = 50257;  // padded to 50304
  EXPECT_EQ(o.loss_chunk_rows, -1);
  EXPECT_EQ(o.head_chunk_rows(), 1024);
  o.device = DeviceType::kCUDA;
  o.precision = Precision::kBf16;
  EXPECT_EQ(o.head_chunk_rows(), 20480);  // 2^31 / (50304 · 2) = 21345
  o.tp = 2;
  // 50432 / 2 = 25216 columns a row: 2^31 / (25216 · 2) = 42581 rows
  EXPECT_EQ(o.head_chunk_rows(), 41984);
  o.tp = 1;
  o.precision = Precision::kFp32;
  EXPECT_EQ(o.head_chunk_rows(), 10240);
  o.model.vocab_size = 600000000;  // a row over 2 GiB: one block still
  EXPECT_EQ(o.head_chunk_rows(), 1024);
  for (const int64_t given : {0, 1, 4096}) {
    o.loss_chunk_rows = given;
    EXPECT_EQ(o.head_chunk_rows(), given);
  }
  o = Valid();
  o.loss_chunk_rows = -2;
  EXPECT_THAT(o.Resolve(1, 257).message(),
              AllOf(HasSubstr("--loss_chunk_rows=-2"), HasSubstr("-1")));
}

TEST(TrainOptionsTest, AcceptsEveryScheduleByItsDocumentedName) {
  for (const std::string name : {"gpipe", "1f1b", "zb-h1"}) {
    TrainOptions o = Valid();
    o.pp = 2;
    ASSERT_TRUE(o.ApplyFlagString("--schedule=" + name).ok()) << name;
    EXPECT_TRUE(o.Resolve(2, 257).ok()) << name;
  }
  TrainOptions o = Valid();
  o.pp = 2;
  ASSERT_TRUE(o.ApplyFlagString("--schedule=interleaved-1f1b").ok());
  EXPECT_EQ(o.schedule, ScheduleKind::kInterleaved1F1B);
  o.virtual_stages = 2;
  const absl::Status status = o.Resolve(2, 257);
  EXPECT_TRUE(status.ok()) << status;
}

// --attention is a CUDA kernel choice: every path is accepted (and on CPU
// ignored), the default is cudnn, and the flag string carries it.
TEST(TrainOptionsTest, AcceptsEveryAttentionPathOnEveryDevice) {
  EXPECT_EQ(TrainOptions().attention, AttentionPath::kCudnn);
  for (const std::string name : {"cudnn", "mma", "simt"}) {
    TrainOptions o = Valid();
    ASSERT_TRUE(o.ApplyFlagString("--attention=" + name).ok()) << name;
    const absl::Status status = o.Resolve(1, 257);
    EXPECT_TRUE(status.ok()) << name << ": " << status;
    EXPECT_THAT(o.ToFlagString(), HasSubstr("\n--attention=" + name + "\n"));
  }
}

// The document flags resolve on CPU; --document_mask is refused on cuda
// (either for the mask or, in a build without CUDA, for the device).
TEST(TrainOptionsTest, DocumentFlagsResolveOnCpuOnly) {
  TrainOptions o = Valid();
  ASSERT_TRUE(
      o.ApplyFlagString("--document_mask=true\n--eod_mask_loss=true").ok());
  EXPECT_TRUE(o.Resolve(1, 257).ok());
  EXPECT_THAT(o.ToFlagString(), HasSubstr("\n--document_mask=true\n"));
  TrainOptions cuda = Valid();
  cuda.document_mask = true;
  cuda.device = DeviceType::kCUDA;
  const absl::Status status = cuda.Resolve(1, 257);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              ::testing::AnyOf(HasSubstr("--document_mask runs on"),
                               HasSubstr("this build has no CUDA")));
}

// Every ZeRO level combines with --sequence_parallel and with key/value
// heads replicated over tp (their sums over tp run on the owned blocks).
TEST(TrainOptionsTest, ZeroLevelsCombineWithTheSumsOverTp) {
  for (int zero : {1, 2, 3}) {
    for (const bool sequence_parallel : {false, true}) {
      TrainOptions o = Valid();
      o.tp = 2;
      o.zero = zero;
      o.sequence_parallel = sequence_parallel;
      o.model.family = ModelFamilyKind::kLlama;
      o.model.n_kv_heads = 1;
      const absl::Status status = o.Resolve(4, 257);
      EXPECT_TRUE(status.ok()) << "--zero=" << zero << ": " << status;
      EXPECT_EQ(o.dp, 2);
    }
  }
}

// --zero=3 with both sums over tp at once, from the flags, under dp2·tp2·pp2.
TEST(TrainOptionsTest, ZeroThreeCombinesWithBothSumsOverTpUnderPp) {
  TrainOptions o = Valid();
  o.model.family = ModelFamilyKind::kLlama;
  o.model.n_kv_heads = 1;
  ASSERT_TRUE(
      o.ApplyFlagString("--zero=3\n--sequence_parallel=true\n--tp=2\n--pp=2")
          .ok());
  const absl::Status status = o.Resolve(8, 257);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(o.dp, 2);
  EXPECT_THAT(o.ToFlagString(),
              AllOf(HasSubstr("\n--zero=3\n"),
                    HasSubstr("\n--sequence_parallel=true\n")));
}

TEST(TrainOptionsTest, StageLayersSplitsEvenlyOrAsGiven) {
  EXPECT_THAT(StageLayers(7, 3, {}), ElementsAre(3, 2, 2));
  EXPECT_THAT(StageLayers(7, 2, {2, 5}), ElementsAre(2, 5));
}

// --comm_timeout_s: 0 turns the watchdog off, a negative deadline is
// refused naming the flag.
TEST(TrainOptionsTest, CommTimeoutIsOffOrPositive) {
  EXPECT_EQ(TrainOptions().comm_timeout_s, 600);
  TrainOptions o = Valid();
  o.comm_timeout_s = 0;
  EXPECT_TRUE(o.Resolve(1, 257).ok());
  o.comm_timeout_s = -1;
  const absl::Status status = o.Resolve(1, 257);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--comm_timeout_s"));
}

struct BadCase {
  std::string name;
  int world;
  std::function<void(TrainOptions&)> change;
  std::vector<std::string> message_parts;  // Each must appear.
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class TrainOptionsBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(TrainOptionsBadTest, RefusedWithAMessageNamingTheFlags) {
  const BadCase& c = GetParam();
  TrainOptions o = Valid();
  c.change(o);
  const absl::Status status = o.Resolve(c.world, 257);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(status.message());
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(message, HasSubstr(part));
  }
  // One line, so programs print exactly one line per error.
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

using O = TrainOptions;
INSTANTIATE_TEST_SUITE_P(Cases, TrainOptionsBadTest,
                         ::testing::Values(BadCase{"no_data",
                                                   1,
                                                   [](O& o) { o.data = ""; },
                                                   {"--data"}},
                                           BadCase{"ep_without_experts",
                                                   2,
                                                   [](O& o) { o.ep = 2; },
                                                   {"--ep=2", "--family=gpt2",
                                                    "--family=moe"}},
                                           BadCase{"ep_not_dividing_dp",
                                                   4,
                                                   [](O& o) {
                                                     o.model.family =
                                                         ModelFamilyKind("moe");
                                                     o.ep = 3;
                                                   },
                                                   {"--ep=3", "dp=4"}},
                                           BadCase{"ep_not_dividing_experts",
                                                   6,
                                                   [](O& o) {
                                                     o.model.family =
                                                         ModelFamilyKind("moe");
                                                     o.ep = 3;
                                                   },
                                                   {"--ep=3", "--experts=8"}},
                                           BadCase{
                                               "moe_router_too_wide_for_cuda",
                                               1,
                                               [](O& o) {
                                                 o.model.family =
                                                     ModelFamilyKind("moe");
                                                 o.model.experts = 2048;
                                                 o.device = DeviceType::kCUDA;
                                               },
                                               {"--experts=2048",
                                                "at most 1024"}},
                                           BadCase{
                                               "odd_head_dim",
                                               1,
                                               [](O& o) {
                                                 o.model.family =
                                                     ModelFamilyKind::kLlama;
                                                 o.model.head_dim = 7;
                                               },
                                               {"--head_dim=7", "even"}},
                                           BadCase{"head_dim_on_gpt2",
                                                   1,
                                                   [](O& o) {
                                                     o.model.head_dim = 8;
                                                   },
                                                   {"head_dim"}},
                                           BadCase{"zero_layers",
                                                   1,
                                                   [](O& o) {
                                                     o.model.n_layer = 0;
                                                   },
                                                   {"--n_layer"}},
                                           BadCase{
                                               "width_not_divisible_by_heads",
                                               1,
                                               [](O& o) {
                                                 o.model.d_model = 30;
                                               },
                                               {"--d_model=30", "--n_head=4"}},
                                           BadCase{"micro_batch_zero",
                                                   1,
                                                   [](O& o) {
                                                     o.micro_batch_size = 0;
                                                   },
                                                   {"--micro_batch_size=0"}},
                                           BadCase{"global_batch_negative",
                                                   1,
                                                   [](O& o) {
                                                     o.global_batch_size = -4;
                                                   },
                                                   {"--global_batch_size=-4"}},
                                           BadCase{"steps_negative",
                                                   1,
                                                   [](O& o) { o.steps = -1; },
                                                   {"--steps=-1"}},
                                           BadCase{"lr_zero",
                                                   1,
                                                   [](O& o) { o.lr = 0; },
                                                   {"--lr=0"}},
                                           BadCase{"min_lr_above_lr",
                                                   1,
                                                   [](O& o) { o.min_lr = 1; },
                                                   {"--min_lr=1", "--lr"}},
                                           BadCase{"warmup_negative",
                                                   1,
                                                   [](O& o) {
                                                     o.warmup_steps = -1;
                                                   },
                                                   {"--warmup_steps"}},
                                           BadCase{
                                               "grad_clip_negative",
                                               1,
                                               [](O& o) { o.grad_clip = -1; },
                                               {"--grad_clip"}},
                                           BadCase{
                                               "val_fraction_one",
                                               1,
                                               [](O& o) { o.val_fraction = 1; },
                                               {"--val_fraction=1"}},
                                           BadCase{
                                               "log_every_zero",
                                               1,
                                               [](O& o) { o.log_every = 0; },
                                               {"--log_every"}},
                                           BadCase{
                                               "save_every_negative",
                                               1,
                                               [](O& o) { o.save_every = -5; },
                                               {"--save_every"}},
                                           BadCase{"keep_checkpoints_negative",
                                                   1,
                                                   [](O& o) {
                                                     o.keep_checkpoints = -1;
                                                   },
                                                   {"--keep_checkpoints"}},
                                           BadCase{
                                               "peak_tflops_negative",
                                               1,
                                               [](O& o) { o.peak_tflops = -1; },
                                               {"--peak_tflops=-1"}},
                                           BadCase{
                                               "bucket_size",
                                               1,
                                               [](O& o) { o.dp_bucket_mb = 0; },
                                               {"--dp_bucket_mb"}},
                                           BadCase{
                                               "zero_four",
                                               1,
                                               [](O& o) { o.zero = 4; },
                                               {"--zero=4", "0, 1, 2 or 3"}},
                                           BadCase{"zero_negative",
                                                   1,
                                                   [](O& o) { o.zero = -1; },
                                                   {"--zero=-1"}},
                                           BadCase{"tp_zero",
                                                   1,
                                                   [](O& o) { o.tp = 0; },
                                                   {"--tp=0"}},
                                           BadCase{"virtual_stages_zero",
                                                   1,
                                                   [](O& o) {
                                                     o.virtual_stages = 0;
                                                   },
                                                   {"--virtual_stages=0"}},
                                           BadCase{"world_not_divisible",
                                                   3,
                                                   [](O& o) { o.tp = 2; },
                                                   {"world size 3",
                                                    "tp × pp = 2 × 1"}},
                                           BadCase{"layout_not_world",
                                                   4,
                                                   [](O& o) {
                                                     o.dp = 3;
                                                     o.tp = 2;
                                                   },
                                                   {"dp=3", "tp=2",
                                                    "world size 4"}},
                                           BadCase{"tp_on_one_rank",
                                                   1,
                                                   [](O& o) { o.tp = 3; },
                                                   {"tp × pp = 3"}},
                                           BadCase{"heads_not_divisible_by_tp",
                                                   3,
                                                   [](O& o) { o.tp = 3; },
                                                   {"--n_head=4", "--tp=3"}},
                                           BadCase{"too_few_layers",
                                                   8,
                                                   [](O& o) { o.pp = 8; },
                                                   {"--n_layer=4",
                                                    "pp × virtual_stages = 8"}},
                                           BadCase{"pp_layers_entry_zero",
                                                   2,
                                                   [](O& o) {
                                                     o.pp = 2;
                                                     o.pp_layers = {0, 4};
                                                   },
                                                   {"--pp_layers"}},
                                           BadCase{"pp_layers_count",
                                                   2,
                                                   [](O& o) {
                                                     o.pp = 2;
                                                     o.pp_layers = {1, 1, 2};
                                                   },
                                                   {"--pp_layers=1,1,2",
                                                    "2 stages", "--n_layer=4"}},
                                           BadCase{"pp_layers_sum",
                                                   2,
                                                   [](O& o) {
                                                     o.pp = 2;
                                                     o.pp_layers = {1, 2};
                                                   },
                                                   {"--pp_layers=1,2",
                                                    "--n_layer=4"}},
                                           BadCase{
                                               "pp_layers_with_virtual_stages",
                                               2,
                                               [](O& o) {
                                                 o.pp = 2;
                                                 o.pp_layers = {2, 2};
                                                 o.schedule = ScheduleKind::
                                                     kInterleaved1F1B;
                                                 o.virtual_stages = 2;
                                               },
                                               {"--pp_layers",
                                                "--virtual_stages"}},
                                           BadCase{"global_batch_not_multiple",
                                                   2,
                                                   [](O& o) {
                                                     o.global_batch_size = 10;
                                                   },
                                                   {"--global_batch_size=10",
                                                    "dp × micro_batch_size = 2 "
                                                    "× 2 = 4",
                                                    "multiple of 4"}},
                                           BadCase{
                                               "interleaved_needs_virtual_"
                                               "stages",
                                               2,
                                               [](O& o) {
                                                 o.pp = 2;
                                                 o.schedule = ScheduleKind::
                                                     kInterleaved1F1B;
                                               },
                                               {"--schedule=interleaved-1f1b",
                                                "--virtual_stages"}},
                                           BadCase{
                                               "interleaved_microbatches_not_"
                                               "multiple_of_pp",
                                               2,
                                               [](O& o) {
                                                 o.pp = 2;
                                                 o.model.n_layer = 4;
                                                 o.global_batch_size = 6;
                                                 o.schedule = ScheduleKind::
                                                     kInterleaved1F1B;
                                                 o.virtual_stages = 2;
                                               },
                                               {"microbatches (3)", "--pp=2"}},
                                           BadCase{"virtual_stages_without_"
                                                   "interleaved",
                                                   2,
                                                   [](O& o) {
                                                     o.pp = 2;
                                                     o.virtual_stages = 2;
                                                   },
                                                   {"--virtual_stages",
                                                    "--schedule=interleaved-"
                                                    "1f1b"}}),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           return info.param.name;
                         });

// --sequence_parallel splits rows over tp: it needs tp ranks, and rows
// that divide among them.
INSTANTIATE_TEST_SUITE_P(
    SequenceParallel, TrainOptionsBadTest,
    ::testing::Values(BadCase{"without_tp",
                              1,
                              [](O& o) { o.sequence_parallel = true; },
                              {"--sequence_parallel", "--tp > 1", "--tp=1"}},
                      BadCase{
                          "rows_not_divisible",
                          3,
                          [](O& o) {
                            o.tp = 3;
                            o.model.n_head = 3;
                            o.model.d_model = 24;
                            o.micro_batch_size = 1;
                            o.sequence_parallel = true;
                          },
                          {"--sequence_parallel", "1 × 16 = 16", "--tp=3"}}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      return info.param.name;
    });

constexpr double kInf = std::numeric_limits<double>::infinity();

// Every floating-point flag must be finite (each of these trained on NaN
// weights or never clipped), and evaluation needs held-out windows: both
// are refused at start.
INSTANTIATE_TEST_SUITE_P(
    AtStart, TrainOptionsBadTest,
    ::testing::Values(
        BadCase{"lr_nan",
                1,
                [](O& o) { o.lr = std::nan(""); },
                {"--lr=nan", "not a finite number"}},
        BadCase{"lr_inf",
                1,
                [](O& o) {
                  o.lr = kInf;
                  o.min_lr = 0;
                },
                {"--lr=inf", "not a finite number"}},
        BadCase{
            "min_lr_inf", 1, [](O& o) { o.min_lr = kInf; }, {"--min_lr=inf"}},
        BadCase{"weight_decay_nan",
                1,
                [](O& o) { o.weight_decay = std::nan(""); },
                {"--weight_decay=nan", "not a finite number"}},
        BadCase{"grad_clip_nan",
                1,
                [](O& o) { o.grad_clip = std::nan(""); },
                {"--grad_clip=nan"}},
        BadCase{"grad_clip_inf",
                1,
                [](O& o) { o.grad_clip = kInf; },
                {"--grad_clip=inf"}},
        BadCase{"beta1_nan",
                1,
                [](O& o) { o.beta1 = std::nan(""); },
                {"--beta1=nan"}},
        BadCase{"beta2_minus_inf",
                1,
                [](O& o) { o.beta2 = -kInf; },
                {"--beta2=-inf"}},
        BadCase{"val_fraction_nan",
                1,
                [](O& o) { o.val_fraction = std::nan(""); },
                {"--val_fraction=nan"}},
        BadCase{"bucket_inf",
                1,
                [](O& o) { o.dp_bucket_mb = kInf; },
                {"--dp_bucket_mb=inf"}},
        BadCase{"memory_budget_inf",
                1,
                [](O& o) { o.memory_budget_gb = kInf; },
                {"--memory_budget_gb=inf"}},
        BadCase{"eval_without_validation",
                1,
                [](O& o) {
                  o.val_fraction = 0;
                  o.eval_every = 50;
                },
                {"--eval_every=50", "--val_fraction=0", "--eval_every=0"}},
        // Sizes whose memory plan overflowed int64.
        BadCase{"huge_width",
                1,
                [](O& o) { o.model.d_model = int64_t{1} << 30; },
                {"--d_model=1073741824", "choose smaller sizes"}},
        BadCase{"huge_batch_and_context",
                1,
                [](O& o) {
                  o.model.seq_len = int64_t{1} << 24;
                  o.global_batch_size = int64_t{1} << 20;
                  o.micro_batch_size = int64_t{1} << 20;
                },
                {"--seq_len=16777216", "choose smaller sizes"}}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace trellis
