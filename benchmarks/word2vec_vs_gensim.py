"""Static word vectors: ptmkit side by side with gensim 4.4, speed at 1 and 2 threads and WordSim-353 quality.

Setup (the issue's): data/corpus/enwiki-106.txt lower-cased (416K whitespace tokens), vector size
100, window 5, min_count 5, 5 epochs, 5 negatives, sample 1e-3. Variants:

* ``SGNS``: skip-gram, negative sampling (ptmkit: HogBatch windows, Ji et al. 2016);
* ``SGNS pairs``: the same with word2vec.c's per-pair updates (``model.batching=pairs``);
* ``CBOW``: CBOW (mean of the window), negative sampling;
* ``SG+HS``: skip-gram, hierarchical softmax (``negative=0``);
* ``fastText``: skip-gram with character 3..6-grams in 2,000,000 buckets, negative sampling
  (ptmkit: a center word's rows averaged once per window).

Each variant runs at 1 and 2 threads (gensim ``workers``, ptmkit ``model.threads`` on the CPU
kernel, ``model.backend=cpu-kernel``), seeds 1, 2, 3 as rounds, gensim and ptmkit alternating in one
process so that both see the same machine state. Speed: corpus words per second of the training
loop only (raw tokens x epochs / seconds), as gensim counts them: gensim's ``train()`` call;
ptmkit's ``train_seconds`` from ``metrics.json`` (vocabulary counting and corpus encoding excluded
on both sides; loading the kernel from numba's cache included), median of the rounds. Quality:
Spearman's rho on WordSim-353 (pairs with both words in the vocabulary;
``ptmkit.wordvectors.evaluation``, which equals gensim's ``evaluate_word_pairs``, tested), mean of
the rounds. The load average is read before and after (the machine may be shared).

Run: ``python benchmarks/word2vec_vs_gensim.py [--seeds 1 2 3] [--threads 1 2] [--variants SGNS CBOW ...]
[--out benchmarks/results/word2vec_vs_gensim.md] [--json results.json] [--set model.KEY=VALUE ...]``.
``--quick``: 300 lines, 1 epoch, one round, without fastText unless named (what the test suite runs).
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

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "data" / "corpus" / "enwiki-106.txt"
WORDSIM = REPO / "data" / "eval" / "wordsim353.tsv"
EPOCHS, SIZE, WINDOW, MIN_COUNT, NEGATIVE = 5, 100, 5, 5, 5

VARIANTS: dict[str, dict[str, Any]] = {
    "SGNS": {"family": "word2vec", "gensim": {"sg": 1, "hs": 0, "negative": NEGATIVE}, "ptmkit": ["model.architecture=skipgram"]},
    "SGNS pairs": {"family": "word2vec", "gensim": {"sg": 1, "hs": 0, "negative": NEGATIVE}, "ptmkit": ["model.architecture=skipgram", "model.batching=pairs"]},
    "CBOW": {"family": "word2vec", "gensim": {"sg": 0, "hs": 0, "negative": NEGATIVE}, "ptmkit": ["model.architecture=cbow"]},
    "SG+HS": {"family": "word2vec", "gensim": {"sg": 1, "hs": 1, "negative": 0}, "ptmkit": ["model.architecture=skipgram", "model.hs=true", "model.negative=0"]},
    "fastText": {"family": "fasttext", "gensim": {"sg": 1, "hs": 0, "negative": NEGATIVE}, "ptmkit": ["model.architecture=skipgram"]},
}


def run_gensim(variant: str, corpus: Path, seed: int, workers: int = 2) -> dict[str, float]:
    from gensim.models import FastText, Word2Vec
    from gensim.models.word2vec import LineSentence

    from ptmkit.wordvectors import WordVectors
    from ptmkit.wordvectors.evaluation import evaluate_word_pairs

    cls = FastText if variant == "fastText" else Word2Vec
    extra = {"min_n": 3, "max_n": 6, "bucket": 2_000_000} if variant == "fastText" else {}
    model = cls(vector_size=SIZE, window=WINDOW, min_count=MIN_COUNT, epochs=EPOCHS, workers=workers, seed=seed, sample=1e-3, **VARIANTS[variant]["gensim"], **extra)
    sentences = LineSentence(str(corpus))
    model.build_vocab(sentences)
    started = time.perf_counter()
    model.train(sentences, total_examples=model.corpus_count, epochs=EPOCHS)
    seconds = time.perf_counter() - started
    vectors = WordVectors(model.wv.index_to_key, model.wv.vectors)
    rho = evaluate_word_pairs(vectors, WORDSIM)["spearman"]
    return {"words_per_second": model.corpus_total_words * EPOCHS / seconds, "rho": rho, "seconds": seconds}


def run_ptmkit(variant: str, corpus: Path, seed: int, scratch: Path, extra: list[str] | None = None, threads: int | None = None) -> dict[str, float]:
    """ptmkit's run of ``variant``; ``threads``: on the CPU kernel with that many threads (None:
    the family's defaults, ``model.backend = auto``)."""
    from ptmkit.console import default_console
    from ptmkit.training.pretrain import pretrain
    from ptmkit.wordvectors.commands import load_vectors
    from ptmkit.wordvectors.evaluation import evaluate_word_pairs

    spec = VARIANTS[variant]
    out = scratch / f"{variant.replace(' ', '-')}-{seed}-{threads}"
    overrides = [f"model.vector_size={SIZE}", f"model.window={WINDOW}", f"model.min_count={MIN_COUNT}", f"model.epochs={EPOCHS}", f"model.seed={seed}", "model.sample=0.001", *spec["ptmkit"]]
    if spec["family"] == "fasttext":
        overrides += ["model.minn=3", "model.maxn=6", "model.bucket=2000000", f"model.negative={NEGATIVE}"]
    if threads is not None:
        overrides += ["model.backend=cpu-kernel", f"model.threads={threads}"]
    overrides += extra or []
    metrics = pretrain(spec["family"], corpus, out, overrides=overrides, console=default_console())
    _, vectors = load_vectors(out)
    rho = evaluate_word_pairs(vectors, WORDSIM)["spearman"]
    return {"words_per_second": metrics["words_per_second"], "rho": rho, "seconds": metrics["train_seconds"]}


def load() -> str:
    """The 1, 5 and 15-minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "unknown"


def measure(args: argparse.Namespace, corpus: Path, scratch: Path, done: Any = None) -> dict[str, dict[int, dict[str, list[dict[str, float]]]]]:
    """``results[variant][threads][side]``: the rounds' outcomes, gensim and ptmkit alternating;
    ``done(results)`` is called after each variant (the page so far is written)."""
    results: dict[str, dict[int, dict[str, list[dict[str, float]]]]] = {}
    for variant in args.variants:
        results[variant] = {}
        for threads in args.threads:
            results[variant][threads] = {"gensim": [], "ptmkit": []}
            for seed in args.seeds:
                sides = {
                    "gensim": lambda v=variant, s=seed, t=threads: run_gensim(v, corpus, s, t),
                    "ptmkit": lambda v=variant, s=seed, t=threads: run_ptmkit(v, corpus, s, scratch, args.overrides, t),
                }
                for side, run in sides.items():
                    outcome = run()
                    results[variant][threads][side].append(outcome)
                    print(f"{variant} {threads} thread(s) seed {seed} {side}: {outcome['words_per_second']:,.0f} words/s, rho {outcome['rho']:.4f}", file=sys.stderr, flush=True)
        if done is not None:
            done(results)
    return results


def table(results: dict[str, dict[int, dict[str, list[dict[str, float]]]]]) -> list[str]:
    """The results as Markdown rows: median words/s, mean rho (each round's in brackets)."""
    lines = [
        "| variant | threads | gensim words/s | ptmkit words/s | ptmkit / gensim | gensim rho | ptmkit rho | rho difference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant, by_threads in results.items():
        for threads, sides in by_threads.items():
            speed = {side: statistics.median(r["words_per_second"] for r in runs) for side, runs in sides.items()}
            rho = {side: statistics.mean(r["rho"] for r in runs) for side, runs in sides.items()}
            each = {side: ", ".join(format(r["rho"], ".3f") for r in runs) for side, runs in sides.items()}
            lines.append(
                f"| {variant} | {threads} | {speed['gensim']:,.0f} | {speed['ptmkit']:,.0f} | {speed['ptmkit'] / speed['gensim']:.2f}x | "
                f"{rho['gensim']:.3f} ({each['gensim']}) | {rho['ptmkit']:.3f} ({each['ptmkit']}) | {rho['ptmkit'] - rho['gensim']:+.3f} |"
            )
    return lines


def report(lines: list[str], started: str, loads: tuple[str, str], command: str, tokens: int) -> str:
    """The results page: date, commit, load, command, setup, then the table."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return "\n".join([
        "# word2vec and fastText against gensim 4.4",
        "",
        "| | |",
        "|---|---|",
        f"| date | {started} |",
        f"| commit | {commit} |",
        f"| machine | {os.cpu_count()} CPU cores, shared with other jobs |",
        f"| load | load average (1, 5, 15 min) {loads[0]} at the start, {loads[1]} at the end |",
        f"| command | `{command}` |",
        "",
        f"Setup: the corpus lower-cased ({tokens:,} tokens), vector size {SIZE}, window {WINDOW}, min_count {MIN_COUNT}, {EPOCHS} epochs, "
        f"{NEGATIVE} negatives, sample 1e-3. ptmkit on its CPU kernel (`model.backend=cpu-kernel`, `model.threads` = the threads column; "
        "SGNS: HogBatch windows, SGNS pairs: word2vec.c's per-pair updates; fastText: a center's rows averaged once per window); gensim with `workers` = the "
        "threads column. Words/s = corpus words x epochs / seconds of the training loop, median of the rounds (gensim and ptmkit "
        "alternating); rho = Spearman on WordSim-353, mean of the rounds (each in brackets).",
        "",
        *lines,
        "",
    ])


def main(argv: list[str] | None = None) -> None:
    global EPOCHS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--variants", nargs="+", default=None, choices=list(VARIANTS), help="default: all (--quick: all but fastText)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the results page (Markdown) here")
    parser.add_argument("--quick", action="store_true", help="300 lines, 1 epoch, one round: a smoke run")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="extra ptmkit [model] override, e.g. model.batch_size=512 (repeatable)")
    args = parser.parse_args(argv)
    if args.quick:
        EPOCHS, args.seeds = 1, args.seeds[:1]
    args.variants = args.variants or [v for v in VARIANTS if not (args.quick and v == "fastText")]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    started, first_load = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), load()
    with tempfile.TemporaryDirectory(prefix="w2v-bench-") as tmp:
        scratch = Path(tmp)
        corpus = scratch / "enwiki-106.lower.txt"
        lines = CORPUS.read_text(encoding="utf-8").lower().splitlines(keepends=True)
        corpus.write_text("".join(lines[:300] if args.quick else lines), encoding="utf-8")
        tokens = len(corpus.read_text(encoding="utf-8").split())
        command = "python benchmarks/word2vec_vs_gensim.py " + " ".join(argv if argv is not None else sys.argv[1:])

        def write(results: dict[str, Any]) -> None:
            if args.out:
                args.out.write_text(report(table(results), started, (first_load, load()), command.strip(), tokens), encoding="utf-8")
            if args.json:
                args.json.write_text(json.dumps(results, indent=2))

        results = measure(args, corpus, scratch, write)
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
