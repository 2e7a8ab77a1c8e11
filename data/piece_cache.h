// A bounded cache from a pre-tokenized piece of text to its token ids,
// shared by the BPE tokenizers: most pieces of real text repeat, so their
// merges are computed once.
//
// Sharded by hash so concurrent encoders rarely contend; a shard that grows
// past its bound is emptied, which keeps memory bounded on text with endless
// distinct pieces.
//
// Thread safety: Find and Insert may run on many threads at once.
#ifndef TRELLIS_DATA_PIECE_CACHE_H_
#define TRELLIS_DATA_PIECE_CACHE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace trellis {

class PieceCache {
 public:
  // Longer pieces are not worth caching (they rarely repeat).
  static constexpr size_t kMaxPieceBytes = 128;

  // Appends the cached ids of `piece` to `out`; false when not cached.
  bool Find(std::string_view piece, std::vector<uint32_t>& out) const {
    const Shard& shard = shards_[Hash{}(piece) % kShards];
    absl::ReaderMutexLock lock(&shard.mu);
    const auto it = shard.map.find(piece);
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void Insert(std::string_view piece, std::span<const uint32_t> ids) {
    Shard& shard = shards_[Hash{}(piece) % kShards];
    absl::MutexLock lock(&shard.mu);
    if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
    shard.map.try_emplace(std::string(piece), ids.begin(), ids.end());
  }

 private:
  static constexpr size_t kShards = 64;
  static constexpr size_t kMaxEntriesPerShard = 8192;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const {
      return std::hash<std::string_view>{}(s);
    }
  };
  struct Shard {
    mutable absl::Mutex mu;
    std::unordered_map<std::string, std::vector<uint32_t>, Hash,
                       std::equal_to<>>
        map;
  };
  std::array<Shard, kShards> shards_;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_PIECE_CACHE_H_
