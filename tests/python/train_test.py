#!/usr/bin/env python3
"""`kiln train` and `kiln eval` end to end, with onnxruntime as the oracle.

- Trained networks exported to ONNX (LeNet-5 on a Fashion-MNIST subset; ResNet-8 and a network
  with every other layer kind on a small numpy data set) pass onnx.checker, contain no Dropout and
  keep BatchNormalization with running statistics, and compute in onnxruntime and in `kiln run` the
  logits of Kiln's own inference forward pass (the --example batch).
- `kiln eval` gives the same accuracy for the .onnx and the optimized .kiln engine.
- A training process killed with SIGKILL at a random moment (maybe while it writes a checkpoint)
  resumes from its last checkpoint and exports the same weights as an uninterrupted run.
- Refused options and bad inputs exit with 2 and a message naming what is wrong.

Run by ctest as: train_test.py --kiln path/to/kiln
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import onnx
from onnx import numpy_helper
import onnxruntime as ort

KILN = None
FASHION = "/usr/share/datasets/fashion-mnist"


def run_kiln(*args, timeout=300):
    p = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def ort_logits(model, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]


def initializers(model):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}


# Every layer kind not in the zoo: avg pooling, leaky ReLU, sigmoid, tanh, GELU, dropout, concat,
# a grouped and dilated convolution, a batch norm on features.
EVERY_LAYER = """
name: "every_layer"
layer { name: "conv" conv { out_channels: 8 kernel: 3 pad: 1 } }
layer { name: "bn" batch_norm {} }
layer { name: "leaky" leaky_relu { alpha: 0.1 } }
layer { name: "gconv" conv { out_channels: 8 kernel: 3 pad: 2 dilation: 2 groups: 4 } }
layer { name: "tanh" tanh {} }
layer { name: "sig" sigmoid {} input: "leaky" }
layer { name: "cat" concat {} input: "tanh" input: "sig" }
layer { name: "avg" avg_pool { kernel: 3 stride: 2 pad: 1 } }
layer { name: "flat" flatten {} }
layer { name: "drop" dropout { p: 0.3 } }
layer { name: "fc1" linear { out_features: 32 } }
layer { name: "bn_f" batch_norm {} }
layer { name: "gelu" gelu {} }
layer { name: "fc2" linear {} init: XAVIER }
"""


class Train(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kiln_train_test_")
        cls.dir = cls.tmp.name
        # A small numpy data set: 3x8x8 images of 4 classes, channels last (as numpy users keep them).
        rng = np.random.default_rng(0)
        cls.npy = os.path.join(cls.dir, "npy")
        os.makedirs(cls.npy)
        for split, n in (("train", 400), ("test", 100)):
            y = rng.integers(0, 4, n)
            x = rng.random((n, 8, 8, 3), dtype=np.float32) * 0.5 + y[:, None, None, None] * 0.1
            np.save(os.path.join(cls.npy, f"x_{split}.npy"), x.astype(np.float32))
            np.save(os.path.join(cls.npy, f"y_{split}.npy"), y.astype(np.int64))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def check_export(self, model, example, expect_batchnorm):
        m = onnx.load(model)
        onnx.checker.check_model(m, full_check=True)
        ops = {n.op_type for n in m.graph.node}
        self.assertNotIn("Dropout", ops)
        self.assertEqual("BatchNormalization" in ops, expect_batchnorm)
        x, ref = load_pb(os.path.join(example, "input_0.pb")), load_pb(os.path.join(example, "output_0.pb"))
        out = ort_logits(model, x)
        self.assertEqual(out.shape, ref.shape)
        scale = np.abs(ref).max()
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5 * scale)
        code, stdout, stderr = run_kiln("run", model, "--inputs", example, "--expect", example, "--rtol", "1e-4",
                                        "--atol", 1e-5 * scale)
        self.assertEqual(code, 0, stdout + stderr)

    @unittest.skipUnless(os.path.isdir(FASHION), "dataset-fashion-mnist is not installed")
    def test_lenet5_export_eval_and_engine(self):
        model, example = self.path("lenet5.onnx"), self.path("lenet5_example")
        code, out, err = run_kiln("train", "--net", "lenet5", "--data", FASHION, "--limit", 3000, "--epochs", 1,
                                  "--batch", 50, "-o", model, "--example", example, "--metrics",
                                  self.path("m.json"), "--plot", self.path("curves.svg"))
        self.assertEqual(code, 0, out + err)
        self.assertIn("best validation accuracy", out)
        self.assertIn("epoch 1/1", err)
        self.check_export(model, example, expect_batchnorm=False)
        with open(self.path("curves.svg")) as f:
            self.assertIn("<polyline", f.read())

        engine = self.path("lenet5.kiln")
        code, out, err = run_kiln("optimize", model, "-o", engine, "--batch", 100)
        self.assertEqual(code, 0, out + err)
        accuracy = {}
        for m in (model, engine):
            code, out, err = run_kiln("eval", m, "--data", FASHION, "--limit", 1000)
            self.assertEqual(code, 0, out + err)
            self.assertIn("confusion matrix", out)
            accuracy[m] = out.split("top-1 accuracy ")[1].split("%")[0]
        self.assertEqual(accuracy[model], accuracy[engine])
        self.assertGreater(float(accuracy[model]), 60)

    def test_resnet8_and_every_layer_export(self):
        desc = self.path("every_layer.prototxt")
        with open(desc, "w") as f:
            f.write(EVERY_LAYER)
        for net, has_bn in (("resnet8", True), (desc, True)):
            with self.subTest(net=net):
                model, example = self.path("export.onnx"), self.path("export_example")
                code, out, err = run_kiln("train", "--net", net, "--data", self.npy, "--epochs", 2, "--batch", 32,
                                          "--solver", "adam", "-o", model, "--example", example)
                self.assertEqual(code, 0, out + err)
                self.assertIn("3x8x8", out)
                self.check_export(model, example, expect_batchnorm=has_bn)

    @unittest.skipUnless(os.path.isdir(FASHION), "dataset-fashion-mnist is not installed")
    def test_sigkill_and_resume_match_an_uninterrupted_run(self):
        # Long enough (about 1.5 s of steps on the build machine) that the kill, up to 0.5 s after the
        # first checkpoint, lands before the end: 2,500 images for 2 epochs took about 0.3 s of steps
        # once the MLP's products ran in oneDNN, less than the kill's delay can be.
        common = ["train", "--net", "mlp", "--data", FASHION, "--limit", 10000, "--epochs", 4, "--batch", 25,
                  "--solver", "adam", "--seed", 3, "--threads", 1]
        whole = self.path("whole.onnx")
        code, out, err = run_kiln(*common, "-o", whole)
        self.assertEqual(code, 0, out + err)

        ckpt = self.path("ckpt")
        checkpoint = os.path.join(ckpt, "latest.ckpt")
        proc = subprocess.Popen([KILN, *map(str, [*common, "--checkpoint", ckpt, "--checkpoint-every", 3])],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while not os.path.exists(checkpoint) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.005)
        time.sleep(random.uniform(0, 0.5))  # anywhere: between checkpoints or inside a write (each fsyncs)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(), -signal.SIGKILL, "training finished before the kill; make it longer")
        self.assertTrue(os.path.exists(checkpoint))

        resumed = self.path("resumed.onnx")
        code, out, err = run_kiln(*common, "--resume", ckpt, "--checkpoint-every", 3, "-o", resumed)
        self.assertEqual(code, 0, out + err)
        self.assertIn("resumed from", out)
        a, b = initializers(whole), initializers(resumed)
        self.assertEqual(a.keys(), b.keys())
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)

    def test_refused_options_and_bad_inputs(self):
        bad_idx = self.path("bad_idx")
        os.makedirs(bad_idx, exist_ok=True)
        with open(os.path.join(bad_idx, "train-images-idx3-ubyte"), "wb") as f:
            f.write(b"\x01\x02\x08\x03" + b"\x00" * 100)
        with open(os.path.join(bad_idx, "train-labels-idx1-ubyte"), "wb") as f:
            f.write(b"\x00\x00\x08\x01\x00\x00\x00\x01\x00")
        bad_net = self.path("bad.prototxt")
        with open(bad_net, "w") as f:
            f.write('layer { name: "flat" flatten {} }\nlayer { name: "fc" linear {} input: "nothing" }\n')
        data = ["--data", self.npy]
        npy = [*data, "--net", "mlp"]
        cases = [
            # Refused in every build: without CUDA, without a GPU, or with fewer than 64 GPUs.
            (["train", "--device", "gpu", "--gpus", 64, *npy],
             ("built without CUDA", "no CUDA device", "--gpus 64: this machine has")),
            (["train", "--fp16", *npy], "--fp16: mixed-precision training runs on the GPU; add --device gpu"),
            (["train", "--gpus", 2, *npy], "--gpus 2: data-parallel training runs on GPUs; add --device gpu"),
            (["train", *npy, "-o", self.path("m.pt")], "expected a .onnx file"),
            (["train", *npy, "--metrics", self.path("m.txt")], "expected a .csv or .json file"),
            (["train", "--data", bad_idx], "not an IDX file (bad magic number"),
            (["train", "--net", bad_net, *data], "bad.prototxt:2: layer 'fc': input 'nothing'"),
            (["train", "--net", "nonet", *data], "neither a zoo network"),
            (["train", *npy, "--resume", self.path("nowhere")], "no checkpoint"),
            (["train", *npy, "--solver", "rmsprop"], "expected sgd, adam or adamw"),
            (["train", *npy, "--batch", 100000], "larger than the training set"),
        ]
        if os.path.isdir(FASHION):
            lenet = self.path("lenet5.onnx")
            if not os.path.exists(lenet):
                run_kiln("train", "--net", "lenet5", "--limit", 500, "--epochs", 1, "-o", lenet)
            cases.append((["eval", lenet, *data], "wrong image size"))
        for args, message in cases:
            with self.subTest(args=args):
                code, out, err = run_kiln(*args)
                self.assertEqual(code, 2, out + err)
                messages = message if isinstance(message, tuple) else (message,)
                self.assertTrue(any(m in err for m in messages), err)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    args, rest = ap.parse_known_args()
    KILN = os.path.abspath(args.kiln)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
