// MemoryArena: one allocation on a device, carved into tensor storage.
//
// A training run knows before its first step how many bytes its weights,
// gradients, optimizer moments and activations take (the memory plan). It
// reserves them as one arena and, while an ArenaScope for that arena is
// alive, every Storage::Allocate on the arena's device takes a block from
// it instead of asking the device allocator (cudaMalloc synchronizes the
// device and cudaFree waits for it; the arena does neither):
//
//   auto arena = MemoryArena::Create(plan.total() + headroom, device);
//   ArenaScope scope(arena);           // Tensor::Empty now draws on it
//   ... build the model, train ...
//
// Blocks are aligned to kAlignment bytes and chosen best fit; a freed block
// merges with free neighbours. A request that no free block can hold is
// served by the device allocator instead and counted (Stats::fallbacks), so
// an arena that was sized too small costs speed, never a failed run.
//
// Stream safety on CUDA: a block freed on the host may be handed out again
// while kernels that used it are still queued. That is safe because trellis
// issues all kernels and copies of a device in order on its compute stream,
// and communication requests hold their buffers until the compute stream
// has been ordered after them (parallel/nccl_communicator.h).
//
// A block keeps its arena alive, so tensors may outlive the scope and the
// last owner of the arena.
//
// Thread safety: Allocate, the release of blocks and stats() may be called
// from any thread. Scopes are process-wide: one created on one thread
// routes the allocations of every thread.
#ifndef TRELLIS_FRAMEWORK_MEMORY_ARENA_H_
#define TRELLIS_FRAMEWORK_MEMORY_ARENA_H_

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "framework/tensor.h"

namespace trellis {

class ArenaBlock;

class MemoryArena : public std::enable_shared_from_this<MemoryArena> {
 public:
  static constexpr size_t kAlignment = 256;

  // Reserves `capacity` bytes (rounded up to kAlignment) on `device` with
  // one device allocation.
  static std::shared_ptr<MemoryArena> Create(size_t capacity, Device device);
  ~MemoryArena();
  MemoryArena(const MemoryArena&) = delete;
  MemoryArena& operator=(const MemoryArena&) = delete;

  Device device() const { return device_; }
  size_t capacity() const { return capacity_; }
  // Whether `data` points into the reservation.
  bool Contains(const void* data) const {
    const char* p = static_cast<const char*>(data);
    const char* base = static_cast<const char*>(base_);
    return p >= base && p < base + capacity_;
  }

  // A block of at least `bytes` bytes, returned to the arena when the last
  // copy of `*owner` goes; null (and `*owner` untouched) when no free block
  // is large enough.
  void* Allocate(size_t bytes, std::shared_ptr<void>* owner);

  struct Stats {
    size_t in_use = 0;        // bytes of live blocks (rounded sizes)
    size_t peak_in_use = 0;   // the most at once
    size_t largest_free = 0;  // the largest block Allocate could return
    size_t blocks = 0;        // live blocks
    size_t fallbacks = 0;     // requests served by the device allocator
    size_t fallback_bytes = 0;
  };
  Stats stats() const;
  // Counts a request that was served outside the arena.
  void RecordFallback(size_t bytes);

 private:
  friend class ArenaBlock;
  MemoryArena(void* base, size_t capacity, Device device);
  void Release(size_t offset);
  void AddFree(size_t offset, size_t size);
  void RemoveFree(std::map<size_t, size_t>::iterator it);

  void* base_;
  size_t capacity_;
  Device device_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_by_offset_;           // offset -> size
  std::set<std::pair<size_t, size_t>> free_by_size_;  // (size, offset)
  std::unordered_map<size_t, size_t> used_;           // offset -> size
  Stats stats_;
};

// While alive, Storage::Allocate on `arena->device()` draws on `arena`.
// Scopes nest: the newest live scope for a device wins.
class ArenaScope {
 public:
  explicit ArenaScope(std::shared_ptr<MemoryArena> arena);
  ~ArenaScope();
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

  const std::shared_ptr<MemoryArena>& arena() const { return arena_; }

 private:
  std::shared_ptr<MemoryArena> arena_;
};

// For Storage::Allocate: a block of the arena in scope for `device`, or
// null when there is none or it has no room (then counted as a fallback).
void* AllocateFromScopedArena(size_t bytes, Device device,
                              std::shared_ptr<void>* owner);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_MEMORY_ARENA_H_
