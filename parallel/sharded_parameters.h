// ShardedParameters: the weights sharded over the data-parallel group
// (ZeRO-3, FSDP-style).
//
// The gradient buckets (GradientBuckets, GradSync::kShardGradients) lay
// every parameter out in flat buckets padded to a multiple of the dp size;
// dp rank r owns block r of each (the blocks ShardedOptimizer steps). This
// class keeps only those blocks of the weights: the working values (the
// parameters' dtype) and, for a bfloat16 value, the float32 masters. The
// parameters' own `value` and `master` stay undefined except while a unit
// of them is in use:
//
//   Acquire(unit, next)  makes `unit`'s values whole: each bucket holding
//                        one of its parameters is all-gathered over dp into
//                        a buffer of the bucket's size (in the values'
//                        dtype), and the parameters' values become views of
//                        it. Then starts gathering `next`'s buckets without
//                        waiting (the prefetch overlaps the unit's compute).
//   Release(unit)        drops the buffers no acquired unit and no pending
//                        prefetch holds, leaving the values undefined.
//
// The chunks call these around their reads (ModelChunk::WeightGathers), so
// a rank holds its owned blocks plus the unit being computed and the one
// being fetched. Buckets never span two weight groups (the trainer starts a
// bucket at each), so a unit's gather moves only its own weights.
//
// After the optimizer stepped the owned blocks (OwnedWeights) nothing needs
// gathering: RefreshOwned rounds a bfloat16 block from its master.
//
// No rank ever holds the whole model's weights:
//  - Start-up: built from the parameters' declarations (not materialized,
//    ParameterSet::TakeDeclarations), each owned block is filled straight
//    from the initializers (InitializeElements: bit for bit what a
//    replicated run's InitializeParameter gives those elements), or left
//    zero when a load follows. No weight is made whole.
//  - Checkpoint I/O walks IoGroups (the gather units as disjoint sets of
//    whole buckets): GatherUnit makes one group's weights whole (values
//    and masters; all-gathered for a save, zeros for a load to fill),
//    the I/O reads or writes them, and ShardUnit (keeping the owned
//    blocks of what was loaded) drops them before the next group.
// whole_bytes() counts the bytes of whole weights held (gathered buffers,
// values and masters, and what a caller materialized before the
// materialized-parameters constructor took its blocks); its high-water
// mark, peak_whole_bytes(), is what the tests bound by the largest units.
// GatherAll / ShardAll are GatherUnit / ShardUnit over every parameter,
// for tests that compare whole weights.
//
// Thread safety: none; the training thread drives it. Acquire and
// GatherUnit (gathering) are collective over dp (every dp rank walks the same
// units in the same order).
#ifndef TRELLIS_PARALLEL_SHARDED_PARAMETERS_H_
#define TRELLIS_PARALLEL_SHARDED_PARAMETERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/parameter.h"

namespace trellis {

class ShardedParameters {
 public:
  // REQUIRES: `buckets` are kShardGradients and outlive this; every
  // parameter in them is materialized (value, and master for bfloat16).
  // Copies this rank's block of each bucket's weights and releases the
  // parameters' values and masters. The whole weights the caller made
  // count in peak_whole_bytes(); the trainer uses the form below, which
  // never makes them.
  explicit ShardedParameters(GradientBuckets& buckets);
  // REQUIRES: `buckets` as above; every parameter in them is in `declared`
  // and not materialized (ParameterSet::TakeDeclarations), all of one
  // dtype. Makes the owned blocks and, with kInitialize, fills them from
  // the initializers; with kZero leaves them zero (a load follows).
  ShardedParameters(GradientBuckets& buckets,
                    const std::vector<ParameterDeclaration>& declared,
                    ParameterFill fill);
  ~ShardedParameters();

  void Acquire(const std::vector<Parameter*>& unit,
               const std::vector<Parameter*>& next);
  void Release(const std::vector<Parameter*>& unit);

  // Bucket b's owned block of the full-precision weights (the float32
  // master where values are bfloat16), what the optimizer steps.
  Tensor OwnedWeights(int b) const;
  // Rounds bucket b's owned values from its owned masters (a no-op
  // without masters).
  void RefreshOwned(int b);

  // Makes every parameter of `unit`'s buckets whole (values and, for
  // bfloat16, masters): all-gathered over dp (collective, blocking) when
  // `gather`, else zeros for a load to fill (no communication).
  // REQUIRES: none of those buckets is acquired or gathered.
  void GatherUnit(const std::vector<Parameter*>& unit, bool gather);
  // Undoes GatherUnit; with `keep`, the owned blocks first take the whole
  // weights' elements (after a load).
  void ShardUnit(const std::vector<Parameter*>& unit, bool keep);
  // `units` (the gather units, in order) as the groups checkpoint I/O
  // walks: each the members of the buckets of a unit not in an earlier
  // group (every bucket in exactly one group; empty groups left out).
  std::vector<std::vector<Parameter*>> IoGroups(
      const std::vector<std::vector<Parameter*>>& units) const;
  // GatherUnit (gathering) and ShardUnit over every parameter.
  void GatherAll();
  void ShardAll(bool keep);

  // Elements this rank keeps per buffer kind (its blocks, padding
  // included).
  int64_t owned_elements() const;
  // All-gathers issued, and the most bytes of gathered buffers held at
  // once, since construction.
  int64_t gathers() const { return gathers_; }
  size_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  size_t gathered_bytes() const { return gathered_bytes_; }
  // Bytes of whole weights held now and at most at once since
  // construction (see the contract above).
  size_t whole_bytes() const { return whole_bytes_; }
  size_t peak_whole_bytes() const { return peak_whole_bytes_; }

 private:
  struct Slot {
    Tensor owned;         // (block) in the values' dtype
    Tensor owned_master;  // (block) float32, for bfloat16 values
    Tensor full;          // (elements) while gathered or gathering
    Tensor full_master;   // (elements) under GatherUnit only
    std::unique_ptr<Request> request;
    int refs = 0;         // acquired units holding it
    bool wanted = false;  // prefetched, not yet acquired
    bool bound = false;   // the members' values view `full`
  };
  // Allocates the owned blocks (zeros) of every bucket.
  void MakeBlocks(DType dtype, Device device);
  // Copies bucket b's owned blocks from its members' whole weights.
  void KeepBlocks(int b);
  // Whole-weight bytes taken and given back.
  void Hold(size_t bytes);
  void Free(size_t bytes);
  // Every bucket's members.
  std::vector<Parameter*> all_parameters() const;
  // Starts bucket b's all-gather into a new buffer unless one exists.
  void Launch(int b);
  // Waits for bucket b's gather and points its members' values at it.
  void Bind(int b);
  // Drops bucket b's buffer; its members' values become undefined.
  void Drop(int b);
  // This rank's block of a buffer of bucket b's size.
  Tensor Block(const Tensor& buffer, int b) const;

  GradientBuckets& buckets_;
  DType dtype_ = DType::kF32;  // the values'
  std::vector<Slot> slots_;
  int64_t gathers_ = 0;
  size_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
  size_t whole_bytes_ = 0, peak_whole_bytes_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_SHARDED_PARAMETERS_H_
