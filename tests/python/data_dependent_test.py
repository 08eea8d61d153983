#!/usr/bin/env python3
"""Data-dependent shapes (decision 56) through `kiln optimize` and `kiln run --expect`, against
onnxruntime: models whose outputs' sizes depend on the values of their inputs.

  nonzero  x -> NonZero -> Transpose -> GatherND(x, .): the nonzero elements' coordinates and values.
  nms      detection post-processing: NonMaxSuppression over boxes and per-class scores, then the
           kept boxes (Gather) and their scores (GatherND); max_output_boxes_per_class and the
           thresholds are initializers.
  nms_in   the same with max_output_boxes_per_class and the thresholds as model inputs.
  topk     shapes as values: the scores above a threshold (NonZero), then TopK of them with
           K = min(their count, 20) from Shape, Concat and ReduceMin, then a Reshape to a shape
           from their count, as torchvision's detectors compute.
  if_nms   torchvision's batched_nms: If the filtered boxes are empty, an empty constant, else
           NonMaxSuppression of them (the branch reads outer values); the condition from Shape.
  if_data  an If on the data (ReduceSum > 0) whose branches give different shapes, with an If
           nested in one branch.
  if_fold  an If on a static shape, whose other branch could not run at these shapes: dropped.
  loop     a Loop of a constant trip count (unrolled at import): a carried sum of the iteration
           numbers times x, and every iteration's value as a scan output.
  loop_while  a Loop that its body stops (a while loop bounded by its trip count, 8) and that a
           model input may skip: a carried sum until it passes a limit, every iteration's value
           as a scan output (0 to 8 rows), and a carried list growing by one element each
           iteration (its shape differs between iterations).
  unique   Unique (lowered at import: pairwise comparisons, NonZero, TopK) of int64 values, sorted and in
           order of first occurrence, and of the rows of a matrix (axis 0): 1 to all values unique.

Each model is built once and run on several data sets whose result sizes run from 0 to the bound
(all zeros, all nonzero; a score threshold nothing passes). `--device gpu` builds GPU engines (on
the GPU machine). Exit status 1 on any mismatch.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def nonzero_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 4])
    nodes = [
        helper.make_node("NonZero", ["x"], ["idx"]),
        helper.make_node("Transpose", ["idx"], ["idx_t"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx_t"], ["values"]),
        helper.make_node("Relu", ["values"], ["relu"]),
    ]
    outs = [helper.make_tensor_value_info("idx", TensorProto.INT64, [3, "n"]),
            helper.make_tensor_value_info("relu", TensorProto.FLOAT, ["n"])]
    return helper.make_graph(nodes, "nonzero", [x], outs)


def nonzero_data(rng):
    sets = []
    for p in (0.0, 0.3, 0.7, 1.0):  # the share of nonzero elements
        x = rng.normal(0, 1, (3, 5, 4)).astype(np.float32)
        x[rng.random(x.shape) >= p] = 0
        sets.append({"x": x})
    return sets


BOXES, CLASSES = 200, 3


def nms_model(params_as_inputs):
    boxes = helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, BOXES, 4])
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, CLASSES, BOXES])
    inputs, inits = [boxes, scores], [numpy_helper.from_array(np.array([2], np.int64), "two"),
                                      numpy_helper.from_array(np.array([0], np.int64), "zero")]
    params = {"max_out": np.array([60], np.int64), "iou": np.array([0.45], np.float32),
              "score": np.array([0.5], np.float32)}
    for name, value in params.items():
        if params_as_inputs:
            inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), [1]))
        else:
            inits.append(numpy_helper.from_array(value, name))
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score"], ["selected"]),
        helper.make_node("Gather", ["selected", "two"], ["box_idx"], axis=1),       # [k, 1]
        helper.make_node("Squeeze", ["boxes", "zero"], ["boxes0"]),                  # [BOXES, 4]
        helper.make_node("Squeeze", ["box_idx", "two_axis"], ["box_idx1"]),          # [k]
        helper.make_node("Gather", ["boxes0", "box_idx1"], ["kept_boxes"], axis=0),  # [k, 4]
        helper.make_node("GatherND", ["scores", "selected"], ["kept_scores"]),       # [k]
    ]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "two_axis"))
    outs = [helper.make_tensor_value_info("selected", TensorProto.INT64, ["k", 3]),
            helper.make_tensor_value_info("kept_boxes", TensorProto.FLOAT, ["k", 4]),
            helper.make_tensor_value_info("kept_scores", TensorProto.FLOAT, ["k"])]
    return helper.make_graph(nodes, "nms", inputs, outs, inits), params


def nms_data(rng, params, params_as_inputs):
    sets = []
    # Scores scaled so that from all to none of the boxes pass the threshold of 0.5; as inputs, the
    # threshold varies too.
    for scale, score_threshold in ((1.0, 0.5), (0.7, 0.0), (0.52, 0.99), (0.45, 2.0)):
        corner = rng.uniform(0, 40, (1, BOXES, 2)).astype(np.float32)
        size = rng.uniform(1, 12, (1, BOXES, 2)).astype(np.float32)
        s = {"boxes": np.concatenate([corner, corner + size], axis=2),
             "scores": (rng.random((1, CLASSES, BOXES)) * scale).astype(np.float32)}
        if params_as_inputs:
            s.update(params)
            s["score"] = np.array([score_threshold], np.float32)
        sets.append(s)
    return sets


def i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


SCORES = 120


def topk_model():
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [SCORES])
    nodes = [
        helper.make_node("Greater", ["scores", "threshold"], ["keep"]),
        helper.make_node("NonZero", ["keep"], ["nz"]),
        helper.make_node("Reshape", ["nz", "minus_one"], ["idx"]),                  # [k]
        helper.make_node("Gather", ["scores", "idx"], ["kept"]),                    # [k]
        helper.make_node("Shape", ["kept"], ["count"]),                             # [1]: k
        helper.make_node("Concat", ["count", "twenty"], ["both"], axis=0),
        helper.make_node("ReduceMin", ["both"], ["k"], keepdims=1),                 # [1]: min(k, 20)
        helper.make_node("TopK", ["kept", "k"], ["top", "top_idx"]),
        helper.make_node("Gather", ["idx", "top_idx"], ["top_pos"]),
        helper.make_node("Concat", ["count", "one"], ["col_shape"], axis=0),        # [k, 1]
        helper.make_node("Reshape", ["kept", "col_shape"], ["kept_col"]),
    ]
    inits = [numpy_helper.from_array(np.array(0.6, np.float32), "threshold"), i64("minus_one", [-1]),
             i64("twenty", [20]), i64("one", [1])]
    outs = [helper.make_tensor_value_info("top", TensorProto.FLOAT, ["t"]),
            helper.make_tensor_value_info("top_pos", TensorProto.INT64, ["t"]),
            helper.make_tensor_value_info("kept_col", TensorProto.FLOAT, ["k", 1])]
    return helper.make_graph(nodes, "topk", [scores], outs, inits)


def topk_data(rng):
    return [{"scores": (rng.random(SCORES) * scale).astype(np.float32)} for scale in (0.5, 0.62, 0.8, 1.0)]


def if_nms_model():
    boxes = helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [BOXES, 4])
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [BOXES])
    empty = helper.make_graph([helper.make_node("Constant", [], ["none"], value=numpy_helper.from_array(
        np.zeros([0], np.int64)))], "empty", [], [helper.make_tensor_value_info("none", TensorProto.INT64, [0])])
    nms = helper.make_graph([
        helper.make_node("Unsqueeze", ["kept_boxes", "zero"], ["b3"]),
        helper.make_node("Unsqueeze", ["kept_scores", "zero_one"], ["s3"]),
        helper.make_node("NonMaxSuppression", ["b3", "s3", "max_out", "iou"], ["sel"]),
        helper.make_node("Gather", ["sel", "two"], ["col"], axis=1),
        helper.make_node("Squeeze", ["col", "one"], ["keep"]),
    ], "nms", [], [helper.make_tensor_value_info("keep", TensorProto.INT64, ["n"])])
    nodes = [
        helper.make_node("Greater", ["scores", "threshold"], ["pass"]),
        helper.make_node("NonZero", ["pass"], ["nz"]),
        helper.make_node("Reshape", ["nz", "minus_one"], ["idx"]),
        helper.make_node("Gather", ["boxes", "idx"], ["kept_boxes"]),
        helper.make_node("Gather", ["scores", "idx"], ["kept_scores"]),
        helper.make_node("Shape", ["kept_boxes"], ["shape"]),
        helper.make_node("ReduceProd", ["shape"], ["numel"], keepdims=0),
        helper.make_node("Equal", ["numel", "zero_scalar"], ["is_empty"]),
        helper.make_node("If", ["is_empty"], ["keep_idx"], then_branch=empty, else_branch=nms),
        helper.make_node("Gather", ["idx", "keep_idx"], ["kept"]),
    ]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "threshold"), i64("minus_one", [-1]),
             i64("zero", [0]), i64("zero_one", [0, 1]), i64("two", [2]), i64("one", [1]),
             numpy_helper.from_array(np.array(0, np.int64), "zero_scalar"), i64("max_out", [1000]),
             numpy_helper.from_array(np.array([0.45], np.float32), "iou")]
    outs = [helper.make_tensor_value_info("kept", TensorProto.INT64, ["n"])]
    return helper.make_graph(nodes, "if_nms", [boxes, scores], outs, inits)


def if_nms_data(rng):
    sets = []
    for scale in (0.4, 0.55, 1.0):  # none, a few and half of the boxes pass 0.5
        corner = rng.uniform(0, 40, (BOXES, 2)).astype(np.float32)
        size = rng.uniform(1, 12, (BOXES, 2)).astype(np.float32)
        sets.append({"boxes": np.concatenate([corner, corner + size], axis=1),
                     "scores": (rng.random(BOXES) * scale).astype(np.float32)})
    return sets


def if_data_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    out = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["d"])  # noqa: E731
    twice = helper.make_graph([helper.make_node("Mul", ["x", "two_f"], ["y_then"])], "twice", [], [out("y_then")])
    # else: an If on the first element's sign, both branches giving [8]
    inner_then = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["y_cat"], axis=0)], "cat", [],
                                   [out("y_cat")])
    inner_else = helper.make_graph([helper.make_node("Concat", ["x", "neg"], ["y_cat2"], axis=0)], "cat2", [],
                                   [out("y_cat2")])
    other = helper.make_graph([
        helper.make_node("Neg", ["x"], ["neg"]),
        helper.make_node("Gather", ["x", "zero_scalar"], ["first"]),
        helper.make_node("Greater", ["first", "zero_f"], ["first_pos"]),
        helper.make_node("If", ["first_pos"], ["y_inner"], then_branch=inner_then, else_branch=inner_else),
    ], "other", [], [out("y_inner")])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
        helper.make_node("Greater", ["sum", "zero_f"], ["positive"]),
        helper.make_node("If", ["positive"], ["y"], then_branch=twice, else_branch=other),
    ]
    inits = [numpy_helper.from_array(np.array(2, np.float32), "two_f"),
             numpy_helper.from_array(np.array(0, np.float32), "zero_f"),
             numpy_helper.from_array(np.array(0, np.int64), "zero_scalar")]
    return helper.make_graph(nodes, "if_data", [x], [out("y")], inits)


def if_data_data(rng):
    return [{"x": np.array(v, np.float32)} for v in ([1, 2, 3, 4], [-1, -2, 0, 1], [1, -5, 0, 1], [0, 0, 0, 0])]


def if_fold_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    good = helper.make_graph([helper.make_node("Reshape", ["x", "three_two"], ["r"]),
                              helper.make_node("Relu", ["r"], ["y_good"])], "good", [],
                             [helper.make_tensor_value_info("y_good", TensorProto.FLOAT, [3, 2])])
    bad = helper.make_graph([helper.make_node("Reshape", ["x", "seven"], ["y_bad"])], "bad", [],
                            [helper.make_tensor_value_info("y_bad", TensorProto.FLOAT, [7, 7])])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero_scalar"], ["rows"]),
        helper.make_node("Equal", ["rows", "two"], ["two_rows"]),
        helper.make_node("If", ["two_rows"], ["y"], then_branch=good, else_branch=bad),
    ]
    inits = [i64("three_two", [3, 2]), i64("seven", [7, 7]), numpy_helper.from_array(np.array(0, np.int64),
             "zero_scalar"), numpy_helper.from_array(np.array(2, np.int64), "two")]
    return helper.make_graph(nodes, "if_fold", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
                             inits)


def if_fold_data(rng):
    return [{"x": rng.normal(0, 1, (2, 3)).astype(np.float32)}]


def loop_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    body = helper.make_graph([
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "i_f"], ["step"]),
        helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
        helper.make_node("Identity", ["acc_out"], ["each"]),
    ], "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("each", TensorProto.FLOAT, [3])])
    nodes = [helper.make_node("Loop", ["trips", "", "zeros"], ["acc", "all"], body=body)]
    inits = [numpy_helper.from_array(np.array(4, np.int64), "trips"),
             numpy_helper.from_array(np.zeros(3, np.float32), "zeros")]
    outs = [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("all", TensorProto.FLOAT, [4, 3])]
    return helper.make_graph(nodes, "loop", [x], outs, inits)


def loop_data(rng):
    return [{"x": rng.normal(0, 1, 3).astype(np.float32)}]


def loop_while_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    go = helper.make_tensor_value_info("go", TensorProto.BOOL, [])
    body = helper.make_graph([
        helper.make_node("Add", ["i", "one"], ["i1"]),
        helper.make_node("Cast", ["i1"], ["i_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "i_f"], ["step"]),
        helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
        helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
        helper.make_node("Reshape", ["total", "one_d"], ["total1"]),
        helper.make_node("Concat", ["list_in", "total1"], ["list_out"], axis=0),
        helper.make_node("Identity", ["acc_out"], ["each"]),
    ], "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3]),
                helper.make_tensor_value_info("list_in", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("list_out", TensorProto.FLOAT, ["n1"]),
         helper.make_tensor_value_info("each", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array([1], np.int64), "one_d"),
         numpy_helper.from_array(np.array(10, np.float32), "limit")])
    nodes = [helper.make_node("Loop", ["trips", "go", "zeros", "empty"], ["acc", "list", "all"], body=body)]
    inits = [numpy_helper.from_array(np.array(8, np.int64), "trips"),
             numpy_helper.from_array(np.zeros(3, np.float32), "zeros"),
             numpy_helper.from_array(np.zeros(0, np.float32), "empty")]
    outs = [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("list", TensorProto.FLOAT, ["k"]),
            helper.make_tensor_value_info("all", TensorProto.FLOAT, ["k", 3])]
    return helper.make_graph(nodes, "loop_while", [x, go], outs, inits)


def loop_while_data(rng):
    sets = []  # stops after 1, some, and all 8 iterations; skipped
    for scale, go in ((20.0, True), (0.5, True), (-1.0, True), (1.0, False)):
        x = (np.abs(rng.normal(0, 1, 3)) * scale).astype(np.float32)
        sets.append({"x": x, "go": np.array(go)})
    return sets


def unique_model():
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [12])
    m = helper.make_tensor_value_info("m", TensorProto.FLOAT, [6, 3])
    outs = []
    for tag in ("s", "f", "r"):
        outs += [helper.make_tensor_value_info(f"y_{tag}", TensorProto.FLOAT if tag == "r" else TensorProto.INT64,
                                               ["k", 3] if tag == "r" else ["k"]),
                 helper.make_tensor_value_info(f"idx_{tag}", TensorProto.INT64, ["k"]),
                 helper.make_tensor_value_info(f"inv_{tag}", TensorProto.INT64, [6 if tag == "r" else 12]),
                 helper.make_tensor_value_info(f"cnt_{tag}", TensorProto.INT64, ["k"])]
    nodes = [helper.make_node("Unique", ["x"], ["y_s", "idx_s", "inv_s", "cnt_s"], sorted=1),
             helper.make_node("Unique", ["x"], ["y_f", "idx_f", "inv_f", "cnt_f"], sorted=0),
             helper.make_node("Unique", ["m"], ["y_r", "idx_r", "inv_r", "cnt_r"], axis=0)]
    return helper.make_graph(nodes, "unique", [x, m], outs)


def unique_data(rng):
    sets = []
    for distinct in (1, 4, 12):  # values drawn from this many (all unique at 12)
        x = rng.permutation(12)[:12] if distinct == 12 else rng.integers(0, distinct, 12)
        rows = rng.normal(0, 1, (3, 3)).astype(np.float32)
        m = rows[rng.integers(0, 1 if distinct == 1 else 3, 6)]
        sets.append({"x": (x * 7 - 20).astype(np.int64), "m": m})
    return sets


def write_sets(sess, sets, folder):
    names = [o.name for o in sess.get_outputs()]
    dirs = []
    for k, feed in enumerate(sets):
        d = os.path.join(folder, f"test_data_set_{k}")
        os.makedirs(d)
        feed = {i.name: feed[i.name] for i in sess.get_inputs()}
        for j, (name, value) in enumerate(feed.items()):
            onnx.save_tensor(numpy_helper.from_array(value, name), os.path.join(d, f"input_{j}.pb"))
        for j, (name, value) in enumerate(zip(names, sess.run(None, feed))):
            onnx.save_tensor(numpy_helper.from_array(value, name), os.path.join(d, f"output_{j}.pb"))
        dirs.append((d, [v.shape for v in sess.run(None, feed)]))
    return dirs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--device", default="cpu", help="cpu or gpu (kiln optimize --device)")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = [("nonzero", nonzero_model(), nonzero_data(rng))]
    for as_inputs in (False, True):
        g, params = nms_model(as_inputs)
        cases.append(("nms_in" if as_inputs else "nms", g, nms_data(rng, params, as_inputs)))
    cases += [("topk", topk_model(), topk_data(rng)), ("if_nms", if_nms_model(), if_nms_data(rng)),
              ("if_data", if_data_model(), if_data_data(rng)), ("if_fold", if_fold_model(), if_fold_data(rng)),
              ("loop", loop_model(), loop_data(rng)), ("loop_while", loop_while_model(), loop_while_data(rng)),
              ("unique", unique_model(), unique_data(rng))]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, graph, sets in cases:
            folder = os.path.join(tmp, name)
            os.makedirs(folder)
            model = os.path.join(folder, "model.onnx")
            onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
            so = ort.SessionOptions()
            so.log_severity_level = 3
            sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
            engine = os.path.join(folder, "model.kiln")
            p = subprocess.run([a.kiln, "optimize", model, "-o", engine, "--device", a.device], capture_output=True,
                               text=True)
            if p.returncode != 0:
                print(f"{name}: kiln optimize failed:\n{p.stdout}{p.stderr}")
                failures += 1
                continue
            for d, shapes in write_sets(sess, sets, folder):
                p = subprocess.run([a.kiln, "run", engine, "--inputs", d, "--expect", d, "--rtol", "1e-6",
                                    "--atol", "1e-6"], capture_output=True, text=True)
                ok = p.returncode == 0
                failures += not ok
                print(f"{name} {os.path.basename(d)} (onnxruntime's shapes {shapes}): {'ok' if ok else 'FAILED'}")
                if not ok:
                    print(p.stdout + p.stderr)
    print("all passed" if not failures else f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
