#include "runtime/engine_format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::format {

uint64_t checksum(std::span<const uint8_t> bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

}  // namespace kiln::format
