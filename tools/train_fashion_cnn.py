#!/usr/bin/env python3
"""Trains a small CNN on Fashion-MNIST with numpy alone and writes it as ONNX, so that INT8
accuracy can be measured on a real trained network on machines without PyTorch.

  tools/train_fashion_cnn.py OUT.onnx [--data /usr/share/datasets/fashion-mnist] [--samples 20000]
                             [--epochs 1] [--seed 0]

Network (opset 17, input x float32 [N, 1, 28, 28] in [0, 1], output logits [N, 10]):
  Conv 1->8 3x3 pad 1, Relu, MaxPool 2, Conv 8->16 3x3 pad 1, Relu, MaxPool 2, Flatten, Gemm 784->10.
SGD with momentum on the first --samples training images; about 85% top-1 on the test set after
one epoch of 20000 images (a few seconds on one core).
"""
import argparse
import gzip
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    x = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz")).astype(np.int64)
    return x[:, None], y


def im2col(x, k=3, pad=1):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((n, c, k, k, h, w), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + h, j:j + w]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * h * w, c * k * k)


def col2im(cols, shape, k=3, pad=1):
    n, c, h, w = shape
    cols = cols.reshape(n, h, w, c, k, k).transpose(0, 3, 4, 5, 1, 2)
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), dtype=cols.dtype)
    for i in range(k):
        for j in range(k):
            xp[:, :, i:i + h, j:j + w] += cols[:, :, i, j]
    return xp[:, :, pad:pad + h, pad:pad + w]


def conv_forward(x, w, b):
    n, _, h, wd = x.shape
    cols = im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), cols


def conv_backward(dout, cols, x_shape, w):
    m = w.shape[0]
    d = dout.transpose(0, 2, 3, 1).reshape(-1, m)
    dw = (d.T @ cols).reshape(w.shape)
    db = d.sum(0)
    dx = col2im(d @ w.reshape(m, -1), x_shape)
    return dx, dw, db


def pool_forward(x):
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2)
    out = r.max(axis=(3, 5))
    mask = r == out[:, :, :, None, :, None]
    return out, mask


def pool_backward(dout, mask):
    d = mask * dout[:, :, :, None, :, None]
    n, c, h2, _, w2, _ = d.shape
    return d.reshape(n, c, h2 * 2, w2 * 2)


def forward(p, x):
    c1, cols1 = conv_forward(x, p["w1"], p["b1"])
    r1 = np.maximum(c1, 0)
    p1, m1 = pool_forward(r1)
    c2, cols2 = conv_forward(p1, p["w2"], p["b2"])
    r2 = np.maximum(c2, 0)
    p2, m2 = pool_forward(r2)
    f = p2.reshape(len(x), -1)
    logits = f @ p["w3"].T + p["b3"]
    return logits, (x, c1, cols1, m1, p1, c2, cols2, m2, f)


def train(x, y, epochs, seed, batch=64, lr=0.05, momentum=0.9):
    rng = np.random.default_rng(seed)
    p = {"w1": rng.normal(0, np.sqrt(2 / 9), (8, 1, 3, 3)), "b1": np.zeros(8),
         "w2": rng.normal(0, np.sqrt(2 / 72), (16, 8, 3, 3)), "b2": np.zeros(16),
         "w3": rng.normal(0, np.sqrt(1 / 784), (10, 784)), "b3": np.zeros(10)}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    vel = {k: np.zeros_like(v) for k, v in p.items()}
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for s in range(0, len(x) - batch + 1, batch):
            xb, yb = x[order[s:s + batch]], y[order[s:s + batch]]
            logits, (xi, c1, cols1, m1, p1, c2, cols2, m2, f) = forward(p, xb)
            e = np.exp(logits - logits.max(1, keepdims=True))
            prob = e / e.sum(1, keepdims=True)
            prob[np.arange(batch), yb] -= 1
            dlog = prob / batch
            g = {"w3": dlog.T @ f, "b3": dlog.sum(0)}
            dp2 = (dlog @ p["w3"]).reshape(batch, 16, 7, 7)
            dc2 = pool_backward(dp2, m2) * (c2 > 0)
            dp1, g["w2"], g["b2"] = conv_backward(dc2, cols2, p1.shape, p["w2"])
            dc1 = pool_backward(dp1, m1) * (c1 > 0)
            _, g["w1"], g["b1"] = conv_backward(dc1, cols1, xi.shape, p["w1"])
            for k in p:
                vel[k] = momentum * vel[k] - lr * g[k].astype(np.float32)
                p[k] += vel[k]
    return p


def to_onnx(p, path):
    init = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in p.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "fashion_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln train_fashion_cnn.py")
    m.ir_version = 8  # readable by older onnxruntime too
    onnx.checker.check_model(m)
    onnx.save(m, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    x, y = load(a.data, "train")
    p = train(x[:a.samples], y[:a.samples], a.epochs, a.seed)
    to_onnx(p, a.out)
    tx, ty = load(a.data, "t10k")
    acc = np.mean(np.concatenate([forward(p, tx[i:i + 1000])[0].argmax(1) for i in range(0, len(tx), 1000)]) == ty)
    print(f"wrote {a.out}: test top-1 {100 * acc:.2f}%")


if __name__ == "__main__":
    main()
