"""Peak memory of static word-vector training against corpus size.

Trains ``ptmkit train FAMILY`` (one epoch) in a fresh process on data/corpus/enwiki-106.txt
lower-cased and on the same text repeated ``--repeat`` times, and reports each run's peak resident
set size (``ru_maxrss`` of the child). The vocabulary is the same in both runs, so any growth
comes from how the corpus, the training pairs and the co-occurrence counts are held.

Run: ``python benchmarks/wordvectors_memory.py [--families word2vec glove] [--repeat 10] [--quick]``.
``--quick`` (run by tests/test_benchmark_quick_modes.py): the corpus's first 400 lines, repeated
twice, each family in a vector size of 16: the code paths only, its figures measure nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "data" / "corpus" / "enwiki-106.txt"
SETTINGS = {
    "word2vec": ["model.epochs=1"],
    "fasttext": ["model.epochs=1", "model.bucket=200000"],
    "glove": ["model.epochs=1"],
}
QUICK_LINES = 400


def peak_rss_mb(family: str, corpus: Path, out: Path) -> tuple[float, float]:
    """``(peak RSS in MB, seconds)`` of ``ptmkit train FAMILY`` run by a fresh interpreter, so
    that one run's maximum never masks another's (``ru_maxrss`` of children is a running maximum)."""
    argv = [sys.executable, "-m", "ptmkit.cli", "train", family, "--corpus", str(corpus), "--out", str(out)]
    argv += [a for setting in SETTINGS[family] for a in ("--set", setting)]
    script = (
        "import resource, subprocess, time; started = time.perf_counter(); "
        f"subprocess.run({argv!r}, check=True, capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, time.perf_counter() - started)"
    )
    result = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    rss, seconds = result.stdout.split()
    return float(rss), float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", nargs="+", default=["word2vec", "glove"], choices=list(SETTINGS))
    parser.add_argument("--repeat", type=int, help="copies of the corpus in the large run (default 10; --quick 2)")
    parser.add_argument("--quick", action="store_true", help="the corpus's first 400 lines, vectors of 16: the code paths only")
    args = parser.parse_args()
    args.repeat = args.repeat or (2 if args.quick else 10)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    text = CORPUS.read_text(encoding="utf-8").lower()
    if args.quick:
        text = "".join(text.splitlines(keepends=True)[:QUICK_LINES])
        for settings in SETTINGS.values():
            settings.append("model.vector_size=16")
    print("| family | corpus | tokens | peak RSS | wall time |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="wv-mem-") as tmp:
        small, large = Path(tmp) / "x1.txt", Path(tmp) / f"x{args.repeat}.txt"
        small.write_text(text, encoding="utf-8")
        large.write_text(text * args.repeat, encoding="utf-8")
        tokens = len(text.split())
        for family in args.families:
            for name, corpus, count in (("x1", small, tokens), (f"x{args.repeat}", large, tokens * args.repeat)):
                rss, seconds = peak_rss_mb(family, corpus, Path(tmp) / f"{family}-{name}")
                print(f"| {family} | {name} | {count:,} | {rss:,.0f} MB | {seconds:.0f} s |", flush=True)


if __name__ == "__main__":
    main()
