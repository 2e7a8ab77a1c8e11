// trellis-plan through the program: --help, --json's shape, --explain, a
// bad cluster file as one line, "nothing fits" as a table, and the kernel
// cost table trellis-bench --profile writes as its --profile.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Output {
  int code = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs build/bin/trellis-<program> with `args`.
Output RunProgram(const std::string& program, const std::string& args) {
  const std::string dir = ::testing::TempDir();
  // Per process: ctest runs this suite's tests side by side.
  const std::string err =
      absl::StrCat(dir, "/plan_stderr_", ::getpid(), ".txt");
  const std::string command =
      absl::StrCat("OPENBLAS_NUM_THREADS=1 ", TRELLIS_BINARY_DIR,
                   "/bin/trellis-", program, " ", args, " 2>", err);
  Output o;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return o;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    o.out.append(buffer, n);
  const int status = pclose(pipe);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.err = Slurp(err);
  return o;
}

Output Plan(const std::string& args) { return RunProgram("plan", args); }

const std::string kTrainModel =
    absl::StrCat("--flagfile=", TRELLIS_SOURCE_DIR,
                 "/configs/tiny.flags --global_batch_size=8");
const std::string kModel = kTrainModel + " --vocab_size=257";

std::string WriteCluster(const std::string& name, const nlohmann::json& j) {
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/", ::getpid(), "_", name);
  std::ofstream(path) << j.dump();
  return path;
}

nlohmann::json SmallCluster(double memory_gib) {
  return {{"device", "cpu"},
          {"gpus_per_node", 2},
          {"nodes", 1},
          {"memory_gib", memory_gib},
          {"peak_tflops", 0.02},
          {"gemm_efficiency", 1},
          {"attention_efficiency", 0.3},
          {"memory_bandwidth_gbs", 5},
          {"intra_node_bandwidth_gbs", 1},
          {"intra_node_latency_us", 5},
          {"inter_node_bandwidth_gbs", 1},
          {"inter_node_latency_us", 5}};
}

TEST(PlanProgramTest, HelpListsItsFlags) {
  const Output o = Plan("--help");
  EXPECT_EQ(o.code, 0);
  EXPECT_THAT(o.out, HasSubstr("--cluster="));
  EXPECT_THAT(o.out, HasSubstr("--explain="));
  EXPECT_THAT(o.out, HasSubstr("h100-sxm-8xN"));
}

TEST(PlanProgramTest, JsonHasEveryLayoutWithItsParts) {
  const std::string cluster = WriteCluster("small.json", SmallCluster(4));
  const Output o =
      Plan(absl::StrCat(kModel, " --cluster=", cluster, " --json"));
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["cluster"]["gpus_per_node"], 2);
  ASSERT_TRUE(j["layouts"].is_array());
  ASSERT_FALSE(j["layouts"].empty());
  EXPECT_EQ(j["fitting"], j["layouts"].size());
  double previous = 1e300;
  for (const nlohmann::json& l : j["layouts"]) {
    EXPECT_EQ(l["dp"].get<int>() * l["cp"].get<int>() * l["tp"].get<int>() *
                  l["pp"].get<int>(),
              2);
    for (const char* key : {"compute", "bubble", "tp_comm", "cp_comm",
                            "pp_comm", "dp_comm", "optimizer", "total"}) {
      EXPECT_TRUE(l["step_s"].contains(key)) << key;
    }
    EXPECT_GT(l["memory"]["total"].get<double>(), 0);
    const double tokens = l["tokens_per_s"].get<double>();
    EXPECT_LE(tokens, previous * 1.001);  // ranked
    previous = tokens;
  }
}

TEST(PlanProgramTest, ExplainBreaksTheBestLayoutDown) {
  const std::string cluster = WriteCluster("small.json", SmallCluster(4));
  const Output o =
      Plan(absl::StrCat(kModel, " --cluster=", cluster, " --explain=1"));
  ASSERT_EQ(o.code, 0) << o.err;
  for (const char* part :
       {"compute", "pipeline bubble", "exposed tp", "exposed pp", "exposed dp",
        "optimizer", "memory per rank"}) {
    EXPECT_THAT(o.out, HasSubstr(part));
  }
  // The rates its kernels were costed at: this cluster file's own figures.
  EXPECT_THAT(o.out, HasSubstr("kernel rates (the cluster's peak × "
                               "efficiencies) on N = "));
  EXPECT_THAT(o.out, HasSubstr("attention 0.006 TFLOP/s; element-wise 5 GB/s"));
  // A zero-2 and a sequence-parallel layout, by name.
  for (const auto& [name, shown] :
       {std::pair<std::string, std::string>{
            "dp2.tp1.pp1/1f1b/v1/mbs2/z2/none",
            "ZeRO level 2 (gradients and optimizer states sharded"},
        {"dp1.tp2.pp1/1f1b/v1/mbs2/z0/none/sp", "sequence parallelism on"}}) {
    const Output one =
        Plan(absl::StrCat(kModel, " --cluster=", cluster, " --explain=", name));
    ASSERT_EQ(one.code, 0) << one.err;
    EXPECT_THAT(one.out, HasSubstr(name));
    EXPECT_THAT(one.out, HasSubstr(shown));
  }
  const Output sp = Plan(absl::StrCat(kModel, " --cluster=", cluster,
                                      " --explain=dp1.tp2.pp1/1f1b/v1/mbs2/z0/"
                                      "none/sp"));
  EXPECT_THAT(sp.out, HasSubstr("all_gather"));
  EXPECT_THAT(sp.out, HasSubstr("reduce_scatter"));
  const Output missing = Plan(
      absl::StrCat(kModel, " --cluster=", cluster, " --explain=dp9.tp9.pp9"));
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("--explain"));
}

TEST(PlanProgramTest, BadClusterFileIsOneLineNamingTheField) {
  nlohmann::json j = SmallCluster(4);
  j.erase("inter_node_latency_us");
  Output o = Plan(
      absl::StrCat(kModel, " --cluster=", WriteCluster("missing.json", j)));
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, HasSubstr("\"inter_node_latency_us\" is missing"));
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  j = SmallCluster(4);
  j["memory_gib"] = -2;
  o = Plan(absl::StrCat(kModel, " --cluster=", WriteCluster("neg.json", j)));
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, HasSubstr("memory_gib"));
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
}

// A search bound far past the model's size plans what the model allows, at
// once; a bound under 1 is refused in one line.
TEST(PlanProgramTest, SearchBoundsAreCheckedAndCapped) {
  const std::string cluster = WriteCluster("bounds.json", SmallCluster(4));
  Output o = Plan(absl::StrCat(kModel, " --cluster=", cluster,
                               " --max_virtual_stages=1000000000"));
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("dp"));
  for (const char* flag : {"--max_virtual_stages=0", "--max_micro_batch_size=0",
                           "--max_micro_batch_size=-3", "--world=-3"}) {
    o = Plan(absl::StrCat(kModel, " --cluster=", cluster, " ", flag));
    EXPECT_EQ(o.code, 1) << flag;
    EXPECT_THAT(o.err, HasSubstr(flag)) << flag;
    EXPECT_THAT(o.err, HasSubstr("must be at least")) << flag;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
}

TEST(PlanProgramTest, NothingFitsIsATable) {
  const std::string cluster = WriteCluster("tiny.json", SmallCluster(0.001));
  const Output o = Plan(absl::StrCat(kModel, " --cluster=", cluster));
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("nothing fits"));
  EXPECT_THAT(o.out, HasSubstr("do not fit"));
  EXPECT_THAT(o.out, HasSubstr("needs"));
}

TEST(PlanProgramTest, TrainPlanOnlyExplainsItsLayoutAndAllocatesNothing) {
  const std::string data = absl::StrCat(
      ::testing::TempDir(), "/plan_only_tokens_", ::getpid(), ".h5");
  test::WriteTokenFile(data, test::kByteVocab);
  const std::string flags = absl::StrCat(kTrainModel, " --data=", data,
                                         " --dp=1 --tp=1 --pp=2 --plan_only");
  const Output o = RunProgram("train", flags);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("layout dp1.tp1.pp2/1f1b/v1/mbs"));
  EXPECT_THAT(o.out, HasSubstr("exposed pp communication"));
  EXPECT_THAT(o.out, HasSubstr("memory per rank"));
  // It exits before the model exists: no arena, no step.
  EXPECT_THAT(o.out, Not(HasSubstr("memory arena")));
  EXPECT_THAT(o.out, Not(HasSubstr("| loss")));
  // Context parallelism is planned too: each rank's share of the window.
  const Output cp = RunProgram(
      "train", absl::StrCat(kTrainModel, " --data=", data,
                            " --dp=1 --cp=2 --cp_comm=a2a --plan_only"));
  ASSERT_EQ(cp.code, 0) << cp.err;
  EXPECT_THAT(cp.out, HasSubstr("layout dp1.cp2-a2a.tp1.pp1/1f1b"));
  EXPECT_THAT(cp.out, HasSubstr("exposed cp transfers"));
  EXPECT_THAT(cp.out, HasSubstr("cp calls per step"));
  // A mixture with its experts over ep 2 under ZeRO: the experts' sync
  // and sharding over their holders.
  const Output ep = RunProgram(
      "train",
      absl::StrCat("--flagfile=", TRELLIS_SOURCE_DIR,
                   "/configs/moe-tiny.flags --global_batch_size=8 --data=",
                   data, " --dp=2 --ep=2 --zero=2 --plan_only"));
  ASSERT_EQ(ep.code, 0) << ep.err;
  EXPECT_THAT(ep.out, HasSubstr("layout dp2.ep2.tp1.pp1/1f1b"));
  EXPECT_THAT(ep.out, HasSubstr("expert parallelism: ep 2, each rank 4 of a "
                                "layer's 8 experts; each alone on its rank"));
  EXPECT_THAT(ep.out, HasSubstr("layer 0's (1 of its kind) GEMMs"));
  EXPECT_THAT(ep.out, HasSubstr("layer 1's (3 of its kind) GEMMs"));
  // A layout the trainer refuses is refused the same way.
  const Output bad =
      RunProgram("train", absl::StrCat(kTrainModel, " --data=", data,
                                       " --dp=1 --tp=3 --plan_only"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("trellis-train: error:"));
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

// trellis-bench --profile measures the device's kernel cost table into its
// --json summary; trellis-plan --profile reads it as the cluster's, a
// cluster file can name it, and a damaged one is one line saying so.
TEST(PlanProgramTest, BenchProfileTableFeedsThePlan) {
  const std::string summary = absl::StrCat(::testing::TempDir(), "/",
                                           ::getpid(), "_bench_profile.json");
  const Output bench = RunProgram(
      "bench", absl::StrCat("--n_layer=1 --n_head=2 --d_model=64 --seq_len=32 "
                            "--micro_batch_size=1 --global_batch_size=1 "
                            "--steps=1 --warmup=0 --gemm_size=128 --profile "
                            "--json=",
                            summary));
  ASSERT_EQ(bench.code, 0) << bench.err;
  EXPECT_THAT(bench.out, HasSubstr("kernel costs (cpu, f32"));
  const std::string cluster = WriteCluster("small.json", SmallCluster(4));
  const Output plan = Plan(absl::StrCat(
      kModel, " --cluster=", cluster, " --profile=", summary, " --explain=1"));
  ASSERT_EQ(plan.code, 0) << plan.err;
  // The cluster file has no table: the profile's is what --explain shows.
  EXPECT_THAT(plan.out,
              HasSubstr("kernel rates (by shape, from the kernel cost table)"));
  nlohmann::json named = SmallCluster(4);
  named["kernel_costs"] = summary;
  const Output file = Plan(absl::StrCat(
      kModel, " --cluster=", WriteCluster("named.json", named), " --top=1"));
  EXPECT_EQ(file.code, 0) << file.err;
  std::ofstream(summary) << "{\"kernel_costs\": {\"kernel_costs\": 1}}";
  const Output bad = Plan(
      absl::StrCat(kModel, " --cluster=", cluster, " --profile=", summary));
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("kernel cost table"));
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  std::remove(summary.c_str());
}

}  // namespace
}  // namespace trellis
