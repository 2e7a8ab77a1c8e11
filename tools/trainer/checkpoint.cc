#include "tools/trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "framework/hdf5.h"
#include "tools/trainer/checkpoint_files.h"
#include "tools/trainer/model_config_json.h"
#include "tools/trainer/shard_io.h"

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

}  // namespace

std::string CheckpointName(int64_t step) {
  return absl::StrFormat("step_%08d", step);
}

absl::StatusOr<TrainingState> ReadTrainingState(const std::string& dir) {
  const fs::path path = fs::path(dir) / kStateFile;
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path.string(), " not found: not a trellis checkpoint"));
  }
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat(path.string(), " is not JSON"));
  }
  try {
    TrainingState s;
    s.step = j.at("step").get<int64_t>();
    s.samples_consumed = j.at("samples_consumed").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    absl::StatusOr<ModelConfig> model = ModelConfigFromJson(j.at("model"));
    if (!model.ok()) {
      return absl::DataLossError(
          absl::StrCat(path.string(), ": ", model.status().message()));
    }
    s.model = *model;
    s.tokenizer = j.value("tokenizer", "");
    if (j.contains("tokenizer_identity")) {
      const nlohmann::json& t = j.at("tokenizer_identity");
      s.tokenizer_identity = {
          t.at("kind").get<std::string>(), t.at("vocab_size").get<int64_t>(),
          t.at("eot_token").get<int64_t>(), t.at("sha256").get<std::string>()};
    }
    const nlohmann::json& layout = j.at("layout");
    s.dp = layout.at("dp").get<int64_t>();
    s.tp = layout.at("tp").get<int64_t>();
    s.pp = layout.at("pp").get<int64_t>();
    s.flags = j.value("flags", "");
    if (j.contains("source")) {
      s.source = j.at("source").get<std::map<std::string, std::string>>();
    }
    if (j.contains("data_sources")) {
      for (const nlohmann::json& d : j.at("data_sources")) {
        s.data_sources.push_back({d.at("path").get<std::string>(),
                                  d.at("weight").get<double>(),
                                  d.at("samples_consumed").get<int64_t>()});
      }
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(
        path.string(), " is missing a field or has a wrong one: ", e.what()));
  }
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