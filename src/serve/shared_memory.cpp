#include "serve/shared_memory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "serve/request.h"

namespace kiln::serve {

namespace {
[[noreturn]] void bad(const std::string& what) { throw RequestError(RequestError::kBadRequest, what); }
}  // namespace

SharedMemoryRegion::~SharedMemoryRegion() {
#if defined(KILN_HAVE_CUDA)
  if (pinned) cudaHostUnregister(base);
#endif
  if (base) munmap(base, mapped);
}

void SharedMemoryRegistry::add(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size) {
  const std::string what = fmt::format("shared memory region '{}' (key '{}')", name, key);
  if (name.empty()) bad("a shared memory region needs a name");
  {
    std::lock_guard lock(mu_);
    if (regions_.count(name)) bad(what + " is already registered; unregister it first");
  }
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) bad(fmt::format("{}: cannot open the shared memory object: {}", what, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    bad(fmt::format("{}: cannot read its size: {}", what, std::strerror(errno)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (byte_size == 0 || offset > size || byte_size > size - offset) {
    close(fd);
    bad(fmt::format("{}: offset {} + byte_size {} is past the object's {} bytes", what, offset, byte_size, size));
  }
  auto r = std::make_shared<SharedMemoryRegion>();
  r->name = name;
  r->key = key;
  r->offset = offset;
  r->byte_size = byte_size;
  r->mapped = static_cast<size_t>(offset + byte_size);
  void* p = mmap(nullptr, r->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) bad(fmt::format("{}: cannot map it: {}", what, std::strerror(errno)));
  r->base = static_cast<std::byte*>(p);
#if defined(KILN_HAVE_CUDA)
  // Where there is a GPU, page-lock the region so that GPU engines copy inputs from it by DMA,
  // without a host copy; without one (or if the driver refuses) it is ordinary memory.
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0)
    r->pinned = cudaHostRegister(r->base, r->mapped, cudaHostRegisterPortable) == cudaSuccess;
  cudaGetLastError();
#endif
  fmt::print(stderr, "kiln serve: {} registered, {} bytes{}\n", what, byte_size,
             r->pinned ? ", page-locked for the GPU" : "");
  std::lock_guard lock(mu_);
  if (!regions_.emplace(name, std::move(r)).second) bad(what + " is already registered; unregister it first");
}

void SharedMemoryRegistry::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  if (name.empty())
    regions_.clear();
  else
    regions_.erase(name);
}

std::vector<std::shared_ptr<const SharedMemoryRegion>> SharedMemoryRegistry::status(const std::string& name) const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<const SharedMemoryRegion>> v;
  for (const auto& [n, r] : regions_)
    if (name.empty() || n == name) v.push_back(r);
  if (!name.empty() && v.empty())
    throw RequestError(RequestError::kNotFound, fmt::format("no shared memory region '{}' is registered", name));
  return v;
}

std::span<std::byte> SharedMemoryRegistry::slice(const std::string& region, uint64_t offset, uint64_t bytes,
                                                 const std::string& what,
                                                 std::shared_ptr<const SharedMemoryRegion>& keep) const {
  {
    std::lock_guard lock(mu_);
    auto it = regions_.find(region);
    if (it == regions_.end())
      bad(fmt::format("{}: no shared memory region '{}' is registered (register it first)", what, region));
    keep = it->second;
  }
  if (offset > keep->byte_size || bytes > keep->byte_size - offset)
    bad(fmt::format("{}: {} bytes at offset {} do not fit in shared memory region '{}' of {} bytes", what, bytes,
                    offset, region, keep->byte_size));
  return {keep->data() + offset, static_cast<size_t>(bytes)};
}

}  // namespace kiln::serve
