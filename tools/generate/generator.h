// Generator: text generation from a checkpoint (trellis-generate).
//
// Create reads the checkpoint's training state (its model config and
// tokenizer), builds the tokenizer, declares the whole model on this
// rank's tensor-parallel slice, loads the weights and builds the family's
// cached decoder (transformer/model_decoder.h). Generate encodes a prompt,
// prefills it, then picks each next token from the logits
// (tools/generate/sampler.h) and runs it through the decoder: with the
// key/value cache one token per step, or without it (use_cache false) the
// whole sequence again at every step.
//
// Layouts: tp ranks split the model as training does (every rank of the
// world is one tp rank: dp and pp are 1); every rank returns the same
// tokens.
//
// Thread safety: none. All ranks call Create and Generate together.
#ifndef TRELLIS_TOOLS_GENERATE_GENERATOR_H_
#define TRELLIS_TOOLS_GENERATE_GENERATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "parallel/bootstrap.h"
#include "parallel/device_groups.h"
#include "parallel/parameter.h"
#include "tools/generate/sampler.h"
#include "tools/options/options.h"
#include "transformer/config.h"
#include "transformer/model_decoder.h"

namespace trellis {

struct GenerateOptions {
  std::string load;  // a step directory, or a save directory with `latest`
  // Tokenizer spec (data/tokenizer.h); "" takes the checkpoint's, which
  // names its file only for byte and gpt2.
  std::string tokenizer;
  std::string gpt2_assets = kDefaultGpt2AssetsDir;
  // Layout and device: tp, pp (must be 1), device, precision, gpu_comm.
  TrainOptions layout;
};

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids, not empty
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  bool use_cache = true;
  bool stop_at_eot = true;  // end after emitting the end-of-text token
  // When set, receives the logits each new token was chosen from.
  std::vector<std::vector<float>>* logits = nullptr;
};

struct Generation {
  std::vector<int32_t> tokens;  // the new tokens
  double prefill_seconds = 0;   // the prompt's forward
  double decode_seconds = 0;    // every later forward and every choice
  double TokensPerSecond() const;
};

class Generator {
 public:
  // Collective over `groups.world`; every rank returns the same verdict.
  static absl::StatusOr<std::unique_ptr<Generator>> Create(
      const GenerateOptions& options, const ProcessGroups& groups);

  // The ids of `text` (InvalidArgument when it has none).
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;
  // InvalidArgument (naming the context length) when the prompt and
  // max_new_tokens do not fit the model's context, or the sampling options
  // are invalid.
  absl::StatusOr<Generation> Generate(const GenerateRequest& request);

  const ModelConfig& model() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& checkpoint() const { return dir_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }

 private:
  Generator() = default;

  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ProcessGroups groups_;
  std::unique_ptr<DeviceGroups> device_groups_;
  Device device_;
  DType dtype_ = DType::kF32;
  ParameterSet params_;
  std::unique_ptr<ModelDecoder> decoder_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_GENERATE_GENERATOR_H_
