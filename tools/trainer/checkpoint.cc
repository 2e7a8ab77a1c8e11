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

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "framework/hdf5.h"
#include "tools/trainer/model_config_json.h"
#include "tools/trainer/shard_io.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

constexpr char kModelFile[] = "model.h5";
constexpr char kOptimizerFile[] = "optimizer.h5";
constexpr char kStateFile[] = "state.json";
constexpr char kLatest[] = "latest";
constexpr char kFormat[] = "trellis-checkpoint-1";

absl::Status SyncPath(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path.string()));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("fsync ", path.string()));
  }
  return absl::OkStatus();
}

// The dataset path of a moment in optimizer.h5.
std::string MomentPath(const char* kind, const std::string& name) {
  return absl::StrCat(kind, "/", name);
}

// Where this rank's shards live in the files being written.
struct Locations {
  std::vector<TensorLocation> model, exp_avg, exp_avg_sq;
};

// This rank's parts of the checksums of the tensors it writes, by shard.
struct Checksums {
  std::vector<TensorChecksum> model, exp_avg, exp_avg_sq;
};

absl::StatusOr<hdf5::File> OpenForDefining(const fs::path& path, bool create) {
  if (!create) {
    return hdf5::File::Open(path.string(), hdf5::OpenMode::kReadWrite);
  }
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File file, hdf5::File::Create(path.string()));
  TRELLIS_RETURN_IF_ERROR(file.WriteStringAttribute("format", kFormat));
  return file;
}

// Defines the datasets of this rank's shards (this rank's turn).
// and adds this rank's parts to their checksums.
absl::Status DefineShards(const fs::path& dir, const CheckpointShards& mine,
                          const Checksums& sums, DType model_dtype, bool create,
                          Locations* out) {
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File model,
                           OpenForDefining(dir / kModelFile, create));
  for (size_t i = 0; i < mine.model.size(); ++i) {
    const TensorShard& s = mine.model[i];
    TRELLIS_ASSIGN_OR_RETURN(
        TensorLocation where,
        DefineTensor(model, s.name, s.spec.logical_shape, model_dtype));
    TRELLIS_RETURN_IF_ERROR(AddChecksum(model, where, sums.model[i]));
    out->model.push_back(std::move(where));
  }
  TRELLIS_RETURN_IF_ERROR(model.Close());
  if (!mine.has_optimizer()) return absl::OkStatus();
  // The first writer with moments makes the file (under ZeRO the model's
  // first writer may hold none).
  const bool make = create || !fs::exists(dir / kOptimizerFile);
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File opt,
                           OpenForDefining(dir / kOptimizerFile, make));
  if (make) {
    TRELLIS_RETURN_IF_ERROR(
        opt.WriteInt64Attribute("step", mine.optimizer_step));
  }
  // All first moments, then all second moments: the order they are written
  // and read in, so the file is walked sequentially.
  for (const auto& [kind, shards, partial, locations] :
       {std::tuple("exp_avg", &mine.exp_avg, &sums.exp_avg, &out->exp_avg),
        std::tuple("exp_avg_sq", &mine.exp_avg_sq, &sums.exp_avg_sq,
                   &out->exp_avg_sq)}) {
    for (size_t i = 0; i < shards->size(); ++i) {
      const TensorShard& s = (*shards)[i];
      TRELLIS_ASSIGN_OR_RETURN(TensorLocation where,
                               DefineTensor(opt, MomentPath(kind, s.name),
                                            s.spec.logical_shape, DType::kF32));
      TRELLIS_RETURN_IF_ERROR(AddChecksum(opt, where, (*partial)[i]));
      locations->push_back(std::move(where));
    }
  }
  return opt.Close();
}

int64_t WriteDelayMs() {
  const char* text = std::getenv("TRELLIS_CHECKPOINT_WRITE_DELAY_MS");
  int64_t ms = 0;
  if (text == nullptr || !absl::SimpleAtoi(text, &ms)) return 0;
  return std::max<int64_t>(ms, 0);
}

// Writes shard i of `shards` to its location in one file.
absl::Status WriteFile(
    const fs::path& path,
    const std::vector<const std::vector<TensorShard>*>& sets,
    const std::vector<const std::vector<TensorLocation>*>& where,
    const SaveOptions& options, int64_t* written, int64_t total,
    int64_t* bytes) {
  const int64_t delay = WriteDelayMs();
  TRELLIS_ASSIGN_OR_RETURN(TensorFileWriter file,
                           TensorFileWriter::Open(path.string()));
  for (size_t s = 0; s < sets.size(); ++s) {
    for (size_t i = 0; i < sets[s]->size(); ++i) {
      if (delay > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      }
      const TensorShard& shard = (*sets[s])[i];
      TRELLIS_RETURN_IF_ERROR(
          file.WriteShard((*where[s])[i], shard.spec, shard.tensor));
      ++*written;
      if (options.progress) options.progress(*written, total);
    }
  }
  *bytes += file.bytes_written();
  return file.Close();
}

// Writes this rank's shards' bytes into the defined datasets and syncs.
absl::Status WriteShards(const fs::path& dir, const CheckpointShards& mine,
                         const Locations& where, const SaveOptions& options,
                         int64_t* bytes) {
  const int64_t total =
      mine.model.size() + mine.exp_avg.size() + mine.exp_avg_sq.size();
  int64_t written = 0;
  TRELLIS_RETURN_IF_ERROR(WriteFile(dir / kModelFile, {&mine.model},
                                    {&where.model}, options, &written, total,
                                    bytes));
  if (!mine.has_optimizer()) return absl::OkStatus();
  return WriteFile(dir / kOptimizerFile, {&mine.exp_avg, &mine.exp_avg_sq},
                   {&where.exp_avg, &where.exp_avg_sq}, options, &written,
                   total, bytes);
}

nlohmann::json StateToJson(const TrainingState& s) {
  nlohmann::json j = {{"step", s.step},
                      {"samples_consumed", s.samples_consumed},
                      {"seed", s.seed},
                      {"model", ModelConfigToJson(s.model)},
                      {"tokenizer", s.tokenizer},
                      {"layout", {{"dp", s.dp}, {"tp", s.tp}, {"pp", s.pp}}},
                      {"flags", s.flags},
                      {"format", kFormat}};
  if (!s.source.empty()) j["source"] = s.source;
  for (const DataSourceState& d : s.data_sources) {
    j["data_sources"].push_back(
        nlohmann::json{{"path", d.path},
                       {"weight", d.weight},
                       {"samples_consumed", d.samples_consumed}});
  }
  if (!s.tokenizer_identity.kind.empty()) {
    const TokenizerIdentity& t = s.tokenizer_identity;
    j["tokenizer_identity"] = {{"kind", t.kind},
                               {"vocab_size", t.vocab_size},
                               {"eot_token", t.eot_token},
                               {"sha256", t.sha256}};
  }
  return j;
}

absl::Status WriteTextFile(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("write ", tmp.string()));
  }
  TRELLIS_RETURN_IF_ERROR(SyncPath(tmp));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("rename ", tmp.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

// Rank 0's part after the shards are written: state, sync, publish.
absl::Status Publish(const fs::path& save_dir, const fs::path& tmp,
                     const fs::path& final_dir, const TrainingState& state) {
  TRELLIS_RETURN_IF_ERROR(
      WriteTextFile(tmp / kStateFile, StateToJson(state).dump(2) + "\n"));
  for (const auto& entry : fs::directory_iterator(tmp)) {
    TRELLIS_RETURN_IF_ERROR(SyncPath(entry.path()));
  }
  TRELLIS_RETURN_IF_ERROR(SyncPath(tmp));
  std::error_code ec;
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("rename ", tmp.string(), " to ",
                                            final_dir.string(), ": ",
                                            ec.message()));
  }
  TRELLIS_RETURN_IF_ERROR(SyncPath(save_dir));
  TRELLIS_RETURN_IF_ERROR(
      WriteTextFile(save_dir / kLatest, CheckpointName(state.step) + "\n"));
  return SyncPath(save_dir);
}

absl::Status Prepare(const fs::path& save_dir, const fs::path& tmp) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  if (!ec) fs::remove_all(tmp, ec);
  if (!ec) fs::create_directory(tmp, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", tmp.string(), ": ", ec.message(),
                     "; check --save_dir is writable"));
  }
  return absl::OkStatus();
}

// A flag or count, summed over the world.
int64_t SumOverWorld(Communicator& world, int64_t value) {
  if (world.size() == 1) return value;
  Tensor t = Tensor::Empty({1}, DType::kI64);
  t.data<int64_t>()[0] = value;
  world.AllReduce(t, ReduceOp::kSum);
  return t.data<int64_t>()[0];
}

// Whether each world rank writes.
std::vector<bool> WriterFlags(Communicator& world, bool writer) {
  Tensor mine = Tensor::Empty({1}, DType::kI32);
  mine.data<int32_t>()[0] = writer ? 1 : 0;
  Tensor all = Tensor::Empty({world.size()}, DType::kI32);
  world.AllGather(mine, all);
  std::vector<bool> flags(world.size());
  for (int r = 0; r < world.size(); ++r) flags[r] = all.data<int32_t>()[r];
  return flags;
}

CheckpointShards ShardsOf(const ParameterSet& params, Optimizer* optimizer,
                          bool primary_only) {
  CheckpointShards shards;
  const std::vector<Parameter*>& all = params.all();
  for (size_t i = 0; i < all.size(); ++i) {
    const Parameter& p = *all[i];
    if (primary_only && !p.primary) continue;
    // bfloat16 runs store their float32 master weights.
    shards.model.push_back({p.name, p.spec, p.weights()});
    if (optimizer != nullptr) {
      shards.exp_avg.push_back({p.name, p.spec, optimizer->exp_avg(i)});
      shards.exp_avg_sq.push_back({p.name, p.spec, optimizer->exp_avg_sq(i)});
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

// Runs read(i) for i in [0, n) on up to ReadThreads() threads; returns the
// first error. Several streams keep more of a file system's queue busy than
// one (a first read after a save gets about twice one stream's speed).
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

// This rank's checksum parts, computed before the writers take their turns
// (so all writers hash at once), on the read threads.
Checksums ChecksumsOf(const CheckpointShards& mine, DType model_dtype) {
  Checksums sums;
  std::vector<std::tuple<const TensorShard*, DType, TensorChecksum*>> work;
  for (const auto& [shards, out, stored] :
       {std::tuple(&mine.model, &sums.model, model_dtype),
        std::tuple(&mine.exp_avg, &sums.exp_avg, DType::kF32),
        std::tuple(&mine.exp_avg_sq, &sums.exp_avg_sq, DType::kF32)}) {
    out->resize(shards->size());
    for (size_t i = 0; i < shards->size(); ++i) {
      work.emplace_back(&(*shards)[i], stored, &(*out)[i]);
    }
  }
  const absl::Status done = ParallelReads(work.size(), [&](size_t k) {
    const auto& [shard, stored, out] = work[k];
    *out = ShardChecksum(shard->spec, shard->tensor, stored);
    return absl::OkStatus();
  });
  TRELLIS_CHECK(done.ok()) << done;
  return sums;
}

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

absl::Status SaveCheckpoint(const std::string& save_dir,
                            const TrainingState& state,
                            const ParameterSet& params, Optimizer* optimizer,
                            Communicator& world, bool writer) {
  // The model's writers write the primary parameters; their moments too,
  // unless the optimizer spreads those over its ranks (ZeRO).
  CheckpointShards mine;
  const std::vector<Parameter*>& all = params.all();
  for (size_t i = 0; i < all.size(); ++i) {
    const Parameter& p = *all[i];
    if (!p.primary) continue;
    // bfloat16 runs store their float32 master weights.
    if (writer) mine.model.push_back({p.name, p.spec, p.weights()});
    const bool moments =
        optimizer != nullptr &&
        (optimizer->SavesOwnMoments() ? optimizer->SavesMoments(i) : writer);
    if (moments) {
      mine.exp_avg.push_back({p.name, p.spec, optimizer->exp_avg(i)});
      mine.exp_avg_sq.push_back({p.name, p.spec, optimizer->exp_avg_sq(i)});
    }
  }
  if (optimizer != nullptr) mine.optimizer_step = optimizer->step();
  return SaveShards(save_dir, state, mine, world,
                    writer || mine.has_optimizer());
}

absl::Status SaveShards(const std::string& save_dir_name,
                        const TrainingState& state,
                        const CheckpointShards& mine, Communicator& world,
                        bool writer, const SaveOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path save_dir(save_dir_name);
  const std::string name = CheckpointName(state.step);
  const fs::path final_dir = save_dir / name;
  const fs::path tmp = save_dir / absl::StrCat(".", name, ".tmp");
  const bool root = world.rank() == 0;
  if (SumOverWorld(world, root && fs::exists(final_dir)) > 0) {
    if (root && options.log) {
      std::printf("checkpoint: %s already exists; not rewritten\n",
                  final_dir.c_str());
    }
    return absl::OkStatus();
  }
  TRELLIS_RETURN_IF_ERROR(
      AgreeOnStatus(world, root ? Prepare(save_dir, tmp) : absl::OkStatus()));
  // Writers define their datasets in turns: serial HDF5 allows one writer
  // per file at a time. Defining is metadata only.
  const std::vector<bool> writers = WriterFlags(world, writer);
  const Checksums sums =
      writer ? ChecksumsOf(mine, options.model_dtype) : Checksums();
  Locations where;
  bool create = true;
  for (int r = 0; r < world.size(); ++r) {
    if (!writers[r]) continue;
    absl::Status mine_status;
    if (r == world.rank()) {
      mine_status =
          DefineShards(tmp, mine, sums, options.model_dtype, create, &where);
    }
    TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(world, mine_status));
    create = false;
  }
  // Then every writer writes its bytes at once.
  int64_t bytes = 0;
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
      world, writer ? WriteShards(tmp, mine, where, options, &bytes)
                    : absl::OkStatus()));
  TRELLIS_RETURN_IF_ERROR(
      AgreeOnStatus(world, root ? Publish(save_dir, tmp, final_dir, state)
                                : absl::OkStatus()));
  const int64_t total = SumOverWorld(world, bytes);
  if (root && options.log) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    const double mb = total / 1e6;
    std::printf("checkpoint: saved %s (%.1f MB in %.2f s, %.0f MB/s)\n",
                final_dir.c_str(), mb, seconds, mb / std::max(seconds, 1e-9));
    std::fflush(stdout);
  }
  return absl::OkStatus();
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
  CheckpointShards shards = ShardsOf(params, optimizer, /*primary_only=*/false);
  TRELLIS_RETURN_IF_ERROR(LoadShards(dir, shards));
  for (Parameter* p : params.all()) RefreshFromMaster(*p);
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
