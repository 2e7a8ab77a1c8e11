// Counter-based random numbers: every value is a pure function of
// (seed, stream, index), with no state to carry. trellis initializes each
// parameter element from (seed, hash of the parameter's logical name, the
// element's index in the whole logical tensor), so every parallel layout
// starts from the same weights.
//
// SplitMix64 here is the one copy of the mix every seeded stream in
// trellis is built from (initialization, the samplers' permutations, the
// blends' schedules, tensor checksums); their values must never change, as
// tests and resumed runs compare against them.
//
// Thread safety: all functions are pure.
#ifndef TRELLIS_FRAMEWORK_RNG_H_
#define TRELLIS_FRAMEWORK_RNG_H_

#include <cstdint>
#include <string>

namespace trellis {

// SplitMix64's finalizer (Stafford's mix 13): a bijection of 64 bits in
// which every input bit reaches every output bit.
constexpr uint64_t SplitMix64Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// SplitMix64's output for state `x`: the golden-ratio increment, then the
// finalizer. Also a bijective avalanche mix.
constexpr uint64_t SplitMix64(uint64_t x) {
  return SplitMix64Finalize(x + 0x9e3779b97f4a7c15ULL);
}

// 64-bit FNV-1a of `text`: the stream id of a logical name.
uint64_t HashName(const std::string& text);

// A well-mixed 64-bit value for (seed, stream, index).
uint64_t RandomBits(uint64_t seed, uint64_t stream, uint64_t index);

// Uniform in (0, 1), 53 random bits.
double UniformAt(uint64_t seed, uint64_t stream, uint64_t index);

// Standard normal via Box-Muller on two uniforms of the same counter.
double NormalAt(uint64_t seed, uint64_t stream, uint64_t index);

// The part of (seed, stream) that every index of the stream shares:
// NormalAtKey(StreamKey(seed, stream), i) == NormalAt(seed, stream, i) to
// the bit, computing the key once for a whole tensor.
uint64_t StreamKey(uint64_t seed, uint64_t stream);
double NormalAtKey(uint64_t key, uint64_t index);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_RNG_H_
