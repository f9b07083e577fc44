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
pre-training's last loss and the seconds of each stage. Each finished row is kept in
``--rows-dir`` (``benchmarks/results/denoising-rows/ROW.json``, committed with the page: a row is
hours, so the table may be filled over several sessions; a kept row of other settings is refused),
an interrupted stage resumes from its newest checkpoint, and the page goes to ``--output``
(``benchmarks/results/denoising.md``). The dev losses of ``scratch`` (the pairs' vocabulary) and of
the other rows (the corpus's) are over different vocabularies: compare the rows by BLEU and chrF.

    python benchmarks/denoising.py [--quick] [--rows scratch,bart]

``--quick``: a tiny model (1 + 1 layers, hidden 64), 300 corpus lines, 1,000 pairs, 30 + 30 steps,
100 test sentences: checks the machinery in a few minutes, its BLEU says nothing. The full
version (the defaults: the family's default model, 2,000 + 2,000 steps) takes hours on two CPU
cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kept_rows import KeptRows, atomic_write, page_header, start  # noqa: E402  (benchmarks/ is not a package)
from seq2seq_reference import run_translations  # noqa: E402

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


def _stage(argv: list[str], out: Path, overrides: list[str]) -> dict[str, Any]:
    """One ``ptmkit train transformer`` stage into ``out``: reused when finished, resumed from its
    newest checkpoint when interrupted; its ``metrics.json``."""
    from ptmkit.testing import main

    if (out / "metrics.json").exists():
        return json.loads((out / "metrics.json").read_text())
    resume = any((out / "checkpoints").glob("ckpt-*"))
    if not resume:
        shutil.rmtree(out, ignore_errors=True)
    code = main(["train", "transformer", *argv, "--out", str(out), *(["--resume"] if resume else []), *(a for item in overrides for a in ("--set", item))])
    if code != 0:
        raise SystemExit(f"ptmkit train transformer {' '.join(argv)} exited {code}")
    return json.loads((out / "metrics.json").read_text())


def _last_loss(run: Path) -> float:
    lines = (run / "logs" / "steps.jsonl").read_text().splitlines()
    return round(float(json.loads(lines[-1])["loss"]), 3)


def _seconds(metrics: dict[str, Any]) -> dict[str, Any]:
    """A stage's training seconds (its last session's only, when it was resumed) and the step it resumed from (0: none)."""
    return {"seconds": metrics["train_seconds_this_session"], "resumed_from_step": metrics.get("resumed_from_step") or 0}


def _shown(stage: dict[str, Any] | None) -> str:
    """A stage's seconds as the page shows them."""
    if not stage:
        return "-"
    return f"{stage['seconds']:.0f}" + (f" (resumed at step {stage['resumed_from_step']})" if stage["resumed_from_step"] else "")


def row(name: str, args: argparse.Namespace, data: tuple[Path, Path, Path, Path], model: list[str], rows: KeptRows) -> dict[str, Any]:
    """Pre-train (unless ``scratch``), fine-tune and score one row; kept in ``rows``."""
    from ptmkit.api import read_parallel
    from ptmkit_transformer.translate import score_translations

    kept = rows.get(name)
    if kept is not None:
        return kept
    work = args.work / name
    rows.claim_work(work)
    began = start()
    corpus, train, dev, test = data
    result: dict[str, Any] = {"row": name, "pretrain": None, "pretrain_last_loss": None}
    pairs = ["--parallel", str(train), "--dev", str(dev)]
    every = max(1, args.finetune_steps // 4)
    steps = [f"model.max_steps={args.finetune_steps}", f"model.checkpoint_every={every}", "model.dev_sentences=0"]
    if name == "scratch":
        metrics = _stage(pairs, work / "translation", [*model, *steps])
    else:
        pre = work / "pretrain"
        every = max(1, args.pretrain_steps // 4)
        pretrained = _stage(["--corpus", str(corpus), "--objective", name], pre, [*model, f"model.max_steps={args.pretrain_steps}", f"model.checkpoint_every={every}"])
        result.update(pretrain=_seconds(pretrained), pretrain_last_loss=_last_loss(pre))
        metrics = _stage([*pairs, "--init", str(pre), "--objective", "translation"], work / "translation", steps)
    pairs_read = read_parallel(test)
    hypotheses, result["translated_with"] = run_translations(work / "translation", pairs_read.sources, work / "export.log")
    scores = score_translations(hypotheses, pairs_read.targets)
    result.update(finetune=_seconds(metrics), dev_loss=metrics.get("dev_loss"), test_bleu=scores["bleu"], test_chrf=scores["chrf"])
    result.update(bleu_signature=scores["bleu_signature"], keras_backend=os.environ.get("KERAS_BACKEND", "tensorflow"))
    return rows.put(name, result, began)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What a row's figures depend on besides its objective: a kept row is reused only by a run with the same."""
    names = ("pretrain_steps", "finetune_steps", "corpus_lines", "pairs", "dev_pairs", "test_sentences", "pair_sides", "quick")
    return {name: getattr(args, name) for name in names}


def page(rows: list[dict[str, Any]], args: argparse.Namespace, load_at_start: float) -> str:
    """The Markdown results page."""
    lines = [
        *page_header("Denoising pre-training objectives, compared by English-German translation", "denoising.py", load_at_start),
        f"{'A tiny model (--quick: 1 + 1 layers, hidden 64)' if args.quick else 'The transformer family default model'}; {args.pretrain_steps:,} pre-training steps "
        f"on `data/corpus/enwiki-106.txt`{' plus both sides of the training pairs' if args.pair_sides else ''}, then {args.finetune_steps:,} translation steps on "
        f"`data/parallel/en-de-train-10k.tsv`{f' (first {args.pairs:,} pairs)' if args.pairs else ''}; greedy decoding of the test pairs"
        f"{f' (first {args.test_sentences:,})' if args.test_sentences else ''}, sacrebleu. Dev losses of `scratch` (the pairs' vocabulary) and of the "
        "pre-trained rows (the corpus's) are over different vocabularies: compare rows by BLEU and chrF.", "",
        "| row | test BLEU | test chrF | dev loss | pre-training last loss | pre-training s | translation s | ran (date, commit, 1-minute load) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ran = r.get("ran", {})
        lines.append(
            f"| {r['row']} | {r['test_bleu']:.2f} | {r['test_chrf']:.2f} | {r['dev_loss']} | {r.get('pretrain_last_loss') or '-'} | "
            f"{_shown(r.get('pretrain'))} | {_shown(r.get('finetune'))} | {ran.get('date', '?')}, {ran.get('commit', '?')}, {ran.get('load', '?')} |"
        )
    how = sorted({f"{r.get('translated_with', 'the Keras translator')} (Keras on {r.get('keras_backend', 'tensorflow')})" for r in rows})
    lines += ["", f"Test sentences translated greedily by {'; '.join(how)}."]
    scratch = next((r for r in rows if r["row"] == "scratch"), None)
    best = max(rows, key=lambda r: r["test_bleu"])
    if scratch is not None and len(rows) > 1:
        verdict = "no objective beats training from scratch" if best is scratch else f"{best['row']} wins, {best['test_bleu'] - scratch['test_bleu']:+.2f} BLEU over scratch"
        lines += ["", f"At this budget {verdict}. Signature: {next((r['bleu_signature'] for r in rows if r.get('bleu_signature')), '?')}."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="where the runs go (default: runs/bench-denoising; --quick: runs/bench-denoising-quick)")
    parser.add_argument("--rows-dir", type=Path, help="where each finished row's JSON is kept (default: benchmarks/results/denoising-rows; --quick: WORK/rows)")
    parser.add_argument("--output", type=Path, help="the results page (default: benchmarks/results/denoising.md; --quick: WORK/denoising.md)")
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
    names = [name.strip() for name in args.rows.split(",") if name.strip()]
    unknown = [name for name in names if name not in ("scratch", *OBJECTIVES)]
    if not names:
        raise SystemExit(f"--rows {args.rows!r}: no row; give some of scratch, {', '.join(OBJECTIVES)}")
    if unknown:
        raise SystemExit(f"--rows: unknown row {unknown[0]!r}; the rows are scratch, {', '.join(OBJECTIVES)}")
    model: list[str] = []
    if args.quick:
        args.pretrain_steps, args.finetune_steps, args.corpus_lines, args.pairs, args.dev_pairs, args.test_sentences = 30, 30, 300, 1000, 100, 100
        model = QUICK_MODEL
    args.work = args.work or REPO / "runs" / ("bench-denoising-quick" if args.quick else "bench-denoising")
    args.rows_dir = args.rows_dir or (args.work / "rows" if args.quick else REPO / "benchmarks" / "results" / "denoising-rows")
    args.output = args.output or (args.work / "denoising.md" if args.quick else REPO / "benchmarks" / "results" / "denoising.md")
    args.work.mkdir(parents=True, exist_ok=True)
    load_at_start = os.getloadavg()[0]
    rows = KeptRows(args.rows_dir, settings(args))
    data = prepare(args)
    results = [row(name, args, data, model, rows) for name in names]
    text = page(results, args, load_at_start)
    atomic_write(args.output, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
