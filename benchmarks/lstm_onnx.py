"""ONNX Runtime inference of the ELMo biLSTM: fused ``LSTM`` nodes against tf2onnx's ``Loop``.

The ELMo backbone at its default size (``ptmkit config elmo``: character CNN of 336 filters, 2
highway layers, projection 128, 2 layers of forward and backward LSTMs of 512 units; random
weights: latency does not depend on them) is converted twice by ptmkit's converter
(:func:`ptmkit.exporting.convert.convert_to_onnx`, output ``sequence_output``): with
``fuse_lstm=True`` (four ``LSTM`` nodes with ``sequence_lens``, what ``ptmkit export`` writes for
elmo runs) and without (tf2onnx's four ``Loop``\\ s). Both graphs are checked against Keras at every
step (padded ones included) on a batch with rows of lengths 64, 40, 1 and 0 (all padding).

Latency on ONNX Runtime (CPU, 1 intra-op thread as ``ptmkit export``'s gate times, and 2
threads), at batch 1 x 64 (one full row), 32 x 64 full rows and 32 x 64 with ragged rows (lengths
uniform in 8..64, padding at the end). Each round times ``--calls`` runs of each graph,
alternating fused and Loop call by call so that a load swing hits both alike, and keeps each
one's median, of wall-clock time and of the calling thread's CPU time (with one intra-op thread
ONNX Runtime computes on the caller's thread, so CPU time holds under load); the table shows the
median of the rounds' medians (``--rounds``, >= 3), with the load average before and after.

Run: ``python benchmarks/lstm_onnx.py [--rounds 5] [--calls 20] [--threads 1,2] [--out benchmarks/results/lstm_onnx.md]``
(a few minutes on two cores); ``--quick``: a tiny backbone (one layer each way), one round, no
results file (the test).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "plugins", REPO / "export"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

#: ``(name, batch, steps, ragged)`` of the timed shapes.
SHAPES = (("1 x 64", 1, 64, False), ("32 x 64", 32, 64, False), ("32 x 64 ragged", 32, 64, True))
TINY = {"char_embedding_dim": 4, "filter_widths": [1, 2], "filter_counts": [4, 4], "highway_layers": 1, "projection_dim": 8, "lstm_dim": 12, "lstm_layers": 1}


def build_model(quick: bool) -> Any:
    """The ELMo backbone (default size, or :data:`TINY` with ``quick``) as a model with one output,
    ``sequence_output`` ``(batch, steps, 2 projection_dim)``."""
    import keras

    from ptmkit_elmo.backbone import build_backbone
    from ptmkit_elmo.config import ELMoConfig

    keras.utils.set_random_seed(0)
    config = ELMoConfig(**(TINY if quick else {}), dropout=0.0)
    backbone = build_backbone(config)
    return keras.Model(backbone.input, backbone.output["sequence_output"]), config


def feeds(batch: int, steps: int, lengths: list[int] | np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """``char_ids`` (words of 1-8 random bytes) and ``padding_mask`` for rows of ``lengths``."""
    rng = np.random.default_rng(seed)
    mask = (np.arange(steps)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32)
    spelt = np.arange(50)[None, None, :] < rng.integers(1, 9, size=(batch, steps, 1))
    chars = rng.integers(1, 257, size=(batch, steps, 50)) * spelt * mask[:, :, None]
    return {"char_ids": chars.astype(np.int32), "padding_mask": mask}


def convert_both(model: Any, work: Path) -> dict[str, dict[str, Any]]:
    """Both graphs under ``work``: ``{"fused" | "loop": {"path", "seconds", "recurrence"}}``."""
    import onnx

    from ptmkit.exporting.convert import convert_to_onnx
    from ptmkit.exporting.recurrent import recurrence
    from ptmkit_elmo import ELMoFamily

    graphs = {}
    for name, fuse in (("fused", True), ("loop", False)):
        path = work / f"elmo_{name}.onnx"
        start = time.perf_counter()
        convert_to_onnx(model, path, ELMoFamily.inputs, "sequence_output", fuse_lstm=fuse)
        graphs[name] = {"path": path, "seconds": time.perf_counter() - start, "recurrence": recurrence(onnx.load(str(path)))}
    return graphs


def session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def check_against_keras(model: Any, graphs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Max abs difference to Keras of each graph at every step of rows of lengths 64, 40, 1, 0."""
    batch = feeds(4, 64, [64, 40, 1, 0], seed=1)
    expected = np.asarray(model(batch, training=False))
    return {name: float(np.abs(session(g["path"], 1).run(["sequence_output"], batch)[0] - expected).max()) for name, g in graphs.items()}


def paired_latency(graphs: dict[str, dict[str, Any]], threads: int, rounds: int, calls: int) -> dict[str, dict[str, Any]]:
    """``{shape: {"fused" | "loop": {"median_ms", "rounds_ms"}}}``: per round, the median of
    ``calls`` runs of each graph, alternating call by call."""
    sessions = {name: session(g["path"], threads) for name, g in graphs.items()}
    rng = np.random.default_rng(7)
    results: dict[str, dict[str, Any]] = {}
    for label, batch, steps, ragged in SHAPES:
        lengths = rng.integers(8, steps + 1, size=batch) if ragged else np.full(batch, steps)
        feed = feeds(batch, steps, lengths, seed=2)
        for s in sessions.values():  # warm-up
            s.run(["sequence_output"], feed)
        per_round: dict[str, list[float]] = {name: [] for name in sessions}
        cpu_round: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(rounds):
            times: dict[str, list[float]] = {name: [] for name in sessions}
            cpu: dict[str, list[float]] = {name: [] for name in sessions}
            for _ in range(calls):
                for name, s in sessions.items():
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    s.run(["sequence_output"], feed)
                    times[name].append((time.perf_counter() - start) * 1000)
                    cpu[name].append((time.thread_time() - start_cpu) * 1000)
            for name in sessions:
                per_round[name].append(statistics.median(times[name]))
                cpu_round[name].append(statistics.median(cpu[name]))
        results[label] = {name: {"median_ms": statistics.median(r), "rounds_ms": r, "cpu_median_ms": statistics.median(cpu_round[name]),
                                 "cpu_rounds_ms": cpu_round[name]} for name, r in per_round.items()}
        results[label]["mean_length"] = float(np.mean(lengths))
        row = results[label]
        print(f"{threads} thread(s), {label}: fused {row['fused']['median_ms']:.2f} ms (CPU {row['fused']['cpu_median_ms']:.2f}), "
              f"Loop {row['loop']['median_ms']:.2f} ms (CPU {row['loop']['cpu_median_ms']:.2f})", flush=True)
    return results


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def markdown(summary: dict[str, Any]) -> str:
    """The results page: the table of latencies side by side, then how it was measured."""
    lines = [
        "# ONNX Runtime inference of the ELMo biLSTM: fused LSTM nodes against Loop",
        "",
        f"{summary['date']}, commit {summary['commit']}, load average {summary['load_before'][0]:.2f} before / "
        f"{summary['load_after'][0]:.2f} after (1 min), {os.cpu_count()} CPUs; command: `{summary['command']}`.",
        "",
        f"ELMo backbone, {'a tiny one (--quick)' if summary['quick'] else 'default size'} ({summary['parameters']:,} parameters), output `sequence_output`; "
        f"onnxruntime {summary['onnxruntime']}. Medians of {summary['rounds']} rounds, each the median of {summary['calls']} calls per graph, "
        "fused and Loop alternating call by call.",
        "",
        "Wall: the call's wall-clock time. CPU: the calling thread's CPU time (`time.thread_time`), which with one",
        "intra-op thread is where ONNX Runtime computes: it holds under a shared machine's load, where wall time does not",
        "(not shown for 2 threads, whose second thread it misses).",
        "",
        "| threads | shape | fused LSTM wall (ms) | Loop wall (ms) | Loop / fused, wall | fused CPU (ms) | Loop CPU (ms) | Loop / fused, CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for threads, table in summary["latency"].items():
        for label, row in table.items():
            fused, loop = row["fused"]["median_ms"], row["loop"]["median_ms"]
            extra = f" (mean length {row['mean_length']:.1f})" if "ragged" in label else ""
            cpu = (f"{row['fused']['cpu_median_ms']:.2f} | {row['loop']['cpu_median_ms']:.2f} | {row['loop']['cpu_median_ms'] / row['fused']['cpu_median_ms']:.2f}x"
                   if threads == "1" else "- | - | -")
            lines.append(f"| {threads} | {label}{extra} | {fused:.2f} | {loop:.2f} | {loop / fused:.2f}x | {cpu} |")
    graphs = summary["graphs"]
    lines += [
        "",
        f"Graphs: fused {graphs['fused']['recurrence']}, converted in {graphs['fused']['seconds']:.1f} s; "
        f"Loop {graphs['loop']['recurrence']}, converted in {graphs['loop']['seconds']:.1f} s.",
        f"Max abs difference to Keras at every step (rows of lengths 64, 40, 1 and 0): fused {summary['parity']['fused']:.1e}, "
        f"Loop {summary['parity']['loop']:.1e}.",
        "",
        "Per-round medians, wall (ms): " + json.dumps({t: {label: {k: [round(v, 2) for v in row[k]["rounds_ms"]] for k in ("fused", "loop")}
                                                            for label, row in table.items()} for t, table in summary["latency"].items()}),
        "",
        "Per-round medians, CPU (ms): " + json.dumps({t: {label: {k: [round(v, 2) for v in row[k]["cpu_rounds_ms"]] for k in ("fused", "loop")}
                                                           for label, row in table.items()} for t, table in summary["latency"].items()}),
        "",
    ]
    return "\n".join(lines)


def run(quick: bool, rounds: int, calls: int, work: Path, argv: list[str], threads: tuple[int, ...] = (1, 2)) -> dict[str, Any]:
    """Build, convert, check and time; the summary :func:`markdown` renders."""
    import onnxruntime

    load_before = os.getloadavg()
    model, _ = build_model(quick)
    graphs = convert_both(model, work)
    parity = check_against_keras(model, graphs)
    print(f"converted: {graphs['fused']['recurrence']} / {graphs['loop']['recurrence']}; max abs difference to Keras {parity}", flush=True)
    latency = {str(n): paired_latency(graphs, n, rounds, calls) for n in ((1,) if quick else threads)}
    return {
        "date": datetime.date.today().isoformat(), "commit": commit(), "command": " ".join(["python", "benchmarks/lstm_onnx.py", *argv]), "quick": quick,
        "load_before": load_before, "load_after": os.getloadavg(), "parameters": int(model.count_params()), "onnxruntime": onnxruntime.__version__,
        "rounds": rounds, "calls": calls, "parity": parity, "latency": latency,
        "graphs": {name: {"seconds": g["seconds"], "recurrence": g["recurrence"]} for name, g in graphs.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny backbone, one round of 3 calls, no results file")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--threads", default="1,2", help="ONNX Runtime intra-op threads to time, comma-separated (default 1,2)")
    parser.add_argument("--out", type=Path, default=None, help="results page (default: benchmarks/results/lstm_onnx.md; none with --quick)")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = parser.parse_args(argv)
    if not args.quick and args.rounds < 3:
        parser.error("--rounds must be >= 3 for a full run")
    rounds, calls = (1, 3) if args.quick else (args.rounds, args.calls)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="lstm-onnx-") as work:
        summary = run(args.quick, rounds, calls, Path(work), sys.argv[1:] if argv is None else argv, tuple(int(n) for n in args.threads.split(",")))
    page = markdown(summary)
    print(page)
    out = args.out if args.out is not None else (None if args.quick else REPO / "benchmarks" / "results" / "lstm_onnx.md")
    if out is not None:
        out.write_text(page, encoding="utf-8")
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
