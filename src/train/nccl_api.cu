// Loading NCCL at run time (see nccl_api.h). The handle is never closed: NCCL's own threads may
// outlive any object of ours, and the library stays for the process.
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "kiln/types.h"
#include "train/nccl_api.h"

namespace kiln::train {

namespace {

constexpr const char* kLibrary = "libnccl.so.2";

template <class F>
void load(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) throw Error(std::string(kLibrary) + " has no " + name + "; install NCCL 2.10 or newer");
}

NcclApi load_api() {
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    throw Error(std::string("--gpus: data-parallel training needs NCCL, but ") + kLibrary + " could not be loaded (" +
                (why ? why : "not found") +
                "); install NCCL (it comes with the CUDA toolkit's nccl package and with PyTorch's "
                "nvidia-nccl wheel) and put its lib folder on LD_LIBRARY_PATH");
  }
  NcclApi api;
  load(lib, "ncclGetVersion", api.get_version);
  load(lib, "ncclGetErrorString", api.error_string);
  load(lib, "ncclCommInitAll", api.comm_init_all);
  load(lib, "ncclCommDestroy", api.comm_destroy);
  load(lib, "ncclCommAbort", api.comm_abort);
  load(lib, "ncclAllReduce", api.all_reduce);
  load(lib, "ncclGroupStart", api.group_start);
  load(lib, "ncclGroupEnd", api.group_end);
  api.check(api.get_version(&api.version), "ncclGetVersion");
  return api;
}

}  // namespace

void NcclApi::check(ncclResult_t r, std::string_view what) const {
  if (r != ncclSuccess) throw Error(std::string(what) + ": " + (error_string ? error_string(r) : "NCCL error"));
}

const NcclApi& nccl_api() {
  // call_once rethrows to every caller until a load succeeds, so a failed load can be retried.
  static std::once_flag once;
  static NcclApi api;
  std::call_once(once, [] { api = load_api(); });
  return api;
}

}  // namespace kiln::train
