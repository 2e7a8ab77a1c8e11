// The one list of training options: every option prints as a flag and reads
// back to the same value, the presets in configs/ name only options that
// exist, the demo preset is the default run, and enum-like options are
// refused at the edge with the names they accept.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tools/options/options.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::filesystem::path Configs() {
  return std::filesystem::path(TRELLIS_SOURCE_DIR) / "configs";
}

// The experts' options unlike their defaults.
void UnusualExperts(ModelConfig& m) {
  m.experts = 6;
  m.experts_per_token = 3;
  m.moe_ffn_hidden = 48;
  m.moe_first_dense = 1;
  m.moe_layer_freq = 2;
  m.moe_sigmoid = true;
  m.moe_norm_topk = false;
  m.moe_aux_loss_coeff = 1.0 / 3.0 * 1e-2;
  m.moe_z_loss_coeff = 1e-3;
  m.moe_bias_update_rate = 1.0 / 7.0 * 1e-3;
  m.moe_shared_ffn_hidden = 72;
}

// Options with a value unlike its default in every field.
TrainOptions Unusual() {
  TrainOptions o;
  o.model.family = ModelFamilyKind::kLlama;
  o.model.n_layer = 7;
  o.model.n_head = 3;
  o.model.d_model = 96;
  o.model.seq_len = 33;
  o.model.n_kv_heads = 1;
  o.model.head_dim = 40;
  o.model.qk_norm = true;
  o.model.ffn_hidden = 250;
  o.model.ffn_multiple_of = 64;
  o.model.ffn_dim_multiplier = 1.3;
  o.model.rope_theta = 500000.0;
  o.model.rope_scaling = RopeScalingType::kLlama3;
  o.model.rope_factor = 32.0;
  o.model.rope_low_freq_factor = 0.5;
  o.model.rope_high_freq_factor = 2.0;
  o.model.rope_original_max_positions = 4096;
  o.model.norm_eps = 1.0 / 3.0 * 1e-6;
  o.model.tie_embeddings = false;
  UnusualExperts(o.model);
  o.data = "some/tokens.h5";
  o.val_fraction = 0.125;
  o.document_mask = true;
  o.eod_mask_loss = true;
  o.micro_batch_size = 3;
  o.global_batch_size = 27;
  o.steps = 11;
  o.lr = 3.0000000000000001e-4;
  o.min_lr = 1.0 / 3.0 * 1e-5;
  o.warmup_steps = 2;
  o.weight_decay = 0.05;
  o.grad_clip = 0.5;
  o.beta1 = 0.85;
  o.beta2 = 0.999;
  o.seed = 18446744073709551615ull;
  o.max_skipped_steps = 4;
  o.skip_spike_zscore = 6.5;
  o.save_dir = "ckpt dir";
  o.save_every = 5;
  o.resume = "auto";
  o.keep_checkpoints = 2;
  o.eval_every = 4;
  o.eval_windows = 8;
  o.log_every = 2;
  o.metrics_file = "m.jsonl";
  o.tensorboard_dir = "tb";
  o.straggler_every = 7;
  o.straggler_threshold = 1.5;
  o.trace_dir = "traces";
  o.trace_steps = {2, 3};
  o.dp = 3;
  o.tp = 3;
  o.pp = 2;
  o.ep = 3;
  o.cp = 2;
  o.cp_comm = "a2a";
  o.mesh_order = "dp-tp-pp";
  o.schedule = ScheduleKind::kZeroBubbleH1;
  o.virtual_stages = 2;
  o.pp_layers = {3, 4};
  o.dp_bucket_mb = 0.75;
  o.zero = 1;
  o.sequence_parallel = true;
  o.comm_timeout_s = 45.5;
  o.device = DeviceType::kCUDA;
  o.precision = Precision::kBf16;
  o.recompute = Recompute::kSelective;
  o.attention = AttentionPath::kSimt;
  o.loss_chunk_rows = 77;
  o.bias_grad_epilogue = true;
  o.residual_in_gemm = false;
  o.gemm_autotune = true;
  o.gpu_comm = DeviceTransport::kHostStaged;
  o.memory_budget_gb = 1.5;
  o.peak_tflops = 123.5;
  return o;
}

TEST(OptionListTest, EveryOptionPrintsAndReadsBackExactly) {
  const TrainOptions unusual = Unusual();
  const std::string flags = unusual.ToFlagString();
  TrainOptions read;
  ASSERT_TRUE(read.ApplyFlagString(flags).ok()) << flags;
  EXPECT_EQ(read.ToFlagString(), flags);
  // Every line differs from the defaults': no option was left out of the
  // printed or the read direction.
  const std::string defaults = TrainOptions{}.ToFlagString();
  std::istringstream a(flags), b(defaults);
  std::string line_a, line_b;
  int lines = 0;
  while (std::getline(a, line_a) && std::getline(b, line_b)) {
    ++lines;
    EXPECT_NE(line_a, line_b) << "an option kept its default";
  }
  EXPECT_EQ(lines, 85);  // 30 model + 30 run + 25 layout and device options
  EXPECT_EQ(read.lr, unusual.lr);
  EXPECT_EQ(read.min_lr, unusual.min_lr);
  EXPECT_EQ(read.seed, unusual.seed);
  EXPECT_EQ(read.model, unusual.model);
  EXPECT_EQ(read.schedule, ScheduleKind::kZeroBubbleH1);
  EXPECT_EQ(read.gpu_comm, DeviceTransport::kHostStaged);
  EXPECT_EQ(read.pp_layers, unusual.pp_layers);
  EXPECT_EQ(read.comm_timeout_s, 45.5);
}

TEST(OptionListTest, EveryPresetNamesOnlyKnownOptionsWithValidValues) {
  int presets = 0;
  for (const auto& entry : std::filesystem::directory_iterator(Configs())) {
    if (entry.path().extension() != ".flags") continue;
    TrainOptions o;
    const absl::Status status = o.ApplyFlagString(ReadFile(entry.path()));
    EXPECT_TRUE(status.ok()) << entry.path() << ": " << status;
    ++presets;
  }
  EXPECT_GE(presets, 5);
}

TEST(OptionListTest, TheDemoPresetIsTheDefaultRun) {
  TrainOptions o;
  ASSERT_TRUE(o.ApplyFlagString(ReadFile(Configs() / "tiny.flags")).ok());
  EXPECT_EQ(o.ToFlagString(), TrainOptions{}.ToFlagString());
}

TEST(OptionListTest, TheLlamaPresetsHaveThePublishedShapes) {
  struct Preset {
    const char* file;
    int64_t parameters;  // at Llama 3's 128256-token vocabulary
  };
  for (const Preset& p : {Preset{"llama-3.2-1b.flags", 1235814400},
                          Preset{"llama-3-8b.flags", 8030261248},
                          Preset{"llama-3-8b-128k.flags", 8030261248},
                          Preset{"llama-3-70b.flags", 70553706496}}) {
    TrainOptions o;
    ASSERT_TRUE(o.ApplyFlagString(ReadFile(Configs() / p.file)).ok());
    o.model.vocab_size = 128256;
    EXPECT_TRUE(o.model.Validate().ok())
        << p.file << ": " << o.model.Validate();
    EXPECT_EQ(o.model.NumParameters(), p.parameters) << p.file;
  }
  TrainOptions tiny;
  ASSERT_TRUE(
      tiny.ApplyFlagString(ReadFile(Configs() / "llama-tiny.flags")).ok());
  EXPECT_TRUE(tiny.model.Validate().ok());
  EXPECT_EQ(tiny.model.family, ModelFamilyKind::kLlama);
}

TEST(OptionListTest, TheMixturePresetsHaveThePublishedShapes) {
  struct Preset {
    const char* file;
    int64_t vocab, parameters, active;
  };
  // Mixtral 8x7B: 46.7B parameters, 12.9B of them active per token;
  // Qwen3-30B-A3B: 30.5B and 3.3B; DeepSeekMoE 16B (two shared experts):
  // 16.4B and 2.8B.
  for (const Preset& p :
       {Preset{"mixtral-8x7b.flags", 32000, 46702792704, 12879925248},
        Preset{"qwen3-30b-a3b.flags", 151936, 30532122624, 3353032704},
        Preset{"deepseek-moe-16b.flags", 102400, 16375728128, 2828650496}}) {
    TrainOptions o;
    ASSERT_TRUE(o.ApplyFlagString(ReadFile(Configs() / p.file)).ok());
    o.model.vocab_size = p.vocab;
    ASSERT_TRUE(o.model.Validate().ok())
        << p.file << ": " << o.model.Validate();
    EXPECT_EQ(o.model.NumParameters(), p.parameters) << p.file;
    EXPECT_EQ(FamilyOf(o.model).ActiveParameters(o.model), p.active) << p.file;
  }
}

TEST(OptionListTest, BadValuesAreRefusedNamingTheFlagAndTheChoices) {
  struct Case {
    const char* line;
    const char* expected;
  };
  for (const Case& c : {
           Case{"--device=tpu", "cpu or cuda"},
           Case{"--schedule=foo", "interleaved-1f1b"},
           Case{"--recompute=some", "none, selective or full"},
           Case{"--precision=fp8", "fp32 or bf16"},
           Case{"--gpu_comm=gloo", "nccl or host"},
           Case{"--attention=flash", "cudnn, mma or simt"},
           Case{"--pp_layers=3,x", "'x' is not an integer"},
           Case{"--family=gpt5", "gpt2, llama or moe"},
           Case{"--rope_scaling=yarn", "llama3"},
           Case{"--tie_embeddings=maybe", "--tie_embeddings=maybe"},
           Case{"--steps=ten", "--steps=ten"},
           Case{"--no_such_option=1", "unknown option --no_such_option"},
           Case{"--steps", "has no value"},
           Case{"steps=3", "is not a --name=value option"},
       }) {
    TrainOptions o;
    const absl::Status status = o.ApplyFlagString(c.line);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << c.line;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.expected)) << c.line;
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr("\n")))
        << "one line";
  }
}

TEST(OptionListTest, TheStartupReportShowsEveryGroup) {
  const std::string report = ConfigReport(Unusual());
  for (const char* group : {"model:", "data:", "batch:", "optimization:",
                            "checkpoints:", "logging:", "layout:", "device:"}) {
    EXPECT_THAT(report, HasSubstr(group));
  }
  EXPECT_THAT(report, HasSubstr("schedule=zb-h1"));
  EXPECT_THAT(report, HasSubstr("precision=bf16"));
  EXPECT_THAT(report, HasSubstr("pp_layers=3,4"));
  EXPECT_THAT(ConfigReport(TrainOptions{}), HasSubstr("save_dir=''"));
}

}  // namespace
}  // namespace trellis
