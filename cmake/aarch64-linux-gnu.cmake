# Cross-compiling Kiln for 64-bit Arm Linux (Jetson boards, Arm servers) on an x86-64 Debian or
# Ubuntu machine: GCC's aarch64-linux-gnu cross compiler, the arm64 -dev packages installed beside
# the native ones (Debian multiarch: /usr/lib/aarch64-linux-gnu), host tools (protoc, flatc,
# grpc_cpp_plugin) from the build machine. scripts/build_jetson.sh sets it up and uses it:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# With CUDA, the toolkit needs a targets/aarch64-linux folder (include/ shared with the build
# machine's, lib/ with the aarch64 libraries from PyPI's wheels); scripts/build_jetson.sh makes it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Libraries, headers and CMake packages of the target only; programs (protoc, flatc) of the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Tests run target programs through qemu. The arm64 C library and loader come with the multiarch
# packages (/lib/ld-linux-aarch64.so.1), so qemu needs no -L: with -L /usr/aarch64-linux-gnu (the
# cross compiler's copy) qemu 7.2 hangs in the first pthread_create of a dynamically linked program.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
set(PKG_CONFIG_EXECUTABLE aarch64-linux-gnu-pkg-config CACHE FILEPATH "")
# CUDA: nvcc of the build machine with the cross compiler as host compiler, headers and aarch64
# libraries from the toolkit's targets/aarch64-linux (scripts/build_jetson.sh puts PyPI's aarch64
# CUDA runtime, cuBLAS and cuDNN libraries there, as NVIDIA's cross-compilation package does).
set(CMAKE_CUDA_HOST_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_CUDA_FLAGS_INIT "-target-dir aarch64-linux")
set(CMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE PRE_TEST)  # list tests when ctest runs, not at build time under qemu
