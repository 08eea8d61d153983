#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: issue 41's
# figures on this GPU restricted to a Jetson Orin's kernels (--target-arch sm_87) next to its own:
# ResNet-50 and MobileNetV2 FP16 and --best at batch 1 and 256 with the Orin estimate
# (bench/target_arch_gpu.py), then BERT-base FP16 at batch 1 both ways (bench/transformers_gpu.py,
# KILN_TARGET_ARCH=sm_87 for the limited build). Tables and JSON come back in $OUT.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
$PY bench/target_arch_gpu.py --kiln "$PWD/build-dev/kiln" --out "$OUT/target_arch" "$@" 2>&1 |
  tee "$OUT/target_arch.log" | tail -n 40
for arch in "" sm_87; do
  KILN_TARGET_ARCH=$arch $PY bench/transformers_gpu.py --kiln "$PWD/build-dev/kiln" --models bert_base \
    --out "$OUT/bert${arch:+_$arch}" 2>&1 | grep -E "^bert" | sed "s/^/[kernels ${arch:-own}] /"
done
mkdir -p "$OUT/keep"
cp "$OUT"/target_arch/target_arch.{json,md} "$OUT/keep/" 2>/dev/null
for d in "$OUT"/bert*; do cp "$d/transformers.json" "$OUT/keep/$(basename "$d").json" 2>/dev/null; done
tar -C "$OUT" -czf "$OUT/target_arch_logs.tgz" target_arch/target_arch.log 2>/dev/null
rm -rf "$OUT/target_arch" "$OUT"/bert*
