#include "tools/convert/shard_export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "framework/hdf5.h"
#include "tools/checkpoint/model_config_json.h"
#include "tools/checkpoint/shard_io.h"
#include "tools/options/options.h"
#include "transformer/model_family.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

absl::Status CheckLayout(const ModelConfig& config, const ShardExport& e) {
  if (e.tp < 1 || e.pp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp=", e.tp, " and --pp=", e.pp, " must be ≥ 1"));
  }
  TRELLIS_RETURN_IF_ERROR(FamilyOf(config).CheckTensorParallel(config, e.tp));
  const std::vector<int64_t> layers =
      StageLayers(config.n_layer, e.pp, e.pp_layers);
  const int64_t sum = std::accumulate(layers.begin(), layers.end(), int64_t{0});
  if (static_cast<int64_t>(layers.size()) != e.pp || sum != config.n_layer ||
      *std::min_element(layers.begin(), layers.end()) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot cut ", config.n_layer, " layers into ", e.pp,
        " stages of at least one layer each; check --pp and --pp_layers"));
  }
  if (!IsStorableDType(e.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shards store float32, float16 or bfloat16, not ", DTypeName(e.dtype)));
  }
  return absl::OkStatus();
}

// Fills a rank's parameters from the whole tensors (padding zero).
void Fill(const WholeModel& model, ParameterSet& params) {
  for (Parameter* p : params.all()) {
    const Tensor* whole = model.Find(p->name);
    TRELLIS_CHECK(whole != nullptr) << p->name;
    const float* from = whole->data<float>();
    float* to = p->value.data<float>();
    p->spec.ForEachElement([&](int64_t local, int64_t logical) {
      to[local] = logical < 0 ? 0.0f : from[logical];
    });
  }
}

absl::Status DescribeDataset(hdf5::File& file, const Parameter& p) {
  TRELLIS_ASSIGN_OR_RETURN(hdf5::Dataset d, file.OpenDataset(p.name));
  const ShardSpec& s = p.spec;
  TRELLIS_RETURN_IF_ERROR(d.WriteStringAttribute(
      "logical_shape", nlohmann::json(s.logical_shape).dump()));
  TRELLIS_RETURN_IF_ERROR(d.WriteInt64Attribute("split_dim", s.split_dim));
  TRELLIS_RETURN_IF_ERROR(d.WriteInt64Attribute("groups", s.groups));
  TRELLIS_RETURN_IF_ERROR(d.WriteInt64Attribute("parts", s.parts));
  TRELLIS_RETURN_IF_ERROR(d.WriteInt64Attribute("index", s.index));
  TRELLIS_RETURN_IF_ERROR(d.WriteStringAttribute(
      "group_sizes", nlohmann::json(s.group_sizes).dump()));
  TRELLIS_RETURN_IF_ERROR(d.WriteStringAttribute(
      "group_parts", nlohmann::json(s.group_parts).dump()));
  return d.WriteInt64Attribute("padded_size", s.padded_size);
}

// Writes one rank's file: datasets and attributes through HDF5, then the
// bytes; under a temporary name, renamed when complete.
absl::Status WriteShardFile(const fs::path& path, const ParameterSet& params,
                            const ModelConfig& config, const ShardExport& e,
                            int64_t t, int64_t p, const ChunkPlan& plan,
                            int64_t* bytes) {
  const std::string tmp = path.string() + ".tmp";
  std::vector<TensorLocation> where;
  {
    TRELLIS_ASSIGN_OR_RETURN(hdf5::File file, hdf5::File::Create(tmp));
    const std::pair<const char*, int64_t> attrs[] = {
        {"tp", e.tp},
        {"pp", e.pp},
        {"tp_rank", t},
        {"pp_rank", p},
        {"first_layer", plan.first_layer},
        {"num_layers", plan.num_layers}};
    for (const auto& [name, value] : attrs) {
      TRELLIS_RETURN_IF_ERROR(file.WriteInt64Attribute(name, value));
    }
    TRELLIS_RETURN_IF_ERROR(
        file.WriteStringAttribute("model", ModelConfigToJson(config).dump()));
    for (const Parameter* param : params.all()) {
      TRELLIS_ASSIGN_OR_RETURN(
          TensorLocation loc,
          DefineTensor(file, param->name, param->value.shape(), e.dtype));
      where.push_back(std::move(loc));
      TRELLIS_RETURN_IF_ERROR(DescribeDataset(file, *param));
    }
    TRELLIS_RETURN_IF_ERROR(file.Close());
  }
  TRELLIS_ASSIGN_OR_RETURN(TensorFileWriter writer,
                           TensorFileWriter::Open(tmp));
  for (size_t i = 0; i < params.all().size(); ++i) {
    const Tensor& value = params.all()[i]->value;
    TRELLIS_RETURN_IF_ERROR(writer.WriteShard(
        where[i], ShardSpec::Replicated(value.shape()), value));
  }
  *bytes += writer.bytes_written();
  TRELLIS_RETURN_IF_ERROR(writer.Close());
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("rename ", tmp, " to ",
                                            path.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ExportShards(const WholeModel& model, const ShardExport& e,
                          const ProgressFn& progress, int64_t* tensors,
                          int64_t* bytes) {
  const ModelConfig& config = model.config;
  TRELLIS_RETURN_IF_ERROR(CheckLayout(config, e));
  std::error_code ec;
  fs::create_directories(e.dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", e.dir, ": ", ec.message()));
  }
  const std::vector<int64_t> layers =
      StageLayers(config.n_layer, e.pp, e.pp_layers);
  nlohmann::json index = {{"tp", e.tp},
                          {"pp", e.pp},
                          {"dtype", DTypeName(e.dtype)},
                          {"model", ModelConfigToJson(config)},
                          {"files", nlohmann::json::array()}};
  int64_t first = 0;
  for (int64_t p = 0; p < e.pp; ++p) {
    const ChunkPlan plan{first, layers[p], p == 0, p == e.pp - 1};
    first += layers[p];
    for (int64_t t = 0; t < e.tp; ++t) {
      ParameterSet params;
      // Fill writes every element: nothing to initialize first.
      AddModelParameters(config, plan, TpPlace{e.tp, t}, /*seed=*/0,
                         Device::Cpu(), DType::kF32, params,
                         ParameterFill::kZero);
      Fill(model, params);
      const std::string name = absl::StrCat("shard_tp", t, "_pp", p, ".h5");
      TRELLIS_RETURN_IF_ERROR(WriteShardFile(fs::path(e.dir) / name, params,
                                             config, e, t, p, plan, bytes));
      *tensors += static_cast<int64_t>(params.all().size());
      index["files"].push_back({{"file", name},
                                {"tp_rank", t},
                                {"pp_rank", p},
                                {"first_layer", plan.first_layer},
                                {"num_layers", plan.num_layers}});
      if (progress) progress(p * e.tp + t + 1, e.tp * e.pp, *bytes);
    }
  }
  std::ofstream out(fs::path(e.dir) / "shards.json", std::ios::trunc);
  out << index.dump(2) << "\n";
  if (!out.flush()) {
    return absl::InternalError(
        absl::StrCat(e.dir, "/shards.json: write failed"));
  }
  return absl::OkStatus();
}

}  // namespace trellis
