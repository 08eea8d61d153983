#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried:
#   torchvision classifiers exported by torch.onnx.export, through kiln optimize + kiln run --expect,
#   against onnxruntime. Full logs go to $OUT; a short table is printed last.
set -uo pipefail
source bench/device_env.sh
PY=python3
[ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt" 2>&1
$PY bench/torchvision_check.py --kiln "$PWD/build-dev/kiln" --out /tmp/kiln-torchvision "$@" > "$OUT/torchvision.log" 2>&1
rc=$?
cat "$OUT/device.txt"
tail -n 20 "$OUT/torchvision.log"
exit $rc
