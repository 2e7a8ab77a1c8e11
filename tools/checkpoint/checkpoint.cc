#include "tools/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "framework/hdf5.h"
#include "framework/text_file.h"
#include "tools/checkpoint/checkpoint_files.h"
#include "tools/checkpoint/file_tie.h"
#include "tools/checkpoint/model_config_json.h"
#include "tools/checkpoint/shard_io.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

// The shards of `part` (parameters of `params`) and, with `optimizer`,
// their moments.
CheckpointShards ShardsOf(const ParameterSet& params,
                          const std::vector<Parameter*>& part,
                          Optimizer* optimizer) {
  std::unordered_map<const Parameter*, size_t> index;
  for (size_t i = 0; i < params.all().size(); ++i) index[params.all()[i]] = i;
  CheckpointShards shards;
  for (const Parameter* p : part) {
    // bfloat16 runs store their float32 master weights.
    shards.model.push_back({p->name, p->spec, p->weights()});
    if (optimizer != nullptr) {
      const size_t i = index.at(p);
      shards.exp_avg.push_back({p->name, p->spec, optimizer->exp_avg(i)});
      shards.exp_avg_sq.push_back({p->name, p->spec, optimizer->exp_avg_sq(i)});
    }
  }
  if (optimizer != nullptr) shards.optimizer_step = optimizer->step();
  return shards;
}

int64_t ReadThreads() {
  const char* text = std::getenv("TRELLIS_CHECKPOINT_READ_THREADS");
  int64_t n = 4;
  if (text != nullptr && absl::SimpleAtoi(text, &n))
    return std::max<int64_t>(n, 1);
  return n;
}
}  // namespace

absl::Status ParallelReads(size_t n,
                           const std::function<absl::Status(size_t)>& read) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  absl::Status first;
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) {
      absl::Status s = read(i);
      if (!s.ok()) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (first.ok()) first = std::move(s);
        next = n;
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t count = std::min<size_t>(ReadThreads(), n);
  for (size_t t = 1; t < count; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  return first;
}

namespace {

// Counts in *unverified the tensors read that carry no checksums.
absl::Status ReadShardsOf(const TensorFileReader& file,
                          std::vector<TensorShard>& shards, const char* kind,
                          int64_t* unverified) {
  // Locate every tensor first (HDF5 metadata, one thread), then read the
  // raw bytes in parallel; tensors HDF5 must read go on this thread.
  std::vector<TensorLocation> where;
  std::vector<size_t> raw;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string path =
        kind == nullptr ? shards[i].name : MomentPath(kind, shards[i].name);
    absl::StatusOr<TensorLocation> found = file.Locate(path);
    if (absl::IsNotFound(found.status())) {
      return absl::NotFoundError(
          absl::StrCat(file.file_name(), " has no tensor ", path,
                       "; the checkpoint is of a different model"));
    }
    TRELLIS_RETURN_IF_ERROR(found.status());
    where.push_back(*std::move(found));
    if (!where.back().checksum.has_value()) ++*unverified;
    if (where.back().offset >= 0) {
      raw.push_back(i);
    } else {
      TRELLIS_RETURN_IF_ERROR(
          file.ReadShard(where[i], shards[i].spec, shards[i].tensor));
    }
  }
  return ParallelReads(raw.size(), [&](size_t k) {
    const size_t i = raw[k];
    return file.ReadShard(where[i], shards[i].spec, shards[i].tensor);
  });
}

// The integer j.at(key): a JSON integer that int64_t holds. (get<int64_t>()
// would cast a float, undefined beyond int64's range, or wrap a larger
// unsigned one.)
absl::StatusOr<int64_t> Int64At(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})) {
    return absl::DataLossError(
        absl::StrCat("\"", key, "\" is ", v.dump(), ", not a 64-bit integer"));
  }
  return v.get<int64_t>();
}

// The routers' selection biases: a list of rows, each a list of numbers.
absl::StatusOr<ExpertBias> ExpertBiasAt(const nlohmann::json& v) {
  std::vector<std::vector<double>> rows;
  bool numbers = v.is_array();
  for (size_t l = 0; numbers && l < v.size(); ++l) {
    numbers = v[l].is_array();
    for (size_t e = 0; numbers && e < v[l].size(); ++e) {
      numbers = v[l][e].is_number();
    }
    if (numbers) rows.push_back(v[l].get<std::vector<double>>());
  }
  if (!numbers) {
    return absl::DataLossError(
        "\"expert_bias\" is not a list of rows of numbers, one row per layer");
  }
  return ExpertBias(std::move(rows));
}

// What a state.json read in full must hold: a model trellis can build and
// counts in range.
absl::Status CheckState(const TrainingState& s) {
  if (const absl::Status valid = s.model.Validate(); !valid.ok()) {
    return absl::DataLossError(
        absl::StrCat("the model is invalid: ", valid.message()));
  }
  if (s.step < 0 || s.samples_consumed < 0) {
    return absl::DataLossError(
        absl::StrCat("step ", s.step, " or samples_consumed ",
                     s.samples_consumed, " is negative"));
  }
  if (s.dp < 1 || s.tp < 1 || s.pp < 1) {
    return absl::DataLossError(absl::StrCat("layout dp ", s.dp, ", tp ", s.tp,
                                            ", pp ", s.pp,
                                            " is not of positive sizes"));
  }
  if (const absl::Status bias =
          s.expert_bias.Check(s.model.n_layer, s.model.experts);
      !bias.ok()) {
    return absl::DataLossError(bias.message());
  }
  if (!s.expert_bias.empty() && s.model.moe_bias_update_rate <= 0) {
    return absl::DataLossError(
        "\"expert_bias\" is set but the model has no moe_bias_update_rate");
  }
  for (const DataSourceState& d : s.data_sources) {
    if (!(d.weight >= 0 && d.weight <= 1) || d.samples_consumed < 0) {
      return absl::DataLossError(
          absl::StrCat("data source ", d.path, " has weight ", d.weight,
                       " (not in [0, 1]) or samples_consumed ",
                       d.samples_consumed, " (negative)"));
    }
  }
  return absl::OkStatus();
}

// The state in `j`, an object. Errors name the field, not the file; a
// missing field or one of another JSON type throws nlohmann's exception.
absl::StatusOr<TrainingState> StateFromJson(const nlohmann::json& j) {
  TrainingState s;
  TRELLIS_ASSIGN_OR_RETURN(s.step, Int64At(j, "step"));
  TRELLIS_ASSIGN_OR_RETURN(s.samples_consumed, Int64At(j, "samples_consumed"));
  if (!j.at("seed").is_number_unsigned()) {
    return absl::DataLossError(absl::StrCat("\"seed\" is ", j.at("seed").dump(),
                                            ", not an unsigned integer"));
  }
  s.seed = j.at("seed").get<uint64_t>();
  TRELLIS_ASSIGN_OR_RETURN(s.model, ModelConfigFromJson(j.at("model")));
  s.tokenizer = j.value("tokenizer", "");
  if (j.contains("tokenizer_identity")) {
    const nlohmann::json& t = j.at("tokenizer_identity");
    s.tokenizer_identity.kind = t.at("kind").get<std::string>();
    TRELLIS_ASSIGN_OR_RETURN(s.tokenizer_identity.vocab_size,
                             Int64At(t, "vocab_size"));
    TRELLIS_ASSIGN_OR_RETURN(s.tokenizer_identity.eot_token,
                             Int64At(t, "eot_token"));
    s.tokenizer_identity.sha256 = t.at("sha256").get<std::string>();
  }
  const nlohmann::json& layout = j.at("layout");
  TRELLIS_ASSIGN_OR_RETURN(s.dp, Int64At(layout, "dp"));
  TRELLIS_ASSIGN_OR_RETURN(s.tp, Int64At(layout, "tp"));
  TRELLIS_ASSIGN_OR_RETURN(s.pp, Int64At(layout, "pp"));
  s.flags = j.value("flags", "");
  if (j.contains("source")) {
    s.source = j.at("source").get<std::map<std::string, std::string>>();
  }
  if (j.contains("files")) {
    s.files = j.at("files").get<std::map<std::string, std::string>>();
  }
  if (j.contains("expert_bias")) {
    TRELLIS_ASSIGN_OR_RETURN(s.expert_bias, ExpertBiasAt(j.at("expert_bias")));
  }
  if (j.contains("data_sources")) {
    for (const nlohmann::json& d : j.at("data_sources")) {
      DataSourceState& source = s.data_sources.emplace_back();
      source.path = d.at("path").get<std::string>();
      source.weight = d.at("weight").get<double>();
      TRELLIS_ASSIGN_OR_RETURN(source.samples_consumed,
                               Int64At(d, "samples_consumed"));
    }
  }
  TRELLIS_RETURN_IF_ERROR(CheckState(s));
  return s;
}

}  // namespace

absl::StatusOr<TrainingState> ReadTrainingState(const std::string& dir) {
  const fs::path path = fs::path(dir) / kStateFile;
  absl::StatusOr<std::string> text = ReadTextFile(path.string());
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(
        absl::StrCat(path.string(), " not found: not a trellis checkpoint"));
  }
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        text.status().message(), ": not a trellis checkpoint's state.json"));
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat(path.string(), " is not JSON"));
  }
  absl::StatusOr<TrainingState> state;
  try {
    state = StateFromJson(j);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(
        path.string(), " is missing a field or has a wrong one: ", e.what()));
  }
  if (!state.ok()) {
    return absl::DataLossError(
        absl::StrCat(path.string(), ": ", state.status().message()));
  }
  return state;
}

absl::Status LoadCheckpoint(const std::string& dir, ParameterSet& params,
                            Optimizer* optimizer) {
  return LoadCheckpointPart(dir, params, params.all(), optimizer);
}

absl::Status LoadCheckpointPart(const std::string& dir,
                                const ParameterSet& params,
                                const std::vector<Parameter*>& part,
                                Optimizer* optimizer, bool note_unverified) {
  CheckpointShards shards = ShardsOf(params, part, optimizer);
  shards.note_unverified = note_unverified;
  TRELLIS_RETURN_IF_ERROR(LoadShards(dir, shards));
  for (Parameter* p : part) RefreshFromMaster(*p);
  if (optimizer != nullptr) optimizer->set_step(shards.optimizer_step);
  return absl::OkStatus();
}

absl::Status LoadShards(const std::string& dir, CheckpointShards& mine) {
  const fs::path base(dir);
  TRELLIS_ASSIGN_OR_RETURN(
      TensorFileReader model,
      TensorFileReader::Open((base / kModelFile).string()));
  TRELLIS_RETURN_IF_ERROR(CheckFileTie(dir, kModelFile, model.hdf5()));
  int64_t unverified = 0;
  TRELLIS_RETURN_IF_ERROR(
      ReadShardsOf(model, mine.model, nullptr, &unverified));
  if (unverified > 0 && mine.note_unverified) {
    std::fprintf(stderr,
                 "checkpoint: %s has no tensor checksums (written before "
                 "checkpoints carried them); its bytes are not verified\n",
                 model.file_name().c_str());
  }
  if (!mine.has_optimizer()) return absl::OkStatus();
  if (!HasOptimizerState(dir)) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " holds weights only (no ", kOptimizerFile,
        "), so training cannot resume from it; load it with trellis-eval, "
        "or resume from a checkpoint written by trellis-train"));
  }
  TRELLIS_ASSIGN_OR_RETURN(
      TensorFileReader opt,
      TensorFileReader::Open((base / kOptimizerFile).string()));
  TRELLIS_RETURN_IF_ERROR(CheckFileTie(dir, kOptimizerFile, opt.hdf5()));
  TRELLIS_RETURN_IF_ERROR(
      ReadShardsOf(opt, mine.exp_avg, "exp_avg", &unverified));
  TRELLIS_RETURN_IF_ERROR(
      ReadShardsOf(opt, mine.exp_avg_sq, "exp_avg_sq", &unverified));
  TRELLIS_ASSIGN_OR_RETURN(mine.optimizer_step,
                           opt.hdf5().ReadInt64Attribute("step"));
  return absl::OkStatus();
}

bool HasOptimizerState(const std::string& dir) {
  return fs::exists(fs::path(dir) / kOptimizerFile);
}

absl::StatusOr<DType> StoredModelDType(const std::string& dir) {
  TRELLIS_ASSIGN_OR_RETURN(
      TensorFileReader model,
      TensorFileReader::Open((fs::path(dir) / kModelFile).string()));
  std::string probe = "wte";
  if (!model.Exists(probe)) {
    TRELLIS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                             model.hdf5().ListMembers());
    if (names.empty()) {
      return absl::DataLossError(
          absl::StrCat(model.file_name(), " holds no tensors"));
    }
    probe = names[0];
  }
  TRELLIS_ASSIGN_OR_RETURN(TensorLocation where, model.Locate(probe));
  return where.dtype;
}

}  // namespace trellis