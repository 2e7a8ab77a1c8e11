// Byte-pair-encoding merges: the ranked list of (left, right) -> merged token
// rules shared by the gpt2 and hf tokenizers, and the merge loop that applies
// them to one pre-tokenized piece.
//
// Apply repeatedly merges the adjacent pair with the lowest rank, every
// non-overlapping occurrence left to right, until no adjacent pair has a
// rank. This is OpenAI's encoder.py and also what Hugging Face's BPE model
// computes (it merges the leftmost lowest-ranked pair one at a time, which
// reaches the same result).
//
// Thread safety: immutable after the last Add; Apply may run on many threads.
#ifndef TRELLIS_DATA_BPE_H_
#define TRELLIS_DATA_BPE_H_

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace trellis {

class BpeMerges {
 public:
  // Adds the rule with the next rank (the first Add has rank 0). A pair
  // added again keeps its last rank and merged id, as a dict built from the
  // merges list would.
  void Add(uint32_t left, uint32_t right, uint32_t merged);
  bool empty() const { return merges_.empty(); }
  size_t size() const { return merges_.size(); }

  // Merges the token ids `symbols` and appends the result to `out`.
  void Apply(std::span<const uint32_t> symbols,
             std::vector<uint32_t>& out) const;

 private:
  struct Merge {
    uint32_t rank;
    uint32_t merged_id;
  };
  static uint64_t Key(uint32_t left, uint32_t right) {
    return (static_cast<uint64_t>(left) << 32) | right;
  }

  std::unordered_map<uint64_t, Merge> merges_;
  uint32_t next_rank_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_BPE_H_
