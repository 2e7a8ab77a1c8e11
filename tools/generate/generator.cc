#include "tools/generate/generator.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "framework/status.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/checkpoint_dir.h"
#include "tools/trainer/rank_device.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

// The tokenizer the checkpoint was trained with: `spec` when given, else
// the one it records (byte and gpt2 need no file; the others do).
absl::StatusOr<std::unique_ptr<Tokenizer>> CheckpointTokenizer(
    const GenerateOptions& o, const TrainingState& state,
    const std::string& dir) {
  std::string spec = o.tokenizer;
  if (spec.empty()) {
    TRELLIS_ASSIGN_OR_RETURN(const std::optional<std::string> held,
                             CheckpointTokenizerSpec(dir, state));
    if (held.has_value()) {
      spec = *held;
    } else if (state.tokenizer != "byte" && state.tokenizer != "gpt2") {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, " records tokenizer '", state.tokenizer,
          "', whose file it does not hold; pass --tokenizer=hf:PATH or "
          "--tokenizer=sentencepiece:PATH"));
    } else {
      spec = state.tokenizer;
    }
  }
  TRELLIS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                           MakeTokenizer(spec, o.gpt2_assets));
  const TokenizerIdentity identity = TokenizerIdentity::Of(*tokenizer);
  std::string differs;
  if (!state.tokenizer.empty() && state.tokenizer != tokenizer->name()) {
    differs = absl::StrCat("kind ", state.tokenizer, " vs ", tokenizer->name());
  } else if (!state.tokenizer_identity.kind.empty()) {
    differs = IdentityMismatch(state.tokenizer_identity, identity);
  }
  if (differs.empty() && tokenizer->vocab_size() != state.model.vocab_size) {
    differs = absl::StrCat("vocab_size ", state.model.vocab_size, " vs ",
                           tokenizer->vocab_size());
  }
  if (!differs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " was trained with another tokenizer than --tokenizer=", spec,
        " (", differs, "); pass the checkpoint's"));
  }
  return tokenizer;
}

absl::Status CheckLayout(const TrainOptions& o, int world) {
  if (o.pp != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pp=", o.pp,
        ": trellis-generate does not split the model into pipeline stages; "
        "spread it over ranks with --tp"));
  }
  if (o.cp != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cp=", o.cp,
        ": trellis-generate decodes one growing sequence and does not split "
        "it over context-parallel ranks; drop --cp (spread the model with "
        "--tp)"));
  }
  if (o.tp < 1 || o.tp != world || (o.dp != 0 && o.dp != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trellis-generate runs one sequence on --tp ranks: start it with as "
        "many ranks as --tp (now ",
        world, " ranks, --tp=", o.tp, ", --dp=", o.dp, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

double Generation::TokensPerSecond() const {
  const double seconds = prefill_seconds + decode_seconds;
  return seconds > 0 ? static_cast<double>(tokens.size()) / seconds : 0;
}

namespace {

// A model whose weights and key/value cache cannot fit is refused before
// a parameter is declared (a state.json of 100,000 layers grew memory
// without bound).
absl::Status CheckFits(const ModelConfig& c, int64_t tp, DType dtype,
                       size_t available, Device device) {
  const double bytes = static_cast<double>(DTypeSize(dtype));
  const double weights = static_cast<double>(c.NumParameters()) / tp * bytes;
  const double cache =
      2.0 * static_cast<double>(c.n_layer) * static_cast<double>(c.seq_len) *
      static_cast<double>(c.kv_heads() * c.HeadDim()) / tp * bytes;
  if (weights + cache <= static_cast<double>(available)) {
    return absl::OkStatus();
  }
  auto gib = [](double b) {
    return absl::StrFormat("%.1f GiB", b / (1 << 30));
  };
  return absl::ResourceExhaustedError(absl::StrCat(
      "the checkpoint's model (", c.n_layer, " layers, width ", c.d_model,
      ") needs at least ", gib(weights + cache), " per rank (weights ",
      gib(weights), ", key/value cache ", gib(cache), ") and ",
      DeviceName(device), " has ", gib(static_cast<double>(available)),
      "; split it over more --tp ranks or use a larger device"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Generator>> Generator::Create(
    const GenerateOptions& o, const ProcessGroups& groups) {
  std::unique_ptr<Generator> g(new Generator());
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
      *groups.world, CheckLayout(o.layout, groups.world->size())));
  absl::StatusOr<std::string> dir =
      o.load.empty()
          ? absl::InvalidArgumentError("--load is required: a checkpoint")
          : ResolveResume(o.load, "", "--load");
  absl::StatusOr<TrainingState> state =
      dir.ok() ? ReadTrainingState(*dir) : dir.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      state.ok() ? CheckpointTokenizer(o, *state, *dir) : state.status();
  absl::Status valid = tokenizer.status();
  if (valid.ok()) valid = state->model.Validate();
  if (valid.ok()) {
    valid =
        FamilyOf(state->model).CheckTensorParallel(state->model, o.layout.tp);
  }
  if (valid.ok()) {
    valid = FamilyOf(state->model).CheckDevice(state->model, o.layout.device);
  }
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(*groups.world, valid));
  g->dir_ = *dir;
  g->config_ = state->model;
  g->tokenizer_ = std::move(*tokenizer);
  TRELLIS_ASSIGN_OR_RETURN(RankDevice rank,
                           SetUpRankDevice(o.layout, groups, DType::kF32));
  g->groups_ = rank.groups;
  g->device_groups_ = std::move(rank.device_groups);
  g->device_ = rank.device;
  g->dtype_ = rank.dtype;
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
      *g->groups_.world,
      CheckFits(g->config_, g->groups_.tp->size(), g->dtype_,
                AvailableMemory(o.layout, g->device_), g->device_)));
  const TpPlace tp{g->groups_.tp->size(), g->groups_.tp->rank()};
  const ModelFamily& family = FamilyOf(g->config_);
  family.DeclareParameters(g->config_,
                           ChunkPlan{0, g->config_.n_layer, true, true}, tp,
                           /*seed=*/0, g->device_, g->dtype_, g->params_);
  // LoadCheckpoint below writes every element: nothing to initialize.
  g->params_.Materialize(/*grads=*/false, ParameterFill::kZero);
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
      *g->groups_.world, LoadCheckpoint(g->dir_, g->params_, nullptr)));
  DecoderSetup setup{tp, g->groups_.tp, &g->params_, g->device_, g->dtype_};
  g->decoder_ = family.NewDecoder(g->config_, setup);
  // Its routers choose as they did in training.
  g->decoder_->SetExpertBias(state->expert_bias);
  return g;
}

absl::StatusOr<std::vector<int32_t>> Generator::Encode(
    const std::string& text) const {
  std::vector<uint32_t> ids;
  tokenizer_->Encode(text, ids);
  if (ids.empty()) {
    return absl::InvalidArgumentError(
        "--prompt is empty; give some text to continue, e.g. --prompt=\"Once "
        "upon a time\"");
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::string> Generator::Decode(
    const std::vector<int32_t>& ids) const {
  const std::vector<uint32_t> u(ids.begin(), ids.end());
  return tokenizer_->Decode(u);
}

absl::StatusOr<Generation> Generator::Generate(const GenerateRequest& r) {
  TRELLIS_RETURN_IF_ERROR(ValidateSampling(r.sampling));
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  const int64_t context = decoder_->capacity();
  if (prompt == 0) return absl::InvalidArgumentError("the prompt is empty");
  if (prompt >= context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt's ", prompt,
        " tokens leave no room in the model's context of ", context,
        " tokens; shorten it to at most ", context - 1, " tokens"));
  }
  if (r.max_new_tokens < 1 || prompt + r.max_new_tokens > context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_new_tokens=", r.max_new_tokens, " with a prompt of ", prompt,
        " tokens does not fit the model's context of ", context,
        " tokens; ask for 1 to ", context - prompt,
        " new tokens or shorten the prompt"));
  }
  Generation out;
  std::vector<int32_t> sequence = r.prompt;
  decoder_->Reset();
  auto start = std::chrono::steady_clock::now();
  std::vector<float> logits = decoder_->Forward(sequence);
  out.prefill_seconds = Seconds(start);
  start = std::chrono::steady_clock::now();
  const int32_t eot = static_cast<int32_t>(tokenizer_->eot_token());
  for (int64_t step = 0; step < r.max_new_tokens; ++step) {
    if (r.logits != nullptr) r.logits->push_back(logits);
    const int32_t token = SampleToken(logits, r.sampling, step);
    out.tokens.push_back(token);
    sequence.push_back(token);
    if ((r.stop_at_eot && token == eot) || step + 1 == r.max_new_tokens) break;
    if (r.use_cache) {
      logits = decoder_->Forward(std::span<const int32_t>(&token, 1));
    } else {
      decoder_->Reset();
      logits = decoder_->Forward(sequence);
    }
  }
  out.decode_seconds = Seconds(start);
  return out;
}

}  // namespace trellis
