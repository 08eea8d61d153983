"""`kiln serve` on the GPU machine (issue 39's figures): ResNet-50 (torchvision, random weights)
built `--best --batch 1..64`, loaded by Triton's perf_analyzer over gRPC at concurrency 1, 8, 32 and
128 (binary tensors in the request, and Triton's system shared memory extension, which leaves the
transport out), next to `kiln bench` of the same engine and to Triton Inference Server serving the
same engine through libtriton_kiln.so. Writes OUT/serve.json and prints a table.

  serve_gpu.py --kiln build-dev/kiln --backend build-dev/libtriton_kiln.so --tools DIR --out DIR"""
import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranges import export_resnet50  # noqa: E402

CONCURRENCY = (1, 8, 32, 128)


def log_run(cmd, logf, **kw):
    print("$", " ".join(map(str, cmd)), file=logf, flush=True)
    return subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, check=True, **kw)


def wait_ready(port, proc, what, timeout=180):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status == 200:
                return time.time() - t0
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} did not become ready in {timeout} s")


def perf(a, model, grpc_port, mode, logf):
    rows = []
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(a.tools, "lib") + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    for c in a.concurrency:
        out = os.path.join(a.out, f"pa_{model}_{grpc_port}_{mode}_{c}.csv")
        cmd = [os.path.join(a.tools, "bin", "perf_analyzer"), "-m", model, "-u", f"127.0.0.1:{grpc_port}", "-i", "grpc",
               "--concurrency-range", str(c), "-p", "3000", "--max-trials", "6", "-s", str(a.stability), "-f", out]
        if mode == "shm":
            cmd += ["--shared-memory", "system", "--output-shared-memory-size", "4000"]
        try:
            r = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, timeout=a.pa_timeout)
            error = None if r.returncode == 0 and os.path.exists(out) else f"perf_analyzer exit {r.returncode}"
        except subprocess.TimeoutExpired:  # it did not find stable windows; the server itself is checked below
            error = f"perf_analyzer found no {a.stability}%-stable windows in {a.pa_timeout} s"
        if error:
            rows.append({"concurrency": c, "error": error})
            print(f"  {model} port {grpc_port} {mode} c={c}: {error}", flush=True)
            continue
        with open(out) as f:
            row = next(csv.DictReader(f))
        rows.append({"concurrency": c, "infer_per_s": float(row["Inferences/Second"]),
                     "p50_ms": float(row["p50 latency"]) / 1000, "p99_ms": float(row["p99 latency"]) / 1000,
                     "server_queue_ms": float(row["Server Queue"]) / 1000,
                     "server_compute_ms": (float(row["Server Compute Input"]) + float(row["Server Compute Infer"]) +
                                           float(row["Server Compute Output"])) / 1000})
        print(f"  {model} port {grpc_port} {mode} c={c}: {rows[-1]}", flush=True)
    return rows


def export_null(path):
    """A model with ResNet-50's inputs and outputs that does almost no work (the mean of each channel
    times a 3x1000 matrix): served, it measures what the transport, the server and the client cost."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32), "W")
    axes = numpy_helper.from_array(np.array([2, 3], np.int64), "axes")
    g = helper.make_graph(
        [helper.make_node("ReduceMean", ["input", "axes"], ["mean"], keepdims=0),
         helper.make_node("MatMul", ["mean", "W"], ["logits"])], "null",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])], [w, axes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, path)


def rest_infer(port, x, model):
    """One binary-data KServe v2 request (no client library on the GPU machine): logits of x."""
    header = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer", data=header + x.tobytes(),
                                 headers={"Inference-Header-Content-Length": str(len(header)),
                                          "Content-Type": "application/octet-stream"})
    r = urllib.request.urlopen(req, timeout=60)
    body = r.read()
    n = int(r.headers["Inference-Header-Content-Length"])
    out = json.loads(body[:n])["outputs"][0]
    return np.frombuffer(body[n:], np.float32).reshape(out["shape"])


def agreement(y, ref):
    """How an INT8/FP16 engine's logits agree with onnxruntime's float32 ones."""
    cos = float(np.sum(y * ref) / (np.linalg.norm(y) * np.linalg.norm(ref)))
    return {"cosine": cos, "argmax_agree": float(np.mean(y.argmax(1) == ref.argmax(1))),
            "max_abs_diff": float(np.abs(y - ref).max()), "ref_range": float(ref.max() - ref.min())}


def bench(a, engine, batch, streams, logf):
    js = os.path.join(a.out, f"bench_{batch}_{streams}.json")
    log_run([a.kiln, "bench", engine, "--device", "gpu", "--batch", str(batch), "--streams", str(streams),
             "--duration", "3", "--json", js], logf)
    return json.load(open(js))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--tools", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--instances", type=int, default=2)
    # Dynamic batching of both servers: queue delay (us) and preferred batch size (0: none)
    ap.add_argument("--delay-us", type=int, default=0)
    ap.add_argument("--preferred", type=int, default=0)
    # Only kiln serve, once per instance count (e.g. 2,4,8), without Triton: how it scales
    ap.add_argument("--scaling")
    ap.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    # Serve a model with ResNet-50's inputs and outputs that does almost no work: the ceiling the
    # transport, the server and the client on this machine set, whatever the engine
    ap.add_argument("--null", action="store_true")
    # perf_analyzer: how close three windows' latencies must be, and how long to let it try
    ap.add_argument("--stability", type=int, default=15)
    ap.add_argument("--pa-timeout", type=int, default=120)
    a = ap.parse_args()
    a.concurrency = [int(c) for c in a.concurrency.split(",")]
    os.makedirs(a.out, exist_ok=True)
    logf = open(os.path.join(a.out, "serve_gpu.log"), "w")
    res = {"date": time.strftime("%Y-%m-%d"), "instances": a.instances, "delay_us": a.delay_us,
           "preferred": a.preferred}
    model = "null" if a.null else "resnet50"
    res["model"] = model
    onnx = os.path.join(a.out, model + ".onnx")
    (export_null if a.null else export_resnet50)(onnx)
    calib = os.path.join(a.out, "calib")
    os.makedirs(calib, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(8):  # one batch of 64, the range's top
        np.save(os.path.join(calib, f"x{i}.npy"), rng.standard_normal((8, 3, 224, 224)).astype(np.float32))
    engine = os.path.join(a.out, model + ".kiln")
    t0 = time.time()
    log_run([a.kiln, "optimize", onnx, "-o", engine, "--device", "gpu", "--batch", "1..64"] +
            ([] if a.null else ["--best", "--calib", calib]), logf)
    res["build_s"] = time.time() - t0
    print(f"built {engine} in {res['build_s']:.1f} s", flush=True)
    # The engine alone: batch 64 on as many streams (contexts) as the server has instances, and batch 1.
    b64 = bench(a, engine, 64, a.instances, logf)
    b1 = bench(a, engine, 1, 1, logf)
    res["kiln_bench"] = {"batch64_streams": a.instances, "batch64": b64, "batch1": b1}
    print("kiln bench: batch 64", b64["throughput_samples_per_s"], "img/s; batch 1",
          b1["latency_ms"]["median"], "ms", flush=True)

    import onnxruntime as ort
    x = np.random.default_rng(5).standard_normal((5, 3, 224, 224)).astype(np.float32)
    ref = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    if a.scaling:
        res["scaling"] = {}
        for n in map(int, a.scaling.split(",")):
            srv = subprocess.Popen([a.kiln, "serve", engine, "--host", "127.0.0.1", "--http-port", "8000",
                                    "--grpc-port", "8001", "--metrics-port", "8002", "--instances", str(n)],
                                   stdout=logf, stderr=subprocess.STDOUT)
            wait_ready(8000, srv, "kiln serve")
            res["scaling"][n] = {"agreement": agreement(rest_infer(8000, x, model), ref)}
            print(f"kiln serve, {n} instances, vs onnxruntime:", res["scaling"][n]["agreement"], flush=True)
            res["scaling"][n].update({m: perf(a, model, 8001, m, logf) for m in ("binary", "shm")})
            stats = json.load(urllib.request.urlopen(f"http://127.0.0.1:8000/v2/models/{model}/stats"))
            res["scaling"][n]["executions_by_batch"] = {
                b["batch_size"]: b["compute_infer"]["count"] for b in stats["model_stats"][0]["batch_stats"]}
            print("executions by batch size:", res["scaling"][n]["executions_by_batch"], flush=True)
            srv.send_signal(signal.SIGTERM)
            srv.wait(timeout=60)
        json.dump(res, open(os.path.join(a.out, "serve.json"), "w"), indent=1)
        tput = b64["throughput_samples_per_s"]
        print(f"| instances | transfer | concurrency | infer/s | p50 ms | p99 ms | vs kiln bench ({tput:.0f}) |")
        for n, modes in res["scaling"].items():
            for mode, rows in modes.items():
                if mode in ("agreement", "executions_by_batch"):
                    continue
                for r in rows:
                    if "error" not in r:
                        print(f"| {n} | {mode} | {r['concurrency']} | {r['infer_per_s']:.0f} | {r['p50_ms']:.2f} | "
                              f"{r['p99_ms']:.2f} | {r['infer_per_s'] / tput:.2f} |")
        return

    # kiln serve
    srv = subprocess.Popen([a.kiln, "serve", engine, "--host", "127.0.0.1", "--http-port", "8000", "--grpc-port", "8001",
                            "--metrics-port", "8002", "--instances", str(a.instances),
                            "--max-queue-delay-us", str(a.delay_us)] +
                           (["--preferred-batch", str(a.preferred)] if a.preferred else []), stdout=logf,
                           stderr=subprocess.STDOUT)
    res["kiln_serve_ready_s"] = wait_ready(8000, srv, "kiln serve")
    res["kiln_serve_agreement"] = agreement(rest_infer(8000, x, model), ref)
    print("kiln serve vs onnxruntime:", res["kiln_serve_agreement"], flush=True)
    res["kiln_serve"] = {m: perf(a, model, 8001, m, logf) for m in ("binary", "shm")}
    stats = json.load(urllib.request.urlopen(f"http://127.0.0.1:8000/v2/models/{model}/stats"))["model_stats"][0]
    res["kiln_serve_stats"] = {k: stats[k] for k in ("inference_count", "execution_count")}
    res["kiln_serve_stats"]["fail"] = stats["inference_stats"]["fail"]["count"]
    srv.send_signal(signal.SIGTERM)
    res["kiln_serve_exit"] = srv.wait(timeout=60)

    # Triton Inference Server with the Kiln backend
    repo = os.path.join(a.out, "repo")
    os.makedirs(os.path.join(repo, model, "1"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "backends", "kiln"), exist_ok=True)
    os.replace(engine, os.path.join(repo, model, "1", "model.kiln"))
    with open(os.path.join(repo, model, "config.pbtxt"), "w") as f:
        pref = f"preferred_batch_size: [{a.preferred}] " if a.preferred else ""
        f.write(f'backend: "kiln"\nmax_batch_size: 64\n'
                f'dynamic_batching {{ {pref}max_queue_delay_microseconds: {a.delay_us} }}\n'
                f'instance_group [{{ count: {a.instances} kind: KIND_GPU }}]\n')
    be = os.path.join(a.out, "backends", "kiln", "libtriton_kiln.so")
    if not os.path.exists(be):
        os.symlink(os.path.abspath(a.backend), be)
    ts = os.path.join(a.tools, "site", "pytriton", "tritonserver", "bin", "tritonserver")
    tri = subprocess.Popen([ts, "--model-repository", repo, "--backend-directory", os.path.join(a.out, "backends"),
                            "--http-port", "8010", "--grpc-port", "8011", "--metrics-port", "8012"], stdout=logf,
                           stderr=subprocess.STDOUT)
    try:
        res["triton_ready_s"] = wait_ready(8010, tri, "tritonserver")
        res["triton_agreement"] = agreement(rest_infer(8010, x, model), ref)
        print("Triton + libtriton_kiln vs onnxruntime:", res["triton_agreement"], flush=True)
        res["triton"] = {m: perf(a, model, 8011, m, logf) for m in ("binary", "shm")}
    finally:
        tri.send_signal(signal.SIGTERM)
        try:
            res["triton_exit"] = tri.wait(timeout=60)
        except subprocess.TimeoutExpired:
            tri.kill()
    json.dump(res, open(os.path.join(a.out, "serve.json"), "w"), indent=1)

    tput = b64["throughput_samples_per_s"]
    print(f"\n{model} 1..64, {a.instances} instances, queue delay {a.delay_us} us, preferred {a.preferred}; "
          f"kiln bench batch 64 x {a.instances} streams: "
          f"{tput:.0f} img/s; batch 1 median latency {b1['latency_ms']['median']:.3f} ms")
    print("| server | transfer | concurrency | infer/s | p50 ms | p99 ms | vs kiln bench |")
    print("|---|---|---|---|---|---|---|")
    for name in ("kiln_serve", "triton"):
        for mode, rows in res.get(name, {}).items():
            for r in rows:
                if "error" in r:
                    print(f"| {name} | {mode} | {r['concurrency']} | {r['error']} | | | |")
                    continue
                ratio = r["infer_per_s"] / tput
                print(f"| {name} | {mode} | {r['concurrency']} | {r['infer_per_s']:.0f} | {r['p50_ms']:.2f} | "
                      f"{r['p99_ms']:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
