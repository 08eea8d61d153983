#!/usr/bin/env bash
# Runs on the GPU machine (device tool), with build-dev/ carried: the peak GPU memory of an INT8
# build of ResNet-50 at batch 256 with 512 calibration images (`--int8 --force-int8`, sampled by
# nvidia-smi every 100 ms), for build-dev/kiln and, where build-dev/base_kiln.xz is carried (an xz of
# another kiln binary), for that one too, with their calibration caches compared (equal caches:
# equal statistics). Prints one line per binary.
set -uo pipefail
source bench/device_env.sh
PY=/opt/torch/.venv/bin/python
w=$(mktemp -d)
$PY bench/torchvision_onnx.py "$w" resnet50 512 > /dev/null 2>&1
bins=(build-dev/kiln)
if [ -f build-dev/base_kiln.xz ]; then
  unpack_base "$w/base" && bins+=("$w/base")
fi
n=0
for b in "${bins[@]}"; do
  n=$((n + 1))
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$w/mem$n.txt" 2>/dev/null &
  smi=$!
  "$b" optimize "$w/resnet50.onnx" --device gpu --batch 256 --int8 --force-int8 --calib "$w/calib" \
    --calib-cache "$w/cc$n.json" -v -o "$w/x$n.kiln" > "$OUT/calib_memory_$n.txt" 2>&1
  rc=$?
  kill "$smi"
  echo "$b: exit $rc; peak GPU memory $(sort -n "$w/mem$n.txt" | tail -1) MiB;" \
    "$(grep -E '^calibrating' "$OUT/calib_memory_$n.txt")"
done
if [ "$n" -eq 2 ]; then
  cmp -s "$w/cc1.json" "$w/cc2.json" && echo "calibration caches equal" || echo "calibration caches differ"
fi
