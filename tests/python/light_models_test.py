#!/usr/bin/env python3
"""The ONNX model zoo's Inception v1 (GoogLeNet) and v2 topologies through `kiln optimize` and
`kiln run --expect`, against onnxruntime, with and without fuse-siblings.

The `onnx` Python package ships these models "light": every weight is a ConstantOfShape node. Here
each becomes a seeded random initializer (He-scaled weights, small biases, BatchNormalization
scales and variances in [0.5, 1.5]), and the final Softmax is dropped so that the logits are
compared (a near-uniform softmax would check little). Checks per model: fuse-siblings joins some
Conv+Relu branches, the engine has fewer steps than without it, and both engines match onnxruntime
(norm-wise relative error 1e-4, as in models_test.py). `--device gpu` builds GPU engines (on the
GPU machine).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["inception_v1", "inception_v2"]


def with_random_weights(name, out_dir):
    """Writes OUT_DIR/model.onnx and OUT_DIR/test_data_set_0/{input_0,output_0}.pb."""
    m = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
    rng = np.random.default_rng(0)
    shapes = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    kept = []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in shapes:
            shape = [int(d) for d in shapes[n.input[0]]]
            if any(k in n.output[0] for k in ("var", "scale")):
                a = rng.uniform(0.5, 1.5, shape)
            elif len(shape) == 1:
                a = rng.normal(0, 0.1, shape)
            else:
                a = rng.normal(0, np.sqrt(2.0 / np.prod(shape[1:])), shape)
            m.graph.initializer.append(numpy_helper.from_array(a.astype(np.float32), n.output[0]))
        elif n.op_type == "Softmax" and n.output[0] == m.graph.output[0].name:
            m.graph.output[0].name = n.input[0]
        else:
            kept.append(n)
    used = {i for n in kept for i in n.input}
    dropped = {i.name for i in m.graph.initializer if i.name not in used}  # the shapes
    inits = [i for i in m.graph.initializer if i.name in used]
    inputs = [i for i in m.graph.input if i.name not in dropped]
    del m.graph.initializer[:], m.graph.input[:]
    m.graph.initializer.extend(inits)
    m.graph.input.extend(inputs)
    del m.graph.node[:]
    m.graph.node.extend(kept)
    data = os.path.join(out_dir, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    path = os.path.join(out_dir, "model.onnx")
    onnx.save(m, path)
    inits = {i.name for i in m.graph.initializer}
    x_info = next(i for i in m.graph.input if i.name not in inits)
    x = rng.normal(0, 1, [d.dim_value or 1 for d in x_info.type.tensor_type.shape.dim]).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the plain reference
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    y = sess.run(None, {x_info.name: x})[0]
    onnx.save_tensor(numpy_helper.from_array(x, x_info.name), os.path.join(data, "input_0.pb"))
    onnx.save_tensor(numpy_helper.from_array(y, sess.get_outputs()[0].name), os.path.join(data, "output_0.pb"))
    return path, data, float(np.abs(y).max())


def build(kiln, device, model, engine, extra):
    """Runs `kiln optimize -v`; returns (steps, fuse-siblings line)."""
    p = subprocess.run([kiln, "optimize", model, "-o", engine, "-v", "--device", device] + extra, capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stdout + p.stderr)
    steps = int(re.search(r"-> (\d+) steps", p.stdout + p.stderr).group(1))
    line = next((l.strip() for l in (p.stdout + p.stderr).splitlines() if l.strip().startswith("fuse-siblings:")), "")
    return steps, line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--device", default="cpu", help="cpu or gpu (kiln optimize --device)")
    a = ap.parse_args()
    if not os.path.isdir(LIGHT):
        print(f"onnx {onnx.__version__} ships no light models in {LIGHT}: install a newer onnx (pip install -U onnx)")
        return 1
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            d = os.path.join(tmp, name)
            model, data, ref_max = with_random_weights(name, d)
            on = os.path.join(d, "on.kiln")
            off = os.path.join(d, "off.kiln")
            steps_on, line = build(a.kiln, a.device, model, on, [])
            steps_off, _ = build(a.kiln, a.device, model, off, ["--disable-pass", "fuse-siblings"])
            ok = steps_on < steps_off and not line.startswith("fuse-siblings: 0 ")
            print(f"{name}: {steps_off} steps without fuse-siblings, {steps_on} with ({line})")
            for engine in (on, off):
                p = subprocess.run([a.kiln, "run", engine, "--inputs", data, "--expect", data, "--rtol", "1e-4",
                                    "--atol", f"{1e-4 * ref_max:.3g}"], capture_output=True, text=True)
                print(p.stdout + p.stderr)
                ok = ok and p.returncode == 0
            print(f"{name}: {'ok' if ok else 'FAILED'}")
            failures += not ok
    print(f"{len(MODELS) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
