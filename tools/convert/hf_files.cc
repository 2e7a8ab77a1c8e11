#include "tools/convert/hf_files.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "framework/atomic_file.h"
#include "framework/status.h"
#include "framework/text_file.h"
#include "transformer/moe/moe_family.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

absl::StatusOr<nlohmann::json> ReadJsonObject(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat(
        path,
        " not found; a Hugging Face model directory holds config.json "
        "and model.safetensors or model.safetensors.index.json"));
  }
  TRELLIS_RETURN_IF_ERROR(text.status());
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a JSON object"));
  }
  return j;
}

bool IsWeightDType(const SafetensorsEntry& e) {
  return e.trellis_dtype == DType::kF32 || e.trellis_dtype == DType::kF16 ||
         e.trellis_dtype == DType::kBF16;
}

absl::Status RemoveIfExists(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot remove stale ",
                                            path.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfArchitecture> ReadHfArchitecture(const std::string& path) {
  TRELLIS_ASSIGN_OR_RETURN(const nlohmann::json j, ReadJsonObject(path));
  const HfArchitecture gpt2{ModelFamilyKind::kGpt2, "gpt2", "GPT2LMHeadModel"};
  if (!j.contains("model_type")) return gpt2;
  const nlohmann::json& type = j.at("model_type");
  if (type == "gpt2") return gpt2;
  static const HfArchitecture kKnown[] = {
      {ModelFamilyKind::kLlama, "llama", "LlamaForCausalLM"},
      {ModelFamilyKind::kLlama, "qwen3", "Qwen3ForCausalLM"},
      {moe::kKind, "mixtral", "MixtralForCausalLM"},
      {moe::kKind, "qwen3_moe", "Qwen3MoeForCausalLM"}};
  for (const HfArchitecture& k : kKnown) {
    if (type != k.model_type) continue;
    if (j.contains("architectures")) {
      const nlohmann::json& a = j.at("architectures");
      if (!a.is_array() || a.size() != 1 || a[0] != k.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": architectures ", a.dump(),
                         " is not supported; trellis-convert reads [\"", k.name,
                         "\"] for model_type ", type.dump()));
      }
    }
    return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": model_type ", type.dump(),
                   " is not supported; trellis-convert reads gpt2, llama, "
                   "qwen3, mixtral and qwen3_moe"));
}

absl::StatusOr<ModelFamilyKind> HfModelFamily(const std::string& path) {
  TRELLIS_ASSIGN_OR_RETURN(const HfArchitecture a, ReadHfArchitecture(path));
  return a.family;
}

absl::StatusOr<HfSafetensors> HfSafetensors::Open(const std::string& input) {
  HfSafetensors h;
  fs::path p(input);
  if (fs::is_regular_file(p) && p.filename() != kHfIndexFile) {
    h.dir_ = p.parent_path().string();
    h.path_ = p.string();
    TRELLIS_ASSIGN_OR_RETURN(SafetensorsReader r,
                             SafetensorsReader::Open(h.path_));
    h.files_.push_back(std::move(r));
  } else {
    const fs::path dir = fs::is_regular_file(p) ? p.parent_path() : p;
    h.dir_ = dir.string();
    if (!fs::is_regular_file(p) && !fs::exists(dir / kHfSingleFile) &&
        !fs::exists(dir / kHfIndexFile)) {
      return absl::NotFoundError(absl::StrCat(
          h.dir_, " holds neither ", kHfSingleFile, " nor ", kHfIndexFile));
    }
    if (fs::is_regular_file(p) || !fs::exists(dir / kHfSingleFile)) {
      h.path_ = (dir / kHfIndexFile).string();
      TRELLIS_RETURN_IF_ERROR(h.OpenIndex(h.path_));
      return h;
    }
    h.path_ = (dir / kHfSingleFile).string();
    TRELLIS_ASSIGN_OR_RETURN(SafetensorsReader r,
                             SafetensorsReader::Open(h.path_));
    h.files_.push_back(std::move(r));
  }
  for (const SafetensorsEntry& e : h.files_[0].tensors()) h.where_[e.name] = 0;
  return h;
}

absl::Status HfSafetensors::OpenIndex(const std::string& index) {
  TRELLIS_ASSIGN_OR_RETURN(const nlohmann::json j, ReadJsonObject(index));
  if (!j.contains("weight_map") || !j.at("weight_map").is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index, ": no weight_map object"));
  }
  std::map<std::string, size_t> file_index;
  for (const auto& [name, file] : j.at("weight_map").items()) {
    if (!file.is_string() || fs::path(file.get<std::string>()).filename() !=
                                 file.get<std::string>()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": weight_map entry ", name, " is ", file.dump(),
                       "; it must name a file of the same directory"));
    }
    const std::string f = file.get<std::string>();
    if (!file_index.count(f)) {
      TRELLIS_ASSIGN_OR_RETURN(
          SafetensorsReader r,
          SafetensorsReader::Open((fs::path(dir_) / f).string()));
      file_index[f] = files_.size();
      files_.push_back(std::move(r));
    }
    const size_t k = file_index[f];
    if (files_[k].Find(name) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": weight_map puts tensor ", name, " in ", f,
                       ", which does not hold it"));
    }
    where_[name] = k;
  }
  return absl::OkStatus();
}

std::vector<std::string> HfSafetensors::names() const {
  std::vector<std::string> out;
  for (size_t k = 0; k < files_.size(); ++k) {
    for (const SafetensorsEntry& e : files_[k].tensors()) {
      const auto it = where_.find(e.name);
      if (it != where_.end() && it->second == k) out.push_back(e.name);
    }
  }
  return out;
}

const SafetensorsEntry* HfSafetensors::Find(const std::string& name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second].Find(name);
}

absl::StatusOr<Tensor> HfSafetensors::Read(const std::string& name,
                                           const Shape& shape) const {
  const SafetensorsEntry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path_, " has no tensor ", name,
                     ", which the model in config.json needs"));
  }
  if (!IsWeightDType(*e)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor ", name, " is ", e->dtype,
                     "; weights must be F32, F16 or BF16"));
  }
  if (e->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": tensor ", name, " has shape ", ShapeString(e->shape),
        " but the model in config.json needs ", ShapeString(shape)));
  }
  return files_[where_.at(name)].Read(name);
}

absl::StatusOr<int64_t> WriteHfSafetensors(
    const std::string& dir, const std::vector<HfOutputTensor>& tensors,
    int64_t max_shard_size,
    const std::function<void(int64_t, int64_t, int64_t)>& progress) {
  // Shards: consecutive tensors while they fit (save_pretrained's rule).
  std::vector<std::vector<size_t>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t n = tensors[i].nbytes();
    if (!shards.back().empty() && in_shard + n > max_shard_size) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += n;
    total += n;
  }
  const bool sharded = shards.size() > 1;
  const fs::path d(dir);
  TRELLIS_RETURN_IF_ERROR(
      RemoveIfExists(d / (sharded ? kHfSingleFile : kHfIndexFile)));
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  int64_t done = 0, bytes = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file =
        sharded ? absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1,
                                  shards.size())
                : std::string(kHfSingleFile);
    SafetensorsWriter writer;
    writer.SetMetadata("format", "pt");
    for (size_t i : shards[s]) {
      const HfOutputTensor& t = tensors[i];
      Tensor value = t.make();
      TRELLIS_CHECK(value.shape() == t.shape && value.dtype() == t.dtype)
          << t.name;
      TRELLIS_RETURN_IF_ERROR(writer.Add(t.name, value));
      weight_map[t.name] = file;
    }
    TRELLIS_RETURN_IF_ERROR(writer.Write((d / file).string()));
    for (size_t i : shards[s]) {
      bytes += tensors[i].nbytes();
      if (progress) progress(++done, tensors.size(), bytes);
    }
  }
  if (sharded) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                          {"weight_map", weight_map}};
    TRELLIS_RETURN_IF_ERROR(WriteTextFileAtomically((d / kHfIndexFile).string(),
                                                    index.dump(2) + "\n"));
  }
  return bytes;
}

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  static constexpr std::pair<const char*, int64_t> kUnits[] = {
      {"GIB", int64_t{1} << 30},
      {"MIB", int64_t{1} << 20},
      {"KIB", int64_t{1} << 10},
      {"GB", 1'000'000'000},
      {"MB", 1'000'000},
      {"KB", 1'000},
      {"B", 1}};
  const std::string upper = absl::AsciiStrToUpper(text);
  int64_t scale = 1;
  std::string digits = upper;
  for (const auto& [unit, factor] : kUnits) {
    const std::string u(unit);
    if (upper.size() > u.size() &&
        upper.compare(upper.size() - u.size(), u.size(), u) == 0) {
      digits = upper.substr(0, upper.size() - u.size());
      scale = factor;
      break;
    }
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(digits, &n) || n <= 0 || n > INT64_MAX / scale) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text,
        "' is not a positive byte count such as 5GB, 500MB, 2GiB or 1000000"));
  }
  return n * scale;
}

HfSpecialTokens HfSpecialTokensOf(const std::string& spec,
                                  const TokenizerIdentity& identity,
                                  ModelFamilyKind family, int64_t vocab_size) {
  HfSpecialTokens t;
  if (!spec.empty()) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        MakeTokenizer(spec, kDefaultGpt2AssetsDir);
    if (tokenizer.ok() &&
        (identity.kind.empty() ||
         IdentityMismatch(identity, TokenizerIdentity::Of(**tokenizer))
             .empty())) {
      t.eos = (*tokenizer)->eot_token();
      if (const std::optional<uint32_t> bos = (*tokenizer)->bos_token()) {
        t.bos = *bos;
      }
    }
  }
  if (!t.eos && !identity.kind.empty()) t.eos = identity.eot_token;
  // GPT-2's end-of-text is fixed by its vocabulary (data/tokenizer.h),
  // whether or not encoder.json is at hand.
  if (!t.eos && spec == "gpt2") t.eos = 50256;
  if (!t.bos && family == ModelFamilyKind::kGpt2) t.bos = t.eos;
  auto in_vocab = [vocab_size](std::optional<int64_t>& id) {
    if (id && (*id < 0 || *id >= vocab_size)) id.reset();
  };
  in_vocab(t.bos);
  in_vocab(t.eos);
  return t;
}

}  // namespace trellis
