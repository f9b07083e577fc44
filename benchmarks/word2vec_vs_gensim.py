"""Static word vectors: ptmkit side by side with gensim 4.4, speed and WordSim-353 quality.

Setup (the issue's): data/corpus/enwiki-106.txt lower-cased (416K whitespace tokens), vector size
100, window 5, min_count 5, 5 epochs, 5 negatives, sample 1e-3, gensim with ``workers=2``; seeds
1, 2, 3, one after the other in one process, the two toolkits alternating, so that both see the
same machine state. Variants:

* ``SGNS``: skip-gram, negative sampling;
* ``CBOW``: CBOW (mean of the window), negative sampling;
* ``SG+HS``: skip-gram, hierarchical softmax (``negative=0``);
* ``fastText``: skip-gram with character 3..6-grams in 2,000,000 buckets, negative sampling.

Speed: corpus words per second of the training loop only (raw tokens x epochs / seconds), as
gensim counts them: gensim's ``train()`` call; ptmkit's ``train_seconds`` from ``metrics.json``
(vocabulary counting and corpus encoding excluded on both sides; ptmkit's XLA compilation
included). Quality: Spearman's rho on WordSim-353 (pairs with both words in the vocabulary;
``ptmkit.wordvectors.evaluation``, which equals gensim's ``evaluate_word_pairs``, tested).

Run: ``python benchmarks/word2vec_vs_gensim.py [--seeds 1 2 3] [--variants SGNS CBOW SG+HS fastText]
[--json results.json] [--set model.KEY=VALUE ...]``. Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
    "CBOW": {"family": "word2vec", "gensim": {"sg": 0, "hs": 0, "negative": NEGATIVE}, "ptmkit": ["model.architecture=cbow"]},
    "SG+HS": {"family": "word2vec", "gensim": {"sg": 1, "hs": 1, "negative": 0}, "ptmkit": ["model.architecture=skipgram", "model.hs=true", "model.negative=0"]},
    "fastText": {"family": "fasttext", "gensim": {"sg": 1, "hs": 0, "negative": NEGATIVE}, "ptmkit": ["model.architecture=skipgram"]},
}


def run_gensim(variant: str, corpus: Path, seed: int) -> dict[str, float]:
    from gensim.models import FastText, Word2Vec
    from gensim.models.word2vec import LineSentence

    from ptmkit.wordvectors import WordVectors
    from ptmkit.wordvectors.evaluation import evaluate_word_pairs

    cls = FastText if variant == "fastText" else Word2Vec
    extra = {"min_n": 3, "max_n": 6, "bucket": 2_000_000} if variant == "fastText" else {}
    model = cls(vector_size=SIZE, window=WINDOW, min_count=MIN_COUNT, epochs=EPOCHS, workers=2, seed=seed, sample=1e-3, **VARIANTS[variant]["gensim"], **extra)
    sentences = LineSentence(str(corpus))
    model.build_vocab(sentences)
    started = time.perf_counter()
    model.train(sentences, total_examples=model.corpus_count, epochs=EPOCHS)
    seconds = time.perf_counter() - started
    vectors = WordVectors(model.wv.index_to_key, model.wv.vectors)
    rho = evaluate_word_pairs(vectors, WORDSIM)["spearman"]
    return {"words_per_second": model.corpus_total_words * EPOCHS / seconds, "rho": rho, "seconds": seconds}


def run_ptmkit(variant: str, corpus: Path, seed: int, scratch: Path, extra: list[str] | None = None) -> dict[str, float]:
    from ptmkit.console import default_console
    from ptmkit.training.pretrain import pretrain
    from ptmkit.wordvectors.commands import load_vectors
    from ptmkit.wordvectors.evaluation import evaluate_word_pairs

    spec = VARIANTS[variant]
    out = scratch / f"{variant}-{seed}"
    overrides = [f"model.vector_size={SIZE}", f"model.window={WINDOW}", f"model.min_count={MIN_COUNT}", f"model.epochs={EPOCHS}", f"model.seed={seed}", "model.sample=0.001", *spec["ptmkit"]]
    if spec["family"] == "fasttext":
        overrides += ["model.minn=3", "model.maxn=6", "model.bucket=2000000", f"model.negative={NEGATIVE}"]
    overrides += extra or []
    metrics = pretrain(spec["family"], corpus, out, overrides=overrides, console=default_console())
    _, vectors = load_vectors(out)
    rho = evaluate_word_pairs(vectors, WORDSIM)["spearman"]
    return {"words_per_second": metrics["words_per_second"], "rho": rho, "seconds": metrics["train_seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="extra ptmkit [model] override, e.g. model.batch_size=512 (repeatable)")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="w2v-bench-") as tmp:
        scratch = Path(tmp)
        corpus = scratch / "enwiki-106.lower.txt"
        corpus.write_text(CORPUS.read_text(encoding="utf-8").lower(), encoding="utf-8")
        for variant in args.variants:
            results[variant] = {"gensim": [], "ptmkit": []}
            for seed in args.seeds:
                for side, run in (("gensim", lambda v=variant, s=seed: run_gensim(v, corpus, s)), ("ptmkit", lambda v=variant, s=seed: run_ptmkit(v, corpus, s, scratch, args.overrides))):
                    outcome = run()
                    results[variant][side].append(outcome)
                    print(f"{variant} seed {seed} {side}: {outcome['words_per_second']:,.0f} words/s, rho {outcome['rho']:.4f}", file=sys.stderr, flush=True)
    print("| variant | gensim words/s | ptmkit words/s | ptmkit / gensim | gensim rho (mean of seeds) | ptmkit rho | rho difference |")
    print("|---|---|---|---|---|---|---|")
    for variant, sides in results.items():
        speed = {side: statistics.median(r["words_per_second"] for r in runs) for side, runs in sides.items()}
        rho = {side: statistics.mean(r["rho"] for r in runs) for side, runs in sides.items()}
        each = {side: ", ".join(format(r["rho"], ".3f") for r in runs) for side, runs in sides.items()}
        print(
            f"| {variant} | {speed['gensim']:,.0f} | {speed['ptmkit']:,.0f} | {speed['ptmkit'] / speed['gensim']:.2f}x | "
            f"{rho['gensim']:.3f} ({each['gensim']}) | {rho['ptmkit']:.3f} ({each['ptmkit']}) | {rho['ptmkit'] - rho['gensim']:+.3f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
