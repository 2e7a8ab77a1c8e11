#include "framework/memory_arena.h"

#include <algorithm>
#include <vector>

#include "framework/device_memory.h"

namespace trellis {
namespace {

size_t RoundUp(size_t bytes) {
  const size_t a = MemoryArena::kAlignment;
  return (std::max<size_t>(bytes, 1) + a - 1) / a * a;
}

// The live scopes, oldest first.
struct ScopeRegistry {
  std::mutex mu;
  std::vector<std::shared_ptr<MemoryArena>> arenas;
};

ScopeRegistry& Registry() {
  static ScopeRegistry* registry = new ScopeRegistry;  // never destroyed
  return *registry;
}

}  // namespace

// A live block: returns itself to its arena when the last owner goes, and
// keeps the arena alive until then.
class ArenaBlock {
 public:
  ArenaBlock(std::shared_ptr<MemoryArena> arena, size_t offset)
      : arena_(std::move(arena)), offset_(offset) {}
  ~ArenaBlock() { arena_->Release(offset_); }
  ArenaBlock(const ArenaBlock&) = delete;
  ArenaBlock& operator=(const ArenaBlock&) = delete;

 private:
  std::shared_ptr<MemoryArena> arena_;
  size_t offset_;
};

std::shared_ptr<MemoryArena> MemoryArena::Create(size_t capacity,
                                                 Device device) {
  const size_t rounded = RoundUp(capacity);
  void* base = DeviceAllocate(rounded, device);
  return std::shared_ptr<MemoryArena>(new MemoryArena(base, rounded, device));
}

MemoryArena::MemoryArena(void* base, size_t capacity, Device device)
    : base_(base), capacity_(capacity), device_(device) {
  AddFree(0, capacity);
}

MemoryArena::~MemoryArena() { DeviceFree(base_, device_); }

void MemoryArena::AddFree(size_t offset, size_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void MemoryArena::RemoveFree(std::map<size_t, size_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

void* MemoryArena::Allocate(size_t bytes, std::shared_ptr<void>* owner) {
  const size_t need = RoundUp(bytes);
  size_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Best fit: the smallest free block that holds `need`, lowest offset
    // among equals.
    const auto fit = free_by_size_.lower_bound({need, 0});
    if (fit == free_by_size_.end()) return nullptr;
    offset = fit->second;
    const size_t size = fit->first;
    RemoveFree(free_by_offset_.find(offset));
    if (size > need) AddFree(offset + need, size - need);
    used_.emplace(offset, need);
    stats_.in_use += need;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    ++stats_.blocks;
  }
  *owner = std::make_shared<ArenaBlock>(shared_from_this(), offset);
  return static_cast<char*>(base_) + offset;
}

void MemoryArena::Release(size_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto used = used_.find(offset);
  TRELLIS_CHECK(used != used_.end()) << "arena block at " << offset;
  size_t size = used->second;
  used_.erase(used);
  stats_.in_use -= size;
  --stats_.blocks;
  // Merge with the free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + size) {
    size += next->second;
    RemoveFree(next);
  }
  auto after = free_by_offset_.lower_bound(offset);
  if (after != free_by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      RemoveFree(prev);
    }
  }
  AddFree(offset, size);
}

MemoryArena::Stats MemoryArena::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.largest_free = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  return s;
}

void MemoryArena::RecordFallback(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.fallbacks;
  stats_.fallback_bytes += bytes;
}

ArenaScope::ArenaScope(std::shared_ptr<MemoryArena> arena)
    : arena_(std::move(arena)) {
  TRELLIS_CHECK(arena_ != nullptr);
  ScopeRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.arenas.push_back(arena_);
}

ArenaScope::~ArenaScope() {
  ScopeRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // Scopes usually end newest first, but need not.
  const auto it = std::find(r.arenas.rbegin(), r.arenas.rend(), arena_);
  TRELLIS_CHECK(it != r.arenas.rend());
  r.arenas.erase(std::next(it).base());
}

void* AllocateFromScopedArena(size_t bytes, Device device,
                              std::shared_ptr<void>* owner) {
  std::shared_ptr<MemoryArena> arena;
  {
    ScopeRegistry& r = Registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto it = r.arenas.rbegin(); it != r.arenas.rend(); ++it) {
      if ((*it)->device() == device) {
        arena = *it;
        break;
      }
    }
  }
  if (arena == nullptr) return nullptr;
  void* data = arena->Allocate(bytes, owner);
  if (data == nullptr) arena->RecordFallback(bytes);
  return data;
}

}  // namespace trellis
