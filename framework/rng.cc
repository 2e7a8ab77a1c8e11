#include "framework/rng.h"

#include <cmath>
#include <numbers>

namespace trellis {
namespace {

double ToUnit(uint64_t bits) {
  // 53 bits, shifted off zero so log() below is finite.
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

uint64_t HashName(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

uint64_t StreamKey(uint64_t seed, uint64_t stream) {
  return SplitMix64(SplitMix64(seed) ^ stream);
}

uint64_t RandomBits(uint64_t seed, uint64_t stream, uint64_t index) {
  return SplitMix64(StreamKey(seed, stream) ^ index);
}

double UniformAt(uint64_t seed, uint64_t stream, uint64_t index) {
  return ToUnit(RandomBits(seed, stream, index));
}

double NormalAt(uint64_t seed, uint64_t stream, uint64_t index) {
  return NormalAtKey(StreamKey(seed, stream), index);
}

double NormalAtKey(uint64_t key, uint64_t index) {
  const double u1 = ToUnit(SplitMix64(key ^ (2 * index)));
  const double u2 = ToUnit(SplitMix64(key ^ (2 * index + 1)));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace trellis
