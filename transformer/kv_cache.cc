#include "transformer/kv_cache.h"

#include "framework/status.h"

namespace trellis {

KvCache::KvCache(int64_t layers, int64_t capacity, int64_t kv_width,
                 DType dtype, Device device)
    : capacity_(capacity) {
  TRELLIS_CHECK(layers >= 0 && capacity > 0 && kv_width > 0)
      << layers << " layers, capacity " << capacity << ", width " << kv_width;
  for (int64_t l = 0; l < layers; ++l) {
    keys_.push_back(Tensor::Empty({capacity, kv_width}, dtype, device));
    values_.push_back(Tensor::Empty({capacity, kv_width}, dtype, device));
  }
}

Tensor& KvCache::keys(int64_t layer) {
  TRELLIS_CHECK(layer >= 0 && layer < layers()) << "layer " << layer;
  return keys_[layer];
}

Tensor& KvCache::values(int64_t layer) {
  TRELLIS_CHECK(layer >= 0 && layer < layers()) << "layer " << layer;
  return values_[layer];
}

void KvCache::Advance(int64_t n) {
  TRELLIS_CHECK(n >= 0 && n <= free()) << "advancing " << n << " tokens with "
                                       << free() << " free of " << capacity_;
  length_ += n;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (size_t l = 0; l < keys_.size(); ++l) {
    total += keys_[l].nbytes() + values_[l].nbytes();
  }
  return total;
}

}  // namespace trellis
