#include "tools/trainer/evaluator.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "data/blend.h"
#include "framework/device_info.h"
#include "framework/status.h"
#include "tools/trainer/rank_device.h"
#include "transformer/model_family.h"

namespace trellis {

absl::Status CheckCheckpointMatches(const std::string& dir,
                                    const TrainingState& state,
                                    const ModelConfig& model,
                                    const TokenDataset& data,
                                    const std::string& data_path) {
  if (state.model != model) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " holds a model with ", state.model.DebugString(),
        " but this run has ", model.DebugString(),
        "; use the model flags (and a data file of the vocabulary) the "
        "checkpoint was written with"));
  }
  // Same vocabulary size, other tokenizer: every id would mean another
  // string. Checkpoints written before the name was recorded have none.
  const std::string& tokenizer = data.tokenizer();
  if (!state.tokenizer.empty() && state.tokenizer != tokenizer) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " was trained on data of tokenizer '", state.tokenizer,
        "' but --data=", data_path, " is tokenized with '", tokenizer,
        "'; preprocess the text with --tokenizer=", state.tokenizer));
  }
  // Same kind, another vocabulary, end-of-text or tokenizer file.
  // Checkpoints written before the identity was recorded have none.
  const TokenizerIdentity identity = data.tokenizer_identity();
  const std::string differs =
      state.tokenizer_identity.kind.empty()
          ? ""
          : IdentityMismatch(state.tokenizer_identity, identity);
  if (!differs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " was trained on data of tokenizer ",
        state.tokenizer_identity.ToString(), " but --data=", data_path,
        " is tokenized with ", identity.ToString(), " (", differs,
        "); preprocess the text with the checkpoint's tokenizer file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ModelAtContext(const ModelConfig& stored,
                                           int64_t seq_len) {
  if (seq_len == 0) return stored;
  if (seq_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seq_len=", seq_len,
                     " is negative; give a context length, or 0 "
                     "for the checkpoint's"));
  }
  ModelConfig model = stored;
  model.seq_len = seq_len;
  const auto before = ModelTensorShapes(stored),
             after = ModelTensorShapes(model);
  TRELLIS_CHECK_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    const auto& [name, shape] = before[i];
    const Shape& wanted = after[i].second;
    if (shape == wanted) continue;
    // Only a table with a row per position depends on the context.
    TRELLIS_CHECK(shape.size() == 2 && wanted.size() == 2 &&
                  shape[0] == stored.seq_len && wanted[0] == seq_len &&
                  shape[1] == wanted[1])
        << name;
    if (seq_len > stored.seq_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("--seq_len=", seq_len, " exceeds the ", stored.seq_len,
                       " positions the model's learned position table ", name,
                       " holds; give --seq_len of at most ", stored.seq_len));
    }
  }
  return model;
}

namespace {

// Fills `params` from checkpoint `dir` of model `stored`; a parameter with
// fewer rows than its stored tensor (a position table at a shorter
// context) takes the first rows.
absl::Status LoadWeights(const std::string& dir, const ModelConfig& stored,
                         ParameterSet& params) {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, shape] : ModelTensorShapes(stored)) {
    shapes[name] = shape;
  }
  CheckpointShards shards;
  std::vector<std::pair<Parameter*, Tensor>> prefixes;
  for (Parameter* p : params.all()) {
    const auto it = shapes.find(p->name);
    if (it == shapes.end() || it->second == p->spec.logical_shape) {
      shards.model.push_back({p->name, p->spec, p->weights()});
      continue;
    }
    TRELLIS_CHECK(p->spec.replicated()) << p->name;
    Tensor whole = Tensor::Empty(it->second, p->weights().dtype());
    shards.model.push_back({p->name, ShardSpec::Replicated(it->second), whole});
    prefixes.push_back({p, whole});
  }
  TRELLIS_RETURN_IF_ERROR(LoadShards(dir, shards));
  for (auto& [p, whole] : prefixes) {
    p->weights().CopyFrom(whole.Narrow(0, p->weights().dim(0)));
  }
  for (Parameter* p : params.all()) RefreshFromMaster(*p);
  return absl::OkStatus();
}

// The weights, and the routers' selection biases so that they choose as
// in training.
absl::Status LoadModel(const std::string& dir, const TrainingState& state,
                       const ModelConfig& stored, StageModel& model) {
  TRELLIS_RETURN_IF_ERROR(LoadWeights(dir, stored, model.params()));
  model.SetExpertBias(state.expert_bias);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> EvaluateWindows(StageModel& model, BatchLoader& loader,
                                       const ProcessGroups& groups,
                                       MeshCoord coord,
                                       const TrainOptions& options,
                                       const std::vector<int64_t>& starts,
                                       int source) {
  const int64_t b = options.micro_batch_size;
  std::vector<int64_t> mine;
  // Windows go round the replicas; a replica's cp ranks share its windows.
  for (size_t i = coord.d / options.cp; i < starts.size(); i += options.dp) {
    mine.push_back(starts[i]);
  }
  // Pad to whole microbatches; padded rows are not counted.
  std::vector<int64_t> rows;
  for (int64_t left = static_cast<int64_t>(mine.size()); left > 0; left -= b) {
    rows.push_back(std::min(left, b));
  }
  while (mine.size() % b != 0) mine.push_back(mine.back());
  TRELLIS_ASSIGN_OR_RETURN(std::vector<MicroBatch> microbatches,
                           loader.Windows(mine, source));
  const auto [sum, tokens] = model.ForwardOnly(microbatches, rows);
  Tensor totals = Tensor::Empty({2}, DType::kF64);
  totals.data<double>()[0] = sum;
  totals.data<double>()[1] = static_cast<double>(tokens);
  if (groups.dp->size() > 1) groups.dp->AllReduce(totals, ReduceOp::kSum);
  if (groups.pp->size() > 1) groups.pp->AllReduce(totals, ReduceOp::kSum);
  if (totals.data<double>()[1] == 0) {
    return absl::InvalidArgumentError("no windows to evaluate");
  }
  return totals.data<double>()[0] / totals.data<double>()[1];
}

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(
    TrainOptions options, const ProcessGroups& groups, MeshCoord coord,
    const std::string& dir, DType dtype, int64_t seq_len) {
  TRELLIS_ASSIGN_OR_RETURN(TrainingState state, ReadTrainingState(dir));
  const ModelConfig stored = state.model;
  TRELLIS_ASSIGN_OR_RETURN(state.model, ModelAtContext(stored, seq_len));
  options.model = state.model;
  // A model trained with document masking is scored with it, as its
  // trainer's validation does.
  for (absl::string_view line : absl::StrSplit(state.flags, '\n')) {
    if (line == "--document_mask=true") options.document_mask = true;
  }
  if (options.document_mask && options.device == DeviceType::kCUDA) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir,
        " was trained with --document_mask, which runs on --device=cpu only "
        "for now (the CUDA attention kernels have no document mask); "
        "evaluate it with --device=cpu"));
  }
  TRELLIS_ASSIGN_OR_RETURN(std::vector<BlendSource> sources,
                           ParseBlend(options.data));
  std::vector<TokenDataset> data;
  for (const BlendSource& source : sources) {
    TRELLIS_ASSIGN_OR_RETURN(TokenDataset d, TokenDataset::Open(source.path));
    data.push_back(std::move(d));
  }
  TRELLIS_RETURN_IF_ERROR(
      options.Resolve(groups.world->size(), data.front().vocab_size()));
  // Every source's vocabulary (Resolve took the first's) and tokenizer must
  // be the checkpoint's.
  for (const TokenDataset& d : data) {
    TRELLIS_RETURN_IF_ERROR(
        CheckCheckpointMatches(dir, state, options.model, d, d.path()));
  }
  if (groups.tp->size() != options.tp ||
      groups.dp->size() != options.gradient_replicas() ||
      groups.pp->size() != options.pp) {
    return absl::InvalidArgumentError(
        "the process groups do not match the layout flags");
  }
  std::unique_ptr<Evaluator> e(new Evaluator(options, coord));
  TRELLIS_ASSIGN_OR_RETURN(RankDevice rank,
                           SetUpRankDevice(options, groups, dtype));
  e->groups_ = rank.groups;
  e->device_groups_ = std::move(rank.device_groups);
  e->model_ = std::make_unique<StageModel>(options, e->groups_, coord,
                                           rank.device, rank.dtype);
  e->memory_plan_ = e->model_->PlanEvalMemory();
  const size_t available = AvailableMemory(options, rank.device);
  const absl::Status fits =
      CheckMemoryPlan(e->memory_plan_, available,
                      absl::StrCat("rank ", groups.world->rank(), " (",
                                   DeviceDescription(rank.device), ")"),
                      options.micro_batch_size, options.recompute);
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(*e->groups_.world, fits));
  if (groups.world->rank() == 0) {
    std::printf("memory plan (rank 0, %s): %s\n",
                DeviceName(rank.device).c_str(),
                e->memory_plan_.Format().c_str());
    std::fflush(stdout);
  }
  e->arena_scope_ = std::make_unique<ArenaScope>(MemoryArena::Create(
      ArenaCapacity(e->memory_plan_, available), rank.device));
  // LoadWeights below writes every element: no initialization to pay for.
  e->model_->Allocate(ParameterFill::kZero);
  BatchLoader::Config config;
  config.seq_len = options.model.seq_len;
  config.val_fraction = 0;
  config.global_batch = options.global_batch_size;
  config.micro_batch = options.micro_batch_size;
  config.seed = options.seed;
  config.dp = static_cast<int>(options.dp);
  config.dp_rank = static_cast<int>(coord.d / options.cp);
  config.reads_tokens = e->model_->reads_tokens();
  config.document_mask = options.document_mask;
  config.prefetch = false;  // evaluation reads its windows itself
  TRELLIS_ASSIGN_OR_RETURN(e->loader_, BatchLoader::Open(options.data, config));
  TRELLIS_RETURN_IF_ERROR(LoadModel(dir, state, stored, *e->model_));
  return e;
}

absl::StatusOr<double> Evaluator::Evaluate(const std::vector<int64_t>& starts,
                                           int source) {
  return EvaluateWindows(*model_, *loader_, groups_, coord_, options_, starts,
                         source);
}

absl::StatusOr<StreamEval> Evaluator::EvaluateStreams(int64_t max_windows) {
  const int64_t window = options_.model.seq_len + 1;
  StreamEval result;
  for (int source = 0; source < loader_->num_sources(); ++source) {
    const TokenDataset& data = loader_->dataset(source);
    int64_t n = data.num_tokens() / window;
    if (max_windows > 0) n = std::min(n, max_windows);
    if (n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(data.path(), " holds fewer than seq_len + 1 = ", window,
                       " tokens; give --data a longer file"));
    }
    std::vector<int64_t> starts(n);
    for (int64_t i = 0; i < n; ++i) starts[i] = i * window;
    TRELLIS_ASSIGN_OR_RETURN(const double loss, Evaluate(starts, source));
    const double weight = loader_->weight(source);
    result.sources.push_back({data.path(), weight, n, loss});
    result.loss += weight * loss;
    result.windows += n;
  }
  return result;
}

}  // namespace trellis
