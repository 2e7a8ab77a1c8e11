#include "tools/trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "framework/hdf5.h"
#include "tools/trainer/shard_io.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

constexpr char kModelFile[] = "model.h5";
constexpr char kOptimizerFile[] = "optimizer.h5";
constexpr char kStateFile[] = "state.json";
constexpr char kLatest[] = "latest";

absl::Status SyncPath(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path.string()));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0)
    return absl::InternalError(absl::StrCat("fsync ", path.string()));
  return absl::OkStatus();
}

absl::StatusOr<hdf5::File> OpenOrCreate(const fs::path& path, bool create) {
  return create ? hdf5::File::Create(path.string())
                : hdf5::File::Open(path.string(), hdf5::OpenMode::kReadWrite);
}

// Writes this rank's primary shards (and moments) into `dir`.
absl::Status WriteRankShards(const fs::path& dir, const ParameterSet& params,
                             Optimizer* optimizer, bool create,
                             int64_t* bytes) {
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File model,
                           OpenOrCreate(dir / kModelFile, create));
  const std::vector<Parameter*>& all = params.all();
  for (const Parameter* p : all) {
    if (!p->primary) continue;
    TRELLIS_RETURN_IF_ERROR(WriteShard(model, p->name, p->spec, p->value));
    *bytes += p->numel() * 4;
  }
  TRELLIS_RETURN_IF_ERROR(model.Close());
  if (optimizer == nullptr) return absl::OkStatus();
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File opt,
                           OpenOrCreate(dir / kOptimizerFile, create));
  if (create) {
    TRELLIS_RETURN_IF_ERROR(opt.CreateGroup("exp_avg").status());
    TRELLIS_RETURN_IF_ERROR(opt.CreateGroup("exp_avg_sq").status());
    TRELLIS_RETURN_IF_ERROR(opt.WriteInt64Attribute("step", optimizer->step()));
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i]->primary) continue;
    const std::string& name = all[i]->name;
    TRELLIS_RETURN_IF_ERROR(WriteShard(opt, "exp_avg/" + name, all[i]->spec,
                                       optimizer->exp_avg(i)));
    TRELLIS_RETURN_IF_ERROR(WriteShard(opt, "exp_avg_sq/" + name, all[i]->spec,
                                       optimizer->exp_avg_sq(i)));
    *bytes += all[i]->numel() * 8;
  }
  return opt.Close();
}

nlohmann::json StateToJson(const TrainingState& s) {
  return {{"step", s.step},
          {"samples_consumed", s.samples_consumed},
          {"seed", s.seed},
          {"model",
           {{"n_layer", s.model.n_layer},
            {"n_head", s.model.n_head},
            {"d_model", s.model.d_model},
            {"seq_len", s.model.seq_len},
            {"vocab_size", s.model.vocab_size}}},
          {"tokenizer", s.tokenizer},
          {"layout", {{"dp", s.dp}, {"tp", s.tp}, {"pp", s.pp}}},
          {"flags", s.flags},
          {"format", "trellis-checkpoint-1"}};
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

}  // namespace

std::string CheckpointName(int64_t step) {
  return absl::StrFormat("step_%08d", step);
}

absl::Status SaveCheckpoint(const std::string& save_dir_name,
                            const TrainingState& state,
                            const ParameterSet& params, Optimizer* optimizer,
                            Communicator& world, bool writer) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path save_dir(save_dir_name);
  const std::string name = CheckpointName(state.step);
  const fs::path final_dir = save_dir / name;
  const fs::path tmp = save_dir / absl::StrCat(".", name, ".tmp");
  if (fs::exists(final_dir)) {
    if (world.rank() == 0) {
      std::printf("checkpoint: %s already exists; not rewritten\n",
                  final_dir.c_str());
    }
    return absl::OkStatus();
  }
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
      world, world.rank() == 0 ? Prepare(save_dir, tmp) : absl::OkStatus()));
  int64_t bytes = 0;
  // Writers take turns: serial HDF5 allows one writer per file at a time.
  for (int r = 0; r < world.size(); ++r) {
    absl::Status mine;
    if (r == world.rank() && writer) {
      mine = WriteRankShards(tmp, params, optimizer, /*create=*/r == 0, &bytes);
    }
    TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(world, mine));
  }
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
      world, world.rank() == 0 ? Publish(save_dir, tmp, final_dir, state)
                               : absl::OkStatus()));
  Tensor total = Tensor::Empty({1}, DType::kI64);
  total.data<int64_t>()[0] = bytes;
  world.AllReduce(total, ReduceOp::kSum);
  if (world.rank() == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    const double mb = total.data<int64_t>()[0] / 1e6;
    std::printf("checkpoint: saved %s (%.1f MB in %.2f s, %.0f MB/s)\n",
                final_dir.c_str(), mb, seconds, mb / std::max(seconds, 1e-9));
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveResume(const std::string& resume,
                                          const std::string& save_dir) {
  if (resume.empty()) return std::string();
  const bool automatic = resume == "auto";
  const fs::path base = automatic ? fs::path(save_dir) : fs::path(resume);
  if (automatic && save_dir.empty()) {
    return absl::InvalidArgumentError("--resume=auto needs --save_dir");
  }
  if (fs::exists(base / kStateFile)) return base.string();
  std::ifstream latest(base / kLatest);
  std::string name;
  if (latest >> name) {
    const fs::path dir = base / name;
    if (fs::exists(dir / kStateFile)) return dir.string();
    return absl::DataLossError(absl::StrCat(
        (base / kLatest).string(), " names ", name,
        ", which is missing or incomplete; point --resume at a step_* "
        "directory"));
  }
  if (automatic) return std::string();
  return absl::NotFoundError(absl::StrCat(
      "--resume=", resume, " is neither a checkpoint directory (with ",
      kStateFile, ") nor a save directory with a `latest` file"));
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
    const nlohmann::json& m = j.at("model");
    s.model.n_layer = m.at("n_layer").get<int64_t>();
    s.model.n_head = m.at("n_head").get<int64_t>();
    s.model.d_model = m.at("d_model").get<int64_t>();
    s.model.seq_len = m.at("seq_len").get<int64_t>();
    s.model.vocab_size = m.at("vocab_size").get<int64_t>();
    s.tokenizer = j.value("tokenizer", "");
    const nlohmann::json& layout = j.at("layout");
    s.dp = layout.at("dp").get<int64_t>();
    s.tp = layout.at("tp").get<int64_t>();
    s.pp = layout.at("pp").get<int64_t>();
    s.flags = j.value("flags", "");
    return s;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(
        absl::StrCat(path.string(), " is missing a field: ", e.what()));
  }
}

absl::Status LoadCheckpoint(const std::string& dir, ParameterSet& params,
                            Optimizer* optimizer) {
  const fs::path base(dir);
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File model,
                           hdf5::File::Open((base / kModelFile).string()));
  const std::vector<Parameter*>& all = params.all();
  for (Parameter* p : all) {
    if (!model.Exists(p->name)) {
      return absl::NotFoundError(
          absl::StrCat((base / kModelFile).string(), " has no tensor ", p->name,
                       "; the checkpoint is of a different model"));
    }
    TRELLIS_RETURN_IF_ERROR(ReadShard(model, p->name, p->spec, p->value));
  }
  if (optimizer == nullptr) return absl::OkStatus();
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File opt,
                           hdf5::File::Open((base / kOptimizerFile).string()));
  for (size_t i = 0; i < all.size(); ++i) {
    TRELLIS_RETURN_IF_ERROR(ReadShard(opt, "exp_avg/" + all[i]->name,
                                      all[i]->spec, optimizer->exp_avg(i)));
    TRELLIS_RETURN_IF_ERROR(ReadShard(opt, "exp_avg_sq/" + all[i]->name,
                                      all[i]->spec, optimizer->exp_avg_sq(i)));
  }
  TRELLIS_ASSIGN_OR_RETURN(int64_t step, opt.ReadInt64Attribute("step"));
  optimizer->set_step(step);
  return absl::OkStatus();
}

absl::Status PruneCheckpoints(const std::string& save_dir, int64_t keep) {
  TRELLIS_CHECK_GE(keep, 1);
  std::vector<fs::path> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(save_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("step_", 0) == 0) {
      steps.push_back(entry.path());
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("list ", save_dir));
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    fs::remove_all(steps[i], ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("remove ", steps[i].string(), ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace trellis
