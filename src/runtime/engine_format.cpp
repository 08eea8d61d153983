#include "runtime/engine_format.h"

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::format {

uint64_t checksum(std::span<const uint8_t> file) {
  if (file.size() < sizeof(EngineHeader)) return XXH64(file.data(), file.size(), 0);
  EngineHeader h;
  std::memcpy(&h, file.data(), sizeof h);
  h.checksum = 0;
  XXH64_state_t state;
  XXH64_reset(&state, 0);
  XXH64_update(&state, &h, sizeof h);
  XXH64_update(&state, file.data() + sizeof h, file.size() - sizeof h);
  return XXH64_digest(&state);
}

}  // namespace kiln::format
