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

``--bilstm``: instead, the same teacher distilled into another structure, Tang et al. 2019's
BiLSTM student (the ``bilstm`` plugin): word2vec trained on the shipped ``enwiki-106`` corpus
(``ptmkit train word2vec``), the student's vocabulary and embeddings from it (``ptmkit train
bilstm --corpus TRAIN``), then ``ptmkit finetune`` once on the gold labels alone and once with
``--teacher TEACHER --set finetune.distill_loss=mse --set finetune.distill_alpha=1`` (the paper's
loss, no gold label) on the training texts plus ``--augment K`` copies of each rewritten by two of
the paper's rules (section 3.2: each word masked to ``[UNK]`` with probability 0.1, then with
probability 0.25 an n-gram of 1-5 words sampled from it; its POS-guided swap needs a tagger and is
left out): the teacher labels them, which is what distillation adds. Rows: parameters, ONNX fp32
and int8 MB, int8 latency at 1 x 128 (sessions interleaved, ``head_pruning.py``), dev accuracy of
the int8 model and its agreement with the teacher's int8 predictions, training seconds.
``--teacher-run RUN`` copies an already fine-tuned teacher into the work directory instead of
fine-tuning one (1,250 s on two shared cores for MiniLM).
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
    parser.add_argument("--bilstm", action="store_true", help="the BiLSTM student rows instead (module docstring)")
    parser.add_argument("--augment", type=int, default=None, help="--bilstm: rewritten copies of each training text (default 5; --quick: 1)")
    parser.add_argument("--bilstm-epochs", type=int, default=None, help="--bilstm: the students' epochs (default 10; --quick: 2)")
    parser.add_argument("--teacher-run", type=Path, help="a fine-tuned teacher to copy into WORK/teacher instead of fine-tuning one")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started, load_before = time.time(), Path("/proc/loadavg").read_text().split()[:3]
    if args.teacher_run and not (args.work / "teacher" / "manifest.json").exists():
        import shutil

        shutil.copytree(args.teacher_run, args.work / "teacher", ignore=shutil.ignore_patterns("export", "logs"))
    teacher = hp.teacher(args.work, args.quick)
    if args.bilstm:
        return bilstm_rows(args, teacher, started, load_before)
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


def augmented(texts: list[str], copies: int, seed: int = 0) -> list[str]:
    """``copies`` rewrites of each text by Tang et al. 2019's masking (each word to ``[UNK]`` with
    probability 0.1) then n-gram sampling (with probability 0.25, a random span of 1-5 words)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(copies):
        for text in texts:
            words = ["[UNK]" if rng.random() < 0.1 else word for word in text.split()]
            if rng.random() < 0.25 and len(words) > 1:
                n = int(rng.integers(1, min(5, len(words)) + 1))
                start = int(rng.integers(0, len(words) - n + 1))
                words = words[start : start + n]
            out.append(" ".join(words))
    return out


def bilstm_rows(args: argparse.Namespace, teacher: Path, started: float, load_before: list[str]) -> int:
    """The ``--bilstm`` table (module docstring)."""
    from ptmkit.training.finetune import load_labelled

    os.environ["PTMKIT_PLUGINS"] = ",".join(filter(None, [os.environ.get("PTMKIT_PLUGINS"), "ptmkit_bilstm"]))  # a stale editable install
    from ptmkit.plugins import get_registry

    get_registry.cache_clear()
    work, quick = args.work, args.quick
    copies = args.augment if args.augment is not None else (1 if quick else 5)
    epochs = args.bilstm_epochs or (2 if quick else 10)
    vectors, base = work / "word2vec", work / "bilstm-base"
    if not (vectors / "manifest.json").exists():
        size = ["model.vector_size=16", "model.epochs=1"] if quick else ["model.vector_size=100", "model.epochs=5"]
        hp.ptmkit("train", "word2vec", "--corpus", hp.REPO / "data" / "corpus" / "enwiki-106.txt", "--out", vectors,
                  *[a for item in [*size, "model.min_count=2", "model.lowercase=true"] for a in ("--set", item)])
    if not (base / "manifest.json").exists():
        units = ["model.units=16", "model.hidden_dim=16"] if quick else []
        hp.ptmkit("train", "bilstm", "--corpus", hp.TRAIN, "--out", base, "--set", f"model.word_vectors={vectors}", *[a for u in units for a in ("--set", u)])
    texts, labels, ids = load_labelled(hp.TRAIN)
    transfer = work / f"transfer-x{copies}.txt"
    rows_text = [(labels[i], t) for i, t in zip(ids, texts, strict=True)]
    rows_text += [(labels[i], t) for i, t in zip(list(ids) * copies, augmented(texts, copies), strict=True)]
    transfer.write_text("".join(f"__label__{label} {text}\n" for label, text in rows_text), encoding="utf-8")
    recipe = [f"finetune.epochs={epochs}"]
    runs = {"teacher": teacher, "bilstm alone": work / "bilstm-alone", f"bilstm distilled (mse, x{copies} augmented)": work / f"bilstm-mse-x{copies}"}
    for name, run in list(runs.items())[1:]:
        if not (run / "manifest.json").exists():
            data = ["--train", hp.TRAIN] if name == "bilstm alone" else ["--train", transfer, "--teacher", teacher, "--set", "finetune.distill_loss=mse",
                                                                          "--set", "finetune.distill_alpha=1.0"]
            hp.ptmkit("finetune", base, *data, "--dev", hp.DEV, "--out", run, *[a for item in recipe for a in ("--set", item)])
    for run in runs.values():
        if not (run / "export" / "model.int8.onnx").exists():
            hp.ptmkit("export", run, "--int8")
    exports = {name: run / "export" / "model.int8.onnx" for name, run in runs.items()}
    vocabulary = json.loads((base / "metrics.json").read_text())["words"] + 2  # ids valid for every row's table
    latency = hp.latencies(exports, args.threads, args.rounds, args.calls, min(vocabulary, 600 if quick else 30000))
    teacher_predictions, gold = hp.dev_predictions(teacher, exports["teacher"], args.threads)
    rows = []
    for name, run in runs.items():
        metrics = json.loads((run / "metrics.json").read_text())
        predictions, _ = hp.dev_predictions(run, exports[name], args.threads)
        rows.append({
            "row": name,
            "parameters": metrics["parameters"],
            "fp32 MB": (run / "export" / "model.onnx").stat().st_size / 1e6,
            "int8 MB": exports[name].stat().st_size / 1e6,
            "int8 ms (1x128)": latency[name],
            "dev acc (int8)": float((predictions == gold).mean()),
            "agreement with teacher": float((predictions == teacher_predictions).mean()),
            "train examples": metrics["train_examples"],
            "train s": float(metrics["train_seconds"]),
        })
    hp.write(
        rows, args, load_before, time.time() - started, title="Distillation into another structure: Tang et al.'s BiLSTM student",
        script="distillation.py", details=f"anchor: the `bilstm alone` row (the same student on the gold labels); {epochs} epochs each; "
        f"ONNX Runtime {__import__('onnxruntime').__version__}, {args.threads} thread(s), {args.rounds} rounds x {args.calls} calls, sessions interleaved.",
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
