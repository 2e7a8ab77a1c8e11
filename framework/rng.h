// Counter-based random numbers: every value is a pure function of
// (seed, stream, index), with no state to carry. trellis initializes each
// parameter element from (seed, hash of the parameter's logical name, the
// element's index in the whole logical tensor), so every parallel layout
// starts from the same weights.
//
// Thread safety: all functions are pure.
#ifndef TRELLIS_FRAMEWORK_RNG_H_
#define TRELLIS_FRAMEWORK_RNG_H_

#include <cstdint>
#include <string>

namespace trellis {

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
