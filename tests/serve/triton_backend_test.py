#!/usr/bin/env python3
"""libtriton_kiln.so under a real Triton Inference Server (2.51, nvidia-pytriton's tritonserver),
queried with tritonclient over HTTP and gRPC, on CPU engines:

1. Config auto-complete: a repository whose config.pbtxt says only `backend: "kiln"` and
   `dynamic_batching {}`; Triton's model metadata and config must be the engine's (max_batch_size
   the top of its batch range, inputs and outputs without the batch axis).
2. A hand-written config that contradicts its engine (wrong dims; max_batch_size above the engine's
   range) does not load: the model is not ready and its reason (and the server log) names the
   model, the tensor and the mismatch.
3. Inference at batch 1 and 5 matches onnxruntime (rtol 1e-4); a request for one output gets only
   that output.
4. 32 concurrent single-row requests per protocol are all correct and Triton batched them: the
   model's statistics show fewer executions than inferences (m_q, the same engine with a queue
   delay, must batch the concurrent requests themselves; m, with `dynamic_batching {}`, may not).
5. A wrong-shape and a wrong-dtype request get errors naming the tensor; a good request right after
   still works. On an engine with a ranged non-batch dimension (which Triton's config shows as -1)
   the backend's own check rejects a size out of range, naming the request and the tensor, while
   the requests batched with it (of several sizes) still get their right answers.
6. SIGTERM stops the server, which exits 0.

Two interpreters: this script starts with the main python3 (numpy, onnx, onnxruntime: it builds the
ONNX models, the engines and onnxruntime's reference outputs), then runs itself again with the
serving venv's python (${KILN_SERVE_VENV:-~/.cache/kiln/serve-venv}: tritonclient, nvidia-pytriton;
scripts/install_deps.sh installs it) for the server part.

  triton_backend_test.py --kiln build/kiln --backend build/src/triton_backend/libtriton_kiln.so
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

VENV = os.environ.get("KILN_SERVE_VENV", os.path.expanduser("~/.cache/kiln/serve-venv"))
ROWS = 64  # reference rows of model m
SEQ_MAX_L = 16
MODELS = ["m", "m_q", "m_full", "m_fixed", "seq"]  # the models that must load


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


# ------------------------------------------------------------------------------------------------
# Phase 1 (main python3): models, engines, repository, references.

def build_models(work):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    w2 = (rng.standard_normal((10, 256)) * 0.1).astype(np.float32)
    b2 = rng.standard_normal(10).astype(np.float32)
    # m: Conv+Relu+Gemm on 1x8x8 images (symbolic batch N), two outputs: logits and their softmax.
    g = h.make_graph(
        [h.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
         h.make_node("Relu", ["c"], ["r"]),
         h.make_node("Flatten", ["r"], ["f"], axis=1),
         h.make_node("Gemm", ["f", "W2", "B2"], ["logits"], transB=1),
         h.make_node("Softmax", ["logits"], ["probs"], axis=1)],
        "m", [h.make_tensor_value_info("x", T.FLOAT, ["N", 1, 8, 8])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["N", 10]), h.make_tensor_value_info("probs", T.FLOAT, ["N", 10])],
        [nh.from_array(w, "W"), nh.from_array(b, "B"), nh.from_array(w2, "W2"), nh.from_array(b2, "B2")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(work, "m.onnx"))
    # seq: y = 2 * relu(x) on x[N, L]: a batch axis and a second ranged dimension.
    g = h.make_graph(
        [h.make_node("Relu", ["x"], ["r"]), h.make_node("Mul", ["r", "two"], ["y"])],
        "seq", [h.make_tensor_value_info("x", T.FLOAT, ["N", "L"])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", "L"])],
        [nh.from_array(np.array(2, np.float32), "two")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(work, "seq.onnx"))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


def prepare(args, work):
    try:
        import onnx  # noqa: F401
        import onnxruntime as ort
    except ImportError as e:
        fail(f"{sys.executable} lacks onnx/onnxruntime ({e}): pip install onnx onnxruntime (scripts/install_deps.sh)")
    build_models(work)
    repo = os.path.join(work, "repo")
    engine_m = os.path.join(work, "m.kiln")
    run([args.kiln, "optimize", os.path.join(work, "m.onnx"), "-o", engine_m, "--device", "cpu", "--batch", "1..16"])
    engine_fixed = os.path.join(work, "m_fixed.kiln")  # batch 1 only: no batch axis to serve
    run([args.kiln, "optimize", os.path.join(work, "m.onnx"), "-o", engine_fixed, "--device", "cpu"])
    run([args.kiln, "optimize", os.path.join(work, "seq.onnx"), "-o", os.path.join(work, "seq.kiln"), "--device", "cpu",
         "--shape", f"x=1..8x2..{SEQ_MAX_L}"])
    configs = {
        # Auto-completed from the engine.
        "m": 'backend: "kiln"\ndynamic_batching {}\n',
        "m_q": 'backend: "kiln"\ndynamic_batching { max_queue_delay_microseconds: 20000 }\n',
        # A batched engine that Triton must not batch (max_batch_size 0, dims with the batch axis):
        # each request runs alone with its own batch size.
        "m_full": 'backend: "kiln"\nmax_batch_size: 0\n'
                  'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 1, 8, 8 ] } ]\n',
        # An engine of one fixed shape: max_batch_size 0 and full dims, auto-completed.
        "m_fixed": 'backend: "kiln"\n',
        "seq": 'backend: "kiln"\ndynamic_batching { max_queue_delay_microseconds: 20000 }\n'
               'parameters { key: "threads" value: { string_value: "1" } }\n',
        # Hand-written and wrong: they must not load.
        "bad_dims": 'backend: "kiln"\nmax_batch_size: 8\n'
                    'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1, 9, 8 ] } ]\n'
                    'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]\n',
        "bad_batch": 'backend: "kiln"\nmax_batch_size: 32\n',
    }
    engines = {"m": engine_m, "m_q": engine_m, "m_full": engine_m, "m_fixed": engine_fixed,
               "seq": os.path.join(work, "seq.kiln"), "bad_dims": engine_m, "bad_batch": engine_m}
    for name, config in configs.items():
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(engines[name], os.path.join(repo, name, "1", "model.kiln"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)
    x = np.random.default_rng(1).standard_normal((ROWS, 1, 8, 8)).astype(np.float32)
    sess = ort.InferenceSession(os.path.join(work, "m.onnx"), providers=["CPUExecutionProvider"])
    logits, probs = sess.run(["logits", "probs"], {"x": x})
    np.savez(os.path.join(work, "ref.npz"), x=x, logits=logits, probs=probs)


# ------------------------------------------------------------------------------------------------
# Phase 2 (the venv's python): Triton and tritonclient.

def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def tritonserver_paths():
    import importlib.util
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        fail(f"nvidia-pytriton is not installed in {VENV} (scripts/install_deps.sh installs it)")
    pkg = list(spec.submodule_search_locations)[0]
    binary = os.path.join(pkg, "tritonserver", "bin", "tritonserver")
    if not os.access(binary, os.X_OK):
        fail(f"no tritonserver at {binary}")
    site = os.path.dirname(pkg)
    # The wheel's libraries (libtritonserver, its bundled libcudart...) sit in nvidia_pytriton.libs
    # (tritonserver's RPATH finds them too); nvidia-cuda-runtime-cu12 adds a libcudart.
    libs = [os.path.join(site, "nvidia_pytriton.libs"), os.path.join(site, "nvidia", "cuda_runtime", "lib")]
    return binary, [d for d in libs if os.path.isdir(d)]


def die_with_parent():
    """In the child: SIGTERM when this script dies (a ctest timeout), so that no server outlives it."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Server:
    def __init__(self, work, backend):
        self.work = work
        binary, libs = tritonserver_paths()
        backends = os.path.join(work, "backends")
        os.makedirs(os.path.join(backends, "kiln"))
        os.symlink(os.path.abspath(backend), os.path.join(backends, "kiln", "libtriton_kiln.so"))
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(libs + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p])
        self.log_path = os.path.join(work, "server.log")
        self.log = open(self.log_path, "w")
        cmd = [binary, "--model-repository", os.path.join(work, "repo"), "--backend-directory", backends,
               "--http-address", "127.0.0.1", "--http-port", str(self.http_port),
               "--grpc-address", "127.0.0.1", "--grpc-port", str(self.grpc_port),
               "--metrics-port", str(self.metrics_port), "--allow-metrics=false",
               # The repository holds models that must fail to load: serve the others.
               "--exit-on-error=false", "--strict-readiness=false"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=die_with_parent)

    def text(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode


def expect_error(fn, *needles):
    from tritonclient.utils import InferenceServerException
    try:
        fn()
    except InferenceServerException as e:
        msg = e.message() or str(e)
        for n in needles:
            if n not in msg:
                fail(f"error {msg!r} does not mention {n!r}")
        return msg
    fail(f"expected an error mentioning {needles}, the request succeeded")


def close(actual, expected, what):
    if actual is None:
        fail(f"{what}: no output")
    if actual.shape != expected.shape:
        fail(f"{what}: shape {actual.shape}, expected {expected.shape}")
    try:
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)
    except AssertionError as e:
        fail(f"{what}: {e}")


def serve(args, work):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    ref = np.load(os.path.join(work, "ref.npz"))
    X, LOGITS, PROBS = ref["x"], ref["logits"], ref["probs"]
    server = Server(work, args.backend)
    t0 = time.time()
    try:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", concurrency=32)
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        clients = {"http": (httpclient, http), "grpc": (grpcclient, grpc)}

        # Ready: MODELS load; bad_* do not. Wait until every model's load has ended.
        deadline = time.time() + 60
        index = []
        while True:
            if server.proc.poll() is not None:
                fail(f"tritonserver exited {server.proc.returncode} while starting:\n{server.text()}")
            try:
                if http.is_server_live():
                    index = http.get_model_repository_index()
            except Exception:
                pass
            states = {m["name"]: m.get("state") for m in index}
            if len(states) == len(MODELS) + 2 and all(v in ("READY", "UNAVAILABLE") for v in states.values()):
                if any(states[m] != "READY" for m in MODELS):
                    fail(f"models failed to load: {index}")
                break
            if time.time() > deadline:
                fail(f"tritonserver not ready after 60 s:\n{server.text()}")
            time.sleep(0.2)
        print(f"server ready in {time.time() - t0:.1f} s")

        # 1. Metadata and config, auto-completed from the engines.
        for proto, (_, c) in clients.items():
            md = c.get_model_metadata("m") if proto == "http" else c.get_model_metadata("m", as_json=True)
            ins = [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in md["inputs"]]
            outs = [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in md["outputs"]]
            if ins != [("x", "FP32", [-1, 1, 8, 8])] or sorted(outs) != [("logits", "FP32", [-1, 10]),
                                                                        ("probs", "FP32", [-1, 10])]:
                fail(f"{proto} metadata of m: {md}")
            cfg = c.get_model_config("m") if proto == "http" else c.get_model_config("m", as_json=True)["config"]
            if cfg.get("backend") != "kiln" or int(cfg.get("max_batch_size", 0)) != 16:
                fail(f"{proto} config of m: {cfg}")
            cin = [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in cfg["input"]]
            cout = sorted((t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in cfg["output"])
            if cin != [("x", "TYPE_FP32", [1, 8, 8])] or cout != [("logits", "TYPE_FP32", [10]),
                                                                 ("probs", "TYPE_FP32", [10])]:
                fail(f"{proto} config tensors of m: {cin} {cout}")
            if "dynamic_batching" not in cfg:
                fail(f"{proto} config of m lost dynamic_batching: {cfg}")
        cfg = http.get_model_config("seq")
        if cfg["max_batch_size"] != 8 or [t["dims"] for t in cfg["input"]] != [[-1]]:
            fail(f"config of seq: {cfg}")
        print("metadata and config: auto-completed from the engines (HTTP, gRPC)")

        # 2. Configs that contradict their engines.
        index = {m["name"]: m for m in http.get_model_repository_index()}
        log = server.text()
        for name, needles in {"bad_dims": ["model 'bad_dims'", "input 'x'", "[1,9,8]", "[1,8,8]"],
                              "bad_batch": ["model 'bad_batch'", "max_batch_size 32", "1..16"]}.items():
            if http.is_model_ready(name):
                fail(f"model {name} is ready")
            reason = index.get(name, {}).get("reason", "")
            if index.get(name, {}).get("state") != "UNAVAILABLE" or not all(n in reason for n in needles):
                fail(f"{name}: repository index says {index.get(name)}, expected UNAVAILABLE naming {needles}")
            if not all(n in log for n in needles):
                fail(f"the server log does not say why {name} failed ({needles})")
            print(f"{name}: not loaded: {reason}")

        # 3. Batch 1 and 5 against onnxruntime; only the requested outputs.
        def infer(proto, x, outputs=("logits", "probs"), model="m", request_id=""):
            mod, c = clients[proto]
            inp = mod.InferInput("x", list(x.shape), "FP32" if x.dtype == np.float32 else
                                 {np.dtype(np.float64): "FP64", np.dtype(np.int32): "INT32"}[x.dtype])
            inp.set_data_from_numpy(x)
            return c.infer(model, [inp], outputs=[mod.InferRequestedOutput(o) for o in outputs],
                           request_id=request_id)

        for proto in clients:
            for lo, hi in [(0, 1), (1, 6)]:
                r = infer(proto, X[lo:hi])
                close(r.as_numpy("logits"), LOGITS[lo:hi], f"{proto} batch {hi - lo} logits")
                close(r.as_numpy("probs"), PROBS[lo:hi], f"{proto} batch {hi - lo} probs")
            r = infer(proto, X[6:9], outputs=("probs",))
            close(r.as_numpy("probs"), PROBS[6:9], f"{proto} probs alone")
            if r.as_numpy("logits") is not None:
                fail(f"{proto}: logits returned though only probs was requested")
        print("batch 1 and 5 match onnxruntime; a request for probs gets probs only (HTTP, gRPC)")
        # Not batched by Triton: the shape's first axis is the request's own.
        for name, full_dims, rows in [("m_full", [-1, 1, 8, 8], 3), ("m_fixed", [1, 1, 8, 8], 1)]:
            cfg = http.get_model_config(name)
            if cfg.get("max_batch_size", 0) != 0 or [t["dims"] for t in cfg["input"]] != [full_dims]:
                fail(f"config of {name}: {cfg}")
            md = http.get_model_metadata(name)
            if [o["shape"] for o in md["outputs"]] != [full_dims[:1] + [10]] * 2:
                fail(f"metadata of {name}: {md}")
            for proto in clients:
                r = infer(proto, X[10:10 + rows], model=name)
                close(r.as_numpy("logits"), LOGITS[10:10 + rows], f"{proto} {name} batch {rows} logits")
                close(r.as_numpy("probs"), PROBS[10:10 + rows], f"{proto} {name} batch {rows} probs")
        expect_error(lambda: infer("http", X[:2], model="m_fixed"), "'x'")
        print("max_batch_size 0 (a batched engine run request by request; a fixed engine): correct")

        # 4. 32 concurrent requests per protocol, on m (`dynamic_batching {}`: no queue delay, so
        # Triton batches only what queues up while an execution runs, which a model this small may
        # never do) and on m_q (the same engine, with a queue delay: the requests must share
        # executions).
        def stats(model):
            s = http.get_inference_statistics(model)["model_stats"][0]
            return int(s["inference_count"]), int(s["execution_count"])

        results, done = {}, threading.Semaphore(0)

        def callback(i, result, error):
            results[i] = (result, error)
            done.release()

        n = 32
        for model in ["m", "m_q"]:
            inf0, exe0 = stats(model)
            pending = []
            for i in range(n):
                inp = httpclient.InferInput("x", [1, 1, 8, 8], "FP32")
                inp.set_data_from_numpy(X[i:i + 1])
                pending.append(http.async_infer(model, [inp]))
            for i, p in enumerate(pending):
                r = p.get_result()
                close(r.as_numpy("logits"), LOGITS[i:i + 1], f"{model} http concurrent {i} logits")
                close(r.as_numpy("probs"), PROBS[i:i + 1], f"{model} http concurrent {i} probs")
            results.clear()
            for i in range(n):
                inp = grpcclient.InferInput("x", [1, 1, 8, 8], "FP32")
                inp.set_data_from_numpy(X[32 + i:33 + i])
                grpc.async_infer(model, [inp], callback=lambda result, error, i=i: callback(i, result, error))
            for _ in range(n):
                if not done.acquire(timeout=30):
                    fail(f"{model} gRPC: only {len(results)} of {n} concurrent requests answered")
            for i, (r, err) in sorted(results.items()):
                if err is not None:
                    fail(f"{model} grpc concurrent {i}: {err}")
                close(r.as_numpy("logits"), LOGITS[32 + i:33 + i], f"{model} grpc concurrent {i} logits")
                close(r.as_numpy("probs"), PROBS[32 + i:33 + i], f"{model} grpc concurrent {i} probs")
            # A backend reports an execution's statistics after sending its responses (as Triton's own
            # backends do): a client may see the responses first. Wait for the counts to settle.
            deadline = time.time() + 10
            inf1, exe1 = stats(model)
            while inf1 - inf0 < 2 * n and time.time() < deadline:
                time.sleep(0.05)
                inf1, exe1 = stats(model)
            if inf1 - inf0 != 2 * n:
                fail(f"{model} statistics: {inf1 - inf0} inferences for {2 * n} requests")
            if not exe1 < inf1:
                fail(f"{model} statistics: execution_count {exe1} is not below inference_count {inf1}")
            if model == "m_q" and not exe1 - exe0 < inf1 - inf0:
                fail(f"{model}: {inf1 - inf0} concurrent requests ran in {exe1 - exe0} executions: not batched")
            print(f"{model}: {2 * n} concurrent requests correct (HTTP, gRPC); statistics: {inf1} inferences in "
                  f"{exe1} executions, the concurrent ones {inf1 - inf0} in {exe1 - exe0}")

        # 5. Bad requests: errors naming the tensor, and the server goes on.
        for proto in clients:
            expect_error(lambda: infer(proto, np.zeros((1, 1, 8, 9), np.float32)), "'x'")
            expect_error(lambda: infer(proto, X[:1].astype(np.float64)), "'x'", "FP64")
            expect_error(lambda: infer(proto, np.zeros((17, 1, 8, 8), np.float32)), "16")
            r = infer(proto, X[9:10])
            close(r.as_numpy("logits"), LOGITS[9:10], f"{proto} good request after bad ones")
        print("wrong shape, wrong dtype, too large a batch: errors naming the tensor; the next request runs")

        # seq: Triton's config says [-1]; the backend checks the engine's range 2..16 itself.
        for proto in clients:
            msg = expect_error(lambda: infer(proto, np.ones((1, SEQ_MAX_L + 4), np.float32), ("y",), "seq", "too-long"),
                               "request 'too-long'", "input 'x'", f"2..{SEQ_MAX_L}")
            expect_error(lambda: infer(proto, np.ones((2, 1), np.float32), ("y",), "seq"), "input 'x'")
            x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
            close(infer(proto, x, ("y",), "seq").as_numpy("y"), 2 * np.maximum(x, 0), f"{proto} seq 3x5")
        print(f"seq: out-of-range length rejected by the backend: {msg}")
        # Requests of several lengths and batch sizes at once (one execution may hold them all), two
        # of them bad: the others still get their answers.
        rng = np.random.default_rng(3)
        shapes = [(1, 3), (2, 3), (1, 20), (1, 5), (3, 3), (1, 16), (2, 5), (1, 1), (1, 3), (2, 16)]
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        results.clear()
        inf0, exe0 = stats("seq")
        for i, x in enumerate(xs):
            inp = grpcclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            grpc.async_infer("seq", [inp], request_id=f"r{i}",
                             callback=lambda result, error, i=i: callback(i, result, error))
        for _ in xs:
            if not done.acquire(timeout=30):
                fail(f"seq: only {len(results)} of {len(xs)} concurrent requests answered")
        for i, x in enumerate(xs):
            r, err = results[i]
            if 2 <= x.shape[1] <= SEQ_MAX_L:
                if err is not None:
                    fail(f"seq request r{i} {x.shape}: {err}")
                close(r.as_numpy("y"), 2 * np.maximum(x, 0), f"seq request r{i} {x.shape}")
            elif err is None or f"request 'r{i}'" not in str(err) or "input 'x'" not in str(err):
                fail(f"seq request r{i} {x.shape}: expected an error naming it and input 'x', got {err}")
        inf1, exe1 = stats("seq")
        print(f"seq: {len(xs)} mixed requests ({len(xs) - 2} good, 2 bad) answered in {exe1 - exe0} executions")

        http.close()
        grpc.close()
    except BaseException:
        print("---- server log (tail) ----\n" + "\n".join(server.text().splitlines()[-60:]), file=sys.stderr)
        server.stop()
        raise
    # 6. SIGTERM.
    rc = server.stop()
    if rc is None:
        fail("tritonserver did not exit within 40 s of SIGTERM")
    if rc != 0:
        fail(f"tritonserver exited {rc} after SIGTERM:\n{server.text()[-3000:]}")
    print(f"SIGTERM: tritonserver exited 0 (server part {time.time() - t0:.1f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--backend", required=True, help="libtriton_kiln.so")
    ap.add_argument("--work", help=argparse.SUPPRESS)  # phase 2: the folder phase 1 prepared
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    if args.work:
        serve(args, args.work)
        return
    start = time.time()
    python = os.path.join(VENV, "bin", "python")
    if not os.access(python, os.X_OK):
        fail(f"the serving venv is missing: no {python} (scripts/install_deps.sh creates it through "
             "scripts/install_serve_deps.sh, with tritonclient and nvidia-pytriton; or set KILN_SERVE_VENV to "
             "such a venv)")
    for path, what in [(args.kiln, "kiln"), (args.backend, "libtriton_kiln.so")]:
        if not os.path.exists(path):
            fail(f"no {what} at {path}")
    work = tempfile.mkdtemp(prefix="kiln_triton_")
    try:
        prepare(args, work)
        r = subprocess.run([python, os.path.abspath(__file__), "--kiln", args.kiln, "--backend", args.backend,
                            "--work", work])
        if r.returncode != 0:
            print(f"work folder kept: {work}", file=sys.stderr)
            sys.exit(r.returncode)
    except BaseException:
        args.keep = True
        raise
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"PASS ({time.time() - start:.1f} s)")


if __name__ == "__main__":
    main()
