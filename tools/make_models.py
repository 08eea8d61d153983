#!/usr/bin/env python3
"""Writes ONNX models with the exact topology of well-known classifiers and seeded random weights,
plus an ONNX test-data folder whose expected outputs come from onnxruntime (an independent oracle).

  tools/make_models.py OUT_DIR [--models resnet18,mobilenetv2,transformer,densenet,googlenet] [--batch N]

OUT_DIR/NAME/model.onnx and OUT_DIR/NAME/test_data_set_0/{input_0,output_0}.pb, the layout
`kiln run --inputs DIR --expect DIR` reads. The graphs follow what torch.onnx.export writes at
opset 17 for torchvision's resnet18 and mobilenet_v2 (Conv + BatchNormalization + Relu/Clip,
Add, GlobalAveragePool, Flatten, Gemm); densenet and googlenet are smaller versions (64x64 input,
fewer layers) of torchvision's densenet121 and googlenet, for their Concat patterns. Real
torchvision exports are checked on the GPU machine (bench/gpu_check.sh), where PyTorch is installed.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, base, arr):
        nm = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), nm))
        return nm

    def op(self, op_type, inputs, base=None, **attrs):
        out = self.name(base or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def conv_bn(self, x, cin, cout, k, stride=1, groups=1, act="relu"):
        fan_in = cin // groups * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // groups, k, k)).astype(np.float32)
        y = self.op("Conv", [x, self.const("w", w)], "conv", kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4, group=groups)
        scale = self.rng.uniform(0.5, 1.5, cout).astype(np.float32)
        bias = self.rng.normal(0, 0.1, cout).astype(np.float32)
        mean = self.rng.normal(0, 0.1, cout).astype(np.float32)
        var = self.rng.uniform(0.5, 1.5, cout).astype(np.float32)
        y = self.op("BatchNormalization", [y] + [self.const(n, a) for n, a in
                                                 (("gamma", scale), ("beta", bias), ("mean", mean), ("var", var))],
                    "bn", epsilon=1e-5)
        if act == "relu":
            y = self.op("Relu", [y])
        elif act == "relu6":
            y = self.op("Clip", [y, self.const("min", np.float32(0)), self.const("max", np.float32(6))], "relu6")
        return y

    def head(self, x, cin, classes):
        y = self.op("GlobalAveragePool", [x], "avgpool")
        y = self.op("Flatten", [y], "flatten", axis=1)
        w = self.rng.normal(0, 1.0 / np.sqrt(cin), (classes, cin)).astype(np.float32)
        b = self.rng.normal(0, 0.01, classes).astype(np.float32)
        return self.op("Gemm", [y, self.const("fc_w", w), self.const("fc_b", b)], "fc", transB=1)

    def model(self, name, x_shape, out, out_shape):
        g = helper.make_graph(self.nodes, name,
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-make-models")
        m.ir_version = 8  # what torch.onnx.export writes at opset 17; onnxruntime reads it
        onnx.checker.check_model(m)
        return m


def resnet18(batch):
    b = Builder(18)
    x = b.conv_bn("input", 3, 64, 7, stride=2)
    x = b.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)):
        y = b.conv_bn(x, cin, cout, 3, stride)
        y = b.conv_bn(y, cout, cout, 3, 1, act=None)
        short = b.conv_bn(x, cin, cout, 1, stride, act=None) if (stride != 1 or cin != cout) else x
        x = b.op("Relu", [b.op("Add", [y, short])])
        cin = cout
    return b.model("resnet18", ["batch", 3, 224, 224], b.head(x, 512, 1000), ["batch", 1000]), (batch, 3, 224, 224)


def mobilenetv2(batch):
    b = Builder(2)
    x = b.conv_bn("input", 3, 32, 3, stride=2, act="relu6")
    cin = 32
    # (expansion t, channels c, repeats n, stride s) of torchvision's mobilenet_v2
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x if t == 1 else b.conv_bn(x, cin, hidden, 1, act="relu6")
            y = b.conv_bn(y, hidden, hidden, 3, stride, groups=hidden, act="relu6")
            y = b.conv_bn(y, hidden, c, 1, act=None)
            x = b.op("Add", [x, y]) if (stride == 1 and cin == c) else y
            cin = c
    x = b.conv_bn(x, cin, 1280, 1, act="relu6")
    return b.model("mobilenetv2", ["batch", 3, 224, 224], b.head(x, 1280, 1000), ["batch", 1000]), (batch, 3, 224, 224)


def transformer(batch):
    """One pre-norm encoder block (LayerNormalization, attention with Softmax, GELU MLP)."""
    b = Builder(7)
    seq, d, heads, ff = 64, 128, 4, 512
    dh = d // heads
    w = lambda *s: b.const("w", b.rng.normal(0, 1 / np.sqrt(s[0]), s).astype(np.float32))
    ln = lambda x: b.op("LayerNormalization", [x, b.const("g", np.ones(d, np.float32)),
                                               b.const("b", np.zeros(d, np.float32))], "ln", axis=-1, epsilon=1e-5)
    h = ln("input")
    split_heads = lambda t: b.op("Transpose", [b.op("Reshape", [t, b.const("shape", np.array([batch, seq, heads, dh]))])],
                                 "heads", perm=[0, 2, 1, 3])
    q, k, v = (split_heads(b.op("MatMul", [h, w(d, d)])) for _ in range(3))
    att = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    att = b.op("Softmax", [b.op("Mul", [att, b.const("scale", np.float32(1 / np.sqrt(dh)))])], axis=-1)
    o = b.op("Transpose", [b.op("MatMul", [att, v])], perm=[0, 2, 1, 3])
    o = b.op("MatMul", [b.op("Reshape", [o, b.const("shape", np.array([batch, seq, d]))]), w(d, d)])
    x = b.op("Add", ["input", o])
    m = b.op("MatMul", [ln(x), w(d, ff)])
    gelu = b.op("Mul", [b.op("Mul", [m, b.const("half", np.float32(0.5))]),
                        b.op("Add", [b.op("Erf", [b.op("Div", [m, b.const("sqrt2", np.float32(np.sqrt(2)))])]),
                                     b.const("one", np.float32(1))])])
    y = b.op("Add", [x, b.op("MatMul", [gelu, w(ff, d)])], "output")
    return b.model("transformer", [batch, seq, d], y, [batch, seq, d]), (batch, seq, d)


def densenet(batch):
    """torchvision's densenet121 pattern at 64x64: each layer (BN, ReLU, 1x1 Conv, BN, ReLU, 3x3 Conv)
    reads the channel Concat of all earlier features of its block; transitions between blocks."""
    b = Builder(121)
    growth, bottleneck = 16, 64
    bn_relu = lambda x, c: b.op("Relu", [b.op("BatchNormalization", [x] + [
        b.const(n, a.astype(np.float32)) for n, a in (
            ("gamma", b.rng.uniform(0.5, 1.5, c)), ("beta", b.rng.normal(0, 0.1, c)),
            ("mean", b.rng.normal(0, 0.1, c)), ("var", b.rng.uniform(0.5, 1.5, c)))
    ], "bn", epsilon=1e-5)])
    conv = lambda x, cin, cout, k: b.op("Conv", [x, b.const("w", b.rng.normal(
        0, np.sqrt(2.0 / (cin * k * k)), (cout, cin, k, k)).astype(np.float32))], "conv", kernel_shape=[k, k],
        pads=[k // 2] * 4)
    x = b.conv_bn("input", 3, 32, 7, stride=2)
    x = b.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 32
    for block, layers in enumerate((4, 4)):
        features = [x]
        for _ in range(layers):
            cat = features[0] if len(features) == 1 else b.op("Concat", features, "cat", axis=1)
            c = cin + growth * (len(features) - 1)
            h = conv(bn_relu(cat, c), c, bottleneck, 1)
            features.append(conv(bn_relu(h, bottleneck), bottleneck, growth, 3))
        x = b.op("Concat", features, "cat", axis=1)
        cin += growth * layers
        if block == 0:
            x = b.op("AveragePool", [conv(bn_relu(x, cin), cin, cin // 2, 1)], "pool", kernel_shape=[2, 2],
                     strides=[2, 2])
            cin //= 2
    x = bn_relu(x, cin)
    return b.model("densenet", ["batch", 3, 64, 64], b.head(x, cin, 100), ["batch", 100]), (batch, 3, 64, 64)


def googlenet(batch):
    """torchvision's googlenet inception blocks (1x1; 1x1 -> 3x3; 1x1 -> 3x3; pool -> 1x1, each Conv
    + BN + ReLU, concatenated on channels) at 64x64, two of them (3a, 3b) and a max pool."""
    b = Builder(22)
    x = b.conv_bn("input", 3, 64, 7, stride=2)
    x = b.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for c1, c3r, c3, c5r, c5, cp in ((64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64)):
        b1 = b.conv_bn(x, cin, c1, 1)
        b2 = b.conv_bn(b.conv_bn(x, cin, c3r, 1), c3r, c3, 3)
        b3 = b.conv_bn(b.conv_bn(x, cin, c5r, 1), c5r, c5, 3)
        pool = b.op("MaxPool", [x], "pool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
        b4 = b.conv_bn(pool, cin, cp, 1)
        x = b.op("Concat", [b1, b2, b3, b4], "cat", axis=1)
        cin = c1 + c3 + c5 + cp
    x = b.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return b.model("googlenet", ["batch", 3, 64, 64], b.head(x, cin, 100), ["batch", 100]), (batch, 3, 64, 64)


MODELS = {"resnet18": resnet18, "mobilenetv2": mobilenetv2, "transformer": transformer, "densenet": densenet,
          "googlenet": googlenet}


def write(out_dir, name, batch):
    import onnxruntime as ort
    model, x_shape = MODELS[name](batch)
    d = os.path.join(out_dir, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    x = np.random.default_rng(1).normal(0, 1, x_shape).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the plain reference
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"input": x})
    onnx.save_tensor(numpy_helper.from_array(x, "input"), os.path.join(data, "input_0.pb"))
    onnx.save_tensor(numpy_helper.from_array(y, model.graph.output[0].name), os.path.join(data, "output_0.pb"))
    print(f"{d}: {len(model.graph.node)} nodes, reference from onnxruntime {ort.__version__}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    for name in a.models.split(","):
        write(a.out, name, a.batch)


if __name__ == "__main__":
    main()
