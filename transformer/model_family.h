// The model seam: what a model family provides, so that the trainer, the
// pipeline, checkpoints, the memory plan and conversion never ask which
// family they run.
//
// A family is a folder of its own under transformer/ (gpt2/, llama/): its
// config rules, its parameters, its block hooks and ends, and its Hugging
// Face mapping table. CMake lists the folders at build time (families.cc
// in the build tree calls each folder's `<folder>::Family()`), so adding a
// family edits nothing outside its folder; RegisterModelFamily adds one at
// run time. A family provides
//  - the rules of its config (Validate, CheckTensorParallel) and the tags
//    of the options it reads (OptionTags),
//  - its parameters: each one's logical name, global shape, tensor-parallel
//    split and initialization, declared by DeclareParameters (the split of
//    a linear layer's weight is the layer's own: tensor_parallel.h states
//    it and the layer checks it when built),
//  - each layer's block hooks (NewBlockParts: block_parts.h) and the ends
//    of a chunk (Ends: embedding, positions, final norm, head), from which
//    the shared skeletons build the chunk that runs a ChunkPlan's part of
//    the model (NewChunk: DecoderChunk, DecoderBlock) and the cached
//    forward of text generation (NewDecoder: CachedDecoder, CachedBlock),
//  - the mapping of its parameters to Hugging Face's tensors (HfTensors).
//
// ModelChunk is the contract every family's chunk keeps; the pipeline stage
// (tools/trainer/stage_model.h) drives chunks through it only.
#ifndef TRELLIS_TRANSFORMER_MODEL_FAMILY_H_
#define TRELLIS_TRANSFORMER_MODEL_FAMILY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/context_parallel.h"
#include "parallel/parameter.h"
#include "transformer/block_parts.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"
#include "transformer/expert_bias.h"
#include "transformer/hf_mapping.h"
#include "transformer/model_decoder.h"

namespace trellis {

// A microbatch's document masks (data/batch_loader.h), on the host
// or the chunk's device; each undefined unless its option is on.
struct ChunkMasks {
  Tensor doc_start;    // (B, T) int32: where each token's document starts
  Tensor loss_weight;  // (B, T) float32: each target's loss weight
};

// The part of a model that one pipeline (virtual) stage runs on one rank.
//
// Per microbatch:
//   Forward(mb)         first chunk: tokens (B, T) -> hidden (N, C);
//                       other chunks: hidden in -> hidden out; the last
//                       chunk ends in the mean next-token loss instead.
//   BackwardInput(mb)   d(output hidden) -> d(input hidden): the B action.
//   BackwardWeight(mb)  parameter gradients (+=), then frees mb's state: W.
// Several microbatches may be in flight. All tensor-parallel communication
// goes through the communicator the chunk was built with.
// Thread safety: none; one thread drives a chunk.
class ModelChunk {
 public:
  virtual ~ModelChunk() = default;

  // Allocates the buffers every microbatch shares (WorkspaceBytes); the
  // first Forward does it otherwise. Construction allocates nothing.
  virtual void AllocateWorkspace() = 0;
  virtual const ChunkPlan& plan() const = 0;
  // Rows of the hidden tensors this chunk sends and receives: B·T, or this
  // rank's B·T/tp under sequence parallelism.
  virtual int64_t rows() const = 0;
  // Width of those hidden tensors.
  virtual int64_t width() const = 0;

  // `tokens` (B, T) int32 on the first chunk, else `input` (N, C); the last
  // chunk reads `targets` (B, T) int32 and computes the per-token losses
  // (TokenLosses), adding their mean to `loss_sum` when given (one float64
  // element on the chunk's device; the host does not wait); other chunks
  // write `output` (N, C). Tokens and targets may be on the host or the
  // chunk's device. On the last chunk a `loss_scale` > 0 starts backward:
  // the loss gradient is loss_scale · d(mean loss) and BackwardInput may
  // follow; 0 computes only the losses (evaluation: no gradient is
  // touched, and only Release may follow). Other chunks ignore it.
  // `input` (and BackwardInput's `doutput`) are read during the call only:
  // a chunk copies what later calls need, so the pipeline may reuse those
  // buffers for other microbatches (parallel/pipeline_buffers.h).
  virtual void Forward(int mb, const Tensor& tokens, const Tensor& input,
                       const Tensor& targets, double loss_scale, Tensor* output,
                       Tensor* loss_sum = nullptr) = 0;
  // The masks of the next Forward (BlockOptions::document_mask,
  // eod_mask_loss): doc_start on every chunk with blocks, loss_weight on
  // the last chunk of a training Forward (evaluation passes none: every
  // target counts). A family without document masking keeps this default,
  // which accepts only undefined masks.
  virtual void SetMasks(const ChunkMasks& masks) {
    TRELLIS_CHECK(!masks.doc_start.defined() && !masks.loss_weight.defined())
        << "this model family has no document masking";
  }
  // The last chunk's mean loss of microbatch `mb`, read to the host (one
  // host wait; for tests and tools). Valid while TokenLosses(mb) is.
  virtual double MeanLoss(int mb) const = 0;
  // `doutput` (N, C) on non-last chunks (the last chunk's loss gradient
  // comes from Forward). Writes `dinput` (N, C) on non-first chunks.
  virtual void BackwardInput(int mb, const Tensor& doutput, Tensor* dinput) = 0;
  // Reports each group of parameters as its gradient work for `mb` ends,
  // in the order of WeightGroups() (so data-parallel buckets can launch).
  using WeightsDone = std::function<void(const std::vector<Parameter*>&)>;
  virtual void BackwardWeight(int mb, const WeightsDone& done = nullptr) = 0;
  // The last chunk's per-token losses (N) of microbatch `mb`, rows in
  // order; valid until mb's BackwardWeight or Release.
  virtual const Tensor& TokenLosses(int mb) const = 0;
  // Frees mb's state after a forward-only pass (evaluation).
  virtual void Release(int mb) = 0;
  // The parameter groups BackwardWeight reports, in its order; together
  // they hold every parameter of the chunk. A report means mb's
  // contributions to the group are done.
  virtual std::vector<std::vector<Parameter*>> WeightGroups() const = 0;
  // Calls around the chunk's additions to parameter gradients, group by
  // group (WeightGroups' groups; the head weight alone in a Forward with a
  // loss scale, which adds its share early): `before` ahead of a group's
  // first addition for a microbatch, `after` once the microbatch's last
  // addition to the group is done (in BackwardInput, or in BackwardWeight
  // when weight gradients are deferred). Each group gets one `after` per
  // microbatch. Lets ZeRO-2 hold a gradient's memory only while it is
  // written. Default: none.
  struct GradientWrites {
    std::function<void(const std::vector<Parameter*>&)> before, after;
  };
  virtual void set_gradient_writes(GradientWrites writes) = 0;
  // The parameters the chunk's computes read, in forward order, as the
  // units they are read in: the embedding (and positions), each block,
  // then the final norm and the head weight. A parameter may be in several
  // units (a head tied to the same chunk's embedding).
  virtual std::vector<std::vector<Parameter*>> GatherUnits() const = 0;
  // Calls around the chunk's reads of its weights, unit by unit
  // (GatherUnits' units): `acquire(unit, next)` ahead of the unit's first
  // read in a compute, naming the unit the compute reads next (empty at
  // its end) so that it can be fetched meanwhile; `release(unit)` once the
  // compute is done with it. Forward walks every unit in forward order,
  // BackwardInput every unit in reverse, and BackwardWeight, when weight
  // gradients are deferred, every unit in reverse; a non-deferred
  // BackwardWeight reads none. Lets ZeRO-3 hold a unit's weights whole
  // only while they are read. Default: none.
  struct WeightGathers {
    std::function<void(const std::vector<Parameter*>& unit,
                       const std::vector<Parameter*>& next)>
        acquire;
    std::function<void(const std::vector<Parameter*>& unit)> release;
  };
  virtual void set_weight_gathers(WeightGathers gathers) = 0;

  // Bytes of one microbatch's state and of the chunk's shared buffers
  // (exactly what the chunk allocates).
  virtual size_t StateBytes() const = 0;
  virtual size_t WorkspaceBytes() const = 0;
  // Microbatches in flight, and states allocated so far (the pool's
  // high-water mark).
  virtual int InFlight() const = 0;
  virtual int StatesAllocated() const = 0;
  // A mixture of experts' routing, per MoE layer of the chunk, over the
  // training microbatches since the last TakeRouting (empty without such
  // layers): the sums of the microbatches' balance losses and of the slots
  // each expert received. TakeRouting returns them and starts anew.
  struct LayerRouting {
    int64_t layer = 0;
    double aux_loss = 0, z_loss = 0;
    std::vector<double> expert_slots;
  };
  virtual std::vector<LayerRouting> TakeRouting() { return {}; }
  // The most experts any of its layers routes over (0: none).
  virtual int64_t RoutedExperts() const { return 0; }
  // Sets its routers' selection biases to their layers' rows of the
  // model's table (transformer/expert_bias.h; a missing row: zeros). Only
  // a model with moe_bias_update_rate has them; others ignore it.
  virtual void SetExpertBias(const ExpertBias& /*bias*/) {}
  // Parameters whose gradients this chunk leaves as partial sums over its
  // tp group (the norms' under sequence parallelism: each rank sums its own
  // rows; a q/k norm's: each rank its own heads); their owner sums them
  // over tp once the step's backward is done.
  virtual std::vector<Parameter*> TpPartialGradients() const { return {}; }
};

// Everything a chunk is built from. `params` must hold the chunk's declared
// parameters (DeclareParameters); tp_comm's size is tp.size.
struct ChunkSetup {
  ChunkPlan plan;
  TpPlace tp;
  Communicator* tp_comm = nullptr;
  const ParameterSet* params = nullptr;
  int64_t micro_batch = 1;
  Device device;
  DType dtype = DType::kF32;
  BlockOptions options;
  // The expert-parallel group (plan.expert_ranks ranks); null: none.
  Communicator* ep_comm = nullptr;
  // Context parallelism: each window's attention over the cp group (its
  // split gives the chunk's token positions); null: whole windows.
  const ContextAttention* context = nullptr;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;

  virtual ModelFamilyKind kind() const = 0;
  // The tags of the family-specific options it reads ("llama:"; see
  // TRELLIS_MODEL_CONFIG_OPTIONS): others must stay at their defaults.
  virtual std::vector<std::string> OptionTags() const { return {}; }
  // The family's own rules for `config` (ModelConfig::Validate checked the
  // sizes positive first). Messages name the flags to change.
  virtual absl::Status Validate(const ModelConfig& config) const = 0;
  // Whether `tp` ranks can split the model (heads, widths).
  virtual absl::Status CheckTensorParallel(const ModelConfig& config,
                                           int64_t tp) const = 0;
  // Whether `ep` ranks can split each layer's experts. Default: only 1 (a
  // family without experts).
  virtual absl::Status CheckExpertParallel(const ModelConfig& config,
                                           int64_t ep) const;
  // Whether `cp` ranks can split each window (parallel/context_parallel.h).
  // Default: yes (its per-token work does not mix tokens outside
  // attention).
  virtual absl::Status CheckContextParallel(const ModelConfig& config,
                                            int64_t cp) const {
    return absl::OkStatus();
  }
  // Whether the family's kernels run on `device`. Default: every device.
  virtual absl::Status CheckDevice(const ModelConfig& config,
                                   DeviceType device) const {
    return absl::OkStatus();
  }
  // The parameter that the first and the last chunk both hold (a tied
  // embedding, whose gradients those stages sum), or "" when none is.
  virtual std::string TiedEmbedding(const ModelConfig& config) const = 0;
  // Declares the parameters of `plan`'s part of the model on tp rank
  // `tp.rank` in `params` (without tensors: ParameterSet::Materialize makes
  // them). A parameter the set already holds (a tied embedding on a rank
  // that holds both ends) is reused. Initialization is a function of
  // (seed, logical name, logical index) only, so every layout starts from
  // the same weights.
  virtual void DeclareParameters(const ModelConfig& config,
                                 const ChunkPlan& plan, TpPlace tp,
                                 uint64_t seed, Device device, DType dtype,
                                 ParameterSet& params) const = 0;
  // The hooks of layer `layer`'s block on tp rank tp.rank, over the
  // parameters DeclareParameters declared there. REQUIRES:
  // CheckTensorParallel(config, tp.size) is ok.
  virtual BlockParts NewBlockParts(const ModelConfig& config, int64_t layer,
                                   TpPlace tp,
                                   const ParameterSet& params) const = 0;
  // The ends `plan` holds (each null where it lacks that end).
  virtual ChunkEnds Ends(const ModelConfig& config, const ChunkPlan& plan,
                         const ParameterSet& params) const = 0;
  // Every parameter of the whole model and the Hugging Face tensors it is
  // made of, in DeclareParameters' order (hf_mapping.h).
  virtual std::vector<HfTensorMapping> HfTensors(
      const ModelConfig& config) const = 0;
  // Layers of one class declare the same parameters but for their names
  // (ModelConfig::NumParameters counts one layer of each). Default: one
  // class (every layer alike).
  virtual int64_t LayerClass(const ModelConfig& config, int64_t layer) const {
    return 0;
  }
  // The parameters one token's forward reads, the N of the training FLOPs'
  // 6·N (ModelConfig::TrainingFlopsPerToken). Default: all of them; a
  // mixture of experts counts only the experts a token is routed to.
  virtual int64_t ActiveParameters(const ModelConfig& config) const;

  // The chunk of `setup.plan`: a DecoderChunk of this family's ends and
  // blocks.
  std::unique_ptr<ModelChunk> NewChunk(const ModelConfig& config,
                                       const ChunkSetup& setup) const;
  // The cached forward for generation of the whole model on tp rank
  // setup.tp.rank; setup.params holds the parameters DeclareParameters
  // declares for ChunkPlan{0, n_layer, true, true} on that rank.
  std::unique_ptr<ModelDecoder> NewDecoder(const ModelConfig& config,
                                           const DecoderSetup& setup) const;
};

// Every family --family may name: those built in (one folder each under
// transformer/, in folder order) then those registered, in order.
std::vector<const ModelFamily*> ModelFamilies();
// Adds `family` for the rest of the process (a family outside
// transformer/: tests, experiments). REQUIRES: no family of its kind is
// known; `family` outlives every use. Thread-safe.
void RegisterModelFamily(const ModelFamily& family);

// The family of `config` (config.family). REQUIRES: a known family.
const ModelFamily& FamilyOf(const ModelConfig& config);

// Every logical parameter of the whole model of `config` (a tied one once),
// as (name, global shape) in declaration order: what a checkpoint holds.
std::vector<std::pair<std::string, Shape>> ModelTensorShapes(
    const ModelConfig& config);

// Declares the parameters of `plan` (FamilyOf(config).DeclareParameters) and
// materializes them as `fill` says, gradients included: for tests and tools
// that build a chunk outside the trainer.
void AddModelParameters(const ModelConfig& config, const ChunkPlan& plan,
                        TpPlace tp, uint64_t seed, Device device, DType dtype,
                        ParameterSet& params,
                        ParameterFill fill = ParameterFill::kInitialize);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_MODEL_FAMILY_H_
