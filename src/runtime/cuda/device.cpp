#include "runtime/cuda/device.h"

#include <cstdio>
#include <cstdlib>

#include "kiln/types.h"

#if defined(KILN_HAVE_CUDA)
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#endif

namespace kiln::gpu {

#if defined(KILN_HAVE_CUDA)

namespace {

// The device count, or the CUDA error that prevented counting (no driver, driver too old, no
// device). The failed call's error is cleared so that it does not surface in a later
// cudaGetLastError (check_launch would misreport it as a launch failure).
cudaError_t device_count(int* n) {
  *n = 0;
  const cudaError_t err = cudaGetDeviceCount(n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    *n = 0;
  }
  return err;
}

}  // namespace

bool gpu_available() {
  int n = 0;
  return device_count(&n) == cudaSuccess && n > 0;
}

std::string gpu_target() {
  int n = 0;
  const cudaError_t err = device_count(&n);
  if (err != cudaSuccess) throw Error(std::string("no CUDA device: ") + cudaGetErrorString(err));
  if (n == 0) throw Error("no CUDA device: the CUDA runtime reports 0 devices");
  int major = 0, minor = 0;
  cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(std::string("no CUDA device: cannot read device 0's compute capability: ") + cudaGetErrorString(e));
  }
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

LibraryVersions library_versions() {
  return {CUDART_VERSION, static_cast<int>(cudnnGetVersion()), static_cast<int>(cublasLtGetVersion())};
}

#else  // a CPU-only build

bool gpu_available() { return false; }

std::string gpu_target() { throw Error("no CUDA device: Kiln was built without CUDA (KILN_CUDA=OFF)"); }

LibraryVersions library_versions() { return {}; }

#endif

std::string describe_arch(const std::string& target) {
  static const std::pair<const char*, const char*> known[] = {
      {"sm_70", "Volta: V100"},
      {"sm_72", "Jetson Xavier"},
      {"sm_75", "Turing: T4"},
      {"sm_80", "Ampere: A100"},
      {"sm_86", "Ampere: A10, RTX 30"},
      {"sm_87", "Jetson Orin"},
      {"sm_89", "Ada: L4, L40, RTX 40"},
      {"sm_90", "Hopper: H100, H200"},
      {"sm_100", "Blackwell: B200"},
      {"sm_110", "Jetson Thor"},
      {"sm_120", "Blackwell: RTX 50"},
  };
  for (const auto& [name, what] : known)
    if (target == name) return target + " (" + what + ")";
  return target;
}

namespace {

// 13000 -> "13.0"; 91900 -> "9.19.0"; 130100 -> "13.1.0".
std::string cuda_string(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
std::string library_string(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

}  // namespace

std::string describe_libraries(const LibraryVersions& v) {
  if (v.cuda == 0 && v.cudnn == 0 && v.cublaslt == 0) return "-";
  return "CUDA " + cuda_string(v.cuda) + ", cuDNN " + library_string(v.cudnn) + ", cuBLASLt " + library_string(v.cublaslt);
}

std::string engine_mismatch(const std::string& target, const LibraryVersions& built, const std::string& arch,
                            const LibraryVersions& here) {
  if (target != arch)
    return "the engine was built for " + describe_arch(target) + " but this GPU is " + describe_arch(arch);
  if (built.cuda != 0 && here.cuda != 0 && built.cuda / 1000 != here.cuda / 1000)
    return "the engine was built with CUDA " + cuda_string(built.cuda) + " but this Kiln runs CUDA " +
           cuda_string(here.cuda);
  if (built.cudnn != 0 && here.cudnn != 0 && built.cudnn / 100 != here.cudnn / 100)
    return "the engine was built with cuDNN " + library_string(built.cudnn) + " but this machine has cuDNN " +
           library_string(here.cudnn) + " (cuDNN's engine choices belong to its major.minor version)";
  if (built.cublaslt != 0 && here.cublaslt != 0 && built.cublaslt / 10000 != here.cublaslt / 10000)
    return "the engine was built with cuBLASLt " + library_string(built.cublaslt) + " but this machine has cuBLASLt " +
           library_string(here.cublaslt);
  return "";
}

int parse_arch(const std::string& s) {
  std::string d = s.rfind("sm_", 0) == 0 ? s.substr(3) : s;
  if (const size_t dot = d.find('.'); dot != std::string::npos && dot > 0 && d.size() == dot + 2)
    d.erase(dot, 1);  // "8.7"
  if (d.size() < 2 || d.size() > 3 || d[0] == '0') return 0;
  for (char c : d)
    if (c < '0' || c > '9') return 0;
  return std::stoi(d);
}

size_t max_block_smem_of(int arch) {
  switch (arch) {
    case 70:
    case 72: return 98304;
    case 75: return 65536;
    case 80:
    case 87: return 166912;
    case 86:
    case 89:
    case 120:
    case 121: return 101376;
    case 90:
    case 100:
    case 103:
    case 110: return 232448;
    default: return 48 * 1024;
  }
}

namespace {

int limit_from_environment() {
  static const int arch = [] {
    const char* v = std::getenv("KILN_TARGET_ARCH");
    if (!v || !*v) return 0;
    const int a = parse_arch(v);
    if (a == 0) std::fprintf(stderr, "kiln: KILN_TARGET_ARCH=%s is not an architecture such as sm_87; ignored\n", v);
    return a;
  }();
  return arch;
}

thread_local int t_limit = -1;  // -1: not set on this thread yet (KILN_TARGET_ARCH)

}  // namespace

int kernel_arch_limit() {
  if (t_limit < 0) t_limit = limit_from_environment();
  return t_limit;
}

KernelArchScope::KernelArchScope(int arch, Mode mode) : saved_(kernel_arch_limit()) {
  if (arch != 0 || mode == kExactly) t_limit = arch;
}

KernelArchScope::~KernelArchScope() { t_limit = saved_; }

}  // namespace kiln::gpu
