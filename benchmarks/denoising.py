"""The transformer family's denoising objectives compared by translation (issue 17, item 6): each
objective pre-trains the same encoder-decoder for the same budget on a monolingual corpus, then
fine-tunes on the English-German pairs for the same budget; the test BLEU of each, beside a
translation run from scratch with that fine-tuning budget alone.

Rows:

- ``scratch``: ``ptmkit train transformer --parallel TRAIN`` (its vocabulary from the pairs);
- ``bart``, ``t5_span``, ``mass``: ``ptmkit train transformer --corpus CORPUS --objective NAME``
  for ``--pretrain-steps``, then ``--parallel TRAIN --init RUN --objective translation`` for
  ``--finetune-steps`` (the pre-training run's vocabulary: ``--pair-sides`` adds both sides of the
  training pairs to the corpus, one sentence a line, so that it covers German too, as mBART's
  multilingual denoising would; without it, German is spelt out of English pieces).

Every row gives the test BLEU and chrF (greedy, ``--test-sentences``), the dev loss, the
pre-training's last loss and the seconds of each stage. Results go to ``--work``/results.json
and are printed as a Markdown table. The dev losses of ``scratch`` (the pairs' vocabulary) and of
the other rows (the corpus's) are over different vocabularies: compare the rows by BLEU and chrF.

    python benchmarks/denoising.py [--quick] [--work /tmp/denoising]

``--quick``: a tiny model (1 + 1 layers, hidden 64), 300 corpus lines, 1,000 pairs, 30 + 30 steps,
100 test sentences: checks the machinery in a few minutes, its BLEU says nothing. The full
version (the defaults: the family's default model, 2,000 + 2,000 steps) takes hours on two CPU
cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "corpus" / "enwiki-106.txt"
PARALLEL = REPO / "data" / "parallel"
OBJECTIVES = ("bart", "t5_span", "mass")
QUICK_MODEL = [
    "model.vocabulary_size=2000", "model.encoder_layers=1", "model.decoder_layers=1", "model.hidden_dim=64", "model.num_heads=4",
    "model.intermediate_dim=128", "model.max_sequence_length=64", "model.batch_size=16", "model.warmup_steps=10", "model.dev_sentences=0",
]


def _head(source: Path, out: Path, lines: int | None, header: bool = False) -> Path:
    """The first ``lines`` lines of ``source`` (all: None) in ``out``, a TSV header kept."""
    text = source.read_text(encoding="utf-8").splitlines()
    kept = text[: (lines + 1 if header else lines)] if lines else text
    out.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return out


def prepare(args: argparse.Namespace) -> tuple[Path, Path, Path, Path]:
    """``(corpus, train pairs, dev pairs, test pairs)`` in ``--work``, cut to the run's sizes."""
    work = args.work
    train = _head(PARALLEL / "en-de-train-10k.tsv", work / "train.tsv", args.pairs, header=True)
    dev = _head(PARALLEL / "en-de-dev.tsv", work / "dev.tsv", args.dev_pairs, header=True)
    test = _head(PARALLEL / "en-de-test.tsv", work / "test.tsv", args.test_sentences, header=True)
    corpus = _head(CORPUS, work / "corpus.txt", args.corpus_lines)
    if args.pair_sides:
        sides = [side for line in train.read_text(encoding="utf-8").splitlines()[1:] for side in line.split("\t")[:2]]
        with corpus.open("a", encoding="utf-8") as handle:
            handle.write("\n".join(sides) + "\n")
    return corpus, train, dev, test


def _train(argv: list[str], out: Path, overrides: list[str]) -> tuple[dict[str, Any], float]:
    from ptmkit.testing import main

    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    code = main(["train", "transformer", *argv, "--out", str(out), *(a for item in overrides for a in ("--set", item))])
    if code != 0:
        raise SystemExit(f"ptmkit train transformer {' '.join(argv)} exited {code}")
    return json.loads((out / "metrics.json").read_text()), time.perf_counter() - started


def _last_loss(run: Path) -> float:
    lines = (run / "logs" / "steps.jsonl").read_text().splitlines()
    return round(float(json.loads(lines[-1])["loss"]), 3)


def row(name: str, args: argparse.Namespace, data: tuple[Path, Path, Path, Path], model: list[str]) -> dict[str, Any]:
    """Pre-train (unless ``scratch``), fine-tune and score one row."""
    from rich.console import Console

    from ptmkit_transformer.translate import evaluate_run

    corpus, train, dev, test = data
    result: dict[str, Any] = {"row": name, "load": Path("/proc/loadavg").read_text().split()[0]}
    pairs = ["--parallel", str(train), "--dev", str(dev)]
    steps = [f"model.max_steps={args.finetune_steps}", f"model.checkpoint_every={args.finetune_steps}", "model.dev_sentences=0"]
    if name == "scratch":
        metrics, seconds = _train(pairs, args.work / name, [*model, *steps])
    else:
        pre = args.work / f"{name}-pretrain"
        _, result["pretrain_seconds"] = _train(
            ["--corpus", str(corpus), "--objective", name], pre, [*model, f"model.max_steps={args.pretrain_steps}", f"model.checkpoint_every={args.pretrain_steps}"]
        )
        result["pretrain_last_loss"] = _last_loss(pre)
        metrics, seconds = _train([*pairs, "--init", str(pre), "--objective", "translation"], args.work / name, steps)
    scores = evaluate_run(args.work / name, test, {"num_beams": 1}, Console(quiet=True))
    result.update(finetune_seconds=round(seconds, 1), dev_loss=metrics.get("dev_loss"), test_bleu=scores["bleu"], test_chrf=scores["chrf"])
    result["pretrain_seconds"] = round(result.get("pretrain_seconds", 0.0), 1)
    return result


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    lines = ["| row | test BLEU | test chrF | dev loss | pre-training last loss | pre-train s | fine-tune s | load |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['row']} | {r['test_bleu']:.2f} | {r['test_chrf']:.2f} | {r['dev_loss']} | {r.get('pretrain_last_loss', '-')} | "
            f"{r['pretrain_seconds']} | {r['finetune_seconds']} | {r['load']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/denoising"))
    parser.add_argument("--quick", action="store_true", help="a tiny model, 300 lines, 1,000 pairs, 30 + 30 steps, 100 test sentences")
    parser.add_argument("--pretrain-steps", type=int, default=2000)
    parser.add_argument("--finetune-steps", type=int, default=2000)
    parser.add_argument("--corpus-lines", type=int, default=None, help="corpus lines (default: all)")
    parser.add_argument("--pairs", type=int, default=None, help="training pairs (default: all 10,000)")
    parser.add_argument("--dev-pairs", type=int, default=None, help="dev pairs (default: all 1,000)")
    parser.add_argument("--test-sentences", type=int, default=None, help="test pairs scored (default: all 1,000)")
    parser.add_argument("--pair-sides", action="store_true", help="add both sides of the training pairs to the pre-training corpus")
    parser.add_argument("--rows", default="scratch," + ",".join(OBJECTIVES), help="comma separated: scratch, bart, t5_span, mass")
    args = parser.parse_args()
    model: list[str] = []
    if args.quick:
        args.pretrain_steps, args.finetune_steps, args.corpus_lines, args.pairs, args.dev_pairs, args.test_sentences = 30, 30, 300, 1000, 100, 100
        model = QUICK_MODEL
    args.work.mkdir(parents=True, exist_ok=True)
    data = prepare(args)
    rows = [row(name.strip(), args, data, model) for name in args.rows.split(",") if name.strip()]
    (args.work / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
