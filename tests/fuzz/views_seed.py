#!/usr/bin/env python3
"""Writes a small ONNX model whose engine has views, as a seed for engine_fuzz (scripts/fuzz.sh):
two branches concatenated on channels at batch 1 (written in place), a Flatten (a view), a Split
(free: its outputs are views) and a sibling pair that fuse-siblings joins.

    views_seed.py OUT.onnx [--symbolic-batch]

--symbolic-batch names the leading dimension "N" instead of 1, for a range engine seed
(`kiln optimize --batch 1..3`).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(1)


def const(name, shape):
    return numpy_helper.from_array(rng.uniform(-1, 1, shape).astype(np.float32), name)


nodes = [
    helper.make_node("Conv", ["x", "w1"], ["a"], name="conv_a"),
    helper.make_node("Conv", ["x", "w2"], ["b"], name="conv_b"),
    helper.make_node("Relu", ["x"], ["r"], name="relu"),
    helper.make_node("Concat", ["a", "b", "r"], ["cat"], name="cat", axis=1),
    helper.make_node("Split", ["cat", "sizes"], ["s1", "s2"], name="split", axis=1),
    helper.make_node("Flatten", ["s2"], ["f"], name="flatten"),
    helper.make_node("Gemm", ["f", "wg"], ["y"], name="fc"),
    helper.make_node("Sigmoid", ["s1"], ["z"], name="sigmoid"),
]
n = "N" if "--symbolic-batch" in sys.argv[2:] else 1
graph = helper.make_graph(
    nodes, "views_seed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 2, 3, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 4]),
     helper.make_tensor_value_info("z", TensorProto.FLOAT, [n, 3, 3, 3])],
    [const("w1", (2, 2, 1, 1)), const("w2", (3, 2, 1, 1)), const("wg", (36, 4)),
     numpy_helper.from_array(np.array([3, 4], np.int64), "sizes")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.save(model, sys.argv[1])
