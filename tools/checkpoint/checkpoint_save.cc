// The save side of layout-free checkpoints (checkpoint.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "framework/hdf5.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/checkpoint_files.h"
#include "tools/checkpoint/checkpoint_publish.h"
#include "tools/checkpoint/model_config_json.h"
#include "tools/checkpoint/shard_io.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

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

// Defines the datasets of this rank's shards (this rank's turn) and, with
// `sums`, adds this rank's parts to their checksums (a walked save adds
// them after the bytes, AddChecksums).
absl::Status DefineShards(const fs::path& dir, const CheckpointShards& mine,
                          const Checksums* sums, DType model_dtype, bool create,
                          Locations* out) {
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File model,
                           OpenForDefining(dir / kModelFile, create));
  for (size_t i = 0; i < mine.model.size(); ++i) {
    const TensorShard& s = mine.model[i];
    TRELLIS_ASSIGN_OR_RETURN(
        TensorLocation where,
        DefineTensor(model, s.name, s.spec.logical_shape, model_dtype));
    if (sums != nullptr) {
      TRELLIS_RETURN_IF_ERROR(AddChecksum(model, where, sums->model[i]));
    }
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
       {std::tuple("exp_avg", &mine.exp_avg,
                   sums != nullptr ? &sums->exp_avg : nullptr, &out->exp_avg),
        std::tuple("exp_avg_sq", &mine.exp_avg_sq,
                   sums != nullptr ? &sums->exp_avg_sq : nullptr,
                   &out->exp_avg_sq)}) {
    for (size_t i = 0; i < shards->size(); ++i) {
      const TensorShard& s = (*shards)[i];
      TRELLIS_ASSIGN_OR_RETURN(TensorLocation where,
                               DefineTensor(opt, MomentPath(kind, s.name),
                                            s.spec.logical_shape, DType::kF32));
      if (partial != nullptr) {
        TRELLIS_RETURN_IF_ERROR(AddChecksum(opt, where, (*partial)[i]));
      }
      locations->push_back(std::move(where));
    }
  }
  return opt.Close();
}

// Adds this rank's checksum parts to the datasets it wrote (this rank's
// turn, after the bytes): a walked save hashes each group while it is
// open for the write.
absl::Status AddChecksums(const fs::path& dir, const CheckpointShards& mine,
                          const Checksums& sums, const Locations& where) {
  if (!mine.model.empty()) {
    TRELLIS_ASSIGN_OR_RETURN(hdf5::File model,
                             OpenForDefining(dir / kModelFile, false));
    for (size_t i = 0; i < mine.model.size(); ++i) {
      TRELLIS_RETURN_IF_ERROR(
          AddChecksum(model, where.model[i], sums.model[i]));
    }
    TRELLIS_RETURN_IF_ERROR(model.Close());
  }
  if (!mine.has_optimizer()) return absl::OkStatus();
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File opt,
                           OpenForDefining(dir / kOptimizerFile, false));
  for (const auto& [partial, locations] :
       {std::pair(&sums.exp_avg, &where.exp_avg),
        std::pair(&sums.exp_avg_sq, &where.exp_avg_sq)}) {
    for (size_t i = 0; i < partial->size(); ++i) {
      TRELLIS_RETURN_IF_ERROR(AddChecksum(opt, (*locations)[i], (*partial)[i]));
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

// Hashes each (shard, stored type, out) on the read threads.
void Hash(
    const std::vector<std::tuple<const TensorShard*, DType, TensorChecksum*>>&
        work) {
  const absl::Status done = ParallelReads(work.size(), [&](size_t k) {
    const auto& [shard, stored, out] = work[k];
    *out = ShardChecksum(shard->spec, shard->tensor, stored);
    return absl::OkStatus();
  });
  TRELLIS_CHECK(done.ok()) << done;
}

// Group g's shards of `mine` (model, exp_avg, exp_avg_sq), their tensors
// opened, and where they start in each list.
struct OpenedGroup {
  CheckpointShards shards;
  size_t model_begin = 0, moment_begin = 0;
};

OpenedGroup OpenGroup(const ShardWalk& walk, size_t g,
                      const CheckpointShards& mine) {
  OpenedGroup out;
  out.model_begin = g == 0 ? 0 : walk.model_ends[g - 1];
  out.moment_begin = g == 0 ? 0 : walk.moment_ends[g - 1];
  ShardWalk::Tensors tensors = walk.open(g);
  for (const auto& [from, to, begin, end, opened] :
       {std::tuple(&mine.model, &out.shards.model, out.model_begin,
                   walk.model_ends[g], &tensors.model),
        std::tuple(&mine.exp_avg, &out.shards.exp_avg, out.moment_begin,
                   walk.moment_ends[g], &tensors.exp_avg),
        std::tuple(&mine.exp_avg_sq, &out.shards.exp_avg_sq, out.moment_begin,
                   walk.moment_ends[g], &tensors.exp_avg_sq)}) {
    TRELLIS_CHECK_EQ(opened->size(), end - begin);
    to->assign(from->begin() + begin, from->begin() + end);
    for (size_t k = 0; k < to->size(); ++k) {
      (*to)[k].tensor = std::move((*opened)[k]);
    }
  }
  return out;
}

// This rank's checksum parts, computed before the writers take their turns
// (so all writers hash at once), on the read threads; for a walked save
// only sized, WriteWalked fills them.
Checksums ChecksumsOf(const CheckpointShards& mine, DType model_dtype,
                      bool writer, bool walked) {
  Checksums sums;
  std::vector<std::tuple<const TensorShard*, DType, TensorChecksum*>> work;
  for (const auto& [shards, out, stored] :
       {std::tuple(&mine.model, &sums.model, model_dtype),
        std::tuple(&mine.exp_avg, &sums.exp_avg, DType::kF32),
        std::tuple(&mine.exp_avg_sq, &sums.exp_avg_sq, DType::kF32)}) {
    out->resize(shards->size());
    if (!writer || walked) continue;
    for (size_t i = 0; i < shards->size(); ++i) {
      work.emplace_back(&(*shards)[i], stored, &(*out)[i]);
    }
  }
  Hash(work);
  return sums;
}

// The walk's writes: every rank opens and closes each group once, a writer
// hashing its shards of it into `sums` and writing them into both files
// (after a failure only walking on).
absl::Status WriteWalked(const fs::path& dir, const CheckpointShards& mine,
                         const Locations& where, const ShardWalk& walk,
                         const SaveOptions& options, int64_t total,
                         Checksums* sums, int64_t* bytes) {
  std::optional<TensorFileWriter> model, opt;
  absl::Status status;
  for (const auto& [path, file, wanted] :
       {std::tuple(dir / kModelFile, &model, !mine.model.empty()),
        std::tuple(dir / kOptimizerFile, &opt, mine.has_optimizer())}) {
    if (!wanted || !status.ok()) continue;
    absl::StatusOr<TensorFileWriter> opened =
        TensorFileWriter::Open(path.string());
    status = opened.status();
    if (opened.ok()) file->emplace(*std::move(opened));
  }
  const int64_t delay = WriteDelayMs();
  int64_t written = 0;
  std::vector<std::tuple<const TensorShard*, DType, TensorChecksum*>> work;
  for (size_t g = 0; g < walk.model_ends.size(); ++g) {
    const OpenedGroup group = OpenGroup(walk, g, mine);
    work.clear();
    for (const auto& [shards, out, begin, stored] :
         {std::tuple(&group.shards.model, &sums->model, group.model_begin,
                     options.model_dtype),
          std::tuple(&group.shards.exp_avg, &sums->exp_avg, group.moment_begin,
                     DType::kF32),
          std::tuple(&group.shards.exp_avg_sq, &sums->exp_avg_sq,
                     group.moment_begin, DType::kF32)}) {
      for (size_t k = 0; k < shards->size(); ++k) {
        work.emplace_back(&(*shards)[k], stored, &(*out)[begin + k]);
      }
    }
    if (status.ok()) Hash(work);
    for (const auto& [shards, file, locations, begin] :
         {std::tuple(&group.shards.model, &model, &where.model,
                     group.model_begin),
          std::tuple(&group.shards.exp_avg, &opt, &where.exp_avg,
                     group.moment_begin),
          std::tuple(&group.shards.exp_avg_sq, &opt, &where.exp_avg_sq,
                     group.moment_begin)}) {
      for (size_t k = 0; k < shards->size() && status.ok(); ++k) {
        if (delay > 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(delay));
        }
        const TensorShard& shard = (*shards)[k];
        status = (*file)->WriteShard((*locations)[begin + k], shard.spec,
                                     shard.tensor);
        ++written;
        if (status.ok() && options.progress) options.progress(written, total);
      }
    }
    walk.close(g);
  }
  for (std::optional<TensorFileWriter>* file : {&model, &opt}) {
    if (!file->has_value()) continue;
    *bytes += (*file)->bytes_written();
    const absl::Status closed = (*file)->Close();
    if (status.ok()) status = closed;
  }
  return status;
}

// Writes this rank's shards' bytes into the defined datasets and syncs.
absl::Status WriteShards(const fs::path& dir, const CheckpointShards& mine,
                         const Locations& where, const SaveOptions& options,
                         Checksums* sums, int64_t* bytes) {
  const int64_t total =
      mine.model.size() + mine.exp_avg.size() + mine.exp_avg_sq.size();
  if (options.walk != nullptr) {
    return WriteWalked(dir, mine, where, *options.walk, options, total, sums,
                       bytes);
  }
  int64_t written = 0;
  TRELLIS_RETURN_IF_ERROR(WriteFile(dir / kModelFile, {&mine.model},
                                    {&where.model}, options, &written, total,
                                    bytes));
  if (!mine.has_optimizer()) return absl::OkStatus();
  return WriteFile(dir / kOptimizerFile, {&mine.exp_avg, &mine.exp_avg_sq},
                   {&where.exp_avg, &where.exp_avg_sq}, options, &written,
                   total, bytes);
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

}  // namespace

namespace {

// Whether this rank saves parameter i's moments.
bool SavesMomentsOf(const Optimizer* optimizer, size_t i, bool writer) {
  return optimizer != nullptr &&
         (optimizer->SavesOwnMoments() ? optimizer->SavesMoments(i) : writer);
}

// SaveCheckpoint walking `groups`: the shards listed group by group, their
// tensors taken while the group is open.
absl::Status SaveByGroups(const std::string& save_dir,
                          const TrainingState& state,
                          const ParameterSet& params, Optimizer* optimizer,
                          Communicator& world, bool writer, bool expert_writer,
                          const WeightGroups& groups) {
  std::unordered_map<const Parameter*, size_t> index;
  for (size_t i = 0; i < params.all().size(); ++i) index[params.all()[i]] = i;
  CheckpointShards mine;
  if (optimizer != nullptr) mine.optimizer_step = optimizer->step();
  // Per group, the parameters whose weights and moments this rank writes.
  std::vector<std::vector<const Parameter*>> weights(groups.groups.size());
  std::vector<std::vector<size_t>> moments(groups.groups.size());
  ShardWalk walk;
  for (size_t g = 0; g < groups.groups.size(); ++g) {
    for (const Parameter* p : groups.groups[g]) {
      if (!p->primary) continue;
      const bool writes = writer || (p->expert && expert_writer);
      if (writes) {
        mine.model.push_back({p->name, p->spec, Tensor()});
        weights[g].push_back(p);
      }
      const size_t i = index.at(p);
      if (!SavesMomentsOf(optimizer, i, writes)) continue;
      mine.exp_avg.push_back({p->name, p->spec, Tensor()});
      mine.exp_avg_sq.push_back({p->name, p->spec, Tensor()});
      moments[g].push_back(i);
    }
    walk.model_ends.push_back(mine.model.size());
    walk.moment_ends.push_back(mine.exp_avg.size());
  }
  walk.open = [&](size_t g) {
    groups.open(groups.groups[g]);
    ShardWalk::Tensors tensors;
    for (const Parameter* p : weights[g]) tensors.model.push_back(p->weights());
    for (size_t i : moments[g]) {
      tensors.exp_avg.push_back(optimizer->exp_avg(i));
      tensors.exp_avg_sq.push_back(optimizer->exp_avg_sq(i));
    }
    return tensors;
  };
  walk.close = [&](size_t g) { groups.close(groups.groups[g]); };
  SaveOptions options;
  options.walk = &walk;
  return SaveShards(save_dir, state, mine, world,
                    !mine.model.empty() || writer || mine.has_optimizer(),
                    options);
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& save_dir,
                            const TrainingState& state,
                            const ParameterSet& params, Optimizer* optimizer,
                            Communicator& world, bool writer,
                            const WeightGroups* groups, bool expert_writer) {
  if (groups != nullptr) {
    return SaveByGroups(save_dir, state, params, optimizer, world, writer,
                        expert_writer, *groups);
  }
  // The model's writers write the primary parameters; their moments too,
  // unless the optimizer spreads those over its ranks (ZeRO).
  CheckpointShards mine;
  const std::vector<Parameter*>& all = params.all();
  for (size_t i = 0; i < all.size(); ++i) {
    const Parameter& p = *all[i];
    if (!p.primary) continue;
    const bool writes = writer || (p.expert && expert_writer);
    // bfloat16 runs store their float32 master weights.
    if (writes) mine.model.push_back({p.name, p.spec, p.weights()});
    if (SavesMomentsOf(optimizer, i, writes)) {
      mine.exp_avg.push_back({p.name, p.spec, optimizer->exp_avg(i)});
      mine.exp_avg_sq.push_back({p.name, p.spec, optimizer->exp_avg_sq(i)});
    }
  }
  if (optimizer != nullptr) mine.optimizer_step = optimizer->step();
  return SaveShards(save_dir, state, mine, world,
                    !mine.model.empty() || writer || mine.has_optimizer());
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
  // A checkpoint of this step already there is kept, unless it is this
  // step at an earlier data position (steps skipped since, StepGuard):
  // then the new one takes its place.
  const bool supersede =
      SumOverWorld(world, root && SupersedesCheckpoint(state, final_dir)) > 0;
  if (!supersede && SumOverWorld(world, root && fs::exists(final_dir)) > 0) {
    if (root && options.log) {
      std::printf("checkpoint: %s already exists; not rewritten\n",
                  final_dir.c_str());
    }
    return absl::OkStatus();
  }
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
      world, root ? PrepareCheckpoint(save_dir, tmp) : absl::OkStatus()));
  // Writers define their datasets in turns: serial HDF5 allows one writer
  // per file at a time. Defining is metadata only.
  const std::vector<bool> writers = WriterFlags(world, writer);
  const bool walked = options.walk != nullptr;
  Checksums sums = ChecksumsOf(mine, options.model_dtype, writer, walked);
  Locations where;
  bool create = true;
  for (int r = 0; r < world.size(); ++r) {
    if (!writers[r]) continue;
    absl::Status mine_status;
    if (r == world.rank()) {
      mine_status = DefineShards(tmp, mine, walked ? nullptr : &sums,
                                 options.model_dtype, create, &where);
    }
    TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(world, mine_status));
    create = false;
  }
  // Then every writer writes its bytes at once.
  int64_t bytes = 0;
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
      world, writer || walked
                 ? WriteShards(tmp, mine, where, options, &sums, &bytes)
                 : absl::OkStatus()));
  // A walked save hashed each group as it wrote it; the checksums go in
  // afterwards, again in turns (metadata only).
  for (int r = 0; walked && r < world.size(); ++r) {
    if (!writers[r]) continue;
    TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
        world, r == world.rank() ? AddChecksums(tmp, mine, sums, where)
                                 : absl::OkStatus()));
  }
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(
      world, root
                 ? PublishCheckpoint(save_dir, tmp, final_dir, state, supersede)
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

}  // namespace trellis
