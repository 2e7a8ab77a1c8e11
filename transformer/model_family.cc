#include "transformer/model_family.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transformer/cached_decoder.h"
#include "transformer/decoder_chunk.h"

namespace trellis {

// Defined in families.cc, which CMake writes from the family folders.
std::vector<const ModelFamily*> BuiltInModelFamilies();

namespace {

std::mutex& RegistryMutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<const ModelFamily*>& Registered() {
  static std::vector<const ModelFamily*> families;
  return families;
}

const ModelFamily* Find(ModelFamilyKind kind) {
  for (const ModelFamily* f : ModelFamilies()) {
    if (f->kind() == kind) return f;
  }
  return nullptr;
}

}  // namespace

std::vector<const ModelFamily*> ModelFamilies() {
  static const std::vector<const ModelFamily*> built_in =
      BuiltInModelFamilies();
  std::vector<const ModelFamily*> all = built_in;
  std::lock_guard<std::mutex> lock(RegistryMutex());
  all.insert(all.end(), Registered().begin(), Registered().end());
  return all;
}

void RegisterModelFamily(const ModelFamily& family) {
  TRELLIS_CHECK(Find(family.kind()) == nullptr)
      << "model family " << family.kind().name() << " is already known";
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registered().push_back(&family);
}

const ModelFamily& FamilyOf(const ModelConfig& config) {
  const ModelFamily* family = Find(config.family);
  TRELLIS_CHECK(family != nullptr)
      << "unknown model family " << config.family.name();
  return *family;
}

absl::StatusOr<ModelFamilyKind> ParseModelFamily(const std::string& name) {
  std::vector<std::string> names;
  for (const ModelFamily* f : ModelFamilies()) {
    if (f->kind().name() == name) return f->kind();
    names.emplace_back(f->kind().name());
  }
  // "gpt2 or llama", "gpt2, llama or toy".
  std::string choices = names.back();
  if (names.size() > 1) {
    names.pop_back();
    choices = absl::StrCat(absl::StrJoin(names, ", "), " or ", choices);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--family=", name, " is not a model family: use ", choices));
}

absl::Status ModelFamily::CheckExpertParallel(const ModelConfig& config,
                                              int64_t ep) const {
  if (ep == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--ep=", ep, ": --family=", std::string(config.family.name()),
      " has no experts to split; use --ep=1 or a mixture-of-experts family "
      "(--family=moe)"));
}

int64_t ModelFamily::ActiveParameters(const ModelConfig& config) const {
  return config.NumParameters();
}

std::unique_ptr<ModelChunk> ModelFamily::NewChunk(const ModelConfig& config,
                                                  const ChunkSetup& s) const {
  TRELLIS_CHECK(config.family == kind());
  auto chunk = std::make_unique<DecoderChunk>(config, s.plan, s.tp, *s.tp_comm,
                                              *s.params, s.micro_batch,
                                              s.device, s.dtype, s.options);
  if (s.ep_comm != nullptr) chunk->set_expert_group(s.ep_comm);
  if (s.context != nullptr) chunk->set_context(s.context);
  return chunk;
}

std::unique_ptr<ModelDecoder> ModelFamily::NewDecoder(
    const ModelConfig& config, const DecoderSetup& setup) const {
  TRELLIS_CHECK(config.family == kind());
  return std::make_unique<CachedDecoder>(config, setup);
}

std::vector<std::pair<std::string, Shape>> ModelTensorShapes(
    const ModelConfig& config) {
  ParameterSet params;
  FamilyOf(config).DeclareParameters(
      config, ChunkPlan{0, config.n_layer, true, true}, TpPlace{}, /*seed=*/0,
      Device::Cpu(), DType::kF32, params);
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const Parameter* p : params.all()) {
    shapes.emplace_back(p->name, p->spec.logical_shape);
  }
  return shapes;
}

void AddModelParameters(const ModelConfig& config, const ChunkPlan& plan,
                        TpPlace tp, uint64_t seed, Device device, DType dtype,
                        ParameterSet& params, ParameterFill fill) {
  FamilyOf(config).DeclareParameters(config, plan, tp, seed, device, dtype,
                                     params);
  params.Materialize(/*grads=*/true, fill);
}

}  // namespace trellis
