"""A small classifier with a symbolic batch (Conv, Relu, MaxPool, Gemm on 1x28x28 images), random
weights, for the serving tests: writes MODEL.onnx. Usage: make_model.py OUT.onnx [SEED]"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make(path, seed=0):
    rng = np.random.default_rng(seed)
    w = lambda *s: numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32))
    inits = [w(8, 1, 3, 3), w(8), w(10, 8 * 13 * 13), w(10)]
    for t, n in zip(inits, ["cw", "cb", "fw", "fb"]):
        t.name = n
    nodes = [
        helper.make_node("Conv", ["image", "cw", "cb"], ["c"], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
    ]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 28, 28])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


if __name__ == "__main__":
    make(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
