#!/usr/bin/env python3
"""Torchvision-topology models (tools/make_models.py: ResNet-18, MobileNetV2, a transformer block)
through `kiln optimize` and `kiln run --expect`, against onnxruntime's outputs.

Tolerance: norm-wise relative error max|kiln - ort| <= 1e-4 * max|ort| (atol is set to that
bound, rtol 1e-4). Per-element relative error is not meaningful for outputs near zero: with these
random weights onnxruntime differs from itself (graph optimizations on vs off) by ~2e-4 on
single elements.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    a = ap.parse_args()
    failures = 0
    names = []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_models.py"), tmp], check=True)
        names = sorted(os.listdir(tmp))
        for name in names:
            d = os.path.join(tmp, name)
            data = os.path.join(d, "test_data_set_0")
            ref = numpy_helper.to_array(onnx.load_tensor(os.path.join(data, "output_0.pb")))
            atol = 1e-4 * float(np.abs(ref).max())
            engine = os.path.join(tmp, name + ".kiln")
            subprocess.run([a.kiln, "optimize", os.path.join(d, "model.onnx"), "-o", engine], check=True)
            p = subprocess.run([a.kiln, "run", engine, "--inputs", data, "--expect", data, "--rtol", "1e-4",
                                "--atol", f"{atol:.3g}"], capture_output=True, text=True)
            print(f"{name}: exit {p.returncode}\n{p.stdout}{p.stderr}")
            failures += p.returncode != 0
    print(f"{len(names) - failures} passed, {failures} failed")
    return 1 if failures or not names else 0


if __name__ == "__main__":
    sys.exit(main())
