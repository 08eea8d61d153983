#!/usr/bin/env python3
"""Writes a small ONNX model that calls model-local functions (one calling another, with a
referenced attribute) and a schema function, as a seed for onnx_import_fuzz (scripts/fuzz.sh).

    functions_seed.py OUT.onnx
"""
import sys

import onnx
from onnx import TensorProto, helper

const = onnx.NodeProto(op_type="Constant", output=["a"])
const.attribute.append(helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT))
const.attribute[0].ref_attr_name = "alpha"
scaled = helper.make_function(
    "local", "Scaled", ["X"], ["Y"], [const, helper.make_node("Mul", ["X", "a"], ["Y"])],
    [helper.make_opsetid("", 17)], ["alpha"])
block = helper.make_function(
    "local", "Block", ["X"], ["Y"],
    [helper.make_node("Scaled", ["X"], ["s"], domain="local", alpha=2.0),
     helper.make_node("MeanVarianceNormalization", ["s"], ["Y"])],
    [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
graph = helper.make_graph(
    [helper.make_node("Block", ["x"], ["h"], domain="local"),
     helper.make_node("Scaled", ["h"], ["y"], domain="local", alpha=0.5)],
    "functions_seed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                          functions=[scaled, block], ir_version=8)
onnx.save(model, sys.argv[1])
