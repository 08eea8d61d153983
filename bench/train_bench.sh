#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: kiln train
# next to PyTorch eager (bench/train_peers.py): LeNet-5 FP32 and ResNet-8 FP16 at batch 256, and
# with --scaling the 2-GPU data-parallel speed-up (needs two GPUs); with --fashion DIR (a carried
# Fashion-MNIST folder) the time to 90% validation accuracy and the test accuracy. Logs, metrics
# and the table go to $OUT/train; the table is printed last.
set -uo pipefail
source bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
/opt/torch/.venv/bin/python bench/train_peers.py --kiln "$PWD/build-dev/kiln" --out "$OUT/train" "$@" 2>&1 |
  tee "$OUT/train.log" | tail -n 30
