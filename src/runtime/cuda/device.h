// Which CUDA device Kiln would run on. Usable in every build: without CUDA (KILN_HAVE_CUDA unset)
// gpu_available() is false and gpu_target() throws.
#pragma once

#include <cstddef>
#include <string>

namespace kiln::gpu {

// True if the CUDA runtime finds a driver and at least one device. Never crashes or throws: a
// machine without a driver (or a CPU-only build) just answers false.
bool gpu_available();

// The compute capability of device 0 as an nvcc target name, e.g. "sm_90" for an H100 or H200.
// Throws kiln::Error "no CUDA device: <CUDA's reason>" if there is none.
std::string gpu_target();

// The GPU libraries this Kiln runs with: the CUDA runtime it was compiled with (CUDART_VERSION,
// 13000 for 13.0), cuDNN and cuBLASLt as loaded (cudnnGetVersion() 91900 for 9.19.0,
// cublasLtGetVersion()). Zeros in a CPU-only build.
struct LibraryVersions {
  int cuda = 0, cudnn = 0, cublaslt = 0;
};
LibraryVersions library_versions();

// "CUDA 13.0, cuDNN 9.19.0, cuBLASLt 13.1.0"; "-" where all are 0.
std::string describe_libraries(const LibraryVersions& v);

// A GPU architecture for messages: "sm_87 (Jetson Orin)", "sm_90 (Hopper: H100, H200)", or the
// target itself where Kiln knows no name for it.
std::string describe_arch(const std::string& target);

// Why a GPU engine built for `target` with the libraries `built` cannot run on a GPU of `arch` with
// the libraries `here`, as a sentence naming both sides; empty if it can. Another architecture,
// another CUDA major version, cuDNN's or cuBLASLt's major.minor (their tactics and engine
// configurations belong to a version): each needs the engine rebuilt. Versions recorded as 0
// (unknown) are not compared.
std::string engine_mismatch(const std::string& target, const LibraryVersions& built, const std::string& arch,
                            const LibraryVersions& here);

// ---- The kernels of another GPU. `kiln optimize --target-arch sm_87` on a newer GPU builds an
// engine that uses only the kernels a device of compute capability 8.7 has: Kiln's mma.sync
// kernels (compiled for this GPU), no wgmma, clusters, TMA or programmatic dependent launch, and
// at most its shared memory per block. The limit belongs to a thread: the builder sets it while it
// builds, a context while it runs an engine built that way (the engine records it), and
// KILN_TARGET_ARCH sets it for a whole process (every GPU test can run that way). cuDNN and
// cuBLASLt still pick their kernels for the GPU they run on.

// The compute capability a target name gives: "sm_87", "87" or "8.7" -> 87; 0 where it gives none.
int parse_arch(const std::string& s);

// The most shared memory one block may opt into on compute capability `arch` (the CUDA
// programming guide's table: 166912 bytes on 8.0 and 8.7, 232448 on 9.0); 48 KiB where Kiln knows
// no figure.
size_t max_block_smem_of(int arch);

// The compute capability this thread's builds and runs are limited to; 0: none (the device's own
// kernels). Starts as KILN_TARGET_ARCH where that is set.
int kernel_arch_limit();

// Limits this thread to `arch`'s kernels while it lives (arch 0: leaves the limit as it is; with
// kExactly, arch 0 lifts it: a context runs an engine with the limit it was built with, none
// included).
class KernelArchScope {
 public:
  enum Mode { kWithin, kExactly };
  explicit KernelArchScope(int arch, Mode mode = kWithin);
  ~KernelArchScope();
  KernelArchScope(const KernelArchScope&) = delete;
  KernelArchScope& operator=(const KernelArchScope&) = delete;

 private:
  int saved_;
};

}  // namespace kiln::gpu
