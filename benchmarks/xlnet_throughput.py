"""Training-step throughput of ptmkit's XLNet backbone against keras-hub's ``XLNetBackbone``.

Both are the same size (``--layers``, ``--hidden``, heads hidden / 64, feed-forward 4 x hidden,
vocabulary 8,000) and run the same step: a Keras ``fit`` over ``--steps`` batches of ``--batch`` x
``--length`` tokens, the loss a mean square of the content stream's last states (no head, so
the step is the backbone's forward and backward pass, the two computing the same thing: keras-hub's
relative encodings and padding mask are wrong for a batch of more than one sequence, but cost what
the right ones cost). The two are measured alternately in one process, ``--rounds`` rounds, and
the medians of tokens/s are reported with their ratio.

Run: ``python benchmarks/xlnet_throughput.py`` (a few minutes on two CPU cores); the table is
printed as Markdown for ``benchmarks/results/xlnet.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def models(layers: int, hidden: int) -> dict:
    """``{name: keras.Model}``: ptmkit's and keras-hub's backbones, each with the squared-state loss."""
    import keras
    import keras_hub

    from ptmkit_xlnet.backbone import XLNetBackbone

    sizes = {
        "vocabulary_size": 8000,
        "num_layers": layers,
        "num_heads": hidden // 64,
        "hidden_dim": hidden,
        "intermediate_dim": 4 * hidden,
        "dropout": 0.1,
    }
    ours = XLNetBackbone(**sizes)
    theirs = keras_hub.models.XLNetBackbone(**sizes)
    built = {}
    for name, backbone, pick in (
        ("ptmkit", ours, lambda out: out["sequence_output"]),
        ("keras-hub", theirs, lambda out: out),
    ):
        inputs = {
            key: keras.Input((None,), dtype="int32", name=key) for key in ("token_ids", "segment_ids", "padding_mask")
        }
        model = keras.Model(inputs, pick(backbone(inputs)))
        model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss="mse")
        built[name] = model
    return built


def tokens_per_second(model, batch: int, length: int, steps: int, rng: np.random.Generator) -> float:
    """``fit`` over ``steps`` batches (one warm-up step first, not timed)."""
    x = {
        "token_ids": rng.integers(9, 8000, (batch * steps, length)).astype("int32"),
        "segment_ids": np.zeros((batch * steps, length), "int32"),
        "padding_mask": np.ones((batch * steps, length), "int32"),
    }
    y = np.zeros((batch * steps, length, model.output.shape[-1]), "float32")
    model.fit({k: v[:batch] for k, v in x.items()}, y[:batch], batch_size=batch, epochs=1, verbose=0)
    started = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
    return batch * steps * length / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 layer, hidden 64 (one head), batch 2 x 16, 2 steps, 1 round (overrides the flags above): checks the script, its figures say nothing")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.hidden, args.batch, args.length, args.steps, args.rounds = 1, 64, 2, 16, 2, 1
    built = models(args.layers, args.hidden)
    rng = np.random.default_rng(0)
    measured: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(args.rounds):
        for name, model in built.items():
            measured[name].append(tokens_per_second(model, args.batch, args.length, args.steps, rng))
    medians = {name: statistics.median(values) for name, values in measured.items()}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, load {os.getloadavg()}")
    print("| backbone | tokens/s (median) | rounds |\n|---|---|---|")
    for name, values in measured.items():
        print(f"| {name} | {medians[name]:,.0f} | {', '.join(f'{v:,.0f}' for v in values)} |")
    print(f"ratio ptmkit / keras-hub: {medians['ptmkit'] / medians['keras-hub']:.3f}")


if __name__ == "__main__":
    main()
