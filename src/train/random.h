// Counter-based random numbers for training: every draw is a pure function of (key, index), so the
// CPU and GPU backends draw the same dropout masks, initialization does not depend on the order in
// which tensors are filled, and a resumed run continues the same sequence without saved generator
// state. The mixer is splitmix64's finalizer (Steele et al., "Fast splittable pseudorandom number
// generators", 2014), which passes BigCrush on consecutive counters.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif

namespace kiln::train {

KILN_HD inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A key for one use of the seed, e.g. (seed, kDropout, layer index, step).
KILN_HD inline uint64_t derive_key(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}

KILN_HD inline uint64_t random_bits(uint64_t key, uint64_t index) { return mix64(key ^ mix64(index)); }

// Uniform in [0, 1) with 24 random bits: exact in float.
KILN_HD inline float dropout_uniform(uint64_t key, uint64_t index) {
  return static_cast<float>(random_bits(key, index) >> 40) * (1.0f / 16777216.0f);
}

// Uniform in (0, 1) with 53 random bits, never 0 (a logarithm follows in Box-Muller).
KILN_HD inline double uniform_open(uint64_t key, uint64_t index) {
  return (static_cast<double>(random_bits(key, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Streams of derive_key's second argument, one per use, so that uses never share draws.
enum RandomStream : uint64_t { kStreamInit = 1, kStreamShuffle = 2, kStreamDropout = 3, kStreamSplit = 4 };

}  // namespace kiln::train
