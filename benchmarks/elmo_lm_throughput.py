"""ELMo biLM training throughput: ptmkit's training step side by side with a plain Keras model
and a PyTorch ``nn.LSTM`` model of the same shape, full and sampled softmax.

Rows (tokens/s = batch x sequence_length per step, every position a token, the definition
``ptmkit train`` uses; each row trains on the very same in-memory batches):

* ``ptmkit elmo, full softmax`` / ``sampled``: ptmkit's own training model,
  ``build_pretraining_model(registry, resolve_config(registry, "elmo", None, overrides))`` (the
  ELMo backbone: character CNN, forward and backward 2-layer LSTMs with projections and a residual
  connection, the shared softmax; the ``bilm`` objective; ptmkit's AdamW), fed the arrays
  ``make_step`` would give it (``prepare``'s targets and relative weights, ``char_ids`` from a
  character table). ``sampled``: ``objectives.bilm.softmax = "sampled"`` with ``--num-sampled``.
* ``keras, same layers + Adam``: the ELMo backbone's Keras layers with a plain ``Dense`` softmax
  and ``sparse_categorical_crossentropy``, ``compile(Adam)``, ``fit``: ptmkit's layers without
  its objective and optimizer (the cost of the plugin layer alone).
* ``keras plain, word embedding`` / ``sampled``: THE KERAS ANCHOR the issue names: ``Embedding``
  (words, ``projection_dim``) + the same forward and backward ``LSTM`` stacks (projection
  ``Dense`` after each layer, residual from the second) + a shared ``Dense`` softmax,
  ``compile(Adam)``, ``fit``. It has no character CNN, so ptmkit's rows do more work per token
  (the CNN over 50 characters per word); the ``same layers`` row separates the two. ``sampled``:
  ``tf.nn.sampled_softmax_loss`` (its default unique log-uniform sampler, as bilm-tf) in training.
* ``torch nn.LSTM, word embedding`` / ``sampled``: the same model in PyTorch (``nn.Embedding``,
  one ``nn.LSTM`` per layer and direction, ``nn.Linear`` projections, the backward direction on
  the flipped sequence), ``torch.optim.Adam``, the usual ``zero_grad / backward / step`` loop;
  ``sampled``: the same sampled softmax as ptmkit's (log-uniform draws with replacement, the
  distinct ones kept, ``-log`` inclusion-probability correction, accidental hits removed).

Threads: TensorFlow's intra-op pool and ``torch.set_num_threads`` are both ``--threads`` (default:
all cores; TensorFlow's inter-op pool at its default). Timing: a wall clock and the process CPU time
(``time.process_time``, all threads) stamped after every step; the first ``--warmup`` steps of
each row are dropped (tracing), the next ``--steps`` kept; reported: median wall time per step,
tokens/s from it, median CPU time per step, and the ratios to the anchors. The machine these
benchmarks run on is shared with other jobs: wall time per step swings with their load while
CPU time per step moves much less, so the CPU-time ratios are the more trustworthy ones (they do
not see time lost waiting for a core). Rows run in turn, ``--rounds`` times, the order rotated.

``--quick``: a tiny model (vocabulary 500, LSTM 32, batch 4 x 16, 2 + 3 steps, one round, one
thread unless ``--threads`` says otherwise: two threads of torch beside TensorFlow's ran its
steps 200x slower on two busy cores), a smoke test of every row.

    python benchmarks/elmo_lm_throughput.py --out benchmarks/results/elmo_lm_throughput.md
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "plugins", ROOT / "export"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny model and few steps: a smoke test")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--vocabulary-size", type=int, default=8000, help="the softmax's words (ptmkit's default)")
    parser.add_argument("--lstm-dim", type=int, default=512)
    parser.add_argument("--projection-dim", type=int, default=128)
    parser.add_argument("--num-sampled", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, help="default: all cores (--quick: 1)")
    parser.add_argument("--rows", default="all", help="comma-separated row keys (ptmkit_full, ptmkit_sampled, keras_same, keras_full, keras_sampled, torch_full, torch_sampled)")
    parser.add_argument("--out", type=Path, help="write the Markdown table here (atomically)")
    args = parser.parse_args(argv)
    args.threads = args.threads or (1 if args.quick else os.cpu_count() or 1)
    if args.quick:
        args.batch_size, args.sequence_length, args.vocabulary_size, args.lstm_dim, args.projection_dim = 4, 16, 500, 32, 16
        args.num_sampled, args.warmup, args.steps, args.rounds = 64, 2, 3, 1
    for key in ("batch_size", "sequence_length", "lstm_dim", "projection_dim", "num_sampled", "warmup", "steps", "rounds", "threads"):
        if getattr(args, key) <= 0:
            parser.error(f"--{key.replace('_', '-')} must be > 0, got {getattr(args, key)}")
    if not 4 < args.num_sampled < args.vocabulary_size:
        parser.error(f"--num-sampled must be between 5 and --vocabulary-size - 1 = {args.vocabulary_size - 1}, got {args.num_sampled}")
    return args


# ---------------------------------------------------------------- data


def make_batches(args: argparse.Namespace, count: int) -> tuple[list[np.ndarray], np.ndarray]:
    """``count`` ``(batch, sequence)`` int32 batches of word ids in ``[4, vocabulary)`` (every
    position a token: no padding) and a ``(vocabulary, 50)`` character table (random spellings of
    3-10 bytes, ids 1-256 as ``char_ids`` has them)."""
    rng = np.random.default_rng(0)
    batches = [rng.integers(4, args.vocabulary_size, (args.batch_size, args.sequence_length)).astype(np.int32) for _ in range(count)]
    characters = np.zeros((args.vocabulary_size, 50), np.int32)
    for word in range(args.vocabulary_size):
        length = rng.integers(3, 11)
        characters[word, :length] = rng.integers(98, 123, length)
    return batches, characters


def shifted_targets(token_ids: np.ndarray) -> np.ndarray:
    """``(batch, 2, sequence)``: next word (forward) and previous word (backward); the edges 0."""
    targets = np.zeros((token_ids.shape[0], 2, token_ids.shape[1]), np.int32)
    targets[:, 0, :-1], targets[:, 1, 1:] = token_ids[:, 1:], token_ids[:, :-1]
    return targets


# ---------------------------------------------------------------- timing


class Timer:
    """Wall and process-CPU stamps after each step."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def stamp(self) -> None:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())

    def per_step(self, warmup: int) -> tuple[list[float], list[float]]:
        wall, cpu = np.diff(self.wall)[warmup:], np.diff(self.cpu)[warmup:]
        return list(wall), list(cpu)


def keras_timer() -> tuple[Timer, Any]:
    import keras

    timer = Timer()

    class Stamp(keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            timer.stamp()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            timer.stamp()

    return timer, Stamp()


def fit_keras(model: Any, x: dict[str, np.ndarray], y: Any, w: Any, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """``model.fit`` over the stacked batches, one step per batch; per-step (wall, CPU) seconds."""
    timer, stamp = keras_timer()
    kwargs = {} if w is None else {"sample_weight": w}
    model.fit(x, y, batch_size=args.batch_size, epochs=1, shuffle=False, verbose=0, callbacks=[stamp], **kwargs)
    return timer.per_step(args.warmup)


# ---------------------------------------------------------------- rows


def ptmkit_row(args: argparse.Namespace, batches: list[np.ndarray], characters: np.ndarray, softmax: str) -> Callable[[], tuple[list[float], list[float]]]:
    from ptmkit.api import derive_inputs
    from ptmkit.data.pretraining import relative_weights
    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import build_pretraining_model, resolve_config

    registry = get_registry()
    overrides = [
        f"model.vocabulary_size={args.vocabulary_size}",
        f"model.input_vocabulary_size={args.vocabulary_size}",
        f"model.lstm_dim={args.lstm_dim}",
        f"model.projection_dim={args.projection_dim}",
        f"train.batch_size={args.batch_size}",
        f"train.sequence_length={args.sequence_length}",
        f"objectives.bilm.softmax={softmax}",
        f"objectives.bilm.num_sampled={args.num_sampled}",
    ]
    if args.quick:
        overrides += ["model.filter_widths=[1,2,3]", "model.filter_counts=[4,4,8]"]
    config = resolve_config(registry, "elmo", None, overrides)
    _, model, objectives = build_pretraining_model(registry, config)
    family = registry.family("elmo")
    ((objective, objective_config),) = objectives.values()

    xs, ys, ws = [], [], []
    for token_ids in batches:
        mask = np.ones_like(token_ids)
        extra, y, w = objective.prepare({"token_ids": token_ids, "padding_mask": mask}, np.random.default_rng(0), objective_config, None, args.vocabulary_size)
        xs.append({**derive_inputs(family.inputs, token_ids, None, mask, characters), **extra})
        ys.append(y["bilm"])
        ws.append(relative_weights(w["bilm"]))
    x = {key: np.concatenate([b[key] for b in xs]) for key in xs[0]}
    y, w = {"bilm": np.concatenate(ys)}, {"bilm": np.concatenate(ws)}
    return lambda: fit_keras(model, x, y, w, args)


def _lstm_stacks(keras: Any, x: Any, mask: Any, args: argparse.Namespace) -> tuple[Any, Any]:
    """Forward and backward 2-layer LSTM stacks with projections and a residual from layer 2 (the
    ELMo backbone's, written with plain Keras layers)."""
    from keras import ops

    tops = []
    for backward in (False, True):
        h_in = x
        for k in range(2):
            h = keras.layers.LSTM(args.lstm_dim, return_sequences=True, go_backwards=backward)(h_in, mask=mask)
            if backward:
                h = ops.flip(h, axis=1)
            h = keras.layers.Dense(args.projection_dim, use_bias=False)(h)
            if k > 0:
                h = h + h_in
            h_in = h
        tops.append(h_in)
    return tops[0], tops[1]


class KerasSampledLoss:
    """``tf.nn.sampled_softmax_loss`` (default sampler: unique log-uniform) in training, the full
    softmax's cross-entropy otherwise: a plain Keras layer built on first use."""

    @staticmethod
    def layer(softmax: Any, num_sampled: int) -> Any:
        import keras
        import tensorflow as tf

        class SampledLoss(keras.layers.Layer):
            def call(self, states: Any, targets: Any, training: Any = None) -> Any:
                flat = tf.reshape(states, (-1, states.shape[-1]))
                labels = tf.reshape(tf.cast(targets, tf.int64), (-1, 1))
                if training:
                    loss = tf.nn.sampled_softmax_loss(tf.transpose(softmax.kernel), softmax.bias, labels, flat, num_sampled, softmax.units)
                else:
                    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels[:, 0], tf.matmul(flat, softmax.kernel) + softmax.bias)
                return tf.reshape(loss, tf.shape(targets))

        return SampledLoss(dtype="float32")


def keras_row(args: argparse.Namespace, batches: list[np.ndarray], characters: np.ndarray, kind: str) -> Callable[[], tuple[list[float], list[float]]]:
    """``kind``: ``same`` (ptmkit's backbone layers, plain Dense softmax), ``full`` or ``sampled``
    (word embedding, plain layers)."""
    import keras
    from keras import ops

    token_ids = np.concatenate(batches)
    targets = shifted_targets(token_ids)
    mask_array = np.ones_like(token_ids)
    softmax = keras.layers.Dense(args.vocabulary_size, name="softmax")
    if kind == "same":
        from ptmkit_elmo.backbone import ELMoBackbone

        widths, counts = ([1, 2, 3], [4, 4, 8]) if args.quick else ([1, 2, 3, 4, 5, 6, 7], [16, 16, 32, 32, 64, 64, 64])
        backbone = ELMoBackbone(args.vocabulary_size, 50, 16 if not args.quick else 4, widths, counts, 2, args.projection_dim, args.lstm_dim, 2, dropout=0.1)
        char_ids = keras.Input((None, 50), dtype="int32", name="char_ids")
        padding = keras.Input((None,), dtype="int32", name="padding_mask")
        out = backbone({"char_ids": char_ids, "padding_mask": padding})
        logits = ops.stack([backbone.logits(out["forward_output"]), backbone.logits(out["backward_output"])], axis=1)  # its own Dense softmax
        model = keras.Model({"char_ids": char_ids, "padding_mask": padding}, logits)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = {"char_ids": characters[token_ids], "padding_mask": mask_array}
        return lambda: fit_keras(model, x, targets, None, args)
    words = keras.Input((None,), dtype="int32", name="token_ids")
    padding = keras.Input((None,), dtype="int32", name="padding_mask")
    mask = ops.not_equal(padding, 0)
    x = keras.layers.Embedding(args.vocabulary_size, args.projection_dim)(words)
    x = keras.layers.Dropout(0.1)(x)
    forward, backward = _lstm_stacks(keras, x, mask, args)
    inputs = {"token_ids": words, "padding_mask": padding}
    feed = {"token_ids": token_ids, "padding_mask": mask_array}
    if kind == "full":
        logits = ops.stack([softmax(forward), softmax(backward)], axis=1)
        model = keras.Model(inputs, logits)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return lambda: fit_keras(model, feed, targets, None, args)
    softmax.build((None, args.projection_dim))
    target_input = keras.Input((2, None), dtype="int32", name="targets")
    loss = KerasSampledLoss.layer(softmax, args.num_sampled)(ops.stack([forward, backward], axis=1), target_input)
    model = keras.Model({**inputs, "targets": target_input}, loss)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=lambda y_true, y_pred: y_pred)
    return lambda: fit_keras(model, {**feed, "targets": targets}, targets, None, args)


def torch_row(args: argparse.Namespace, batches: list[np.ndarray], kind: str) -> Callable[[], tuple[list[float], list[float]]]:
    import torch
    from torch import nn

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V, P, H = args.vocabulary_size, args.projection_dim, args.lstm_dim

    class BiLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(V, P)
            self.dropout = nn.Dropout(0.1)
            self.lstms = nn.ModuleList([nn.LSTM(P, H, batch_first=True) for _ in range(4)])  # forward 0, 1; backward 0, 1
            self.projections = nn.ModuleList([nn.Linear(H, P, bias=False) for _ in range(4)])
            self.softmax = nn.Linear(P, V)

        def directions(self, ids: torch.Tensor) -> list[torch.Tensor]:
            x = self.dropout(self.embedding(ids))
            tops = []
            for d in range(2):
                h_in = x if d == 0 else torch.flip(x, dims=[1])
                for k in range(2):
                    h = self.projections[2 * d + k](self.lstms[2 * d + k](h_in)[0])
                    h_in = h + h_in if k > 0 else h
                tops.append(h_in if d == 0 else torch.flip(h_in, dims=[1]))
            return tops

    model = BiLM()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = [(torch.from_numpy(b.astype(np.int64)), torch.from_numpy(shifted_targets(b).astype(np.int64))) for b in batches]
    log_range = math.log(V + 1)

    def sampled_nll(states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        u = torch.rand(args.num_sampled)
        sampled = torch.clamp(torch.floor(torch.exp(u * log_range)) - 1, 0, V - 1).long()
        sampled = torch.unique(sampled)  # the distinct draws

        def inclusion(ids: torch.Tensor) -> torch.Tensor:
            q = (torch.log(ids.float() + 2) - torch.log(ids.float() + 1)) / log_range
            return -torch.expm1(args.num_sampled * torch.log1p(-q))

        weight, bias = model.softmax.weight, model.softmax.bias
        true_logits = (states * weight[targets]).sum(-1) + bias[targets] - torch.log(inclusion(targets))
        sampled_logits = states @ weight[sampled].T + bias[sampled] - torch.log(inclusion(sampled))
        sampled_logits = sampled_logits.masked_fill(targets[:, None] == sampled[None, :], -1e30)
        return torch.logsumexp(torch.cat([true_logits[:, None], sampled_logits], 1), 1) - true_logits

    def run() -> tuple[list[float], list[float]]:
        timer = Timer()
        timer.stamp()
        model.train()
        for ids, targets in data:
            optimizer.zero_grad(set_to_none=True)
            tops = model.directions(ids)
            losses = []
            for d in range(2):
                states, goal = tops[d].reshape(-1, P), targets[:, d].reshape(-1)
                if kind == "full":
                    losses.append(nn.functional.cross_entropy(model.softmax(states), goal))
                else:
                    losses.append(sampled_nll(states, goal).mean())
            loss = (losses[0] + losses[1]) / 2
            loss.backward()
            optimizer.step()
            timer.stamp()
        return timer.per_step(args.warmup)

    return run


ROWS = {
    "ptmkit_full": "ptmkit elmo, full softmax",
    "ptmkit_sampled": "ptmkit elmo, sampled softmax",
    "keras_same": "keras, ELMo layers + Dense softmax + Adam",
    "keras_full": "keras plain, word embedding, full softmax (anchor)",
    "keras_sampled": "keras plain, word embedding, tf.nn.sampled_softmax_loss",
    "torch_full": "torch nn.LSTM, word embedding, full softmax (anchor)",
    "torch_sampled": "torch nn.LSTM, word embedding, sampled softmax",
}


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.rows == "all" or "torch" in args.rows:
        # torch first: its optimizers import torch._dynamo, which crashes (SIGSEGV) once TensorFlow is loaded
        import torch._dynamo  # noqa: F401
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    import keras

    keras.utils.set_random_seed(0)
    keys = list(ROWS) if args.rows == "all" else args.rows.split(",")
    unknown = [key for key in keys if key not in ROWS]
    if unknown:
        print(f"--rows: unknown row {unknown[0]!r} (rows: {', '.join(ROWS)})", file=sys.stderr)
        return 2
    batches, characters = make_batches(args, args.warmup + args.steps)
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    builders = {
        "ptmkit_full": lambda: ptmkit_row(args, batches, characters, "full"),
        "ptmkit_sampled": lambda: ptmkit_row(args, batches, characters, "sampled"),
        "keras_same": lambda: keras_row(args, batches, characters, "same"),
        "keras_full": lambda: keras_row(args, batches, characters, "full"),
        "keras_sampled": lambda: keras_row(args, batches, characters, "sampled"),
        "torch_full": lambda: torch_row(args, batches, "full"),
        "torch_sampled": lambda: torch_row(args, batches, "sampled"),
    }
    runs = {key: builders[key]() for key in keys}
    wall: dict[str, list[float]] = {key: [] for key in keys}
    cpu: dict[str, list[float]] = {key: [] for key in keys}
    loads = []
    for round_ in range(args.rounds):
        order = keys[round_ % len(keys) :] + keys[: round_ % len(keys)]
        for key in order:
            w, c = runs[key]()
            wall[key] += w
            cpu[key] += c
            loads.append(os.getloadavg()[0])
            print(f"round {round_ + 1} {key}: {statistics.median(w) * 1000:.0f} ms/step wall, {statistics.median(c) * 1000:.0f} ms CPU, load {loads[-1]:.1f}", flush=True)
    tokens = args.batch_size * args.sequence_length
    stats = {key: (statistics.median(wall[key]), statistics.median(cpu[key])) for key in keys}
    anchors = [a for a in ("keras_full", "torch_full") if a in stats]
    header = "| row | ms/step (wall) | tokens/s | CPU ms/step | " + " | ".join(f"wall vs {a} | CPU vs {a}" for a in anchors) + " |"
    lines = [header, "|" + "---|" * (4 + 2 * len(anchors))]
    for key in keys:
        w, c = stats[key]
        # ratio > 1: this row is faster (more tokens/s, less CPU per step) than the anchor
        ratios = " | ".join(f"{stats[a][0] / w:.2f}x | {stats[a][1] / c:.2f}x" for a in anchors)
        lines.append(f"| {ROWS[key]} | {w * 1000:.0f} | {tokens / w:,.0f} | {c * 1000:.0f} | {ratios} |")
    table = "\n".join(lines)
    print(table)
    command = "python benchmarks/elmo_lm_throughput.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.out:
        from ptmkit.io import atomic_write_text

        uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        text = (
            f"# ELMo biLM training throughput\n\n"
            f"Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC. Commit: {commit()}. "
            f"Command: `{command.strip()}`.\n\n"
            f"Load (`uptime`): before `{uptime_before}`; after `{uptime_after}`; 1-minute load after each row: "
            f"{', '.join(f'{x:.1f}' for x in loads)}. The machine is shared with other jobs (2 cores): wall times swing "
            f"with their load, CPU time per step (process CPU, all threads) much less; read the CPU ratios first.\n\n"
            f"Setup: batch {args.batch_size} x {args.sequence_length} tokens ({tokens:,} a step), softmax {args.vocabulary_size:,} words, "
            f"2 LSTM layers x 2 directions of {args.lstm_dim} cells projected to {args.projection_dim}, sampled rows {args.num_sampled} draws "
            f"per direction and step, {args.threads} threads (TensorFlow intra-op and torch), {args.warmup} warm-up steps dropped, "
            f"{args.steps} kept per round, {args.rounds} rounds; medians over all kept steps. Ratios > 1: the row is faster than "
            f"the anchor (anchor ms / row ms).\n\n{table}\n"
        )
        atomic_write_text(args.out, text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
