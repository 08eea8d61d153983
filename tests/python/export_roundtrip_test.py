#!/usr/bin/env python3
"""ONNX import -> export round trip, checked by onnxruntime.

Every libonnx-testdata model (node, pytorch-converted, pytorch-operator, simple) that Kiln imports
and onnxruntime runs is exported by kiln_export_tool (opset 21); both the original and the exported
model then run in onnxruntime on test_data_set_0's inputs, and their outputs must agree (same
dtypes and shapes, allclose with rtol 1e-5, atol 1e-6, NaNs equal). Where an op Kiln imports as a
function body exports as that body and onnxruntime's own kernel for the op differs from it, the
exported model must match ONNX's test data instead (rtol 1e-3, atol 1e-5, as `kiln run --expect`).
A few models built here cover
what the test data does not: a small CNN, legacy 2-D Softmax and old-opset attributes that the
importer turns into inputs.

Exit status 1 if any exported model fails to export, to load in onnxruntime or to match, or if fewer
than --min-checked test-data models were compared.
"""
import argparse
import glob
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort

DATA = "/usr/share/libonnx-testdata/data"
SUITES = ("node", "pytorch-converted", "pytorch-operator", "simple")
RTOL, ATOL = 1e-5, 1e-6

# Mismatches caused by Kiln's importer, not the exporter; reported, but not failures. A listed model
# that matches again is reported too, so that the entry gets removed.
KNOWN_IMPORTER_ISSUES = {
    f"node/test_training_dropout{suffix}": (
        "the importer drops Dropout's `seed` (ignorable_attr) and keeps training_mode = true, so the "
        "exported Dropout draws a different random mask")
    for suffix in ("", "_default", "_default_mask", "_mask")
}

# Outcomes of one model.
MATCHED, MATCHED_DATA, KILN_REJECTED, ORT_CANNOT_RUN, RANDOM, KNOWN, FAILED = (
    "matched", "matched_test_data", "kiln_rejected", "ort_cannot_run", "nondeterministic", "known_importer_issue",
    "failed")
# The tolerance of `kiln run --expect`, for comparing with the ONNX test data's own outputs.
DATA_RTOL, DATA_ATOL = 1e-3, 1e-5


def make_session(path):
    so = ort.SessionOptions()
    # Two shared cores run two workers; more threads per session would only contend.
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run_session(path, feeds):
    sess = make_session(path)
    names = [i.name for i in sess.get_inputs()]
    missing = [n for n in names if n not in feeds]
    if missing:
        raise RuntimeError(f"no data for inputs {missing}")
    outs = sess.run(None, {n: feeds[n] for n in names})
    return {o.name: v for o, v in zip(sess.get_outputs(), outs)}


def load_test_inputs(model_path):
    """test_data_set_0's inputs by name; None when there are none or they are not plain tensors."""
    model = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    data_dir = os.path.join(os.path.dirname(model_path), "test_data_set_0")
    files = sorted(glob.glob(os.path.join(data_dir, "input_*.pb")),
                   key=lambda p: int(os.path.basename(p)[6:-3]))
    if not os.path.isdir(data_dir) or len(files) > len(names):
        return None
    feeds = {}
    for i, f in enumerate(files):
        t = onnx.TensorProto()
        with open(f, "rb") as fh:
            t.ParseFromString(fh.read())
        feeds[t.name if t.name in names else names[i]] = numpy_helper.to_array(t)
    return feeds


def load_test_outputs(model_path):
    """test_data_set_0's expected outputs by graph output name (None when absent or not tensors)."""
    model = onnx.load(model_path, load_external_data=False)
    names = [o.name for o in model.graph.output]
    files = sorted(glob.glob(os.path.join(os.path.dirname(model_path), "test_data_set_0", "output_*.pb")),
                   key=lambda p: int(os.path.basename(p)[7:-3]))
    if len(files) != len(names):
        return None
    outs = {}
    for name, f in zip(names, files):
        t = onnx.TensorProto()
        with open(f, "rb") as fh:
            t.ParseFromString(fh.read())
        outs[name] = numpy_helper.to_array(t)
    return outs


def compare(expected, actual, rtol=RTOL, atol=ATOL):
    """A list of problems; empty when the exported model's outputs match the original's."""
    problems = []
    if list(expected) != list(actual):
        return [f"outputs differ: {list(expected)} vs {list(actual)}"]
    for name, e in expected.items():
        a = actual[name]
        e, a = np.asarray(e), np.asarray(a)
        if e.dtype != a.dtype or e.shape != a.shape:
            problems.append(f"{name}: {e.dtype}{list(e.shape)} vs {a.dtype}{list(a.shape)}")
            continue
        if e.dtype.kind in "fc":
            ok = np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = np.array_equal(a, e)
        if not ok:
            diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
            problems.append(f"{name}: values differ (max abs diff {np.nanmax(diff) if diff.size else 0})")
    return problems


def check(tool, model_path, feeds, workdir, tag):
    """Exports one model and compares it in onnxruntime; returns (outcome, detail)."""
    out_path = os.path.join(workdir, tag.replace("/", "_") + ".export.onnx")
    r = subprocess.run([tool, model_path, out_path], capture_output=True, text=True)
    if r.returncode == 2:
        return KILN_REJECTED, r.stderr.strip().splitlines()[0] if r.stderr.strip() else ""
    if r.returncode != 0:
        return FAILED, f"kiln_export_tool exited {r.returncode}: {r.stderr.strip()}"
    try:
        expected = run_session(model_path, feeds)
    except Exception as e:  # onnxruntime itself cannot run the original: nothing to compare with
        return ORT_CANNOT_RUN, str(e).splitlines()[0] if str(e) else type(e).__name__
    try:
        onnx.checker.check_model(out_path, full_check=True)
        actual = run_session(out_path, feeds)
    except Exception as e:
        return FAILED, f"exported model does not load or run: {str(e)[:400]}"
    finally:
        os.remove(out_path)
    problems = compare(expected, actual)
    if problems and compare(expected, run_session(model_path, feeds)):
        # Random ops (training-mode Dropout): the original disagrees with itself.
        return RANDOM, "onnxruntime's outputs differ between two runs of the original"
    if problems:
        # An op Kiln imports as a function body (DFT, MaxUnpool, ...) exports as that body, which
        # onnxruntime computes differently from its own kernel for the op (DFT in float32 against
        # the body's float64; MaxUnpool's output_shape read differently from ONNX's reference).
        # The ONNX test data then decides.
        reference = load_test_outputs(model_path) if "/" in tag else None
        if reference is not None and not compare(reference, actual, DATA_RTOL, DATA_ATOL):
            return MATCHED_DATA, "onnxruntime's own kernel differs: " + "; ".join(problems)
    return (FAILED, "; ".join(problems)) if problems else (MATCHED, "")


def check_test_model(args):
    tool, model_path, workdir = args
    tag = os.path.relpath(os.path.dirname(model_path), DATA)
    try:
        feeds = load_test_inputs(model_path)
    except Exception as e:
        return tag, ORT_CANNOT_RUN, f"test data unreadable: {e}"
    if feeds is None:
        return tag, ORT_CANNOT_RUN, "no plain-tensor test data"
    outcome, detail = check(tool, model_path, feeds, workdir, tag)
    if tag in KNOWN_IMPORTER_ISSUES and outcome == FAILED:
        outcome, detail = KNOWN, f"{KNOWN_IMPORTER_ISSUES[tag]} ({detail})"
    return tag, outcome, detail


# ---- models built here ---------------------------------------------------------------------------

def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def small_cnn():
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], epsilon=1e-3),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1, alpha=0.5),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    rng = np.random.default_rng(1)
    inits = [
        init("w", f32(8, 3, 3, 3, seed=2) * 0.3), init("b", f32(8, seed=3)),
        init("scale", rng.uniform(0.5, 1.5, 8).astype(np.float32)), init("bias", f32(8, seed=4)),
        init("mean", f32(8, seed=5) * 0.1), init("var", rng.uniform(0.5, 2.0, 8).astype(np.float32)),
        init("fc_w", f32(10, 8 * 4 * 4, seed=6) * 0.1), init("fc_b", f32(10, seed=7)),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), {"x": f32(2, 3, 8, 8, seed=8)}


def legacy_softmax():
    # Opset 11 Softmax flattens to 2-D at `axis`: here over C*H*W, not along C alone. Two inputs: one
    # with a known shape (constant Reshape target on export), one after an op (shape unknown).
    nodes = [
        helper.make_node("Softmax", ["x"], ["y"], axis=1),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("LogSoftmax", ["r"], ["z"], axis=2),
        helper.make_node("Hardmax", ["x"], ["h"]),  # default axis 1 before opset 13
    ]
    graph = helper.make_graph(
        nodes, "legacy_softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 4, 5]) for n in ("y", "z", "h")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6), {"x": f32(2, 3, 4, 5, seed=9)}


def legacy_attrs_as_inputs():
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], axes=[1, 3], keepdims=1),
        helper.make_node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3]),
        helper.make_node("Split", ["x"], ["c", "d"], axis=3),  # equal parts, no sizes
    ]
    graph = helper.make_graph(
        nodes, "legacy_attrs_11",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 6])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in
         (("s", [2, 1, 4, 1]), ("a", [2, 3, 1, 6]), ("b", [2, 3, 3, 6]), ("c", [2, 3, 4, 3]), ("d", [2, 3, 4, 3]))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6), {"x": f32(2, 3, 4, 6, seed=10)}


def legacy_clip():
    nodes = [
        helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.75),
        helper.make_node("Clip", ["x"], ["z"], max=0.25),
        helper.make_node("LeakyRelu", ["x"], ["l"]),  # ONNX default alpha 0.01, not the struct's 1.0
    ]
    graph = helper.make_graph(
        nodes, "legacy_clip_10",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 7]) for n in ("y", "z", "l")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)], ir_version=5), {"x": f32(3, 7, seed=11)}


BUILT_MODELS = {"small_cnn": small_cnn, "legacy_softmax_11": legacy_softmax,
                "legacy_attrs_11": legacy_attrs_as_inputs, "legacy_clip_10": legacy_clip}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="path to kiln_export_tool")
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--min-checked", type=int, default=600)
    ap.add_argument("-v", "--verbose", action="store_true", help="list skipped models too")
    args = ap.parse_args()
    start = time.time()

    models = sorted(p for s in SUITES for p in glob.glob(os.path.join(args.data, s, "*", "model.onnx")))
    with tempfile.TemporaryDirectory(prefix="kiln_export_") as tmp:
        with multiprocessing.Pool(args.jobs) as pool:
            results = list(pool.imap_unordered(check_test_model, [(args.tool, m, tmp) for m in models], chunksize=4))

        built = []
        for name, build in BUILT_MODELS.items():
            model, feeds = build()
            onnx.checker.check_model(model)
            path = os.path.join(tmp, name + ".onnx")
            onnx.save(model, path)
            outcome, detail = check(args.tool, path, feeds, tmp, name)
            if outcome != MATCHED:  # these are meant to be supported: any other outcome is a failure
                outcome, detail = FAILED, f"{outcome}: {detail}"
            built.append(("built/" + name, outcome, detail))

    results.sort()
    counts = {k: sum(1 for r in results if r[1] == k)
              for k in (MATCHED, MATCHED_DATA, KILN_REJECTED, ORT_CANNOT_RUN, RANDOM, KNOWN, FAILED)}
    for tag, outcome, detail in results + built:
        if outcome in (FAILED, KNOWN, MATCHED_DATA) or (args.verbose and outcome != MATCHED):
            print(f"{outcome.upper():20} {tag}: {detail}")
        elif outcome == MATCHED and tag in KNOWN_IMPORTER_ISSUES:
            print(f"{'NOW MATCHES':20} {tag}: remove it from KNOWN_IMPORTER_ISSUES")
    built_ok = sum(1 for r in built if r[1] == MATCHED)
    print(f"libonnx-testdata: {len(models)} models; exported and matched {counts[MATCHED]} (and "
          f"{counts[MATCHED_DATA]} matched ONNX's test data where onnxruntime's own kernel differs), "
          f"failed {counts[FAILED]}, skipped {counts[KILN_REJECTED]} (Kiln's importer rejects them) + "
          f"{counts[ORT_CANNOT_RUN]} (onnxruntime cannot run the original on its test data) + "
          f"{counts[RANDOM]} (random outputs: onnxruntime disagrees with itself); "
          f"known importer issues {counts[KNOWN]}")
    print(f"built models: exported and matched {built_ok} of {len(built)}")
    print(f"time: {time.time() - start:.1f} s")

    checked = counts[MATCHED] + counts[MATCHED_DATA] + counts[FAILED] + counts[KNOWN]
    ok = counts[FAILED] == 0 and built_ok == len(built) and checked >= args.min_checked
    if checked < args.min_checked:
        print(f"FAIL: only {checked} test-data models were compared (at least {args.min_checked} expected)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
