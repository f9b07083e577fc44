"""Per-step time of `ptmkit train bert` with --distribute none, mirrored (one CPU) and multi-worker
(two processes on loopback, one TF_CONFIG each), and the all-reduce volume per step.

    python benchmarks/distribute_steps.py [--steps 20] [--quick]

The model is benchmarks/pretrain_throughput.py's (vocabulary 8,000, 4 layers, hidden 256, batch
32 x 128). Step time: the median of the differences of the chief's ``logs/steps.jsonl`` clock
after the first two steps (tracing). On a 2-core machine the two workers share the cores: this
measures the strategy's overhead, not a speed-up.

``--quick``: pretrain_throughput.py's tiny model (2 layers, hidden 32, batch 8 x 32) on the
corpus's first 400 lines, 6 steps: the code paths only (tests/test_benchmark_quick_modes.py).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretrain_throughput import QUICK_OVERRIDES, quick_corpus  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = [
    "model.vocabulary_size=8000", "model.num_layers=4", "model.hidden_dim=256", "model.num_heads=4", "model.intermediate_dim=1024",
    "train.batch_size=32", "train.sequence_length=128", "train.heldout_lines=20", "train.checkpoint_every=1000",
]


def command(corpus: Path, out: Path, steps: int, distribute: str, quick: bool = False) -> list[str]:
    args = [sys.executable, "-m", "ptmkit.cli", "train", "bert", "--corpus", str(corpus), "--out", str(out), "--distribute", distribute]
    for item in [*SETTINGS, *(QUICK_OVERRIDES if quick else []), f"train.max_steps={steps}"]:
        args += ["--set", item]
    return args


def step_seconds(run: Path) -> float:
    clock = [json.loads(line)["seconds"] for line in (run / "logs" / "steps.jsonl").read_text().splitlines()]
    return statistics.median(b - a for a, b in zip(clock[2:], clock[3:], strict=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, help="train.max_steps of every run (default 20; --quick 6)")
    parser.add_argument("--quick", action="store_true", help="a tiny model on the corpus's first 400 lines, 6 steps: the code paths only")
    args = parser.parse_args()
    steps, quick = args.steps or (6 if args.quick else 20), args.quick
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export")])}
    corpus = ROOT / "data" / "corpus" / "enwiki-106.txt"
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = quick_corpus(corpus, Path(tmp)) if quick else corpus
        for kind in ("none", "mirrored"):
            subprocess.run(command(corpus, Path(tmp) / kind, steps, kind, quick), env=env, check=True, capture_output=True)
            results[kind] = step_seconds(Path(tmp) / kind)
        ports = []
        for _ in range(2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        workers = []
        for index in range(2):
            cluster = {"cluster": {"worker": [f"localhost:{p}" for p in ports]}, "task": {"type": "worker", "index": index}}
            workers.append(subprocess.Popen(command(corpus, Path(tmp) / "two", steps, "multi-worker", quick), env={**env, "TF_CONFIG": json.dumps(cluster)},
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        assert [w.wait() for w in workers] == [0, 0]
        results["multi-worker, 2 workers"] = step_seconds(Path(tmp) / "two")
        parameters = json.loads((Path(tmp) / "none" / "metrics.json").read_text())["parameters"]
    chosen = dict(item.split("=", 1) for item in [*SETTINGS, *(QUICK_OVERRIDES if quick else [])])  # the last value of each key
    tokens = int(chosen["train.batch_size"]) * int(chosen["train.sequence_length"])
    for kind, seconds in results.items():
        print(f"{kind}: {seconds * 1000:.0f} ms/step, {tokens / seconds:,.0f} tokens/s")
    print(f"backbone parameters: {parameters:,}; ring all-reduce per worker and step at 2 workers: 2 x (2-1)/2 x {parameters:,} x 4 bytes = {parameters * 4 / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
