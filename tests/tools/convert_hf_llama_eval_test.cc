// A Hugging Face Llama written here converts with trellis-convert, and
// trellis-eval of the conversion equals PyTorch's loss of the original
// (scripts/torch_reference/hf_llama_loss.py, transformers' LlamaForCausalLM
// math in plain torch, float64) to 1e-4 under 1 rank, tp2, pp2 and
// dp2·tp2·pp2: grouped-query attention, tied and untied heads, llama3 RoPE
// scaling, bfloat16 and sharded inputs; and a MixtralForCausalLM (four
// experts, two per token, every layer) the same, and under expert
// parallelism (dp2·ep2, dp4·ep4, dp2·ep2·tp2); a Qwen3ForCausalLM (q/k
// norms, heads 12 wide in a 32-wide model, one key/value head) and a
// Qwen3MoeForCausalLM (a dense layer, then experts) likewise. PyTorch is
// required: without it the test fails and says how to install it. An
// independent plain-Python forward (tests/tools/hf_llama_reference.py) agrees
// with PyTorch to 1e-6, and the same forward with RoPE channels paired the
// other way (interleaved) disagrees, so the comparison sees the q/k row order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/token_dataset.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/hf_llama_test_util.h"
#include "tests/tools/tools_test_util.h"
#include "tests/tools/torch_reference_util.h"

namespace trellis {
namespace {

constexpr int64_t kWindows = 4;
constexpr double kTolerance = 1e-4;

struct EvalLayout {
  const char* name;
  int dp, tp, pp, ep = 1, cp = 1;
  int world() const { return dp * cp * tp * pp; }
};

struct EvalCase {
  const char* name;
  test::TinyLlama model;
};
void PrintTo(const EvalCase& c, std::ostream* os) { *os << c.name; }

// The first {"...": ...} line of `text` holding `key`.
double JsonValue(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{", 0) != 0) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains(key)) return j[key].get<double>();
  }
  ADD_FAILURE() << "no " << key << " in\n" << text;
  return NAN;
}

class HfLlamaEvalTest : public ::testing::TestWithParam<EvalCase> {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    data_ = dir_ + "/tokens.h5";
    log_ = dir_ + "/log.txt";
    test::WriteTokenFile(data_, test::kByteVocab, 2000);
    // The tokens trellis-eval scores, for the reference.
    absl::StatusOr<TokenDataset> data = TokenDataset::Open(data_);
    ASSERT_TRUE(data.ok()) << data.status();
    const int64_t n = kWindows * (test::kLlamaSeq + 1);
    std::vector<int32_t> tokens(n);
    ASSERT_TRUE(data->ReadTokens(0, n, tokens.data()).ok());
    std::ofstream out(dir_ + "/tokens.txt");
    for (int32_t t : tokens) out << t << "\n";
  }

  double Reference(const std::string& model, const char* pairing) {
    const std::string out = dir_ + "/reference.txt";
    std::filesystem::remove(out);
    const int rc = test::RunProgram(
        {test::Python(),
         absl::StrCat(TRELLIS_SOURCE_DIR, "/tests/tools/hf_llama_reference.py"),
         model, dir_ + "/tokens.txt", absl::StrCat(test::kLlamaSeq),
         absl::StrCat(kWindows), absl::StrCat("--rope_pairing=", pairing)},
        out, 300);
    EXPECT_EQ(rc, 0) << test::ReadFile(out);
    return JsonValue(test::ReadFile(out), "loss");
  }

  // scripts/torch_reference/hf_llama_loss.py's loss (NaN after a failure,
  // which it reports, a missing PyTorch included).
  double TorchReference(const std::string& model) {
    const nlohmann::json j = test::RunTorchReference(
        "hf_llama_loss.py",
        {model, dir_ + "/tokens.txt", absl::StrCat(test::kLlamaSeq),
         absl::StrCat(kWindows)},
        dir_);
    return j.is_object() ? j.value("loss", NAN) : NAN;
  }

  double Eval(const std::string& checkpoint, const EvalLayout& layout) {
    std::vector<std::string> argv;
    if (layout.world() > 1) argv = test::Mpirun(layout.world());
    argv.push_back(test::Program("eval"));
    argv.push_back("--load=" + checkpoint);
    argv.push_back("--data=" + data_);
    argv.push_back(absl::StrCat("--max_windows=", kWindows));
    argv.push_back("--micro_batch_size=2");
    argv.push_back(absl::StrCat("--dp=", layout.dp));
    argv.push_back(absl::StrCat("--tp=", layout.tp));
    argv.push_back(absl::StrCat("--pp=", layout.pp));
    argv.push_back(absl::StrCat("--ep=", layout.ep));
    argv.push_back(absl::StrCat("--cp=", layout.cp));
    const std::string out = dir_ + "/eval.txt";
    std::filesystem::remove(out);
    EXPECT_EQ(test::RunProgram(argv, out), 0) << test::ReadFile(out);
    return JsonValue(test::ReadFile(out), "eval_loss");
  }

  std::string dir_, data_, log_;
};

TEST_P(HfLlamaEvalTest, ConvertedModelEvaluatesLikeTheReference) {
  const std::string hf = dir_ + "/hf";
  std::filesystem::create_directories(hf);
  test::WriteTinyLlama(hf, GetParam().model);
  ASSERT_EQ(test::RunProgram(
                {test::Program("convert"), "--input=" + hf, "--to=trellis",
                 "--output=" + dir_ + "/ckpt", "--tokenizer=byte"},
                log_),
            0)
      << test::ReadFile(log_);
  // PyTorch's loss is the one trellis must reproduce.
  const double reference = TorchReference(hf);
  ASSERT_TRUE(std::isfinite(reference));
  // A loss far from log(257) = 5.55: the weights shape the prediction.
  EXPECT_GT(std::abs(reference - std::log(257.0)), 0.1) << reference;
  const bool moe = GetParam().model.experts > 0;
  // The plain-Python forward (Llama's) agrees with PyTorch's.
  const bool llama = !moe && !GetParam().model.qwen3;
  if (llama) {
    EXPECT_NEAR(Reference(hf, "halves"), reference, 1e-6);
  }
  std::vector<EvalLayout> layouts = {{"1x1x1", 1, 1, 1},
                                     {"tp2", 1, 2, 1},
                                     {"pp2", 1, 1, 2},
                                     {"dp2.tp2.pp2", 2, 2, 2}};
  if (!moe) {  // context parallelism: windows split over 2 ranks
    layouts.push_back({"cp2", 1, 1, 1, 1, 2});
    layouts.push_back({"cp2.tp2", 1, 2, 1, 1, 2});
  }
  if (moe) {
    layouts.push_back({"dp2.ep2", 2, 1, 1, 2});
    layouts.push_back({"dp4.ep4", 4, 1, 1, 4});
    layouts.push_back({"dp2.ep2.tp2", 2, 2, 1, 2});
  }
  double single = NAN;
  for (const EvalLayout& layout : layouts) {
    const double loss = Eval(dir_ + "/ckpt", layout);
    EXPECT_NEAR(loss, reference, kTolerance) << layout.name;
    std::printf("%s %s: trellis %.9f torch %.9f (difference %.2g)\n",
                GetParam().name, layout.name, loss, reference,
                std::abs(loss - reference));
    if (layout.world() == 1) single = loss;
  }
  if (!llama) return;
  // The other RoPE pairing is a different model: the comparison can fail.
  const double wrong = Reference(hf, "interleaved");
  EXPECT_GT(std::abs(wrong - single), 100 * kTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Models, HfLlamaEvalTest,
    ::testing::Values(
        EvalCase{"gqa_untied_f32", {}},
        EvalCase{"tied_bf16", {.dtype = DType::kBF16, .tied = true}},
        EvalCase{"llama3_rope", {.llama3 = true}},
        EvalCase{"sharded_tied_head_in_file",
                 {.tied = true, .lm_head_in_file = true, .shards = 3}},
        EvalCase{"mixtral_sharded_bf16",
                 {.dtype = DType::kBF16, .shards = 3, .experts = 4}},
        EvalCase{"qwen3_tied_mqa",
                 {.kv_heads = 1, .tied = true, .qwen3 = true}},
        EvalCase{
            "qwen3_moe_after_a_dense_layer",
            {.shards = 2, .experts = 4, .qwen3 = true, .dense_layers = {0}}}),
    [](const ::testing::TestParamInfo<EvalCase>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace trellis
