# Sourced by the GPU-machine scripts (bench/gpu_tests.sh, gpu_check.sh, peers.sh): unpacks the
# carried build-dev/pack.tar.xz (bench/prepare_device_build.sh) and puts its libraries and the
# cuDNN 9.19 of PyTorch's venv first on the library path (the system cuDNN there is older).
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
if [ -f build-dev/pack.tar.xz ] && [ ! -x build-dev/kiln ]; then
  xz -dc build-dev/pack.tar.xz | tar -C build-dev -xf -
fi
if [ ! -x build-dev/kiln ]; then
  echo "no build-dev/kiln: run bench/prepare_device_build.sh on the build machine and carry build-dev" >&2
  exit 2
fi
nv=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
# NCCL (kiln train --gpus N loads libnccl.so.2 at run time) comes from PyTorch's nvidia-nccl wheel.
export LD_LIBRARY_PATH="$PWD/build-dev/lib:$nv/cudnn/lib:$nv/cu13/lib:$nv/nccl/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"

# graph_median KILN ENGINE LOG [FLAG...]: the CUDA graph's GPU compute median (ms) of ENGINE run by
# the kiln binary KILN (`kiln bench --cuda-graph --no-transfers --duration 2`, plus FLAGs); the full
# output is appended to LOG. The A/B scripts alternate it between two engines.
graph_median() {
  "$1" bench "$2" --device gpu --cuda-graph --no-transfers --duration 2 "${@:4}" 2>&1 | tee -a "$3" |
    awk '/^GPU compute/ {print $6}'
}

# unpack_base DEST: the baseline kiln binary carried as build-dev/base_kiln.xz (`strip -o k
# build/kiln && xz -9 -c k > build-dev/base_kiln.xz` on a checkout of the baseline commit), as the
# executable DEST; fails where none was carried. The A/B scripts compare it with build-dev/kiln.
unpack_base() {
  [ -f build-dev/base_kiln.xz ] && xz -dc build-dev/base_kiln.xz > "$1" && chmod +x "$1"
}
