// Parameter: one rank's piece of a logical model tensor, with its gradient.
//
// `name` is the logical name (Hugging Face GPT-2 state-dict style, e.g.
// "h.3.attn.c_attn.weight"), `spec` how this rank's `value` is cut from the
// logical tensor. `grad` has value's shape and accumulates over microbatches.
//
// Mixed precision: a bfloat16 `value` (what the kernels read) comes with a
// float32 `master` copy (what the optimizer steps and checkpoints store) and
// a float32 `grad` (accumulated and all-reduced in float32, as Megatron's
// main_grad); after changing `master`, RefreshFromMaster rounds it into
// `value`. For float32 and float64 values `master` is undefined and `grad`
// has value's dtype.
//
// Thread safety: none; a Parameter belongs to one rank's model.
#ifndef TRELLIS_PARALLEL_PARAMETER_H_
#define TRELLIS_PARALLEL_PARAMETER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/tensor.h"
#include "parallel/shard.h"

namespace trellis {

struct Parameter {
  std::string name;
  ShardSpec spec;
  Tensor value;
  Tensor grad;
  Tensor master;  // float32, only for a bfloat16 value
  // AdamW decays 2-D weights only (not biases, LayerNorm or nothing else).
  bool decay = false;
  // True on the one copy of each logical element that the global gradient
  // norm counts and checkpoints store: tp-replicated tensors on tp rank 0
  // only, the tied embedding on the stage that holds the embedding lookup.
  // Pieces replicated over sub-groups of tp inside a split tensor are owned
  // element-wise instead (ShardSpec::OwnedRuns, parallel/replicas.h).
  bool primary = true;
  // One of a mixture of experts' experts under expert parallelism: the
  // data-parallel ranks holding it are its expert-data-parallel group (dp /
  // ep of them), which average its gradient instead of the dp group; the
  // ranks of an ep group hold different experts.
  bool expert = false;

  // The local elements (spec's local shape: the value may be released
  // while ZeRO-3 keeps only a block of it).
  int64_t numel() const {
    return value.defined() ? value.numel() : NumElements(spec.LocalShape());
  }
  // The full-precision weights: master when defined, else value.
  const Tensor& weights() const { return master.defined() ? master : value; }
  Tensor& weights() { return master.defined() ? master : value; }
};

// The dtype of the gradient (and master weights, if any) of a `value`
// dtype: float32 for bfloat16, else the value's.
DType GradDType(DType value_dtype);
// value = master rounded (a no-op without master).
void RefreshFromMaster(Parameter& p);

// A parameter's logical initializer: the value of logical element i. It
// must be a pure function of i, callable from several threads at once
// (InitializeParameter fills large parameters in parallel).
using Initializer = std::function<double(int64_t)>;

// How ParameterSet::Materialize fills the values it makes.
enum class ParameterFill {
  // Every parameter from its initializer (padding 0).
  kInitialize,
  // All zeros, initializers not called: for a caller that writes every
  // element but padding next (a checkpoint load, which fails on a missing
  // tensor), so that loading a model does not pay for its initialization.
  kZero,
};

// A declared parameter not materialized yet: where its tensors go, their
// dtype, and its logical initializer.
struct ParameterDeclaration {
  Parameter* parameter;
  Device device;
  DType dtype;
  Initializer init;
};

// Owns parameters in registration order; lookup by name.
//
// Registration and Find cost O(1) expected (a hash index by name), so a
// model of L layers registers in O(L): a --n_layer=100000 run reaches its
// memory check in seconds. name_comparisons() counts the full name
// comparisons the index made, the measure tests hold linear.
//
// Parameters are either added (their tensors made at once) or declared and
// materialized later, so that a run can size its memory from the declared
// shapes before allocating anything (tools/trainer/trainer.h).
class ParameterSet {
 public:
  // Creates value, grad and, for bfloat16, master (zeroed) on `device` with
  // spec's local shape.
  Parameter& Add(std::string name, ShardSpec spec, bool decay, Device device,
                 DType dtype = DType::kF32);
  // Registers a parameter without tensors; Materialize makes them on
  // `device` and fills them with `init`.
  Parameter& Declare(std::string name, ShardSpec spec, bool decay,
                     Device device, DType dtype, Initializer init);
  // Makes the value (and master) of every declared parameter and fills it
  // as `fill` says; also its zeroed grad when `grads`, else whoever owns the
  // gradients (GradientBuckets) makes them.
  void Materialize(bool grads, ParameterFill fill = ParameterFill::kInitialize);
  // Hands over the declarations not materialized yet, in declaration
  // order: their caller makes their tensors (ZeRO-3 keeps only blocks of
  // them, ShardedParameters), and Materialize no longer makes them.
  std::vector<ParameterDeclaration> TakeDeclarations();
  // Registers a parameter owned by another set (the tied embedding, shared
  // by the embedding and the LM head on a single stage).
  void AddShared(Parameter* parameter);
  Parameter* Find(const std::string& name) const;
  // Find for a parameter that must be there (a model's own declaration):
  // a missing one is an invariant failure naming it.
  Parameter& Get(const std::string& name) const;
  const std::vector<Parameter*>& all() const { return order_; }
  int64_t LocalElements() const;
  void ZeroGrads();
  // How many times lookups (Find, and the duplicate check of every
  // registration) compared two names in full, since construction.
  int64_t name_comparisons() const { return *comparisons_; }

 private:
  // Name equality that counts its calls (shared, so moves keep it valid).
  struct CountingEqual {
    std::shared_ptr<int64_t> count;
    bool operator()(const std::string& a, const std::string& b) const {
      ++*count;
      return a == b;
    }
  };
  Parameter& Register(std::string name, ShardSpec spec, bool decay);
  // Adds `p` to order_ and index_; fails on a duplicate name.
  void Index(Parameter* p);

  std::vector<std::unique_ptr<Parameter>> owned_;
  std::vector<Parameter*> order_;
  std::shared_ptr<int64_t> comparisons_ = std::make_shared<int64_t>(0);
  std::unordered_map<std::string, Parameter*, std::hash<std::string>,
                     CountingEqual>
      index_{0, std::hash<std::string>(), CountingEqual{comparisons_}};
  std::vector<ParameterDeclaration> pending_;
};

// Fills `p.weights()` from its logical initializer: `value_at(logical_index)`
// for real elements, 0 for padding; then refreshes value from master. A
// large parameter is filled by several threads, each calling value_at on
// its own rows; element i's value does not depend on how.
void InitializeParameter(Parameter& p, const Initializer& value_at);

// Fills `out` (float32 or float64, on the host, `count` elements) with the
// local elements [first, first + count) of `spec`'s local tensor, in its
// row-major order: bit for bit what InitializeParameter writes there (0
// for padding). Lets ZeRO-3 initialize its block of a parameter without
// making the parameter whole.
// REQUIRES: the range lies inside spec.LocalShape().
void InitializeElements(const ShardSpec& spec, const Initializer& value_at,
                        int64_t first, int64_t count, Tensor& out);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_PARAMETER_H_
