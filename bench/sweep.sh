#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried
# (bench/prepare_device_build.sh --kiln-only): the model sweep (bench/sweep.py) on every model,
# exported there by PyTorch, with PyTorch's own float16 as the peer of the fp16 column. The table,
# the JSON of every cell and the build logs go to $OUT. Extra arguments go to bench/sweep.py
# (e.g. --configs fp16 --models resnet50,bert_base). A whole sweep takes about 15 minutes with
# three builds at a time: split it over calls with --configs or --models.
set -uo pipefail
source bench/device_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1
python3 bench/sweep.py --kiln build-dev/kiln --work /tmp/kiln-sweep --torch-fp16 --ref-device cuda \
  --gpu-jobs 3 --export-jobs 6 -v --json "$OUT/sweep.json" --table "$OUT/sweep.md" --logs "$OUT/sweep_logs.tgz" \
  "$@" > "$OUT/sweep.log" 2>&1
rc=$?
grep -E "^sweep|FAILED" "$OUT/sweep.log"
exit $rc
