// The NCCL functions data-parallel training calls, loaded at run time (dlopen of libnccl.so.2) the
// first time `--gpus N` asks for them. Linking NCCL would make every kiln program need the 200 MB
// library at start-up, also on machines that train on one GPU or only run engines; loading it on
// demand keeps the runtime and single-GPU training free of it, and a missing NCCL becomes a clear
// error naming the library instead of a loader failure. nccl.h (CUDA toolkit) gives the types.
#pragma once

#include <nccl.h>

#include <string_view>

namespace kiln::train {

struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  int version = 0;  // e.g. 22805 for 2.28.5

  // Throws kiln::Error "<what>: <NCCL's message>" unless r is ncclSuccess.
  void check(ncclResult_t r, std::string_view what) const;
};

// Loads NCCL once per process; throws kiln::Error naming libnccl.so.2 and what to do if it is
// missing or lacks a function.
const NcclApi& nccl_api();

// One replica's place in a data-parallel group: its communicator, rank and the group's size.
struct ReplicaGroup {
  const NcclApi* api = nullptr;
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1;
};

}  // namespace kiln::train
