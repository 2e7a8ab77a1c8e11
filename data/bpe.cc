#include "data/bpe.h"

#include <algorithm>

namespace trellis {
namespace {

constexpr uint32_t kDeadSymbol = 0xFFFFFFFFu;

}  // namespace

void BpeMerges::Add(uint32_t left, uint32_t right, uint32_t merged) {
  merges_.insert_or_assign(Key(left, right), Merge{next_rank_++, merged});
}

// Symbols form a linked list; a merge keeps the left symbol and kills the
// right one. Candidate pairs wait in a min-heap by rank. All candidates of
// the lowest rank are merged as one left-to-right pass; stale candidates are
// recognised by their ids no longer matching.
void BpeMerges::Apply(std::span<const uint32_t> initial,
                      std::vector<uint32_t>& out) const {
  struct Symbol {
    uint32_t id;
    int prev;
    int next;
  };
  struct Candidate {
    uint32_t rank;
    int pos;  // the left symbol
    uint32_t left, right, merged;
  };
  const int n = static_cast<int>(initial.size());
  if (n == 0) return;
  std::vector<Symbol> symbols(n);
  for (int i = 0; i < n; ++i) {
    symbols[i] = {initial[i], i - 1, i + 1 < n ? i + 1 : -1};
  }
  std::vector<Candidate> heap;
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank;
  };
  const auto push_pair = [&](int pos) {
    const int next = symbols[pos].next;
    if (next < 0) return;
    const uint32_t left = symbols[pos].id, right = symbols[next].id;
    const auto it = merges_.find(Key(left, right));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, pos, left, right, it->second.merged_id});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);

  std::vector<Candidate> pass;
  while (!heap.empty()) {
    const uint32_t rank = heap.front().rank;
    pass.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), later);
      pass.push_back(heap.back());
      heap.pop_back();
    }
    std::sort(
        pass.begin(), pass.end(),
        [](const Candidate& a, const Candidate& b) { return a.pos < b.pos; });
    for (const Candidate& c : pass) {
      Symbol& left = symbols[c.pos];
      if (left.id != c.left || left.next < 0 ||
          symbols[left.next].id != c.right) {
        continue;  // stale, or overlapped by a merge just made
      }
      Symbol& right = symbols[left.next];
      left.id = c.merged;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = c.pos;
      right.id = kDeadSymbol;
      if (left.prev >= 0) push_pair(left.prev);
      push_pair(c.pos);
    }
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace trellis
