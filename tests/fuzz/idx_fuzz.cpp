// libFuzzer target for read_idx: any byte string, as a plain or gzipped IDX file, must either
// parse or throw kiln::Error. Crashes, sanitizer reports, other exceptions (std::bad_alloc from an
// unchecked size included) and timeouts are bugs.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path kPath =
      std::filesystem::temp_directory_path() / ("kiln_idx_fuzz_" + std::to_string(getpid()));
  {
    std::ofstream out(kPath, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    kiln::HostTensor t = kiln::data::read_idx(kPath);
    if (t.data.size() != static_cast<size_t>(t.numel()) * kiln::dtype_size(t.dtype)) __builtin_trap();
  } catch (const kiln::Error&) {
  }
  return 0;
}
