// The engine file layout, shared by the writer (src/passes) and the loader (src/runtime):
//
//   offset 0     EngineHeader (64 bytes, little-endian)
//   offset 64    table of contents: a flatbuffer (engine_schema.fbs)
//   ...          zero padding to a multiple of kWeightAlign (4096)
//   weights      the weight blob; each tensor starts at a multiple of kTensorAlign (64)
//
// checksum = XXH64(the whole file with the checksum field set to zero, seed 0), so damage to the
// header is caught as well as damage to the contents. The weights start page aligned so that the
// file can be mapped and the weights used in place.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace kiln::format {

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'N', 'G', 0};
// Version 2 added views (Tensor.base); version 3 NhwcConv's x_channels_first; version 4 QConv's
// pool_mean; version 5 shape ranges (Engine.ranges, Engine.buckets); version 6 the ops
// NonMaxSuppression and NonZero (the OpKind codes after them moved); version 7 the op Attention
// (likewise); version 8 Attention's packed_qkv; version 9 its mask_period; version 10 the CUDA,
// cuDNN and cuBLASLt versions of GPU engines; version 11 the kernel architecture limit
// (--target-arch). Files of other versions are refused: rebuild them.
inline constexpr uint32_t kVersion = 11;
inline constexpr uint64_t kWeightAlign = 4096;
inline constexpr uint64_t kTensorAlign = 64;

struct EngineHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;  // sizeof(EngineHeader), so later versions can grow it
  uint64_t toc_offset;
  uint64_t toc_bytes;
  uint64_t weights_offset;
  uint64_t weights_bytes;
  uint64_t checksum;
  uint64_t reserved;
};
static_assert(sizeof(EngineHeader) == 64);

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Checksum of a whole engine file, computed as if its checksum field were zero.
uint64_t checksum(std::span<const uint8_t> file);

// A table of contents' vector of int64 (a shape, a bucket's sizes), copied out: the flatbuffers
// verifier only guarantees 4-byte alignment, so the elements are copied byte-wise rather than read
// in place. Null gives an empty vector.
template <class FlatVector>
std::vector<int64_t> read_longs(const FlatVector* v) {
  std::vector<int64_t> r;
  if (!v) return r;
  r.resize(v->size());
  if (!r.empty()) std::memcpy(r.data(), v->Data(), r.size() * sizeof(int64_t));
  return r;
}

}  // namespace kiln::format
