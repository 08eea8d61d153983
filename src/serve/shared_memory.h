// Triton's system shared memory extension: regions a client registers by the key of a POSIX shared
// memory object (shm_open), mapped here, that requests name instead of sending tensor bytes. A region
// stays mapped while a request still uses it, even after it is unregistered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace kiln::serve {

struct SharedMemoryRegion {
  std::string name, key;
  uint64_t offset = 0, byte_size = 0;
  std::byte* base = nullptr;  // the mapping
  size_t mapped = 0;
  bool pinned = false;  // page-locked for the GPU (cudaHostRegister): copied to a device by DMA
  std::byte* data() const { return base + offset; }  // the region's first byte
  ~SharedMemoryRegion();
};

class SharedMemoryRegistry {
 public:
  // Throws RequestError (bad request) naming the region: a name already registered, a key that
  // does not open, a region past the object's end.
  void add(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size);
  // Unregisters one region ("" : all); unknown names are not an error (Triton's behaviour).
  void remove(const std::string& name);
  std::vector<std::shared_ptr<const SharedMemoryRegion>> status(const std::string& name) const;
  // The bytes [offset, offset + bytes) of a region, for a tensor `what`; throws RequestError naming
  // it when the region is unknown or too small.
  std::span<std::byte> slice(const std::string& region, uint64_t offset, uint64_t bytes, const std::string& what,
                             std::shared_ptr<const SharedMemoryRegion>& keep) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const SharedMemoryRegion>> regions_;
};

}  // namespace kiln::serve
