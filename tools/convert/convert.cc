#include "tools/convert/convert.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/tokenizer.h"
#include "framework/atomic_file.h"
#include "framework/float16.h"
#include "framework/progress_bar.h"
#include "parallel/communicator.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/shard_io.h"
#include "tools/convert/gpt2_tensors.h"
#include "tools/convert/hf_files.h"
#include "tools/convert/llama_tensors.h"
#include "tools/convert/llmc.h"
#include "tools/convert/moe_tensors.h"
#include "tools/convert/qwen3_tensors.h"
#include "tools/convert/shard_export.h"
#include "transformer/model_family.h"
#include "transformer/moe/moe_family.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// Progress in tensors and megabytes, drawn by a ProgressBar.
class TensorProgress {
 public:
  TensorProgress(std::string label, bool enabled)
      : bar_(std::move(label), "tensors", enabled) {}
  void Update(int64_t done, int64_t total, int64_t bytes) {
    bar_.Update(done, total, absl::StrFormat("%.1f MB", bytes / 1e6));
  }
  ProgressFn Fn() {
    return [this](int64_t d, int64_t t, int64_t b) { Update(d, t, b); };
  }

 private:
  ProgressBar bar_;
};

// What was read: the model and, from a trellis input, its state and moments.
struct Input {
  WholeModel model;
  TrainingState state;
  bool is_trellis = false;
  std::string dir;                          // A trellis checkpoint's directory.
  std::vector<Tensor> exp_avg, exp_avg_sq;  // Model order; empty: none.
  int64_t optimizer_step = 0;
};

// `path` made absolute, with "." and ".." resolved (through symbolic links
// where they exist) and no trailing separator.
fs::path Resolved(const std::string& path) {
  std::error_code error;
  fs::path p = fs::weakly_canonical(fs::absolute(path, error), error);
  if (error) p = fs::absolute(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p;
}

// The layers the weights hold: one more than the largest i of a tensor
// named "...h.<i>." (GPT-2) or "...layers.<i>." (Llama), 0 when none.
int64_t LayersInWeights(const HfSafetensors& files) {
  int64_t layers = 0;
  for (const std::string& name : files.names()) {
    for (const char* key : {"h.", "layers."}) {
      size_t at = name.find(key);
      while (at != std::string::npos && at != 0 && name[at - 1] != '.') {
        at = name.find(key, at + 1);
      }
      if (at == std::string::npos) continue;
      const size_t digits = at + std::string(key).size();
      size_t end = digits;
      while (end < name.size() &&
             std::isdigit(static_cast<unsigned char>(name[end]))) {
        ++end;
      }
      if (end == digits || end - digits > 9 || end >= name.size() ||
          name[end] != '.') {
        continue;
      }
      layers = std::max<int64_t>(
          layers, std::stoll(name.substr(digits, end - digits)) + 1);
    }
  }
  return layers;
}

// A config.json that names more layers than the weights hold is refused
// before anything is laid out for them (n_layer 10^9 grew memory without
// bound).
absl::Status CheckLayers(const HfSafetensors& files, const ModelConfig& c,
                         const std::string& config_path) {
  const int64_t held = LayersInWeights(files);
  if (c.n_layer <= held) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(config_path, " says the model has ", c.n_layer,
                   " layers, but ", files.path(), " holds weights of ", held,
                   "; the config and the weights must come from one model"));
}

absl::StatusOr<Input> ReadHf(const ConvertOptions& o, TensorProgress& bar) {
  TRELLIS_ASSIGN_OR_RETURN(HfSafetensors files, HfSafetensors::Open(o.input));
  const std::string config_path =
      (fs::path(files.dir()) / "config.json").string();
  TRELLIS_ASSIGN_OR_RETURN(const HfArchitecture arch,
                           ReadHfArchitecture(config_path));
  TRELLIS_ASSIGN_OR_RETURN(ModelConfig config, ReadHfModelConfig(config_path));
  TRELLIS_RETURN_IF_ERROR(CheckLayers(files, config, config_path));
  Input in;
  if (arch.family == ModelFamilyKind::kGpt2) {
    TRELLIS_ASSIGN_OR_RETURN(in.model, ReadHfModel(files, config, bar.Fn()));
    return in;
  }
  // Llama's blocks: the family's own names, or Mixtral's.
  const std::vector<HfTensorMapping> mappings =
      arch.model_type == "mixtral" ? MixtralHfTensors(config)
                                   : FamilyOf(config).HfTensors(config);
  TRELLIS_ASSIGN_OR_RETURN(
      in.model,
      ReadHfLlamaBlocksModel(files, config, mappings, arch.name, bar.Fn()));
  return in;
}

absl::StatusOr<Input> ReadLlmc(const ConvertOptions& o, TensorProgress& bar) {
  TRELLIS_ASSIGN_OR_RETURN(LlmcReader reader, LlmcReader::Open(o.input));
  Input in;
  TRELLIS_ASSIGN_OR_RETURN(in.model, ReadLlmcModel(reader, bar.Fn()));
  return in;
}

absl::StatusOr<Input> ReadTrellis(const ConvertOptions& o, bool moments,
                                  TensorProgress& bar) {
  TRELLIS_ASSIGN_OR_RETURN(std::string dir,
                           ResolveResume(o.input, "", "--input"));
  Input in;
  in.is_trellis = true;
  in.dir = dir;
  TRELLIS_ASSIGN_OR_RETURN(in.state, ReadTrainingState(dir));
  in.model.config = in.state.model;
  in.model.source = in.state.source;
  TRELLIS_ASSIGN_OR_RETURN(in.model.source_dtype, StoredModelDType(dir));
  moments = moments && HasOptimizerState(dir);
  // The checkpoint's tensors are its family's parameters.
  std::vector<LogicalTensor> all;
  for (auto& [name, shape] : ModelTensorShapes(in.state.model)) {
    all.push_back({name, shape});
  }
  int64_t bytes = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    // One tensor at a time, so the bar moves.
    CheckpointShards one;
    one.note_unverified = i == 0;  // Said once for the file, not per tensor.
    const ShardSpec spec = ShardSpec::Replicated(all[i].shape);
    one.model.push_back(
        {all[i].name, spec, Tensor::Empty(all[i].shape, DType::kF32)});
    if (moments) {
      one.exp_avg.push_back(
          {all[i].name, spec, Tensor::Empty(all[i].shape, DType::kF32)});
      one.exp_avg_sq.push_back(
          {all[i].name, spec, Tensor::Empty(all[i].shape, DType::kF32)});
    }
    TRELLIS_RETURN_IF_ERROR(LoadShards(dir, one));
    in.model.tensors.emplace_back(all[i].name, one.model[0].tensor);
    bytes += one.model[0].tensor.nbytes();
    if (moments) {
      in.exp_avg.push_back(one.exp_avg[0].tensor);
      in.exp_avg_sq.push_back(one.exp_avg_sq[0].tensor);
      in.optimizer_step = one.optimizer_step;
      bytes += 2 * one.model[0].tensor.nbytes();
    }
    bar.Update(i + 1, all.size(), bytes);
  }
  return in;
}

// The dtype of `format` the input came in, when it came in that format.
std::optional<DType> SourceDType(const WholeModel& m,
                                 const std::string& format) {
  const auto f = m.source.find("format");
  const auto d = m.source.find("dtype");
  if (f == m.source.end() || f->second != format || d == m.source.end()) {
    return std::nullopt;
  }
  absl::StatusOr<DType> dtype = ParseFloatDType(d->second);
  return dtype.ok() ? std::optional<DType>(*dtype) : std::nullopt;
}

std::string SourceValue(const WholeModel& m, const std::string& format,
                        const std::string& key) {
  const auto f = m.source.find("format");
  const auto v = m.source.find(key);
  if (f == m.source.end() || f->second != format || v == m.source.end()) {
    return "";
  }
  return v->second;
}

absl::Status MakeDirectory(const fs::path& dir) {
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

// What a checkpoint converted from outside records as its tokenizer
// (ConvertOptions::tokenizer), with a note saying so where it was chosen
// for the user.
struct RecordedTokenizer {
  std::string name = {};
  TokenizerIdentity identity = {};
  std::string note = {};
  std::string spec = {};  // What MakeTokenizer takes for it ("" for `name`).
  // The tokenizer's own file, carried into the output (a checkpoint's, or
  // the tokenizer.json beside Hugging Face weights).
  std::optional<TokenizerFile> file = std::nullopt;
};

absl::StatusOr<RecordedTokenizer> TokenizerToRecord(const ConvertOptions& o,
                                                    const Input& in) {
  if (in.is_trellis) {
    RecordedTokenizer recorded{in.state.tokenizer, in.state.tokenizer_identity,
                               ""};
    TRELLIS_ASSIGN_OR_RETURN(recorded.file,
                             ReadCheckpointTokenizerFile(in.dir, in.state));
    if (recorded.file.has_value()) {
      recorded.spec =
          TokenizerSpecAt(in.state.tokenizer,
                          (fs::path(in.dir) / recorded.file->name).string());
    }
    return recorded;
  }
  if (!o.tokenizer.empty()) return RecordedTokenizer{o.tokenizer, {}, ""};
  if (in.model.config.family == ModelFamilyKind::kGpt2) {
    return RecordedTokenizer{"gpt2", {}, ""};
  }
  std::error_code error;
  const fs::path base = fs::is_directory(o.input, error)
                            ? fs::path(o.input)
                            : fs::path(o.input).parent_path();
  const fs::path file = base / "tokenizer.json";
  if (!fs::is_regular_file(file, error)) {
    return RecordedTokenizer{
        "gpt2",
        {},
        absl::StrCat("recorded tokenizer gpt2: ", base.string(),
                     " holds no tokenizer.json (--tokenizer to name the "
                     "model's own)")};
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      MakeTokenizer("hf:" + file.string(), "");
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tokenizer.json beside the weights cannot be read (",
                     tokenizer.status().message(),
                     "); name the model's tokenizer with --tokenizer"));
  }
  const TokenizerIdentity identity = TokenizerIdentity::Of(**tokenizer);
  RecordedTokenizer recorded{
      (*tokenizer)->name(), identity,
      absl::StrCat("recorded tokenizer ", identity.ToString(), " from ",
                   file.string(), " (--tokenizer to name another)"),
      "hf:" + file.string()};
  TRELLIS_ASSIGN_OR_RETURN(
      recorded.file, ReadSpecTokenizerFile(recorded.spec, identity.sha256));
  return recorded;
}

absl::Status WriteHf(const ConvertOptions& o, const Input& in,
                     TensorProgress& bar, ConvertSummary* s) {
  const WholeModel& m = in.model;
  const DType dtype =
      o.dtype.value_or(SourceDType(m, "hf").value_or(DType::kF32));
  const bool lm_head =
      o.hf_lm_head.value_or(SourceValue(m, "hf", "lm_head") == "1");
  TRELLIS_ASSIGN_OR_RETURN(const RecordedTokenizer recorded,
                           TokenizerToRecord(o, in));
  const std::string& tokenizer = recorded.name;
  const HfSpecialTokens special = HfSpecialTokensOf(
      recorded.spec.empty() ? tokenizer : recorded.spec, recorded.identity,
      m.config.family, m.config.vocab_size);
  absl::StatusOr<std::vector<HfOutputTensor>> tensors;
  std::string config;
  if (m.config.family == ModelFamilyKind::kLlama) {
    // Q/k norms are Qwen3's; Llama's config has none.
    tensors = HfLlamaTensors(m, dtype, lm_head);
    config = m.config.qk_norm
                 ? HfQwen3ConfigJson(m.config, dtype, tokenizer, special)
                 : HfLlamaConfigJson(m.config, dtype, tokenizer, special);
  } else if (m.config.family == moe::kKind && m.config.qk_norm) {
    TRELLIS_RETURN_IF_ERROR(CheckQwen3Shape(m.config));
    tensors = HfLlamaTensors(m, dtype, lm_head);
    config = HfQwen3ConfigJson(m.config, dtype, tokenizer, special);
  } else if (m.config.family == moe::kKind) {
    TRELLIS_RETURN_IF_ERROR(CheckMixtralShape(m.config));
    tensors =
        HfLlamaBlocksTensors(m, MixtralHfTensors(m.config), dtype, lm_head);
    config = HfMixtralConfigJson(m.config, dtype, tokenizer, special);
  } else {
    tensors = HfGpt2Tensors(
        m, dtype, o.hf_prefix.value_or(SourceValue(m, "hf", "prefix")),
        lm_head);
    config = HfConfigJson(m.config, dtype, tokenizer, special);
  }
  TRELLIS_RETURN_IF_ERROR(tensors.status());
  const fs::path dir(o.output);
  TRELLIS_RETURN_IF_ERROR(MakeDirectory(dir));
  TRELLIS_ASSIGN_OR_RETURN(
      s->bytes,
      WriteHfSafetensors(dir.string(), *tensors, o.max_shard_size, bar.Fn()));
  TRELLIS_RETURN_IF_ERROR(
      WriteTextFileAtomically((dir / "config.json").string(), config));
  if (recorded.file.has_value()) {
    // A whole model directory: the tokenizer with the weights.
    TRELLIS_RETURN_IF_ERROR(WriteTextFileAtomically(
        (dir / recorded.file->name).string(), recorded.file->bytes));
  }
  s->output = dir.string();
  s->tensors = tensors->size();
  return absl::OkStatus();
}

absl::Status WriteLlmcFile(const ConvertOptions& o, const Input& in,
                           ConvertSummary* s) {
  const WholeModel& m = in.model;
  const DType dtype =
      o.dtype.value_or(SourceDType(m, "llmc").value_or(DType::kF32));
  int64_t padded = o.padded_vocab;
  if (padded == 0) {
    const std::string from_source = SourceValue(m, "llmc", "padded_vocab");
    if (!from_source.empty()) padded = std::stoll(from_source);
  }
  TRELLIS_ASSIGN_OR_RETURN(auto file, LlmcFor(m, dtype, padded));
  TRELLIS_RETURN_IF_ERROR(MakeDirectory(fs::path(o.output).parent_path()));
  TRELLIS_RETURN_IF_ERROR(WriteLlmc(o.output, file.first, file.second));
  s->output = o.output;
  s->tensors = file.second.size();
  s->bytes = static_cast<int64_t>(fs::file_size(o.output));
  return absl::OkStatus();
}

absl::Status WriteTrellis(const ConvertOptions& o, const Input& in,
                          TensorProgress& bar, ConvertSummary* s) {
  const DType dtype = o.dtype.value_or(DType::kF32);
  if (!IsStorableDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trellis checkpoints store float32, float16 or bfloat16, not ",
        DTypeName(dtype)));
  }
  TrainingState state = in.state;
  TRELLIS_ASSIGN_OR_RETURN(const RecordedTokenizer recorded,
                           TokenizerToRecord(o, in));
  if (!in.is_trellis) {
    if (!recorded.note.empty()) s->notes.push_back(recorded.note);
    state = TrainingState();
    state.model = in.model.config;
    state.tokenizer = recorded.name;
    state.tokenizer_identity = recorded.identity;
    state.source = in.model.source;
    state.source["file"] = o.input;
  }
  state.tokenizer_file = recorded.file;
  const fs::path dir = fs::path(o.output) / CheckpointName(state.step);
  if (fs::exists(dir)) {
    return absl::AlreadyExistsError(absl::StrCat(
        dir.string(), " already exists; choose another --output or remove it"));
  }
  CheckpointShards shards;
  const bool moments = !o.weights_only && !in.exp_avg.empty();
  for (size_t i = 0; i < in.model.tensors.size(); ++i) {
    const auto& [name, t] = in.model.tensors[i];
    const ShardSpec spec = ShardSpec::Replicated(t.shape());
    shards.model.push_back({name, spec, t});
    if (moments) {
      shards.exp_avg.push_back({name, spec, in.exp_avg[i]});
      shards.exp_avg_sq.push_back({name, spec, in.exp_avg_sq[i]});
    }
  }
  shards.optimizer_step = in.optimizer_step;
  SaveOptions save;
  save.model_dtype = dtype;
  save.log = false;
  const int64_t bytes_per = DTypeSize(dtype);
  // Writers go through the model's tensors, then both moments of each.
  std::vector<int64_t> written = {0};
  for (const TensorShard& t : shards.model) {
    written.push_back(written.back() + t.tensor.numel() * bytes_per);
  }
  for (const TensorShard& t : shards.exp_avg) {
    written.push_back(written.back() + 4 * t.tensor.numel());
  }
  for (const TensorShard& t : shards.exp_avg_sq) {
    written.push_back(written.back() + 4 * t.tensor.numel());
  }
  save.progress = [&](int64_t done, int64_t total) {
    bar.Update(done, total,
               written[std::min<size_t>(done, written.size() - 1)]);
  };
  SelfCommunicator world("world");
  TRELLIS_RETURN_IF_ERROR(
      SaveShards(o.output, state, shards, world, /*writer=*/true, save));
  s->output = dir.string();
  s->tensors = shards.model.size() + 2 * shards.exp_avg.size();
  s->bytes = written.back();
  return absl::OkStatus();
}

absl::Status WriteShardFiles(const ConvertOptions& o, const WholeModel& m,
                             TensorProgress& bar, ConvertSummary* s) {
  ShardExport e;
  e.dir = o.output;
  e.tp = o.tp;
  e.pp = o.pp;
  e.pp_layers = o.pp_layers;
  e.dtype = o.dtype.value_or(DType::kF32);
  TRELLIS_RETURN_IF_ERROR(ExportShards(m, e, bar.Fn(), &s->tensors, &s->bytes));
  s->output = o.output;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ReadHfModelConfig(const std::string& path) {
  TRELLIS_ASSIGN_OR_RETURN(const HfArchitecture a, ReadHfArchitecture(path));
  if (a.model_type == "llama") return ReadHfLlamaConfig(path);
  if (a.model_type == "qwen3") return ReadHfQwen3Config(path);
  if (a.model_type == "mixtral") return ReadHfMixtralConfig(path);
  if (a.model_type == "qwen3_moe") return ReadHfQwen3MoeConfig(path);
  return ReadHfConfig(path);
}

absl::StatusOr<std::string> DetectFormat(const std::string& input) {
  const fs::path p(input);
  if (fs::is_directory(p)) {
    if (fs::exists(p / kHfSingleFile) || fs::exists(p / kHfIndexFile)) {
      return std::string("hf");
    }
    if (fs::exists(p / "state.json") || fs::exists(p / "latest")) {
      return std::string("trellis");
    }
  } else if (fs::is_regular_file(p)) {
    if (p.extension() == ".safetensors" || p.filename() == kHfIndexFile) {
      return std::string("hf");
    }
    std::ifstream in(p, std::ios::binary);
    int32_t magic = 0;
    if (in.read(reinterpret_cast<char*>(&magic), 4) && magic == kLlmcMagic) {
      return std::string("llmc");
    }
  } else {
    return absl::NotFoundError(absl::StrCat(input, " does not exist"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      input,
      " is none of: a Hugging Face directory (model.safetensors or its "
      "index), an "
      "llm.c .bin file, a trellis checkpoint; name it with --from"));
}

absl::StatusOr<DType> ParseFloatDType(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "f32") return DType::kF32;
  if (name == "float16" || name == "fp16" || name == "f16") return DType::kF16;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype '", name, "' is not one of float32, float16, bfloat16"));
}

absl::StatusOr<ConvertSummary> Convert(const ConvertOptions& o) {
  const auto start = Clock::now();
  ConvertSummary s;
  if (o.output.empty()) {
    return absl::InvalidArgumentError("--output is required");
  }
  // Writing over the input would remove or replace its files before the
  // new ones are whole: a full disk midway would leave neither.
  if (Resolved(o.input) == Resolved(o.output)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--output=", o.output,
        " is --input itself; write the conversion "
        "beside it (another --output) and replace the original once it is "
        "done"));
  }
  s.from = o.from;
  if (s.from.empty()) {
    TRELLIS_ASSIGN_OR_RETURN(s.from, DetectFormat(o.input));
  }
  s.to = o.to;
  TensorProgress read_bar("reading", o.progress);
  absl::StatusOr<Input> in;
  if (s.from == "hf") {
    in = ReadHf(o, read_bar);
  } else if (s.from == "llmc") {
    in = ReadLlmc(o, read_bar);
  } else if (s.from == "trellis") {
    in = ReadTrellis(o, s.to == "trellis" && !o.weights_only, read_bar);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--from=", s.from, " is not one of hf, llmc, trellis"));
  }
  TRELLIS_RETURN_IF_ERROR(in.status());
  const ModelFamilyKind family = in->model.config.family;
  if (s.to == "llmc" && family != ModelFamilyKind::kGpt2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--to=llmc writes GPT-2 models, and ", o.input,
                     " holds a ", ModelFamilyName(family),
                     " model; use --to=hf, --to=trellis or --to=shards"));
  }
  if (!in->state.expert_bias.empty() && s.to != "trellis") {
    return absl::InvalidArgumentError(absl::StrCat(
        o.input,
        " holds its routers' expert selection biases "
        "(--moe_bias_update_rate), which --to=",
        s.to,
        " has no place for (Hugging Face's Mixtral and Qwen3-MoE models "
        "choose experts without one); convert it --to=trellis, or train "
        "without --moe_bias_update_rate"));
  }
  TensorProgress write_bar("writing",
                           o.progress && (s.to == "trellis" || s.to == "hf"));
  absl::Status written;
  if (s.to == "hf") {
    written = WriteHf(o, *in, write_bar, &s);
  } else if (s.to == "llmc") {
    written = WriteLlmcFile(o, *in, &s);
  } else if (s.to == "trellis") {
    written = WriteTrellis(o, *in, write_bar, &s);
  } else if (s.to == "shards") {
    written = WriteShardFiles(o, in->model, write_bar, &s);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--to=", s.to, " is not one of hf, llmc, trellis, shards"));
  }
  TRELLIS_RETURN_IF_ERROR(written);
  // The reader's notes first, then the writer's.
  s.notes.insert(s.notes.begin(), in->model.notes.begin(),
                 in->model.notes.end());
  s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return s;
}

}  // namespace trellis
