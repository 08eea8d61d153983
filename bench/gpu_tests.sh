#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repo root, with build-dev/ carried: every GPU
# test binary build-dev/tests/*_gpu_test (built here with the CUDA backend and copied there by
# bench/prepare_device_build.sh). Prints the device, one line of counts per binary, the failures
# and the totals; the full logs go to $OUT/gpu_test_logs.tar.gz. Exits non-zero if any test failed
# or a binary crashed.
set -uo pipefail
source bench/device_env.sh
LOGS=$(mktemp -d)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1
shopt -s nullglob
bins=(build-dev/tests/*_gpu_test)
if [ ${#bins[@]} -eq 0 ]; then
  echo "no build-dev/tests/*_gpu_test: run bench/prepare_device_build.sh on the build machine first"
  exit 2
fi

rc=0 total_pass=0 total_fail=0 total_skip=0
for bin in "${bins[@]}"; do
  name=$(basename "$bin")
  log="$LOGS/$name.log"
  start=$(date +%s%N)
  timeout 900 "$bin" --gtest_color=no > "$log" 2>&1
  brc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  # One line per finished test: "[       OK ] Suite.Test (12 ms)", "[  FAILED  ] ... (3 ms)", ...
  pass=$(grep -cE '^\[       OK \] .*\([0-9]+ ms\)$' "$log")
  fail=$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log")
  skip=$(grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$log")
  printf '%-32s passed %4d  failed %4d  skipped %4d  exit %3d  %d.%03d s\n' "$name" "$pass" "$fail" "$skip" "$brc" \
    $((ms / 1000)) $((ms % 1000))
  if [ "$brc" -ne 0 ] || [ "$fail" -ne 0 ]; then
    rc=1
    echo "---- $name: failures (first 60 lines; full log in the archive)"
    grep -E -A3 'Failure|^\[  FAILED  \]|Skipped' "$log" | grep -vE '^\[  SKIPPED' | head -n 60
    [ "$brc" -ge 124 ] && echo "---- $name: timed out or crashed (exit $brc); its last lines:" && tail -n 15 "$log"
  fi
  # The informational lines: the device's target and the ops still CPU-only.
  awk '/^\[ (GPU ops|device) /{p=1; print; next} p && /^  /{print; next} {p=0}' "$log"
  total_pass=$((total_pass + pass)) total_fail=$((total_fail + fail)) total_skip=$((total_skip + skip))
done
echo "TOTAL: ${#bins[@]} binaries, passed $total_pass, failed $total_fail, skipped $total_skip"
tar -C "$LOGS" -czf "$OUT/gpu_test_logs.tar.gz" .
exit $rc
