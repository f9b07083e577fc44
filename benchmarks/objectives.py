"""The survey's pre-training objectives side by side: one small BERT backbone, the same tokens,
then the same fine-tuning on WordNet supersenses.

Each row pre-trains BERT's default config (4 layers, hidden 256, 4 heads, 8,000 WordPiece
tokens) on ``data/corpus/enwiki-106.txt`` for ``--steps`` steps of 32 x 128 tokens (the same
tokens for every row; its wall-clock is reported, since objectives differ in cost per token:
RTD also runs a generator), then fine-tunes the pre-trained backbone on
``data/classify/wordnet-supersense-train-20k.tsv`` (``--train-rows``, 2 epochs, sequence length
32) with each of ``--seeds``, reporting dev and test accuracy (their mean over seeds). The head
reads the mean of the last layer's token states for every row (``head.pooling = "mean"``, as the
lineage table's probes pool), so that no row depends on whether its objective trained BERT's
pooler: NSP, SOP and SSO do, the others leave it at its initial weights.

Columns: pre-training tokens/s; the held-out loss of the row's own objective (its first output:
masked LM, span, cloze, ...; losses of different objectives are not comparable with each other,
only across runs of one objective); dev and test accuracy; the backbone's parameters. The row
"no pre-training" (one step at learning rate 1e-9: the initial weights) is the floor.

The TLM row (XLM's translation LM) cannot read a monolingual corpus: it pre-trains on the
English-German pairs of ``data/parallel/en-de-train-10k.tsv`` (``--parallel``; the same steps of
32 x 128 tokens, each sequence one pair packed ``[CLS] en [SEP] de [SEP]`` and padded, so fewer
real tokens a step, and a vocabulary learnt on both languages), then is fine-tuned like the others.

Every run is a separate ``ptmkit`` process under ``--work``; each finished row's result is kept as
JSON in ``--rows-dir`` (``benchmarks/results/objectives-rows/KEY.json``, committed with the page), so
an interrupted benchmark resumes where it stopped, on this machine or on a fresh clone. ``--rows`` picks rows by key; ``--quick`` runs a
tiny version to check the script (2 layers, 20 steps, 4,000 training rows, 1 epoch, one seed).

Run: ``python benchmarks/objectives.py`` (about 3 hours on two CPU cores with the defaults);
the table goes to ``benchmarks/results/objectives.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kept_rows import KeptRows, atomic_write, page_header, start  # noqa: E402  (benchmarks/ is not a package)

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "corpus" / "enwiki-106.txt"
DATA = REPO / "data" / "classify"
TRAIN, DEV, TEST = (DATA / f"wordnet-supersense-{split}.tsv" for split in ("train-20k", "dev", "test"))
PAIRS = REPO / "data" / "parallel" / "en-de-train-10k.tsv"

#: key -> (row label, objectives, extra --set overrides)
ROWS: dict[str, tuple[str, list[str], list[str]]] = {
    "none": ("no pre-training (initial weights)", ["mlm"], ["train.max_steps=1", "train.learning_rate=1e-9"]),
    "mlm-static": ("MLM, static masking (BERT)", ["mlm"], ["objectives.mlm.masking=static"]),
    "mlm-dynamic": ("MLM, dynamic masking (RoBERTa)", ["mlm"], []),
    "whole-word": ("MLM, whole-word masking", ["mlm"], ["objectives.mlm.whole_word=true"]),
    "ngram": ("MLM, n-grams of 1-3 whole words (ALBERT)", ["mlm"], ["objectives.mlm.whole_word=true", "objectives.mlm.max_ngram=3"]),
    "span": ("span masking + SBO (SpanBERT)", ["span"], []),
    "mlm-nsp": ("MLM + NSP (BERT)", ["mlm", "nsp"], []),
    "mlm-sop": ("MLM + SOP (ALBERT)", ["mlm", "sop"], []),
    "rtd": ("RTD (ELECTRA)", ["rtd"], []),
    "unilm": ("UniLM mixed masks", ["unilm"], []),
    "structbert": ("StructBERT (WSO + SSO)", ["wso", "sso"], []),
    "tlm": ("TLM on en-de pairs (XLM)", ["tlm"], []),
    "plm": ("PLM (XLNet; the xlnet backbone of the same size)", ["plm"], []),
}
#: Rows that pre-train on other data than the corpus: key -> the data flags of ``ptmkit train``.
DATA_FLAGS = {"tlm": ["--parallel", str(PAIRS)]}
#: Rows trained on another family than BERT: the permutation LM needs two-stream attention, which
#: the xlnet family's backbone has (same layers, hidden size and heads; its own 8,000-piece
#: unigram vocabulary and relative positions).
FAMILIES = {"plm": "xlnet"}
#: Rows of the issue not built yet, listed in the table as such.
MISSING: dict[str, str] = {}
QUICK = ["model.num_layers=2", "model.hidden_dim=64", "model.intermediate_dim=128", "model.num_heads=2", "model.vocabulary_size=2000"]


def run(command: list[str], log: Path) -> None:
    """Run a ptmkit command, its output into ``log``; raise with the log's tail on failure."""
    with open(log, "w", encoding="utf-8") as handle:
        status = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "160"}, check=False)
    if status.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({status.returncode}):\n{log.read_text(encoding='utf-8')[-2000:]}")


def backbone_parameters(run_dir: Path) -> int:
    """Values stored in the run's ``backbone.weights.h5`` (the backbone alone, no objective heads)."""
    import h5py

    sizes: list[int] = []
    with h5py.File(run_dir / "backbone.weights.h5") as handle:
        handle.visititems(lambda _, item: sizes.append(item.size) if isinstance(item, h5py.Dataset) else None)
    return sum(sizes)


def row_result(key: str, args: argparse.Namespace, work: Path) -> dict:
    """Pre-train and fine-tune one row (kept in ``args.rows_dir/KEY.json``)."""
    rows = KeptRows(args.rows_dir, settings(args))
    label, objectives, overrides = ROWS[key]
    kept = rows.get(key, {"objectives": objectives, "overrides": overrides})
    if kept is not None:
        return kept
    rows.claim_work(work / key)  # the runs under work/KEY were made with these settings
    began = start()
    run_dir = work / key / "pretrain"
    sets = [f"train.max_steps={args.steps}", f"train.checkpoint_every={max(1, args.steps // 4)}", *(QUICK if args.quick else []), *overrides]
    if not (run_dir / "metrics.json").exists():
        data = DATA_FLAGS.get(key, ["--corpus", str(CORPUS)])
        command = ["ptmkit", "train", FAMILIES.get(key, "bert"), *data, "--out", str(run_dir), "--objective", ",".join(objectives)]
        command += ["--resume"] if run_dir.exists() else []
        started = time.perf_counter()
        run([*command, *[part for item in sets for part in ("--set", item)]], work / key / "pretrain.log")
        print(f"{key}: pre-trained in {time.perf_counter() - started:.0f} s", flush=True)
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    first = objectives[0]
    result = {
        "label": label, "objectives": objectives, "overrides": overrides,
        "tokens_per_second": metrics.get("tokens_per_second"), "pretrain_seconds": metrics.get("train_seconds_this_session"),
        "heldout_loss": metrics.get(f"heldout_{first}_loss", metrics.get("heldout_loss")),
        "parameters": backbone_parameters(run_dir), "seeds": {},
    }
    for seed in args.seeds:
        tuned = work / key / f"supersense-seed{seed}"
        if not (tuned / "metrics.json").exists():
            ft = ["head.pooling=mean", f"finetune.epochs={args.epochs}", "finetune.sequence_length=32", f"finetune.seed={seed}", f"finetune.max_train_examples={args.train_rows}"]
            command = ["ptmkit", "finetune", str(run_dir), "--train", str(TRAIN), "--dev", str(DEV), "--test", str(TEST), "--out", str(tuned)]
            if tuned.exists() and not any((tuned / "checkpoints").glob("*")):
                shutil.rmtree(tuned)  # stopped before its first checkpoint: nothing to resume
            command += ["--resume"] if tuned.exists() else []  # an interrupted benchmark continues its fine-tuning
            run([*command, *[part for item in ft for part in ("--set", item)]], work / key / f"finetune-seed{seed}.log")
        tuned_metrics = json.loads((tuned / "metrics.json").read_text(encoding="utf-8"))
        result["seeds"][str(seed)] = {"dev_accuracy": tuned_metrics["dev_accuracy"], "test_accuracy": tuned_metrics["test_accuracy"]}
        print(f"{key}: seed {seed} dev {tuned_metrics['dev_accuracy']:.4f} test {tuned_metrics['test_accuracy']:.4f}", flush=True)
    result["dev_accuracy"] = statistics.mean(s["dev_accuracy"] for s in result["seeds"].values())
    result["test_accuracy"] = statistics.mean(s["test_accuracy"] for s in result["seeds"].values())
    return rows.put(key, result, began)


def settings(args: argparse.Namespace) -> dict:
    """What a row's figures depend on besides its objective: a kept row is reused only by a run
    with the same."""
    return {"steps": args.steps, "train_rows": args.train_rows, "epochs": args.epochs, "seeds": sorted(args.seeds), "quick": args.quick}


def electra_claim(results: dict[str, dict]) -> str:
    """ELECTRA's claim (RTD beats MLM at equal compute), read off the table: a sentence, or ""."""
    rtd, mlm = results.get("rtd"), results.get("mlm-dynamic")
    if not rtd or not mlm:
        return ""
    gap = 100 * (rtd["dev_accuracy"] - mlm["dev_accuracy"])
    cost = (rtd["pretrain_seconds"] or 0) / max(mlm["pretrain_seconds"] or 1, 1)
    verdict = "holds" if gap > 0 else "does not hold"
    return (
        f"ELECTRA's claim (replaced-token detection beats masked LM at equal compute) {verdict} here: RTD's supersense dev "
        f"accuracy is {gap:+.1f} points against dynamic MLM's on the same tokens, at {cost:.2f}x its pre-training time "
        "(the generator's cost); equal tokens is a compute budget at least as large for RTD."
    )


def budget_reading(results: dict[str, dict]) -> str:
    """Whether the budget separates the rows: the best row's margin over the no-pre-training floor
    against the largest seed-to-seed gap of any row (dev accuracy, points); a sentence, or ""."""
    floor = results.get("none")
    spreads = [max(s["dev_accuracy"] for s in r["seeds"].values()) - min(s["dev_accuracy"] for s in r["seeds"].values()) for r in results.values() if len(r["seeds"]) > 1]
    if not floor or not spreads or len(results) < 2:
        return ""
    best_key, best = max(((k, r) for k, r in results.items() if k != "none"), key=lambda item: item[1]["dev_accuracy"])
    margin, noise = 100 * (best["dev_accuracy"] - floor["dev_accuracy"]), 100 * max(spreads)
    verdict = "more than" if margin > noise else "within"
    return (
        f"The best row ({best['label']}) is {margin:+.1f} dev points from the no-pre-training floor, {verdict} the largest "
        f"gap between two seeds of one row ({noise:.1f} points)"
        + ("; at this budget the objectives are not separated, and a longer run (--steps) is needed to rank them." if margin <= noise else ".")
    )


def table(results: dict[str, dict], args: argparse.Namespace, load_at_start: float) -> str:
    """The Markdown results page."""
    lines = [
        *page_header("Pre-training objectives on one backbone, then WordNet supersenses", "objectives.py", load_at_start),
        f"BERT {'(quick: 2 layers, hidden 64)' if args.quick else '4 layers, hidden 256, 4 heads, 8,000 WordPiece tokens'}; "
        f"{args.steps} pre-training steps of 32 x 128 tokens on `data/corpus/enwiki-106.txt` for every row (TLM: on the en-de pairs of `data/parallel/en-de-train-10k.tsv`); then supersense "
        f"fine-tuning on {args.train_rows:,} training glosses (of 20,000, drawn with the seed), {args.epochs} epoch(s), mean pooling, seeds {', '.join(map(str, args.seeds))} "
        "(dev and test: 5,000 glosses each, 45 classes; accuracy is the mean over seeds). The held-out loss is the row's "
        "own objective's (its first output), comparable only between runs of one objective.", "",
        "| objective | tokens/s | pre-training s | held-out loss | dev accuracy | test accuracy | backbone parameters | ran (date, commit, 1-minute load) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results.values():
        ran = result.get("ran", {})
        lines.append(
            f"| {result['label']} | {format(result['tokens_per_second'], ',.0f') if result['tokens_per_second'] else '-'} | {result['pretrain_seconds'] or 0:.0f} | "
            f"{result['heldout_loss']:.3f} | {result['dev_accuracy']:.4f} | {result['test_accuracy']:.4f} | {result['parameters']:,} | "
            f"{ran.get('date', '?')}, {ran.get('commit', '?')}, {ran.get('load', '?')} |"
        )
    lines += [f"| {label} | not run: {why} | | | | | | |" for label, why in MISSING.items()]
    earlier = [result["label"] for result in results.values() if result.get("from_cache")]
    resumed = (f"{len(earlier)} of {len(results)} rows were read from `--rows-dir` (runs of earlier invocations, under their own load): "
               "tokens/s and seconds are each row's own, not comparable across rows run at different loads." if earlier else "")
    notes = [note for note in (resumed, budget_reading(results), electra_claim(results)) if note]
    return "\n".join(lines + [part for note in notes for part in ("", note)]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="where the runs go (default: runs/bench-objectives; --quick: runs/bench-objectives-quick)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated row keys ({', '.join(ROWS)})")
    parser.add_argument("--steps", type=int, default=250, help="pre-training steps of every row (32 x 128 tokens each)")
    parser.add_argument("--train-rows", type=int, default=20_000, help="supersense training glosses")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    parser.add_argument("--quick", action="store_true", help="a tiny run that checks the script")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "objectives.md")
    parser.add_argument("--rows-dir", type=Path, help="where each finished row's JSON is kept (default: benchmarks/results/objectives-rows; --quick: WORK/rows)")
    args = parser.parse_args()
    args.work = args.work or REPO / "runs" / ("bench-objectives-quick" if args.quick else "bench-objectives")
    args.rows_dir = args.rows_dir or (args.work / "rows" if args.quick else REPO / "benchmarks" / "results" / "objectives-rows")
    if args.quick:
        args.steps, args.train_rows, args.epochs, args.seeds = min(args.steps, 20), min(args.train_rows, 4000), 1, args.seeds[:1]
    unknown = [key for key in args.rows.split(",") if key not in ROWS]
    if unknown:
        raise SystemExit(f"--rows: unknown row {unknown[0]!r}; the rows are {', '.join(ROWS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    args.rows_dir.mkdir(parents=True, exist_ok=True)
    load_at_start = os.getloadavg()[0]
    results = {}
    for key in args.rows.split(","):
        (args.work / key).mkdir(exist_ok=True)
        results[key] = row_result(key, args, args.work)
    atomic_write(args.output, table(results, args, load_at_start))  # the page is whole or the former one
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
