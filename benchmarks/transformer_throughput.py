"""Training throughput of ptmkit's Transformer (issue 17): target tokens per second of the model
``ptmkit train transformer`` fits against a plain keras-hub model of the same layers, on the same
batches.

- ``ptmkit``: :func:`ptmkit_transformer.train.compiled_model` (the family's backbone, tied
  embedding, label-smoothed loss, Adam on the paper's schedule), fitted as ``ptmkit train`` fits it:
  :func:`ptmkit_transformer.train.step_batches` with ptmkit's progress and checkpoint callbacks (no
  checkpoint falls in the timed steps).
- ``keras-hub``: the same layers wired by hand as keras-hub's translation example wires them
  (``ReversibleEmbedding`` shared by both sides and the output, ``SinePositionEncoding``,
  ``TransformerEncoder`` / ``TransformerDecoder``), the same loss and optimizer, fitted on the same
  ``step_batches`` without callbacks.

Batches: ``--batch`` pairs of ``data/parallel/en-de-train-10k.tsv`` a step, each padded to its own
longest pair (what training feeds), the family's default architecture (``--layers`` a side, hidden
256, 8,000 BPE). Each round fits ``--steps`` steps of each model after one warm-up call; the
models alternate, ``--rounds`` rounds, the medians and their ratio are printed.

    python benchmarks/transformer_throughput.py          # a few minutes on two CPU cores
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def plain_model(config: Any) -> Any:
    """The keras-hub model of the same layers (module docstring), compiled like ptmkit's."""
    import keras
    import keras_hub

    from ptmkit_transformer.objectives import inverse_sqrt_schedule, label_smoothed_nll

    embedding = keras_hub.layers.ReversibleEmbedding(config.vocabulary_size, config.hidden_dim, tie_weights=True)
    names = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")
    inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in names}

    def embed(ids: Any) -> Any:
        x = embedding(ids) * math.sqrt(config.hidden_dim)
        return x + keras_hub.layers.SinePositionEncoding()(x)

    block = {"intermediate_dim": config.intermediate_dim, "num_heads": config.num_heads, "dropout": config.dropout, "activation": config.activation}
    x = embed(inputs["encoder_token_ids"])
    for _ in range(config.encoder_layers):
        x = keras_hub.layers.TransformerEncoder(**block)(x, padding_mask=inputs["encoder_padding_mask"])
    y = embed(inputs["decoder_token_ids"])
    for _ in range(config.decoder_layers):
        y = keras_hub.layers.TransformerDecoder(**block)(y, x, decoder_padding_mask=inputs["decoder_padding_mask"], encoder_padding_mask=inputs["encoder_padding_mask"])
    model = keras.Model(inputs, {"logits": embedding(y, reverse=True)})
    smoothing = config.label_smoothing
    model.compile(optimizer=keras.optimizers.Adam(inverse_sqrt_schedule(config.hidden_dim, config.warmup_steps, 1.0), beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                  loss={"logits": lambda labels, logits: label_smoothed_nll(labels, logits, smoothing)})
    return model


def batches(config: Any) -> tuple[Any, float]:
    """``make(step)`` over the training pairs (as ``train_pairs`` makes them) and the mean target tokens a pair."""
    from ptmkit.api import read_parallel
    from ptmkit_transformer.data import encode
    from ptmkit_transformer.objectives import pack_pairs, step_indices
    from ptmkit_transformer.tokenizer import train_shared_bpe
    from ptmkit_transformer.train import relative

    pairs = read_parallel(REPO / "data" / "parallel" / "en-de-train-10k.tsv")
    tokenizer = train_shared_bpe([*pairs.sources, *pairs.targets], config.vocabulary_size, config.min_frequency)
    sources, targets = encode(tokenizer, pairs.sources), encode(tokenizer, pairs.targets)
    bos, eos, pad = (tokenizer.token_to_id(t) for t in ("<s>", "</s>", "<pad>"))

    def make(step: int) -> Any:
        rows = step_indices(config.seed, step, config.batch_size, len(sources))
        inputs, labels, weights = pack_pairs([sources[i] for i in rows], [targets[i] for i in rows], bos, eos, pad, config.max_sequence_length)
        return inputs, {"logits": labels}, {"logits": relative(weights)}

    return make, sum(len(t) + 1 for t in targets) / len(targets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 + 1 layers of hidden 32, batch 4 pairs, 2 steps, 1 round (overrides the flags above): checks the script, its figures say nothing")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.batch, args.steps, args.rounds = 1, 4, 2, 1
    import keras

    from ptmkit.api import CheckpointCallback, ProgressCallback
    from ptmkit.console import default_console
    from ptmkit_transformer.config import TransformerConfig
    from ptmkit_transformer.train import compiled_model, step_batches

    tiny = {"hidden_dim": 32, "num_heads": 2, "intermediate_dim": 64, "vocabulary_size": 1000} if args.quick else {}
    config = TransformerConfig(encoder_layers=args.layers, decoder_layers=args.layers, batch_size=args.batch, **tiny)
    make, target_tokens = batches(config)
    keras.utils.set_random_seed(0)
    models = {"ptmkit": compiled_model(config)[1], "keras-hub": plain_model(config)}
    tokens = args.batch * target_tokens * args.steps
    measured: dict[str, list[float]] = {name: [] for name in models}
    step = 0
    for model in models.values():  # warm-up: the traced train step
        model.fit(step_batches(make, 0, 1), epochs=1, verbose=0)
    for _ in range(args.rounds):
        for name, model in models.items():
            callbacks = []
            if name == "ptmkit":
                progress = ProgressCallback("translation", step, step + args.steps, int(tokens / args.steps), default_console(), reset_metrics=True)
                callbacks = [CheckpointCallback(Path("/tmp/transformer-throughput-ckpt"), step, step + args.steps, 10**9), progress]
            started = time.perf_counter()
            model.fit(step_batches(make, step, step + args.steps), epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
            measured[name].append(tokens / (time.perf_counter() - started))
        step += args.steps
    medians = {name: statistics.median(values) for name, values in measured.items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{args.layers}+{args.layers} layers, batch {args.batch} pairs ({target_tokens:.1f} target tokens a pair), {args.steps} steps a round")
    print("| model | target tokens/s (median) | rounds |\n|---|---|---|")
    for name, values in measured.items():
        print(f"| {name} | {medians[name]:,.0f} | {', '.join(f'{v:,.0f}' for v in values)} |")
    print(f"ratio ptmkit / keras-hub: {medians['ptmkit'] / medians['keras-hub']:.3f}")


if __name__ == "__main__":
    main()
