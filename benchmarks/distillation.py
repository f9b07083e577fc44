"""Distillation of a fine-tuned all-MiniLM-L6-v2 into a 3-block student: soft targets (logits)
against TinyBERT's and MiniLM's layer-to-layer losses, with the same student, data and budget.

Steps: the teacher of ``benchmarks/head_pruning.py`` (MiniLM imported, fine-tuned on the shipped
polarity data with the quickstart's recipe); the student is the imported MiniLM cut to blocks
1, 3, 5 (``ptmkit compress BASE --keep-layers 1,3,5``: DistilBERT's every-other-block start, and
blocks 1, 3, 5 are the teacher blocks TinyBERT's uniform mapping pairs with student blocks 1-3);
then ``ptmkit finetune STUDENT`` with the teacher's recipe, once without a teacher and once with
``--teacher TEACHER --distill logits|tinybert|minilm``. Rows: parameters, dev accuracy, agreement
with the teacher's dev predictions, training seconds (and the ratio to the ``logits`` row, today's
distillation, the anchor), the intermediate losses on 40 dev texts before and after training.

Run: ``python benchmarks/distillation.py [--work DIR] [--out FILE.md] [--student-epochs N]``;
``--quick``: the tiny pre-trained BERT of two blocks of ``head_pruning.py --quick`` (student:
block 1). ``--student-epochs``: every student row's epochs (the same budget for each).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import head_pruning as hp  # noqa: E402  # the teacher and the table writer of the compression tables

#: What each student row adds to ``ptmkit finetune STUDENT`` (besides the teacher's recipe).
METHODS = {
    "student alone": [],
    "logits": ["--distill", "logits"],
    "tinybert": ["--distill", "tinybert", "--set", "finetune.distill_alpha=1.0"],
    "minilm": ["--distill", "minilm"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/distillation"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--student-epochs", type=int, help="the students' epochs (default: the teacher's recipe's)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started, load_before = time.time(), Path("/proc/loadavg").read_text().split()[:3]
    teacher = hp.teacher(args.work, args.quick)
    student = args.work / "student-base"
    if not (student / "manifest.json").exists():
        hp.ptmkit("compress", args.work / "base", "--out", student, "--keep-layers", "1" if args.quick else "1,3,5")
    from ptmkit.quickstart import MINILM_POLARITY

    recipe = ["finetune.epochs=2", "finetune.sequence_length=32", "finetune.learning_rate=1e-3"] if args.quick else list(MINILM_POLARITY)
    recipe += [f"finetune.epochs={args.student_epochs}"] if args.student_epochs else []
    runs = {"teacher": teacher}
    for name, options in METHODS.items():
        run = runs[name] = args.work / name.replace(" ", "-")
        if not (run / "manifest.json").exists():
            teacher_options = ["--teacher", teacher] if options else []
            hp.ptmkit("finetune", student, "--train", hp.TRAIN, "--dev", hp.DEV, "--out", run, *teacher_options, *options,
                      *[a for item in recipe for a in ("--set", item)])
    rows = []
    anchor = json.loads((runs["logits"] / "metrics.json").read_text())["train_seconds"]
    for name, run in runs.items():
        metrics = json.loads((run / "metrics.json").read_text())
        losses = metrics.get("intermediate_losses")
        rows.append({
            "row": name,
            "parameters": metrics["parameters"],
            "dev acc": float(metrics["dev_accuracy"]),
            "agreement with teacher": float(metrics.get("dev_agreement_with_teacher", 1.0)) if name != "student alone" else "-",
            "train s": float(metrics["train_seconds"]),
            "train s / logits": float(metrics["train_seconds"] / anchor) if name != "teacher" else "-",
            "intermediate loss before -> after": (
                f"{sum(losses['before'].values()):.4f} -> {sum(losses['after'].values()):.4f}" if losses else "-"
            ),
        })
    hp.write(
        rows, args, load_before, time.time() - started, title="Distillation: soft targets, TinyBERT and MiniLM into the same student",
        script="distillation.py", details="anchor: the `logits` row (soft targets, today's `--teacher`).",
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
