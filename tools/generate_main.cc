// trellis-generate: continues a prompt with a checkpoint's model.
//
//   trellis-generate --load=CKPT --prompt="Once upon a time"
//       [--max_new_tokens=64 --temperature=1 --top_k=0 --top_p=1 --seed=0
//        --no_cache --tokenizer=SPEC --tp=N --device=cuda]
//
// It tokenizes the prompt with the checkpoint's tokenizer, prefills it,
// then adds one token at a time with a key/value cache (--no_cache: runs
// the whole sequence again for every token), and prints the prompt and its
// continuation, then one JSON line: the new token ids, their count, the
// prompt's length and tokens per second. --temperature=0 is greedy. Under
// mpirun it splits the model over --tp ranks (all ranks of the job); every
// rank computes the same tokens and rank 0 prints. Bad flags give one line
// on stderr and exit 1 (tools/generate/generator.h).
#include <mpi.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "parallel/bootstrap.h"
#include "tools/generate/generator.h"
#include "tools/options/option_flags.h"
#include "tools/options/program_help.h"

ABSL_FLAG(std::string, load, "",
          "checkpoint directory (a step_* directory, or a save directory "
          "whose `latest` names one)");
ABSL_FLAG(std::string, prompt, "", "the text to continue");
ABSL_FLAG(int64_t, max_new_tokens, 64,
          "tokens to add (the prompt and these must fit the model's context, "
          "seq_len)");
ABSL_FLAG(double, temperature, 1.0,
          "divides the logits before sampling; 0 is greedy");
ABSL_FLAG(int64_t, top_k, 0, "sample among the k most likely tokens (0: all)");
ABSL_FLAG(double, top_p, 1.0,
          "sample among the most likely tokens whose probabilities sum to at "
          "least top_p, in (0, 1] (1: all)");
ABSL_FLAG(uint64_t, seed, 0, "seed of the sampling draws");
ABSL_FLAG(bool, no_cache, false,
          "run the whole sequence again for every new token instead of "
          "keeping a key/value cache (for comparison)");
ABSL_FLAG(bool, stop_at_eot, true,
          "stop after the tokenizer's end-of-text token");
ABSL_FLAG(std::string, tokenizer, "",
          "tokenizer spec (byte, gpt2, hf:PATH, sentencepiece:PATH); default: "
          "the checkpoint's");
ABSL_FLAG(std::string, gpt2_assets, trellis::kDefaultGpt2AssetsDir,
          "directory of GPT-2's encoder.json and vocab.bpe");
// The layout and device flags are trellis-train's (ReadParallelFlags).

namespace trellis {
namespace {

struct Result {
  std::vector<int32_t> prompt;
  Generation generation;
  std::string text;
};

absl::StatusOr<Result> Run(const MpiRuntime& runtime) {
  TRELLIS_ASSIGN_OR_RETURN(
      Mesh mesh, Mesh::Create(runtime.world_size(), 1, runtime.world_size(), 1,
                              "tp-dp-pp"));
  TRELLIS_ASSIGN_OR_RETURN(ParallelContext context,
                           ParallelContext::Create(runtime, mesh));
  GenerateOptions o;
  o.load = absl::GetFlag(FLAGS_load);
  o.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  o.gpt2_assets = absl::GetFlag(FLAGS_gpt2_assets);
  ReadParallelFlags(o.layout);
  TRELLIS_ASSIGN_OR_RETURN(std::unique_ptr<Generator> generator,
                           Generator::Create(o, context.groups()));
  Result result;
  GenerateRequest r;
  TRELLIS_ASSIGN_OR_RETURN(r.prompt,
                           generator->Encode(absl::GetFlag(FLAGS_prompt)));
  r.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  r.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  r.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  r.sampling.top_p = absl::GetFlag(FLAGS_top_p);
  r.sampling.seed = absl::GetFlag(FLAGS_seed);
  r.use_cache = !absl::GetFlag(FLAGS_no_cache);
  r.stop_at_eot = absl::GetFlag(FLAGS_stop_at_eot);
  result.prompt = r.prompt;
  TRELLIS_ASSIGN_OR_RETURN(result.generation, generator->Generate(r));
  std::vector<int32_t> all = r.prompt;
  all.insert(all.end(), result.generation.tokens.begin(),
             result.generation.tokens.end());
  TRELLIS_ASSIGN_OR_RETURN(result.text, generator->Decode(all));
  return result;
}

int Main(int argc, char** argv) {
  MpiRuntime runtime(&argc, &argv);
  absl::SetProgramUsageMessage(
      "trellis-generate --load CKPT --prompt TEXT [--max_new_tokens N "
      "--temperature T --top_k K --top_p P --seed S --no_cache]");
  if (PrintHelpIfAsked(argc, argv, std::string(absl::ProgramUsageMessage()))) {
    return 0;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const absl::StatusOr<Result> result =
      positional.size() > 1
          ? absl::InvalidArgumentError(absl::StrCat(
                "unexpected argument '", positional[1],
                "': trellis-generate takes only flags (the text goes in "
                "--prompt=\"...\")"))
          : Run(runtime);
  if (!result.ok()) {
    if (runtime.world_rank() == 0) {
      std::fprintf(stderr, "trellis-generate: error: %s\n",
                   std::string(result.status().message()).c_str());
    }
    return 1;
  }
  if (runtime.world_rank() == 0) {
    const Generation& g = result->generation;
    std::printf("%s\n", result->text.c_str());
    const nlohmann::json j = {{"tokens", g.tokens},
                              {"new_tokens", g.tokens.size()},
                              {"prompt_tokens", result->prompt.size()},
                              {"tokens_per_s", g.TokensPerSecond()},
                              {"prefill_s", g.prefill_seconds},
                              {"decode_s", g.decode_seconds},
                              {"cache", !absl::GetFlag(FLAGS_no_cache)}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::Main(argc, argv); }
