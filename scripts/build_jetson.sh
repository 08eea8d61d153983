#!/usr/bin/env bash
# Cross-compiles Kiln for 64-bit Arm Linux (Jetson boards) on an x86-64 Debian 12 / Ubuntu machine
# into build-aarch64/: the runtime library, the `kiln` command (builder included: engines are built
# on the board) and the tests, with CUDA code for sm_87 (Orin) and sm_110 (Thor) plus PTX, linked
# against the aarch64 CUDA runtime, cuBLAS and cuDNN from PyPI's wheels. docs/jetson.md says more.
#
#   scripts/build_jetson.sh [--cpu-only] [--package] [TARGET...]
#
#   --cpu-only   no CUDA backend (what the qemu tests need: qemu runs no GPU code)
#   --package    also build the arm64 packages (cpack: tar.gz and .deb) into build-aarch64/
#   TARGET...    ninja targets (default: everything but the benchmarks)
# Environment: KILN_JETSON_ARCHS (default "87;110"), KILN_AARCH64_BUILD (default build-aarch64),
# KILN_AARCH64_CUDA_CACHE (where the wheels are kept, default ~/.cache/kiln/aarch64-cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
cpu_only=0 package=0 targets=()
for a in "$@"; do
  case "$a" in
    --cpu-only) cpu_only=1 ;;
    --package) package=1 ;;
    -*) echo "unknown option $a (see the comment at the top of $0)" >&2; exit 2 ;;
    *) targets+=("$a") ;;
  esac
done
BUILD=${KILN_AARCH64_BUILD:-build-aarch64}
ARCHS=${KILN_JETSON_ARCHS:-87;110}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# The cross compiler, qemu, and the arm64 -dev packages beside the native ones (Debian multiarch).
# libonnxifi:arm64 ships /usr/lib/libonnxifi.so, a path outside the multiarch folders that the
# amd64 package also owns (a packaging bug; Kiln uses neither copy), hence --force-overwrite.
arm_pkgs=(libprotobuf-dev libonnx-dev libonnxifi libfmt-dev libflatbuffers-dev libxxhash-dev libgtest-dev
          libgmock-dev libpng-dev libjpeg-dev zlib1g-dev libgrpc++-dev libcpp-httplib-dev)
missing=()
for p in g++-aarch64-linux-gnu qemu-user-static; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
for p in "${arm_pkgs[@]}"; do dpkg -s "$p:arm64" >/dev/null 2>&1 || missing+=("$p:arm64"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing the aarch64 cross-build packages: ${missing[*]}"
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o Dpkg::Options::=--force-overwrite \
    "${missing[@]}" >/dev/null
fi

# CUDA for aarch64: nvcc here compiles for the board with the cross compiler as host compiler; the
# aarch64 libraries come from PyPI's wheels, laid out as NVIDIA's cross-compilation package lays
# them (the toolkit's targets/aarch64-linux, its include folder shared with the host's).
cuda=/usr/local/cuda
if [ "$cpu_only" -eq 0 ]; then
  target="$cuda/targets/aarch64-linux"
  if [ ! -e "$target/lib/libcudnn.so" ]; then
    cache=${KILN_AARCH64_CUDA_CACHE:-$HOME/.cache/kiln/aarch64-cuda}
    mkdir -p "$cache"
    echo "== aarch64 CUDA libraries from PyPI (kept in $cache)"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$cache" --python-version 3.11 \
      --platform manylinux2014_aarch64 --platform manylinux_2_27_aarch64 --platform manylinux_2_28_aarch64 \
      "nvidia-cuda-runtime==13.0.*" "nvidia-cublas==13.*" "nvidia-cudnn-cu13==9.*"
    $SUDO mkdir -p "$target/lib"
    [ -e "$target/include" ] || $SUDO ln -s ../x86_64-linux/include "$target/include"
    for w in "$cache"/*.whl; do
      $SUDO unzip -o -q -j "$w" 'nvidia/*/lib/libcudart*' 'nvidia/*/lib/libcudadevrt.a' 'nvidia/*/lib/libcublas*.so.*' \
        'nvidia/*/lib/libcudnn.so.*' -d "$target/lib" 2>/dev/null || true
    done
    (cd "$target/lib" && for l in cudart cublas cublasLt; do $SUDO ln -sf "lib$l.so.13" "lib$l.so"; done &&
      $SUDO ln -sf libcudnn.so.9 libcudnn.so)
  fi
fi

launcher=()
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
export PATH="$PATH:$cuda/bin"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DKILN_BENCH=OFF -DKILN_CUDA=$([ "$cpu_only" -eq 1 ] && echo OFF || echo ON) -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
  "${launcher[@]}" >/dev/null
echo "== cross-compiling for aarch64 into $BUILD ($([ "$cpu_only" -eq 1 ] && echo "CPU only" || echo "CUDA $ARCHS"))"
ninja -C "$BUILD" -j"$(nproc)" "${targets[@]}" | grep -E "^FAILED|error" || true
ninja -C "$BUILD" -j"$(nproc)" "${targets[@]}" >/dev/null
file "$BUILD/kiln" 2>/dev/null | cut -d, -f1-2 || true
# The GPU code in kiln, per architecture: cuobjdump from the toolkit, or PyPI's
# nvidia-cuda-cuobjdump (the toolkit here may lack it), kept beside the aarch64 wheels.
if [ "$cpu_only" -eq 0 ] && [ -f "$BUILD/kiln" ]; then
  cuobjdump=$(command -v cuobjdump || true)
  tools=${KILN_AARCH64_CUDA_CACHE:-$HOME/.cache/kiln/aarch64-cuda}/tools
  if [ -z "$cuobjdump" ]; then
    mkdir -p "$tools"
    cuobjdump=$(find "$tools" -name cuobjdump -type f | head -n 1)
    if [ -z "$cuobjdump" ] &&
       python3 -m pip download -q --no-deps --only-binary=:all: -d "$tools" "nvidia-cuda-cuobjdump==13.*"; then
      (cd "$tools" && for w in *.whl; do unzip -o -q "$w"; done)
      cuobjdump=$(find "$tools" -name cuobjdump -type f | head -n 1)
      chmod +x "$cuobjdump"
    fi
  fi
  if [ -n "$cuobjdump" ]; then
    echo "== GPU code in $BUILD/kiln (cuobjdump --list-elf / --list-ptx)"
    "$cuobjdump" --list-elf "$BUILD/kiln" | grep -o 'sm_[0-9a-z]*' | sort | uniq -c | sed 's/^/  SASS /'
    "$cuobjdump" --list-ptx "$BUILD/kiln" | grep -o 'sm_[0-9a-z]*' | sort | uniq -c | sed 's/^/  PTX  /'
  fi
fi
if [ "$package" -eq 1 ]; then
  (cd "$BUILD" && cpack -G "TGZ;DEB" >/dev/null && ls -la ./*.tar.gz ./*.deb)
fi
