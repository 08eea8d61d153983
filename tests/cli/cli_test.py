#!/usr/bin/env python3
"""Checks the exit codes and messages of the kiln command (0 ok, 1 mismatch with --expect, 2 error).

Run by ctest as: cli_test.py --kiln path/to/kiln. Small models are written with onnx.helper into a
temporary directory.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = None


def run_kiln(*args):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def save_model(path, nodes, inputs, outputs, initializers=(), opset=17, name="m"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def save_pb(path, array, name=""):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())
    return path


class KilnCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kiln_cli_test_")
        cls.dir = cls.tmp.name
        # y = Relu(x) + bias, x float32[2,3]
        cls.bias = np.array([0.5, -1.0, 2.0], dtype=np.float32)
        cls.model = save_model(
            os.path.join(cls.dir, "relu_add.onnx"),
            [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "bias"], ["y"], name="add")],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
            [numpy_helper.from_array(cls.bias, "bias")],
            name="relu_add")
        cls.x = np.array([[-1.0, 0.5, 2.0], [3.0, -4.0, 0.0]], dtype=np.float32)
        cls.y = np.maximum(cls.x, 0) + cls.bias
        cls.x_npy = os.path.join(cls.dir, "x.npy")
        np.save(cls.x_npy, cls.x)
        cls.inputs_dir = os.path.join(cls.dir, "inputs")
        os.makedirs(cls.inputs_dir)
        save_pb(os.path.join(cls.inputs_dir, "input_0.pb"), cls.x, "x")
        cls.good_dir = os.path.join(cls.dir, "expect_good")
        os.makedirs(cls.good_dir)
        save_pb(os.path.join(cls.good_dir, "output_0.pb"), cls.y, "y")
        cls.bad_dir = os.path.join(cls.dir, "expect_bad")
        os.makedirs(cls.bad_dir)
        save_pb(os.path.join(cls.bad_dir, "output_0.pb"), cls.y + np.float32(0.5), "y")
        cls.engine = os.path.join(cls.dir, "relu_add.kiln")
        code, out, err = run_kiln("optimize", cls.model, "-o", cls.engine, "--device", "cpu")
        assert code == 0, err

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def assert_error(self, args, *parts, code=2):
        rc, out, err = run_kiln(*args)
        self.assertEqual(rc, code, f"kiln {' '.join(map(str, args))}\nstdout: {out}\nstderr: {err}")
        for p in parts:
            self.assertIn(p, err, f"kiln {' '.join(map(str, args))}: stderr lacks {p!r}:\n{err}")
        return err

    # ---- files that are missing or not what they claim -------------------------------------------

    def test_missing_file(self):
        missing = self.path("does_not_exist.onnx")
        self.assert_error(["run", missing], "kiln: error:", missing, "cannot open")
        self.assert_error(["optimize", missing], missing, "cannot open")
        self.assert_error(["inspect", self.path("does_not_exist.kiln")], "cannot open the engine file")

    def test_not_an_onnx_file(self):
        bogus = self.path("bogus.onnx")
        with open(bogus, "w") as f:
            f.write("not a model, just text\n")
        self.assert_error(["inspect", bogus], bogus, "not a valid ONNX model")
        self.assert_error(["optimize", bogus], "not a valid ONNX model")
        self.assert_error(["optimize", self.x_npy], "expected an .onnx model")

    def test_unsupported_op(self):
        m = save_model(self.path("fancy.onnx"),
                       [helper.make_node("FancyOp", ["x"], ["y"], name="fancy_node")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        err = self.assert_error(["optimize", m], "unsupported op types", "FancyOp", "fancy_node")
        self.assertNotIn("internal error", err)
        self.assert_error(["run", m, "--input", f"x={self.x_npy}"], "FancyOp", "fancy_node")

    def test_damaged_engine(self):
        data = bytearray(Path(self.engine).read_bytes())
        damaged = self.path("damaged.kiln")
        data[-1] ^= 0xFF
        Path(damaged).write_bytes(data)
        self.assert_error(["inspect", damaged], "damaged", "checksum")
        self.assert_error(["run", damaged, "--input", f"x={self.x_npy}"], "checksum mismatch")
        truncated = self.path("truncated.kiln")
        Path(truncated).write_bytes(data[:100])
        self.assert_error(["inspect", truncated], "truncated")
        foreign = self.path("foreign.kiln")
        Path(foreign).write_bytes(Path(self.model).read_bytes().ljust(64, b"\0"))
        self.assert_error(["inspect", foreign], "bad magic")

    # ---- inputs --------------------------------------------------------------------------------

    def test_wrong_input_name(self):
        self.assert_error(["run", self.model, "--input", f"nope={self.x_npy}"],
                          "--input nope", "no input of that name", "inputs: x")
        # An engine names the unknown input and the inputs it takes, with dtype and shape.
        self.assert_error(["run", self.engine, "--input", f"nope={self.x_npy}"], "--input nope",
                          "no input of that name", "input 'x'", "float32[2,3]")
        # An input left out is named with what it expects.
        self.assert_error(["run", self.engine], "input 'x'", "float32[2,3]", "was not given")

    def test_unknown_input_name_for_engine_with_all_inputs_given(self):
        # Like an .onnx model, an engine must not silently ignore an input name it does not have.
        self.assert_error(["run", self.engine, "--input", f"x={self.x_npy}", "--input", f"nope={self.x_npy}"],
                          "nope")

    def test_wrong_input_shape_or_dtype(self):
        wrong_shape = self.path("x_3x2.npy")
        np.save(wrong_shape, self.x.reshape(3, 2))
        wrong_dtype = self.path("x_i64.npy")
        np.save(wrong_dtype, self.x.astype(np.int64))
        self.assert_error(["run", self.engine, "--input", f"x={wrong_shape}"],
                          "input 'x' expects float32[2,3], the file holds float32[3,2]")
        self.assert_error(["run", self.engine, "--input", f"x={wrong_dtype}"],
                          "input 'x' expects float32[2,3], the file holds int64[2,3]")
        self.assert_error(["run", self.model, "--input", f"x={wrong_shape}"], "input 'x'", "2x3", "[3,2]")
        self.assert_error(["run", self.model, "--input", f"x={wrong_dtype}"], "input 'x'", "float32", "int64")
        self.assert_error(["run", self.model, "--input", "x"], "expected NAME=VALUE")

    # ---- running -------------------------------------------------------------------------------

    def test_run_prints_outputs(self):
        rc, out, err = run_kiln("run", self.model, "--input", f"x={self.x_npy}")
        self.assertEqual(rc, 0, err)
        self.assertIn("y float32[2,3]: 0.5, -0.5, 4, 3.5, -1, 2", out)

    def test_expect_match(self):
        for model in (self.model, self.engine):
            rc, out, err = run_kiln("run", model, "--inputs", self.inputs_dir, "--expect", self.good_dir)
            self.assertEqual(rc, 0, out + err)
            self.assertIn("all outputs match", out)

    def test_expect_mismatch(self):
        for model in (self.model, self.engine):
            rc, out, err = run_kiln("run", model, "--inputs", self.inputs_dir, "--expect", self.bad_dir)
            self.assertEqual(rc, 1, out + err)
            self.assertIn("MISMATCH", out)
            self.assertIn("outputs do NOT match", out)
        # A looser tolerance accepts the same reference.
        rc, out, err = run_kiln("run", self.engine, "--inputs", self.inputs_dir, "--expect", self.bad_dir,
                                "--atol", "0.6")
        self.assertEqual(rc, 0, out + err)

    def test_outputs_written(self):
        out_dir = self.path("outs")
        rc, out, err = run_kiln("run", self.engine, "--input", f"x={self.x_npy}", "--outputs", out_dir)
        self.assertEqual(rc, 0, err)
        got = numpy_helper.to_array(onnx.load_tensor(os.path.join(out_dir, "output_0.pb")))
        np.testing.assert_allclose(got, self.y, rtol=0, atol=1e-6)
        np.testing.assert_allclose(np.load(os.path.join(out_dir, "output_0.npy")), self.y, rtol=0, atol=1e-6)

    # ---- optimize / inspect --------------------------------------------------------------------

    def test_optimize_then_inspect(self):
        engine = self.path("inspect_me.kiln")
        rc, out, err = run_kiln("optimize", self.model, "-o", engine)
        self.assertEqual(rc, 0, err)
        self.assertIn("wrote " + engine, out)
        rc, out, err = run_kiln("inspect", engine)
        self.assertEqual(rc, 0, err)
        for part in ["input      x float32[2,3]", "output     y float32[2,3]", "steps      2",
                     "weights    ", "target     cpu", "versions   format 11, built by kiln 0.1.0",
                     "model      relu_add", "Relu", "Add"]:
            self.assertIn(part, out)

    def test_inspect_json(self):
        rc, out, err = run_kiln("inspect", self.engine, "--json")
        self.assertEqual(rc, 0, err)
        j = json.loads(out)
        self.assertEqual(j["format_version"], 11)
        self.assertEqual(j["target"], "cpu")
        self.assertEqual(j["model"], "relu_add")
        self.assertEqual(j["inputs"], [{"name": "x", "dtype": "float32", "shape": [2, 3]}])
        self.assertEqual(j["outputs"], [{"name": "y", "dtype": "float32", "shape": [2, 3]}])
        self.assertEqual([s["op"] for s in j["steps"]], ["Relu", "Add"])
        self.assertEqual(j["file_bytes"], os.path.getsize(self.engine))
        self.assertGreaterEqual(j["weight_bytes"], 12)
        rc, out, err = run_kiln("inspect", self.model, "--json")
        self.assertEqual(rc, 0, err)
        j = json.loads(out)
        self.assertEqual(j["nodes"], 2)
        self.assertEqual(j["ops"], {"Add": 1, "Relu": 1})

    def test_optimize_options(self):
        self.assert_error(["optimize", self.model, "--disable-pass", "no-such-pass"], "no such pass")
        self.assert_error(["optimize", self.model, "--disable-pass", "infer-and-fold"], "is required")
        self.assert_error(["optimize", self.model, "--batch", "0"], "--batch must be at least 1")
        self.assert_error(["optimize", self.model, "--shape", "x=2xq"], "is not a size or a range like 1..64")
        self.assert_error(["optimize", self.model, "--device", "tpu"], "expected cpu or gpu")

    def test_device_defaults_to_the_gpu_where_there_is_one(self):
        # No --device: the GPU where the CUDA runtime finds one, else the CPU; the choice is printed.
        rc, out, err = run_kiln("optimize", self.model, "-o", self.path("auto.kiln"))
        self.assertEqual(rc, 0, err)
        on_gpu = "building for the GPU (sm_" in err
        self.assertTrue(on_gpu or "building for the CPU (no GPU found)" in err, err)
        rc, out, err = run_kiln("inspect", self.path("auto.kiln"), "--json")
        self.assertEqual(json.loads(out)["target"] == "cpu", not on_gpu)
        # A CPU engine asked to run on the GPU says so, rather than running on the CPU.
        for cmd in (["run", self.engine, "--input", f"x={self.x_npy}"], ["bench", self.engine, "--iterations", "1"]):
            self.assert_error(cmd + ["--device", "gpu"], "is a CPU engine", "--device gpu needs an engine built for "
                              "the GPU", "kiln optimize MODEL.onnx --device gpu")
        rc, out, err = run_kiln("run", self.engine, "--input", f"x={self.x_npy}", "--device", "cpu")
        self.assertEqual(rc, 0, err)

    def test_bench_streams_share_the_cores(self):
        # CPU contexts running at once get the cores divided among them unless --threads says
        # otherwise (their OpenMP teams together hold no more threads than there are cores).
        out_json = self.path("streams.json")
        for extra, want in (([], max(1, (os.cpu_count() or 1) // 2)), (["--threads", "3"], 3)):
            rc, out, err = run_kiln("bench", self.engine, "--streams", "2", "--iterations", "2", "--duration", "0",
                                    "--json", out_json, *extra)
            self.assertEqual(rc, 0, err)
            self.assertIn(f"2 stream(s) of {want} CPU thread(s)", out)
            with open(out_json) as f:
                self.assertEqual(json.load(f)["cpu_threads_per_stream"], want)

    def test_symbolic_dims(self):
        m = save_model(self.path("sym.onnx"),
                       [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "L"])])
        self.assert_error(["optimize", m, "-o", self.path("sym.kiln")], "input 'x'", "dimension 1 is symbolic",
                          "--shape x=")
        rc, out, err = run_kiln("optimize", m, "-o", self.path("sym.kiln"), "--shape", "x=3x5")
        self.assertEqual(rc, 0, err)
        rc, out, err = run_kiln("inspect", self.path("sym.kiln"))
        self.assertIn("input      x float32[3,5]", out)
        # kiln run takes the shape from the data it is given.
        rc, out, err = run_kiln("run", m, "--input", f"x={self.x_npy}")
        self.assertEqual(rc, 0, err)

    def test_shape_ranges(self):
        # y = Relu(x) over x[N, L]: a range engine over N (rows apart: padded between buckets) and
        # L (Relu keeps positions apart too), run at shapes in range, inspected, benched; onnxruntime's
        # Relu is the oracle.
        m = save_model(self.path("range.onnx"),
                       [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "L"])])
        eng = self.path("range.kiln")
        rc, out, err = run_kiln("optimize", m, "-o", eng, "--device", "cpu", "--batch", "1..8", "--shape",
                                "x=1..8x2..6", "--device", "cpu")
        self.assertNotEqual(rc, 0)  # --batch and a --shape range on the same input: --shape wins, N is given
        rc, out, err = run_kiln("optimize", m, "-o", eng, "--device", "cpu", "--shape", "x=1..8x2..6")
        self.assertEqual(rc, 0, err)
        self.assertIn("range N 1..8: buckets 1,2,4,8; sizes between them run padded", out)
        self.assertIn("range L 2..6: buckets 2,4,6;", out)
        rc, out, err = run_kiln("inspect", eng)
        self.assertIn("input      x float32[1..8,2..6]", out)
        self.assertIn("  plan [4,4]:", out)
        x = np.random.default_rng(5).standard_normal((3, 5)).astype(np.float32)
        np.save(self.path("x35.npy"), x)
        outdir = self.path("range_out")
        rc, out, err = run_kiln("run", eng, "--input", f"x={self.path('x35.npy')}", "--outputs", outdir)
        self.assertEqual(rc, 0, err)
        y = np.load(os.path.join(outdir, "output_0.npy"))
        self.assertEqual(y.shape, (3, 5))
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        rc, out, err = run_kiln("bench", eng, "--shape", "x=5x3", "--iterations", "3", "--duration", "0")
        self.assertEqual(rc, 0, err)
        self.assertIn("bucket        N 8, L 4 (range engine)", out)
        np.save(self.path("x95.npy"), np.zeros((9, 5), np.float32))
        self.assert_error(["run", eng, "--input", f"x={self.path('x95.npy')}"],
                          "input 'x' dimension 0 ('N') is 9, outside the engine's range 1..8")
        self.assert_error(["bench", eng, "--shape", "x=1..2x3"], "a range is for building")
        self.assert_error(["optimize", m, "-o", eng, "--device", "cpu", "--shape", "x=1..8x0..6"], "--shape x")
        self.assert_error(["optimize", self.model, "--device", "cpu", "--buckets", "1,2"],
                          "--buckets is for range engines")
        self.assert_error(["optimize", m, "--device", "cpu", "--shape", "x=1..8x3", "--buckets", "2,4"],
                          "--buckets")
        self.assert_error(["optimize", m, "--device", "cpu", "--batch", "8..1", "--shape", "x=1x3"], "--batch")

    def test_target_arch_is_for_gpu_builds_of_known_architectures(self):
        self.assert_error(["optimize", self.model, "--device", "cpu", "--target-arch", "sm_87"],
                          "--target-arch is for GPU builds (--device gpu)")
        eng = self.path("sm87.kiln")
        rc, out, err = run_kiln("optimize", self.model, "-o", eng, "--device", "gpu", "--target-arch", "sm_87")
        if rc != 0 and "--device gpu needs the GPU" in err:
            return  # no GPU here: the rest needs one (tests/gpu/target_arch_gpu_test.cpp checks the engine)
        self.assertEqual(rc, 0, err)
        self.assertIn("(the kernels of sm_87 only)", out)
        rc, out, err = run_kiln("inspect", eng)
        self.assertIn("kernels    only those of sm_87 (Jetson Orin) (--target-arch)", out)
        self.assert_error(["optimize", self.model, "--device", "gpu", "--target-arch", "ampere"],
                          "--target-arch ampere: expected a GPU architecture such as sm_87")
        self.assert_error(["optimize", self.model, "--device", "gpu", "--target-arch", "sm_72"],
                          "compute capability 8.0 or later", "Xavier")

    def test_optimize_verbose_shows_each_pass_and_folded_names(self):
        # x -> Pad -> Conv -> Mul(per channel) -> Reshape(same shape) -> y: fold-pad, fold-scale-shift
        # and remove-noop each change it, and the one Conv left carries all three names.
        rng = np.random.default_rng(3)
        w = rng.uniform(-1, 1, (4, 2, 3, 3)).astype(np.float32)
        s = rng.uniform(0.5, 2, (4, 1, 1)).astype(np.float32)
        m = save_model(
            self.path("pad_conv_mul.onnx"),
            [helper.make_node("Pad", ["x", "pads"], ["p"], name="pad1"),
             helper.make_node("Conv", ["p", "w"], ["c"], name="conv1"),
             helper.make_node("Mul", ["c", "s"], ["cs"], name="mul1"),
             helper.make_node("Reshape", ["cs", "shape"], ["y"], name="reshape1")],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])],
            [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(s, "s"),
             numpy_helper.from_array(np.array([1, 4, 5, 5], np.int64), "shape")])
        engine = self.path("pad_conv_mul.kiln")
        rc, out, err = run_kiln("optimize", m, "-o", engine, "-v")
        self.assertEqual(rc, 0, err)
        log = out + err
        for line in ["remove-noop: 1 change (Reshape 1)", "merge-transpose-reshape: 0 changes",
                     "fold-pad: 1 change (Pad + Conv 1)", "fold-batchnorm: 0 changes",
                     "fold-scale-shift: 1 change (Conv + Mul 1)", "4 nodes -> 1 steps"]:
            self.assertIn(line, log)
        rc, out, err = run_kiln("inspect", engine)
        self.assertEqual(rc, 0, err)
        self.assertIn("pad1 + conv1 + mul1", out)
        # The same numbers as onnxruntime, and as the engine built without the folds.
        import onnxruntime as ort
        x = rng.uniform(-1, 1, (1, 2, 5, 5)).astype(np.float32)
        ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        data = self.path("pad_conv_mul_data")
        os.makedirs(data, exist_ok=True)
        save_pb(os.path.join(data, "input_0.pb"), x, "x")
        save_pb(os.path.join(data, "output_0.pb"), ref, "y")
        unfolded = self.path("pad_conv_mul_unfolded.kiln")
        rc, out, err = run_kiln("optimize", m, "-o", unfolded, "--disable-pass", "fold-pad",
                                "--disable-pass", "fold-scale-shift", "--disable-pass", "remove-noop",
                                "--disable-pass", "view-reshapes")
        self.assertEqual(rc, 0, err)
        self.assertIn("4 nodes -> 4 steps", out)
        for e in (engine, unfolded):
            rc, out, err = run_kiln("run", e, "--inputs", data, "--expect", data, "--rtol", "1e-5", "--atol", "1e-5")
            self.assertEqual(rc, 0, out + err)

    def test_spelled_out_layernorm_and_gelu_fuse_and_match_onnxruntime(self):
        # As PyTorch exports them before opsets 17 and 20: x -> LayerNorm -> MatMul -> GELU (erf).
        rng = np.random.default_rng(5)
        c = lambda name, v: numpy_helper.from_array(np.asarray(v, np.float32), name)
        nodes = [
            helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1], name="mean1"),
            helper.make_node("Sub", ["x", "mu"], ["d"], name="sub1"),
            helper.make_node("Pow", ["d", "two"], ["d2"], name="pow1"),
            helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1], name="mean2"),
            helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
            helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt1"),
            helper.make_node("Div", ["d", "sd"], ["n"], name="div1"),
            helper.make_node("Mul", ["n", "gamma"], ["ng"], name="mul_gamma"),
            helper.make_node("Add", ["ng", "beta"], ["ln"], name="add_beta"),
            helper.make_node("MatMul", ["ln", "w"], ["h"], name="fc"),
            helper.make_node("Div", ["h", "root2"], ["hs"], name="div_root"),
            helper.make_node("Erf", ["hs"], ["e"], name="erf"),
            helper.make_node("Add", ["e", "one"], ["a"], name="plus_one"),
            helper.make_node("Mul", ["h", "a"], ["ha"], name="times_x"),
            helper.make_node("Mul", ["ha", "half"], ["y"], name="halve")]
        inits = [c("two", 2.0), c("eps", 1e-5), c("gamma", rng.uniform(0.5, 2, 16)), c("beta", rng.uniform(-1, 1, 16)),
                 c("w", rng.uniform(-1, 1, (16, 8))), c("root2", np.sqrt(2.0)), c("one", 1.0), c("half", 0.5)]
        m = save_model(self.path("ln_gelu.onnx"), nodes,
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 16])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])], inits, opset=13)
        engine = self.path("ln_gelu.kiln")
        rc, out, err = run_kiln("optimize", m, "-o", engine, "-v")
        self.assertEqual(rc, 0, err)
        self.assertIn("fuse-layernorm: 1 change (LayerNormalization 1)", out + err)
        self.assertIn("fuse-gelu: 1 change (Gelu 1)", out + err)
        self.assertIn("15 nodes -> 2 steps", out)  # LayerNormalization, then MatMul + Gelu fused
        import onnxruntime as ort
        x = rng.uniform(-2, 2, (2, 4, 16)).astype(np.float32)
        ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        data = self.path("ln_gelu_data")
        os.makedirs(data, exist_ok=True)
        save_pb(os.path.join(data, "input_0.pb"), x, "x")
        save_pb(os.path.join(data, "output_0.pb"), ref, "y")
        rc, out, err = run_kiln("run", engine, "--inputs", data, "--expect", data, "--rtol", "1e-4", "--atol", "1e-5")
        self.assertEqual(rc, 0, out + err)

    def test_views_inspect_and_match_onnxruntime(self):
        # Two branches concatenated on channels at batch 1, flattened into a Gemm: the Concat and the
        # Flatten disappear (views); inspect lists them; the numbers match onnxruntime with and without.
        rng = np.random.default_rng(7)
        c = lambda name, shape: numpy_helper.from_array(rng.uniform(-1, 1, shape).astype(np.float32), name)
        nodes = [helper.make_node("Conv", ["x", "w1"], ["o1"], name="b1"),
                 helper.make_node("Conv", ["x", "w2"], ["o2"], name="b2", pads=[1, 1, 1, 1]),
                 helper.make_node("Concat", ["o1", "o2"], ["cat"], name="cat", axis=1),
                 helper.make_node("Flatten", ["cat"], ["f"], name="flat"),
                 helper.make_node("Gemm", ["f", "wg"], ["y"], name="fc")]
        m = save_model(self.path("views.onnx"), nodes,
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                       [c("w1", (4, 3, 1, 1)), c("w2", (4, 3, 3, 3)), c("wg", (512, 10))])
        engine = self.path("views.kiln")
        rc, out, err = run_kiln("optimize", m, "-o", engine, "-v")
        self.assertEqual(rc, 0, err)
        self.assertIn("5 nodes -> 3 steps", out)
        self.assertIn("view-reshapes: 1 change", err)
        self.assertIn("eliminate-concat: 1 change (2 slice(s) written in place, 0 copied)", err)
        rc, out, err = run_kiln("inspect", engine)
        self.assertEqual(rc, 0, err)
        for part in ["views      3", "o1 view of cat at +0 bytes", "o2 view of cat at +1024 bytes",
                     "f view of cat at +0 bytes"]:
            self.assertIn(part, out)
        rc, out, err = run_kiln("inspect", engine, "--json")
        self.assertEqual(rc, 0, err)
        self.assertIn({"name": "o2", "base": "cat", "offset": 1024, "bytes": 1024}, json.loads(out)["views"])
        import onnxruntime as ort
        x = rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
        ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        data = self.path("views_data")
        os.makedirs(data, exist_ok=True)
        save_pb(os.path.join(data, "input_0.pb"), x, "x")
        save_pb(os.path.join(data, "output_0.pb"), ref, "y")
        plain = self.path("views_off.kiln")
        rc, out, err = run_kiln("optimize", m, "-o", plain, "--disable-pass", "view-reshapes",
                                "--disable-pass", "eliminate-concat")
        self.assertEqual(rc, 0, err)
        self.assertIn("5 nodes -> 5 steps", out)
        for e in (engine, plain):
            rc, out, err = run_kiln("run", e, "--inputs", data, "--expect", data, "--rtol", "1e-5", "--atol", "1e-5")
            self.assertEqual(rc, 0, out + err)

    # ---- the command line itself ----------------------------------------------------------------

    def test_ops_lists_conv(self):
        rc, out, err = run_kiln("ops")
        self.assertEqual(rc, 0, err)
        ops = out.split()
        for op in ["Conv", "Relu", "Gemm", "Constant", "Upsample"]:
            self.assertIn(op, ops)
        self.assertEqual(ops, sorted(ops))
        rc, out, err = run_kiln("ops", "--json")
        self.assertEqual(rc, 0, err)
        entries = {e["op"]: e for e in json.loads(out)}
        self.assertEqual(entries["Upsample"]["imports_as"], "Resize")
        # Every op runs on the CPU; a CUDA build runs every one on the GPU too.
        self.assertIn(entries["Conv"]["backends"], (["cpu"], ["cpu", "gpu"]))
        self.assertEqual({tuple(e["backends"]) for e in entries.values()}, {tuple(entries["Conv"]["backends"])})

    def test_unknown_option_and_usage_errors(self):
        rc, out, err = run_kiln("run", self.model, "--frobnicate")
        self.assertEqual(rc, 2, out + err)
        self.assertIn("frobnicate", out + err)
        rc, out, err = run_kiln("explode")
        self.assertEqual(rc, 2, out + err)
        rc, out, err = run_kiln()
        self.assertEqual(rc, 2, out + err)
        rc, out, err = run_kiln("run")
        self.assertEqual(rc, 2, out + err)
        rc, out, err = run_kiln("--version")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("kiln 0.1.0", out)


def main():
    global KILN
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    args, rest = parser.parse_known_args()
    KILN = os.path.abspath(args.kiln)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
