#!/usr/bin/env bash
# Contexts that run at once on the CPU, with and without the process's thread budget
# (runtime/cpu/thread_budget.h): `kiln bench --streams S --threads T` of one engine, where S * T is
# more than the cores (every stream asks for all of them: what a service with one context of all
# cores per request thread does), taking turns over rounds:
#   shared   the default budget (the cores): the streams' runs share it
#   unshared KILN_CPU_THREAD_BUDGET = S * T: every run gets its T threads (Kiln before the budget)
#   divided  --threads cores / S: each stream's share given by hand
# Prints throughput and median latency per round and writes the JSON of each run under OUT.
#
#   bench/thread_budget.sh ENGINE.kiln OUT [STREAMS] [ROUNDS]
set -euo pipefail
engine=$1 out=$2 streams=${3:-2} rounds=${4:-3}
kiln=${KILN:-build/kiln}
cores=$(nproc)
mkdir -p "$out"
run() {  # name round threads-per-stream budget
  local name=$1 r=$2 threads=$3 budget=$4
  KILN_CPU_THREAD_BUDGET=$budget "$kiln" bench "$engine" --streams "$streams" --threads "$threads" \
    --duration 3 --warmup 10 --json "$out/$name.$r.json" >/dev/null
  python3 - "$out/$name.$r.json" "$name" "$r" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:9s} round {sys.argv[3]}: {j['throughput_inferences_per_s']:8.1f} inferences/s, "
      f"median {j['latency_ms']['median']:.3f} ms, {j['cpu_threads_per_stream']} thread(s) asked per stream")
PY
}
echo "== $engine: $streams streams on $cores cores, $(date -u +%F)"
for r in $(seq 1 "$rounds"); do
  run shared "$r" "$cores" 0
  run unshared "$r" "$cores" $((streams * cores))
  run divided "$r" $((cores / streams > 0 ? cores / streams : 1)) 0
done
