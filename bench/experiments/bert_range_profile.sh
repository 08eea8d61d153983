#!/usr/bin/env bash
# Runs on the GPU machine with build-dev/ carried: why a BERT range engine at 384 tokens ran 5%
# behind a fixed engine of 384 (session 34). Builds a range engine (buckets 384, 512) and a fixed
# engine of 384 from the range build's timing cache, compares their steps' tactics and benches both.
source bench/device_env.sh
D=$OUT/p; mkdir -p $D; K=build-dev/kiln
/opt/torch/.venv/bin/python - <<'PY' 2>/dev/null
import sys, os; sys.path.insert(0, 'bench'); import ranges
ranges.export_bert(os.environ['OUT'] + '/p/bert.onnx')
PY
$K optimize $D/bert.onnx -o $D/r.kiln --device gpu --fp16 --shape input_ids=1x1..512 --buckets 384,512 \
  --timing-cache $D/r.json > /dev/null
cp $D/r.json $D/s.json
$K optimize $D/bert.onnx -o $D/s.kiln --device gpu --fp16 --shape input_ids=1x384 --timing-cache $D/s.json > /dev/null
$K inspect $D/r.kiln --json > $D/ri.json
$K inspect $D/s.kiln --json > $D/si.json
for i in 1 2 3; do
  $K bench $D/r.kiln --shape input_ids=1x384 --cuda-graph --no-transfers --duration 1 | grep "GPU compute" | sed 's/^/range 384 /'
  $K bench $D/s.kiln --cuda-graph --no-transfers --duration 1 | grep "GPU compute" | sed 's/^/fixed 384 /'
  $K bench $D/r.kiln --shape input_ids=1x512 --cuda-graph --no-transfers --duration 1 | grep "GPU compute" | sed 's/^/range 512 /'
done
