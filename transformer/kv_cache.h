// KvCache: the keys and values of every layer of one sequence, kept while
// it is decoded token by token (text generation).
//
// Layer l holds keys(l) and values(l), each (capacity, kv_width): row t is
// the position-t token's key (value) heads on this tensor-parallel rank,
// kv_width = Hkv/tp · D, RoPE applied to keys where the family rotates.
// Rows [0, length()) are filled; a forward over n new tokens writes rows
// [length(), length() + n) of every layer, then Advance(n) commits them.
//
// Thread safety: none; one thread drives a decoder and its cache.
#ifndef TRELLIS_TRANSFORMER_KV_CACHE_H_
#define TRELLIS_TRANSFORMER_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "framework/tensor.h"

namespace trellis {

class KvCache {
 public:
  // Allocates the whole cache (2 · layers · capacity · kv_width elements).
  KvCache(int64_t layers, int64_t capacity, int64_t kv_width, DType dtype,
          Device device);

  int64_t layers() const { return static_cast<int64_t>(keys_.size()); }
  int64_t capacity() const { return capacity_; }
  // Tokens cached: the position the next token takes.
  int64_t length() const { return length_; }
  // Tokens that still fit.
  int64_t free() const { return capacity_ - length_; }

  Tensor& keys(int64_t layer);
  Tensor& values(int64_t layer);

  // Commits n tokens written at rows [length(), length() + n).
  // REQUIRES: n <= free().
  void Advance(int64_t n);
  // Forgets every token (the memory stays).
  void Clear() { length_ = 0; }
  size_t bytes() const;

 private:
  int64_t capacity_;
  int64_t length_ = 0;
  std::vector<Tensor> keys_, values_;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_KV_CACHE_H_
