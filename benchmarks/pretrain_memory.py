"""Peak memory of pre-training as the corpus grows: ``ptmkit train bert`` on ~2.6 MB and on ~200 MB.

What it measures: the peak resident set size (RSS) of a whole ``ptmkit train bert`` run (tokenizer
training, corpus tokenization, ``--set train.max_steps=N`` steps of the default model, held-out
evaluation, saving) on

* the small corpus, data/corpus/enwiki-106.txt (2.6 MB, 5,861 paragraphs; falls back to
  /work/shared/data/corpus/enwiki-106.txt when data/ is missing), and
* a large one: the same file repeated ``--repeat`` times (default 76, ~200 MB), written to a
  temporary file.

The claim under test (ptmkit/data/pretraining.py): the corpus is streamed through the tokenizer
once and read back with ``os.pread``, so peak RSS stays flat however large the corpus is. The
anchor is the small corpus's own peak: the script prints the large/small ratio (flat = ~1.0; the
fixed cost of TensorFlow + the model dominates both). A repeated corpus has the vocabulary of
the small one, so the tokenizer trainer's word-count table does not grow with it: this measures
the streaming and the token files, not vocabulary growth of a more diverse corpus.

How: each run is a fresh ``ptmkit train`` process started by a small Python wrapper process
that waits for it and reports ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` (so the number
is that run's own peak, not the maximum over every child this script ever started, which is what
``RUSAGE_CHILDREN`` of this script would give). The wrapper also samples the child's
``VmRSS`` from /proc every 0.25 s and time-stamps its output lines, which gives the wall time of
each stage (tokenizer training, tokenization, model build + training, evaluation + saving) and
the peak RSS seen in each.

Tokenizer training and tokenization of 200 MB take minutes on 2 cores; the script prints how
long. ``--repeat 38`` (~100 MB) halves that when the machine is slow.

Run (about 8-12 minutes on 2 cores with the defaults)::

    python benchmarks/pretrain_memory.py [--repeat 76] [--steps 20] [--corpus FILE] [--keep] [--json results.json] [--quick]

``--quick``: pretrain_throughput.py's tiny model (2 layers, hidden 32, batch 8 x 32) on the
corpus's first 400 lines and that repeated twice, 2 steps: the code paths only, its figures
measure nothing (tests/test_benchmark_quick_modes.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretrain_throughput import QUICK_OVERRIDES, quick_corpus  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS_CANDIDATES = (REPO / "data/corpus/enwiki-106.txt", Path("/work/shared/data/corpus/enwiki-106.txt"))
FLAT_RATIO = 1.10  # large/small peak RSS at or under this counts as flat

# Runs argv[2:], prints nothing itself, writes its child's rusage, output lines and RSS samples to argv[1].
WRAPPER = r"""
import json, resource, subprocess, sys, threading, time

report, command = sys.argv[1], sys.argv[2:]
start = time.perf_counter()
child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
done = threading.Event()
samples = []

def sample():
    path = f"/proc/{child.pid}/status"
    while not done.is_set():
        try:
            with open(path) as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        samples.append((round(time.perf_counter() - start, 2), int(line.split()[1])))
                        break
        except OSError:
            break
        done.wait(0.25)

sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
lines = []
for line in child.stdout:
    lines.append((round(time.perf_counter() - start, 2), line.rstrip("\n")))
done.set()
code = child.wait()
wall = time.perf_counter() - start
sampler.join(2)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(report, "w") as handle:
    json.dump({"returncode": code, "wall_seconds": wall, "ru_maxrss_kb": usage.ru_maxrss, "user_seconds": usage.ru_utime,
               "system_seconds": usage.ru_stime, "lines": lines, "rss_samples": samples}, handle)
"""


def default_corpus() -> Path:
    for path in CORPUS_CANDIDATES:
        if path.exists():
            return path
    return CORPUS_CANDIDATES[0]


def ptmkit_command() -> list[str]:
    script = shutil.which("ptmkit")
    return [script] if script else [sys.executable, "-m", "ptmkit.cli"]


def repeat_file(source: Path, target: Path, times: int) -> float:
    """Write ``source`` ``times`` times into ``target``; return the seconds it took."""
    started = time.perf_counter()
    data = source.read_bytes()
    if not data.endswith(b"\n"):
        data += b"\n"
    with open(target, "wb") as handle:
        for _ in range(times):
            handle.write(data)
    return time.perf_counter() - started


def stages(lines: list[tuple[float, str]], samples: list[tuple[float, int]]) -> dict[str, Any]:
    """Stage wall times and sampled peak RSS from the child's time-stamped output lines."""

    def first(prefix: str) -> tuple[float, str] | None:
        return next(((t, s) for t, s in lines if s.startswith(prefix)), None)

    def last(prefix: str) -> tuple[float, str] | None:
        return next(((t, s) for t, s in reversed(lines) if s.startswith(prefix)), None)

    tokenizer = first("trained a ")
    tokenized = first("tokenized ")
    training = first("pre-training: steps")
    last_step = last("pre-training step ")
    finished = first("pre-trained ")
    marks: dict[str, float] = {}
    if tokenizer:
        found = re.search(r" in ([0-9.]+)s", tokenizer[1])
        seconds = float(found.group(1)) if found else 0.0
        marks["tokenizer_start"] = tokenizer[0] - seconds
        marks["tokenizer_end"] = tokenizer[0]
    if tokenized:
        marks["tokenize_end"] = tokenized[0]
    if training:
        marks["train_start"] = training[0]
    if last_step:
        marks["train_end"] = last_step[0]
    if finished:
        marks["end"] = finished[0]
    spans = {
        "start-up (imports, config)": ("", "tokenizer_start"),
        "tokenizer training": ("tokenizer_start", "tokenizer_end"),
        "tokenization": ("tokenizer_end", "tokenize_end"),
        "model build": ("tokenize_end", "train_start"),
        "training steps": ("train_start", "train_end"),
        "evaluation + saving": ("train_end", "end"),
    }
    result: dict[str, Any] = {}
    for name, (begin, end) in spans.items():
        if (begin and begin not in marks) or end not in marks:
            continue
        t0, t1 = marks.get(begin, 0.0), marks[end]
        inside = [rss for t, rss in samples if t0 <= t <= t1]
        result[name] = {"seconds": round(t1 - t0, 1), "peak_rss_mb": round(max(inside) / 1024, 1) if inside else None}
    return result


def measure(corpus: Path, out: Path, steps: int, work: Path, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ``ptmkit train bert`` on ``corpus`` (with ``--set`` ``overrides``) under the wrapper; return its numbers."""
    report = work / f"{out.name}.rusage.json"
    command = [*ptmkit_command(), "train", "bert", "--corpus", str(corpus), "--out", str(out), "--set", f"train.max_steps={steps}",
               *(a for item in overrides for a in ("--set", item))]
    env = dict(os.environ, COLUMNS="1000")  # one progress line per log line
    subprocess.run([sys.executable, "-c", WRAPPER, str(report), *command], check=True, env=env)
    data = json.loads(report.read_text())
    if data["returncode"] != 0:
        tail = "\n".join(line for _, line in data["lines"][-20:])
        raise SystemExit(f"ptmkit train failed on {corpus} (exit {data['returncode']}):\n{tail}")
    summary = json.loads((out / "tokens" / "tokens.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "corpus": str(corpus),
        "corpus_bytes": corpus.stat().st_size,
        "corpus_mb": round(corpus.stat().st_size / 1e6, 1),
        "lines": summary["train"]["lines"] + summary["heldout"]["lines"],
        "tokens": summary["train"]["tokens"] + summary["heldout"]["tokens"],
        "token_files_mb": round(sum(f.stat().st_size for f in (out / "tokens").iterdir()) / 1e6, 1),
        "peak_rss_mb": round(data["ru_maxrss_kb"] / 1024, 1),
        "wall_seconds": round(data["wall_seconds"], 1),
        "cpu_seconds": round(data["user_seconds"] + data["system_seconds"], 1),
        "tokens_per_second": metrics.get("tokens_per_second"),
        "stages": stages(data["lines"], data["rss_samples"]),
        "output": [line for _, line in data["lines"] if not line.startswith("pre-training step ")],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=default_corpus(), help="the small corpus (default %(default)s)")
    parser.add_argument("--repeat", type=int, help="copies of the small corpus in the large one (default 76, ~200 MB; --quick 2)")
    parser.add_argument("--steps", type=int, help="train.max_steps of each run (default 20; --quick 2)")
    parser.add_argument("--work", type=Path, help="where run directories and the large corpus go (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (default: deleted at the end)")
    parser.add_argument("--json", type=Path, help="write the results as JSON to this file")
    parser.add_argument("--quick", action="store_true", help="a tiny model on the corpus's first 400 lines: the code paths only")
    args = parser.parse_args(argv)
    args.repeat = args.repeat or (2 if args.quick else 76)
    args.steps = args.steps or (2 if args.quick else 20)
    if not args.corpus.exists():
        parser.error(f"corpus not found: {args.corpus}")
    if args.repeat < 2 or args.steps < 2:
        parser.error("--repeat and --steps must be >= 2")

    work = args.work or Path(tempfile.mkdtemp(prefix="ptmkit-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        args.corpus = quick_corpus(args.corpus, work) if args.quick else args.corpus
        large = work / f"{args.corpus.stem}-x{args.repeat}.txt"
        seconds = repeat_file(args.corpus, large, args.repeat)
        print(f"ptmkit pre-training peak RSS vs corpus size: {' '.join(ptmkit_command())} train bert --set train.max_steps={args.steps}; "
              f"{os.cpu_count()} CPUs; work dir {work}")
        print(f"large corpus: {args.corpus.name} x {args.repeat} = {large.stat().st_size / 1e6:.1f} MB, written in {seconds:.1f}s", flush=True)
        results = []
        for name, corpus in (("small", args.corpus), ("large", large)):
            print(f"running ptmkit train on the {name} corpus ({corpus.stat().st_size / 1e6:.1f} MB) ...", flush=True)
            result = measure(corpus, work / f"run-{name}", args.steps, work, QUICK_OVERRIDES if args.quick else ())
            result["name"] = name
            results.append(result)
            print(f"  peak RSS {result['peak_rss_mb']:,.0f} MB, wall {result['wall_seconds']:.0f}s", flush=True)
            for line in result["output"]:
                print(f"    | {line}")
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)

    small, big = results
    print()
    header = f"{'corpus':<7} {'MB':>7} {'lines':>9} {'tokens':>12} {'peak RSS MB':>12} {'wall s':>7} {'CPU s':>7} {'train tok/s':>12}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r['name']:<7} {r['corpus_mb']:>7.1f} {r['lines']:>9,} {r['tokens']:>12,} {r['peak_rss_mb']:>12,.0f} "
              f"{r['wall_seconds']:>7.0f} {r['cpu_seconds']:>7.0f} {r['tokens_per_second'] or 0:>12,.0f}")
    print()
    stage_names = list(dict.fromkeys(n for r in results for n in r["stages"]))
    header = f"{'stage':<28} " + " ".join(f"{r['name'] + ' s':>9} {r['name'] + ' RSS MB':>14}" for r in results)
    print(header)
    print("-" * len(header))
    for stage in stage_names:
        cells = []
        for r in results:
            info = r["stages"].get(stage, {})
            rss = info.get("peak_rss_mb")
            cells.append(f"{info.get('seconds', float('nan')):>9.1f} {rss if rss is not None else float('nan'):>14,.0f}")
        print(f"{stage:<28} " + " ".join(cells))
    ratio = big["peak_rss_mb"] / small["peak_rss_mb"]
    print()
    print(f"corpus x{big['corpus_bytes'] / small['corpus_bytes']:.0f}, tokens x{big['tokens'] / small['tokens']:.0f}: "
          f"peak RSS large/small = {ratio:.3f} ({big['peak_rss_mb'] - small['peak_rss_mb']:+,.0f} MB) -> "
          f"{'flat' if ratio <= FLAT_RATIO else 'NOT flat'} (threshold {FLAT_RATIO})")
    print(f"total benchmark time {time.perf_counter() - started:.0f}s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"repeat": args.repeat, "steps": args.steps, "cpus": os.cpu_count(), "results": results,
                                         "peak_rss_ratio": round(ratio, 3), "flat_threshold": FLAT_RATIO}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
