#!/usr/bin/env python3
"""ONNX functions through `kiln run --expect`, against onnxruntime: model-local functions (nested,
with attributes referenced by the body, called several times), op types that ONNX's schemas
define by a function body (MeanVarianceNormalization, the windows), which Kiln imports by
expanding that body, and the op types for which Kiln writes a body of its own (ReverseSequence,
MaxUnpool, DFT, STFT, GridSample, MelWeightMatrix, RoiAlign, TfIdfVectorizer, and
ai.onnx.preview.training's Adagrad, Momentum and Adam, which onnxruntime does not run: ONNX's
reference evaluator checks those). Also what the importer lowers: Scan unrolled (opsets 8 and 17),
sequences of a known length, and Det (elimination unrolled, pivots moving, a singular matrix). `--device gpu` runs the same models on the GPU machine.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator


def local_functions_model():
    # ScaledSilu(X; alpha) = X * Sigmoid(alpha * X); Block(X) = ScaledSilu(X; 1.702) + MVN(X),
    # a function calling a function and a schema function.
    const = onnx.NodeProto(op_type="Constant", output=["a"])  # value_float = the call's alpha
    const.attribute.append(h.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT))
    const.attribute[0].ref_attr_name = "alpha"
    silu = h.make_function(
        "custom", "ScaledSilu", ["X"], ["Y"],
        [const, h.make_node("Mul", ["X", "a"], ["t"]), h.make_node("Sigmoid", ["t"], ["s"]),
         h.make_node("Mul", ["X", "s"], ["Y"])],
        [h.make_opsetid("", 17)], ["alpha"])
    block = h.make_function(
        "custom", "Block", ["X"], ["Y"],
        [h.make_node("ScaledSilu", ["X"], ["g"], domain="custom", alpha=1.702),
         h.make_node("MeanVarianceNormalization", ["X"], ["n"], axes=[1]),
         h.make_node("Add", ["g", "n"], ["Y"])],
        [h.make_opsetid("", 17), h.make_opsetid("custom", 1)])
    g = h.make_graph(
        [h.make_node("Block", ["x"], ["h"], domain="custom", name="b1"),
         h.make_node("Block", ["h"], ["h2"], domain="custom", name="b2"),
         h.make_node("ScaledSilu", ["h2"], ["y"], domain="custom", alpha=0.5)],
        "local_functions", [h.make_tensor_value_info("x", T.FLOAT, [3, 16])],
        [h.make_tensor_value_info("y", T.FLOAT, [3, 16])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("custom", 1)],
                     functions=[silu, block], ir_version=8)
    return m, {"x": np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)}


def function_defaults_model():
    # A model function whose attribute has a default (FunctionProto.attribute_proto, IR 9): one call
    # sets it, one relies on the default.
    const = onnx.NodeProto(op_type="Constant", output=["a"])
    const.attribute.append(h.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT))
    const.attribute[0].ref_attr_name = "scale"
    fn = h.make_function("custom", "Scale", ["X"], ["Y"], [const, h.make_node("Mul", ["X", "a"], ["Y"])],
                         [h.make_opsetid("", 17)], attribute_protos=[h.make_attribute("scale", 0.25)])
    g = h.make_graph([h.make_node("Scale", ["x"], ["h"], domain="custom", scale=3.0),
                      h.make_node("Scale", ["h"], ["y"], domain="custom")], "function_defaults",
                     [h.make_tensor_value_info("x", T.FLOAT, [4])], [h.make_tensor_value_info("y", T.FLOAT, [4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("custom", 1)], functions=[fn],
                     ir_version=9)
    return m, {"x": np.array([1, -2, 3, 0.5], np.float32)}


def schema_functions_model():
    # The windows take their size as an input: Kiln freezes it to the value given at build time.
    nodes = [h.make_node("HannWindow", ["n"], ["hann"], periodic=0),
             h.make_node("HammingWindow", ["n"], ["hamming"]),
             h.make_node("BlackmanWindow", ["n"], ["blackman"], output_datatype=T.DOUBLE),
             h.make_node("MeanVarianceNormalization", ["x"], ["mvn"])]
    g = h.make_graph(nodes, "schema_functions",
                     [h.make_tensor_value_info("n", T.INT64, []),
                      h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4, 5])],
                     [h.make_tensor_value_info("hann", T.FLOAT, [None]),
                      h.make_tensor_value_info("hamming", T.FLOAT, [None]),
                      h.make_tensor_value_info("blackman", T.DOUBLE, [None]),
                      h.make_tensor_value_info("mvn", T.FLOAT, [2, 3, 4, 5])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    rng = np.random.default_rng(1)
    return m, {"n": np.array(37, np.int64), "x": (rng.standard_normal((2, 3, 4, 5)) * 3 + 1).astype(np.float32)}


def kiln_bodies_model():
    # Op types ONNX defines without a body, for which Kiln writes one: ReverseSequence (time- and
    # batch-major, a feature dimension), MaxUnpool of MaxPool's indices (pads, strides, 3x3 windows).
    nodes = [h.make_node("ReverseSequence", ["seq", "lens"], ["rev_time"], time_axis=0, batch_axis=1),
             h.make_node("Transpose", ["seq"], ["seq_bt"], perm=[1, 0, 2]),
             h.make_node("ReverseSequence", ["seq_bt", "lens"], ["rev_batch"], time_axis=1, batch_axis=0),
             h.make_node("MaxPool", ["img"], ["pooled", "where"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             h.make_node("MaxUnpool", ["pooled", "where"], ["unpooled"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
             # An odd-sized input pooled 2x2: output_shape gives it back, and the indices refer to it.
             h.make_node("MaxPool", ["img"], ["pooled2", "where2"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Shape", ["img"], ["img_shape"]),
             h.make_node("MaxUnpool", ["pooled2", "where2", "img_shape"], ["unpooled_to_shape"], kernel_shape=[2, 2],
                         strides=[2, 2])]
    g = h.make_graph(nodes, "kiln_bodies",
                     [h.make_tensor_value_info("seq", T.FLOAT, [5, 3, 4]),
                      h.make_tensor_value_info("lens", T.INT64, [3]),
                      h.make_tensor_value_info("img", T.FLOAT, [2, 3, 9, 7])],
                     [h.make_tensor_value_info("rev_time", T.FLOAT, [5, 3, 4]),
                      h.make_tensor_value_info("rev_batch", T.FLOAT, [3, 5, 4]),
                      h.make_tensor_value_info("unpooled", T.FLOAT, [2, 3, 9, 7]),
                      h.make_tensor_value_info("unpooled_to_shape", T.FLOAT, [2, 3, 9, 7])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    rng = np.random.default_rng(2)
    return m, {"seq": rng.standard_normal((5, 3, 4)).astype(np.float32), "lens": np.array([5, 2, 1], np.int64),
               "img": rng.standard_normal((2, 3, 9, 7)).astype(np.float32)}


def spectral_model(opset):
    # DFT: real and complex inputs, forward, inverse and onesided, dft_length longer and shorter
    # than the signal, several axes (at opset 20 the axis is an input); STFT with a window.
    axis = (lambda a: {"axis": a}) if opset < 20 else (lambda a: {})
    ax = (lambda name: [name]) if opset < 20 else (lambda name: [name, name + "_axis"])
    nodes = [h.make_node("DFT", ["real", ""] + ax("a1")[1:], ["dft_real"], **axis(1)),
             h.make_node("DFT", ["real", "len12"] + ax("a2")[1:], ["dft_padded_onesided"], onesided=1, **axis(2)),
             h.make_node("DFT", ["cplx", "len5"] + ax("a1")[1:], ["dft_cut"], **axis(1)),
             h.make_node("DFT", ["cplx", ""] + ax("a2")[1:], ["idft"], inverse=1, **axis(2)),
             h.make_node("STFT", ["audio", "step", "window"], ["spec"])]
    inits = [numpy_helper.from_array(np.array(12, np.int64), "len12"),
             numpy_helper.from_array(np.array(5, np.int64), "len5"),
             numpy_helper.from_array(np.array(6, np.int64), "step")]
    if opset >= 20:
        inits += [numpy_helper.from_array(np.array(1, np.int64), "a1_axis"),
                  numpy_helper.from_array(np.array(2, np.int64), "a2_axis")]
    g = h.make_graph(nodes, f"spectral_{opset}",
                     [h.make_tensor_value_info("real", T.FLOAT, [2, 8, 7, 1]),
                      h.make_tensor_value_info("cplx", T.FLOAT, [2, 8, 7, 2]),
                      h.make_tensor_value_info("audio", T.FLOAT, [2, 100, 1]),
                      h.make_tensor_value_info("window", T.FLOAT, [16])],
                     [h.make_tensor_value_info(o, T.FLOAT, shape) for o, shape in [
                         ("dft_real", [2, 8, 7, 2]), ("dft_padded_onesided", [2, 8, 7, 2]), ("dft_cut", [2, 5, 7, 2]),
                         ("idft", [2, 8, 7, 2]), ("spec", [2, 15, 9, 2])]], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=10 if opset >= 20 else 8)
    rng = np.random.default_rng(3)
    return m, {"real": rng.standard_normal((2, 8, 7, 1)).astype(np.float32),
               "cplx": rng.standard_normal((2, 8, 7, 2)).astype(np.float32),
               "audio": rng.standard_normal((2, 100, 1)).astype(np.float32),
               "window": np.hanning(16).astype(np.float32)}


def grid_sample_model(opset):
    # Every mode, padding mode and align_corners, with grid points up to 1.5x outside [-1, 1].
    modes = ["bilinear", "nearest", "bicubic"] if opset < 20 else ["linear", "nearest", "cubic"]
    nodes, outs = [], []
    for mode in modes:
        for padding in ["zeros", "border", "reflection"]:
            for align in [0, 1]:
                name = f"{mode}_{padding}_{align}"
                nodes.append(h.make_node("GridSample", ["x", "grid"], [name], mode=mode, padding_mode=padding,
                                         align_corners=align))
                outs.append(h.make_tensor_value_info(name, T.FLOAT, [2, 3, 6, 5]))
    g = h.make_graph(nodes, f"grid_sample_{opset}",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 7, 9]),
                      h.make_tensor_value_info("grid", T.FLOAT, [2, 6, 5, 2])], outs)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=10 if opset >= 20 else 8)
    rng = np.random.default_rng(4)
    return m, {"x": rng.standard_normal((2, 3, 7, 9)).astype(np.float32),
               "grid": rng.uniform(-1.5, 1.5, (2, 6, 5, 2)).astype(np.float32)}


def mel_model():
    # Two filter banks: a full-band one, and a narrower one in float64 with more bins than fit.
    nodes = [h.make_node("MelWeightMatrix", ["m", "L", "rate", "lo", "hi"], ["full"]),
             h.make_node("MelWeightMatrix", ["m2", "L", "rate", "lo2", "hi2"], ["narrow"], output_datatype=T.DOUBLE)]
    inits = [numpy_helper.from_array(np.array(v, dt), name) for name, v, dt in
             [("m2", 24, np.int64), ("lo2", 300.0, np.float32), ("hi2", 4000.0, np.float32)]]
    g = h.make_graph(nodes, "mel",
                     [h.make_tensor_value_info("m", T.INT64, []), h.make_tensor_value_info("L", T.INT64, []),
                      h.make_tensor_value_info("rate", T.INT64, []), h.make_tensor_value_info("lo", T.FLOAT, []),
                      h.make_tensor_value_info("hi", T.FLOAT, [])],
                     [h.make_tensor_value_info("full", T.FLOAT, [65, 10]),
                      h.make_tensor_value_info("narrow", T.DOUBLE, [65, 24])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    return m, {"m": np.array(10, np.int64), "L": np.array(128, np.int64), "rate": np.array(16000, np.int64),
               "lo": np.array(0.0, np.float32), "hi": np.array(8000.0, np.float32)}


def roi_align_model(opset):
    # Regions inside, across and outside the image edge; both modes; both coordinate modes (opset 16).
    configs = [("avg", "half_pixel", 2, 3, 4, 0.5), ("avg", "output_half_pixel", 1, 2, 2, 1.0),
               ("max", "half_pixel", 2, 2, 3, 0.25), ("avg", "half_pixel", 3, 5, 5, 0.5)]
    nodes, outs = [], []
    for k, (mode, ctm, sr, oh, ow, scale) in enumerate(configs):
        extra = {"coordinate_transformation_mode": ctm} if opset >= 16 else {}
        if opset < 16 and ctm == "half_pixel":
            continue
        nodes.append(h.make_node("RoiAlign", ["x", "rois", "batch"], [f"y{k}"], mode=mode, sampling_ratio=sr,
                                 output_height=oh, output_width=ow, spatial_scale=scale, **extra))
        outs.append(h.make_tensor_value_info(f"y{k}", T.FLOAT, [5, 3, oh, ow]))
    g = h.make_graph(nodes, f"roi_align_{opset}",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 10, 12]),
                      h.make_tensor_value_info("rois", T.FLOAT, [5, 4]),
                      h.make_tensor_value_info("batch", T.INT64, [5])], outs)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)
    rng = np.random.default_rng(5)
    rois = np.array([[1, 1, 9, 7], [0, 0, 23, 19], [-3, -2, 5, 6], [18, 12, 30, 26], [4.5, 2.2, 4.9, 2.6]],
                    np.float32)
    return m, {"x": rng.standard_normal((2, 3, 10, 12)).astype(np.float32), "rois": rois,
               "batch": np.array([0, 1, 1, 0, 1], np.int64)}


def tfidf_model():
    # Unigrams, bigrams and trigrams with skips; TF, IDF and TFIDF with weights; 1-D and 2-D tokens.
    pool = [1, 2, 3, 4, 1, 2, 2, 3, 3, 1, 1, 2, 3, 2, 3, 1]  # 4 unigrams, 3 bigrams, 2 trigrams
    common = dict(pool_int64s=pool, ngram_counts=[0, 4, 10], ngram_indexes=[8, 0, 7, 1, 2, 6, 3, 5, 4])
    nodes = [h.make_node("TfIdfVectorizer", ["tokens"], ["tf"], mode="TF", min_gram_length=1, max_gram_length=3,
                         max_skip_count=2, **common),
             h.make_node("TfIdfVectorizer", ["tokens"], ["idf"], mode="IDF", min_gram_length=2, max_gram_length=3,
                         max_skip_count=1, weights=[0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5], **common),
             h.make_node("TfIdfVectorizer", ["row"], ["tfidf"], mode="TFIDF", min_gram_length=1, max_gram_length=2,
                         max_skip_count=3, weights=[0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5], **common),
             # Shorter than some skips reach: those count nothing.
             h.make_node("TfIdfVectorizer", ["short"], ["short_tf"], mode="TF", min_gram_length=1, max_gram_length=3,
                         max_skip_count=4, **common)]
    g = h.make_graph(nodes, "tfidf",
                     [h.make_tensor_value_info("tokens", T.INT64, [3, 10]), h.make_tensor_value_info("row", T.INT32, [12]),
                      h.make_tensor_value_info("short", T.INT64, [4])],
                     [h.make_tensor_value_info("tf", T.FLOAT, [3, 9]), h.make_tensor_value_info("idf", T.FLOAT, [3, 9]),
                      h.make_tensor_value_info("tfidf", T.FLOAT, [9]), h.make_tensor_value_info("short_tf", T.FLOAT, [9])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    rng = np.random.default_rng(7)
    return m, {"tokens": rng.integers(0, 5, (3, 10)).astype(np.int64), "row": rng.integers(0, 5, 12).astype(np.int32),
               "short": np.array([1, 2, 1, 2], np.int64)}


def optimizers_model(elem=T.FLOAT):
    # ai.onnx.preview.training's update steps (onnxruntime does not run them: ONNX's reference
    # evaluator is the oracle), several tensors each, every attribute set, T > 0.
    d = "ai.onnx.preview.training"
    nodes = [h.make_node("Adagrad", ["R", "T", "X1", "X2", "G1", "G2", "H1", "H2"],
                         ["ag_X1", "ag_X2", "ag_H1", "ag_H2"], domain=d, decay_factor=0.1, epsilon=1e-3,
                         norm_coefficient=0.01),
             h.make_node("Momentum", ["R", "T", "X1", "X2", "G1", "G2", "H1", "H2"],
                         ["mn_X1", "mn_X2", "mn_V1", "mn_V2"], domain=d, alpha=0.9, beta=0.5, mode="nesterov",
                         norm_coefficient=0.02),
             h.make_node("Adam", ["R", "T", "X1", "X2", "G1", "G2", "H1", "H2", "H1", "H2"],
                         ["ad_X1", "ad_X2", "ad_V1", "ad_V2", "ad_H1", "ad_H2"], domain=d, alpha=0.8, beta=0.7,
                         epsilon=1e-4, norm_coefficient=0.03, norm_coefficient_post=0.05)]
    shapes = {"X1": [3, 4], "X2": [5]}
    np_type = np.float64 if elem == T.DOUBLE else np.float32
    inputs = [h.make_tensor_value_info("R", elem, []), h.make_tensor_value_info("T", T.INT64, [])]
    for k in ["X", "G", "H"]:
        inputs += [h.make_tensor_value_info(f"{k}{i}", elem, shapes[f"X{i}"]) for i in (1, 2)]
    outputs = [h.make_tensor_value_info(o, elem, shapes["X" + o[-1]]) for n in nodes for o in n.output]
    g = h.make_graph(nodes, f"optimizers_{np.dtype(np_type).name}", inputs, outputs)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(d, 1)], ir_version=8)
    rng = np.random.default_rng(6)
    feeds = {"R": np.array(0.1, np_type), "T": np.array(3, np.int64)}
    for k in ["X", "G", "H"]:
        for i in (1, 2):
            v = rng.standard_normal(shapes[f"X{i}"]).astype(np_type)
            feeds[f"{k}{i}"] = np.abs(v) if k == "H" else v
    return m, feeds


def scan_model(opset):
    # Scan unrolled at import: a state, two scan inputs (one along axis 1, reversed), an outer-scope
    # weight and a body initializer, two scan outputs (one stacked along axis 1, reversed). At
    # opset 8 every tensor has a batch axis first and the directions are one attribute.
    body = h.make_graph(
        [h.make_node("Mul", ["a", "w"], ["aw"]), h.make_node("Add", ["s", "aw"], ["t"]),
         h.make_node("Add", ["t", "b"], ["s_out"]), h.make_node("Mul", ["s_out", "c"], ["o1"]),
         h.make_node("Relu", ["b"], ["o2"])],
        "body", [h.make_tensor_value_info(n, T.FLOAT, [2]) for n in ("s", "a", "b")],
        [h.make_tensor_value_info(n, T.FLOAT, [2]) for n in ("s_out", "o1", "o2")],
        [numpy_helper.from_array(np.array([0.5, -2.0], np.float32), "c")])
    batch = [3] if opset < 9 else []
    inputs = ([""] if opset < 9 else []) + ["s0", "x1", "x2"]
    attrs = {"body": body, "num_scan_inputs": 2}
    if opset < 9:
        attrs["directions"] = [0, 1]
        x2_shape = batch + [4, 2]
    else:
        attrs.update(scan_input_axes=[0, 1], scan_input_directions=[0, 1], scan_output_axes=[0, 1],
                     scan_output_directions=[0, 1])
        x2_shape = [2, 4]
    node = h.make_node("Scan", inputs, ["s_final", "y1", "y2"], **attrs)
    g = h.make_graph(
        [node], f"scan_{opset}",
        [h.make_tensor_value_info("s0", T.FLOAT, batch + [2]), h.make_tensor_value_info("x1", T.FLOAT, batch + [4, 2]),
         h.make_tensor_value_info("x2", T.FLOAT, x2_shape)],
        [h.make_tensor_value_info("s_final", T.FLOAT, batch + [2]),
         h.make_tensor_value_info("y1", T.FLOAT, batch + [4, 2]),
         h.make_tensor_value_info("y2", T.FLOAT, batch + [4, 2] if opset < 9 else [2, 4])],
        [numpy_helper.from_array(np.array([1.5, -0.25], np.float32), "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8 if opset >= 9 else 4)
    rng = np.random.default_rng(7)
    feeds = {"s0": rng.standard_normal(batch + [2]).astype(np.float32),
             "x1": rng.standard_normal(batch + [4, 2]).astype(np.float32),
             "x2": rng.standard_normal(x2_shape).astype(np.float32)}
    return m, feeds


def sequences_model():
    # Sequences of a known length lowered at import: split without keepdims, insert and erase at
    # constant positions, stack with new_axis, take an element, count them.
    pos = [numpy_helper.from_array(np.array(v, np.int64), n) for v, n in ((1, "one"), (-1, "last"))]
    nodes = [h.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
             h.make_node("SequenceInsert", ["s", "y", "one"], ["s2"]),
             h.make_node("SequenceErase", ["s2", "last"], ["s3"]),
             h.make_node("ConcatFromSequence", ["s3"], ["stacked"], axis=-1, new_axis=1),
             h.make_node("SequenceAt", ["s3", "one"], ["picked"]),
             h.make_node("SequenceLength", ["s3"], ["n"])]
    g = h.make_graph(nodes, "sequences",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 4]), h.make_tensor_value_info("y", T.FLOAT, [2])],
                     [h.make_tensor_value_info(o, t, d) for o, t, d in
                      (("stacked", T.FLOAT, [2, 4]), ("picked", T.FLOAT, [2]), ("n", T.INT64, []))], pos)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    rng = np.random.default_rng(8)
    return m, {"x": rng.standard_normal([2, 4]).astype(np.float32), "y": rng.standard_normal([2]).astype(np.float32)}


def det_model(shape):
    # Det, lowered at import to Gaussian elimination with partial pivoting: rows permuted so that
    # the pivots move, one singular matrix (two equal rows) where there are several.
    rng = np.random.default_rng(9)
    m = shape[-1]
    x = (np.eye(m) + 0.3 * rng.standard_normal(shape)).astype(np.float32)
    x = x[..., rng.permutation(m), :]
    if len(shape) == 3 and shape[0] > 1 and m > 1:
        x[1, 0] = x[1, m - 1]
    g = h.make_graph([h.make_node("Det", ["x"], ["y"])], "det", [h.make_tensor_value_info("x", T.FLOAT, list(shape))],
                     [h.make_tensor_value_info("y", T.FLOAT, list(shape[:-2]))])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8), {"x": x}


def check(kiln, device, name, model, feeds, tmp, oracle="onnxruntime"):
    onnx.checker.check_model(model)
    d = os.path.join(tmp, name)
    os.makedirs(d)
    path = os.path.join(d, "model.onnx")
    onnx.save(model, path)
    if oracle == "onnxruntime":
        expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    else:  # its Adam returns float32 for float64 inputs: the declared output types decide
        expected = [np.asarray(v).astype(onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type))
                    for v, o in zip(ReferenceEvaluator(model).run(None, feeds), model.graph.output)]
    for i, (k, v) in enumerate(feeds.items()):
        with open(os.path.join(d, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())
    for i, (o, v) in enumerate(zip(model.graph.output, expected)):
        with open(os.path.join(d, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())
    p = subprocess.run([kiln, "run", path, "--inputs", d, "--expect", d, "--device", device, "--rtol", "1e-5",
                        "--atol", "1e-5"], capture_output=True, text=True)
    print(f"{name} ({device}): exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p.returncode == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ok &= check(args.kiln, args.device, "local_functions", *local_functions_model(), tmp)
        ok &= check(args.kiln, args.device, "function_defaults", *function_defaults_model(), tmp)
        ok &= check(args.kiln, args.device, "schema_functions", *schema_functions_model(), tmp)
        ok &= check(args.kiln, args.device, "kiln_bodies", *kiln_bodies_model(), tmp)
        ok &= check(args.kiln, args.device, "spectral_17", *spectral_model(17), tmp)
        ok &= check(args.kiln, args.device, "spectral_20", *spectral_model(20), tmp)
        ok &= check(args.kiln, args.device, "grid_sample_16", *grid_sample_model(16), tmp)
        ok &= check(args.kiln, args.device, "grid_sample_20", *grid_sample_model(20), tmp)
        ok &= check(args.kiln, args.device, "mel", *mel_model(), tmp)
        ok &= check(args.kiln, args.device, "roi_align_16", *roi_align_model(16), tmp)
        ok &= check(args.kiln, args.device, "roi_align_10", *roi_align_model(10), tmp)
        ok &= check(args.kiln, args.device, "tfidf", *tfidf_model(), tmp)
        ok &= check(args.kiln, args.device, "optimizers", *optimizers_model(), tmp, oracle="onnx reference")
        ok &= check(args.kiln, args.device, "optimizers_f64", *optimizers_model(T.DOUBLE), tmp, oracle="onnx reference")
        ok &= check(args.kiln, args.device, "scan_17", *scan_model(17), tmp)
        ok &= check(args.kiln, args.device, "scan_8", *scan_model(8), tmp)
        ok &= check(args.kiln, args.device, "sequences", *sequences_model(), tmp)
        for shape in ((4, 5, 5), (3, 3), (2, 1, 1)):
            ok &= check(args.kiln, args.device, "det_" + "x".join(map(str, shape)), *det_model(shape), tmp)
    print("functions: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
