#!/usr/bin/env bash
# Runs on the GPU machine with build-dev/ carried: why a BERT range engine at 384 tokens ran 5%
# behind a fixed engine of 384 in bench/ranges.sh (session 34). Builds the range engine of
# bench/ranges.py (buckets 32..512) and a fixed engine of 384 from its timing cache, benches both
# and prints the steps whose times differ most in a per-layer profile.
source bench/device_env.sh
D=$OUT/p; mkdir -p $D; K=build-dev/kiln
/opt/torch/.venv/bin/python - <<'PY' 2>/dev/null
import sys, os; sys.path.insert(0, 'bench'); import ranges
ranges.export_bert(os.environ['OUT'] + '/p/bert.onnx')
PY
$K optimize $D/bert.onnx -o $D/r.kiln --device gpu --fp16 --shape input_ids=1x1..512 \
  --buckets ${BUCKETS:-32,64,128,256,384,512} --timing-cache $D/r.json > /dev/null
cp $D/r.json $D/s.json
$K optimize $D/bert.onnx -o $D/s.kiln --device gpu --fp16 --shape input_ids=1x384 --timing-cache $D/s.json > /dev/null
for flags in "" "--no-side-stream"; do
  for i in 1 2; do
    $K bench $D/r.kiln --shape input_ids=1x384 --cuda-graph --no-transfers --duration 1 $flags | grep "GPU compute" | sed "s/^/range 384 $flags /"
    $K bench $D/s.kiln --cuda-graph --no-transfers --duration 1 $flags | grep "GPU compute" | sed "s/^/fixed 384 $flags /"
  done
done
$K bench $D/r.kiln --shape input_ids=1x384 --cuda-graph --no-transfers --duration 1 | grep kernels | sed 's/^/range /'
$K bench $D/s.kiln --cuda-graph --no-transfers --duration 1 | grep kernels | sed 's/^/fixed /'
[ -n "${QUICK:-}" ] && exit 0
$K bench $D/r.kiln --shape input_ids=1x384 --profile --duration 0.5 --json $D/rp.json > /dev/null
$K bench $D/s.kiln --profile --duration 0.5 --json $D/sp.json > /dev/null
python3 - <<'PY'
import json, os
d = os.environ['OUT'] + '/p/'
r = json.load(open(d + 'rp.json'))['profile']['layers']; s = json.load(open(d + 'sp.json'))['profile']['layers']
print('steps', len(r), len(s), 'total range', round(sum(x['ms'] for x in r), 4), 'fixed', round(sum(x['ms'] for x in s), 4))
diffs = sorted(((a['ms'] - b['ms'], a['op'], a['name'][:50]) for a, b in zip(r, s)), reverse=True)
for x in diffs[:12]: print(round(x[0], 4), x[1], x[2])
print('most faster:', [(round(x[0], 4), x[1]) for x in diffs[-4:]])
PY
