#!/usr/bin/env bash
# Installs Kiln to a temporary prefix, builds examples/service against it with
# find_package(Kiln) + Kiln::runtime, and runs the service on a small engine with 4 threads
# (each with its own context) checking every answer. Usage: install_test.sh BUILD_DIR SOURCE_DIR KILN
set -euo pipefail
build=$1 src=$2 kiln=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/examples/service" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/build" -j 2 >/dev/null
python3 - "$tmp/m.onnx" <<'PY'
import sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
rng = np.random.default_rng(0)
w = nh.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["r"]),
                  h.make_node("Softmax", ["r"], ["y"])], "service_model",
                 [h.make_tensor_value_info("x", T.FLOAT, [4, 16])], [h.make_tensor_value_info("y", T.FLOAT, [4, 8])], [w])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), sys.argv[1])
PY
"$kiln" optimize "$tmp/m.onnx" -o "$tmp/m.kiln" >/dev/null
"$tmp/build/kiln_service" "$tmp/m.kiln" 4 200
