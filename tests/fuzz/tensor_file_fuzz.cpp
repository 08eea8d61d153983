// libFuzzer target for read_tensor_file and read_sequence_file: any byte string, read as a .npy or
// a .pb file (a .pb also as a SequenceProto and an OptionalProto), must either parse or throw kiln::Error. Crashes,
// sanitizer reports, other exceptions (std::bad_alloc from an unchecked size included) and timeouts are bugs.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "graph/tensor_file.h"

namespace {

// One path per process and extension, reused across iterations; the pid keeps parallel fuzzing
// jobs (-jobs=N) from overwriting each other's inputs.
std::filesystem::path temp_path(const char* ext) {
  return std::filesystem::temp_directory_path() / ("kiln_tensor_file_fuzz_" + std::to_string(getpid()) + ext);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte picks the parser: inputs starting with the .npy magic byte (0x93) go to the
  // .npy reader, all others to the .pb reader. The .npy reader rejects anything else at its
  // magic check, so this spends no time there, and seed files of either format work unchanged.
  static const std::filesystem::path kNpy = temp_path(".npy");
  static const std::filesystem::path kPb = temp_path(".pb");
  const std::filesystem::path& path = (size > 0 && data[0] == 0x93) ? kNpy : kPb;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    kiln::HostTensor t = kiln::read_tensor_file(path);
    // A successful parse must hand back exactly numel * dtype_size bytes.
    if (t.data.size() != static_cast<size_t>(t.numel()) * kiln::dtype_size(t.dtype)) __builtin_trap();
  } catch (const kiln::Error&) {
    // Rejecting bad input with a kiln::Error is the expected outcome.
  }
  if (&path == &kPb) try {
      for (kiln::HostTensor& t : kiln::read_sequence_file(path))
        if (t.data.size() != static_cast<size_t>(t.numel()) * kiln::dtype_size(t.dtype)) __builtin_trap();
    } catch (const kiln::Error&) {
    }
  if (&path == &kPb) try {
      for (kiln::HostTensor& t : kiln::read_optional_file(path).values)
        if (t.data.size() != static_cast<size_t>(t.numel()) * kiln::dtype_size(t.dtype)) __builtin_trap();
    } catch (const kiln::Error&) {
    }
  return 0;
}
