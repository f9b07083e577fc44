"""Pre-training throughput: ptmkit side by side with a plain keras-hub ``BertMaskedLM`` loop
(``--family roberta``: ``RobertaMaskedLM``; ``albert``: ``AlbertMaskedLM``; ``gpt``: ``GPT2CausalLM``).

What it measures (tokens/s = batch x sequence_length per step, padding included, the definition
``ptmkit train`` uses), all in one process, on the same machine state:

* ``keras-hub BertMaskedLM, arrays`` -- THE ANCHOR: a plain ``keras_hub.models.BertMaskedLM``
  (``preprocessor=None``), ``compile(jit_compile=False)`` with its defaults otherwise (Adam 5e-5,
  sparse cross-entropy, weighted accuracy), ``fit`` on in-memory NumPy arrays. Note that
  ``Task.compile`` defaults to ``jit_compile="auto"``, i.e. XLA on TensorFlow; the anchor
  switches it off explicitly. Measured earlier by the team on these 2 cores: ~5.7K tokens/s
  (~64% of fp32 peak; Hugging Face ``BertForMaskedLM`` on torch: 3.6K). Target: ptmkit >= 0.95x.
* ``keras-hub BertMaskedLM + ptmkit AdamW``: the anchor compiled with ptmkit's optimizer
  (``ptmkit.training.schedule.adamw``: weight-decay exclusions, ``global_clipnorm=1.0``, warm-up
  schedule), to separate the optimizer's cost from the rest.
* ``keras-hub BertMaskedLM, XLA`` (extra, ``--no-xla`` skips it): the anchor with
  ``jit_compile=True``.
* ``ptmkit model, arrays``: ptmkit's own training model
  (``build_pretraining_model(registry, resolve_config(registry, "bert", None, []))``: the BERT
  plugin's backbone + the core masked-LM objective, compiled by ptmkit) fed the very same arrays:
  the cost of the plugin layer alone.
* ``ptmkit model, arrays, unshared forward`` (``--unshared-row``): the same model built as before
  :class:`ptmkit.training.pretrain.SharedForward`, each objective calling the backbone itself (with
  masked LM + NSP or SOP, the backbone runs twice per step): what sharing the forward pass saves.
* ``ptmkit model, PyDataset (pre-made)``: the same model fed through ptmkit's ``step_dataset``
  (a ``keras.utils.PyDataset``, what ``ptmkit train`` feeds ``fit`` with) returning the same
  pre-made batches: the cost of the PyDataset -> ``tf.data.Dataset.from_generator`` adapter.
* ``ptmkit model, PyDataset (live pipeline)``: ``step_dataset`` building each step with
  ``make_step(InstanceSampler, ...)`` from the tokenized corpus, as ``ptmkit train`` does, but
  without ptmkit's callbacks.
* ``ptmkit pretrain() end to end``: ``ptmkit.training.pretrain.pretrain("bert", corpus, out,
  overrides=["train.max_steps=WARMUP+STEPS"])``, the real ``ptmkit train`` path (tokenizer
  training and corpus tokenization first, then ``fit`` with the checkpoint, progress and
  TensorBoard callbacks). Reported twice: the ``tokens_per_second`` it writes to ``metrics.json``
  (mean over steps 2..N, so it includes the final checkpoint write) and the median step time,
  recorded by wrapping ptmkit's ``ProgressCallback`` (ptmkit's code itself is not changed).

Model and data (the issue's setup, = ptmkit's BERT defaults): vocabulary 8,000, 4 layers, hidden
256, 4 heads, intermediate 1,024, dropout 0.1; batch 32 x 128 tokens, 15% of the real tokens
masked, 20 prediction slots per sequence. The batches are ptmkit's real ones: ``make_step`` with
``step_rng(seed, step)`` over the corpus tokenized by the first ``pretrain()`` run (``RUN/tokens``
and ``RUN/tokenizer.json``), i.e. RoBERTa-style packed windows of data/corpus/enwiki-106.txt;
every array-fed and PyDataset-fed row sees exactly the same batches in the same order.

Timing: a callback stamps ``time.perf_counter()`` at every ``on_train_batch_end``; the first
``--warmup`` step times of each ``fit`` are dropped (tracing, iterator start-up), the next
``--steps`` are kept; tokens/s = 4,096 / median step time. Each configuration is run ``--rounds``
times, interleaved, the order rotated every round (models are built once; later rounds reuse the
traced train function). Reported: the median over all kept steps of all rounds, the ratio to the
anchor from those, the "paired" ratio (median over rounds of the same-round ratio, more robust
when other jobs load the machine), per-round medians (to see that noise), and the median process
CPU time per step with the CPU-time ratio to the anchor (on a busy machine wall time per step
swings by 2x while CPU time per step moves by a few %, so this ratio is the least noisy one; it
does not see time lost waiting, e.g. for input). The 1-minute load average after each fit is
printed to show contention (this process alone accounts for ~2).

Share of peak: training FLOPs per token are estimated as
``6 * N + 12 * L * H * S + 6 * (H*E + E*V) * P / S`` where N = parameters of the L transformer
layers applied (non-embedding, pooler excluded; a shared ALBERT layer counted once per call), E = the MLM head's width (H; ALBERT's E), H = hidden, S = sequence length, V = vocabulary, P =
prediction slots per sequence: 6N for the dense layers (forward 2N, backward 4N); 12*L*H*S for
attention scores and the weighted sum (2 * 2*S*H per token and layer forward, x3 with the
backward); the MLM head (dense H x H + output projection H x V tied to the embedding) on the P
masked positions only. A causal LM (no ``mask_positions`` input) has no dense transform in its
head and computes the tied output projection at every position: ``6 * H * V`` per token (P = S,
the H*E term dropped). The fp32 peak is the best of: NumPy (OpenBLAS, all cores) and TensorFlow
(``tf.linalg.matmul`` in a ``tf.function``, default thread pools = all cores) multiplying two
4096 x 4096 float32 matrices (2 * 4096^3 FLOPs), median of repeated runs, measured before and
after the training rows (the best is kept).

``--family albert`` measures the albert family: the anchor is a plain ``keras_hub.models.AlbertMaskedLM``
on an ``AlbertBackbone`` of ptmkit's default ALBERT (embedding 128, hidden 256, 4 layers sharing one
set of weights); ptmkit's rows train the family's defaults, masked LM **and** sentence-order
prediction (the anchor trains masked LM only, so ptmkit does a little more work per step: the SOP
head and its loss), on the family's own batches (unigram pieces, segment pairs).

``--family roberta`` measures the roberta family the same way: the anchor is a plain
``keras_hub.models.RobertaMaskedLM`` on a ``RobertaBackbone`` of the same size (inputs
``token_ids``, ``padding_mask``, ``mask_positions``; no segment ids), ptmkit's rows build the
roberta family's model, and the batches are its own (byte-level BPE, ``<s> ... </s>`` windows).

``--family gpt`` measures the gpt family: the anchor is a plain ``keras_hub.models.GPT2CausalLM``
(``preprocessor=None``) on a ``GPT2Backbone`` of the same size (pre-LN, final layer norm, tanh GELU,
layer-norm epsilon 1e-5: ptmkit's ``model.variant = "gpt2"`` default; the layers and their names
are the same, so ptmkit's initial weights are copied into the anchor), ``compile(jit_compile=False)``
with ``CausalLM.compile``'s defaults (Adam 2e-5, sparse cross-entropy from logits, weighted
accuracy). Inputs ``token_ids`` and ``padding_mask`` (ptmkit's packed, right-padded byte-level BPE
windows ``<|endoftext|> ...``); both models compute logits at every position through the tied
token embedding and train the ``clm`` targets: ``targets[:, i] = token_ids[:, i + 1]``, weight
``padding_mask[:, i + 1]``, the last position weight 0. That is ``GPT2CausalLMPreprocessor``'s
``y = token_ids[..., 1:]``, ``sample_weight = padding_mask[..., 1:]`` on the same window, except that
the preprocessor packs ``sequence_length + 1`` tokens so that its last position has a target too
(here, as in ``ptmkit train``, the window's last token has no successor: S - 1 targets of S
positions, the same logits and softmax computed). The weights are ptmkit's relative ones (mean 1
per step, as for the other families' anchors), so both losses are the mean over real targets;
keras-hub's 0/1 weights would scale the loss by the share of real targets, the same work per step.

Every family: before the timing, each model's loss on the first batch (``evaluate``, dropout off)
is printed beside ln(vocabulary size), the anchor holding ptmkit's initial backbone weights where
the two backbones' weights have the same names and shapes (bert, albert, gpt; not roberta). GPT's head has no
weights of its own (logits through the tied embedding), so there the two losses must agree to
round-off: a check that the anchor and ptmkit compute the same loss on the same batch; the MLM
heads keep their own initialisations, so those losses only sit near ln V together.

``--quick``: a tiny model (2 layers, hidden 32, vocabulary 400, batch 8 x 32) on the corpus's first
400 lines, 1 warm-up + 2 timed steps, 1 round, no XLA row, a 512^3 matmul peak: the code paths in
about 45 s on 2 cores, longer when other jobs load them (its numbers measure nothing; tests/test_benchmark_pretrain_throughput.py).

``--precision bf16`` runs every row under Keras' ``mixed_bfloat16`` policy (the anchor too, so
the ratio to it stays measured; ptmkit's rows with ``train.mixed_precision = "bf16"``) and adds
one row, the anchor in float32, so that bf16's speed-up over fp32 is measured in the same
process. The share of peak is then given against the bf16 peak too: a 4096^3 bfloat16 matmul in
TensorFlow (oneDNN: AMX tiles on CPUs that have them). ``--onednn`` runs a few training steps of
ptmkit's model in a child process with ``ONEDNN_VERBOSE=1`` and sums oneDNN's own execution
times by primitive and implementation, e.g. ``brg_matmul:avx10_1_512_amx`` (AMX ran) against
``gemm:jit`` (it did not), with the dtypes; what does not appear there (layer norms, softmax,
the embedding gathers) ran in TensorFlow's Eigen kernels.

Run (about 10 minutes with the defaults on 2 idle cores; longer on a busy machine)::

    python benchmarks/pretrain_throughput.py [--family bert|roberta|albert|gpt] [--steps 20] [--warmup 3] [--rounds 3] \\
        [--precision float32|bf16] [--onednn] [--no-xla] [--unshared-row] [--corpus data/corpus/enwiki-106.txt] \\
        [--quick] [--keep] [--json results.json]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
CORPUS_CANDIDATES = (REPO / "data/corpus/enwiki-106.txt", Path("/work/shared/data/corpus/enwiki-106.txt"))
#: family -> (keras-hub task, keras-hub backbone, the task's inputs): the plain keras-hub anchor.
ANCHORS = {
    "bert": ("BertMaskedLM", "BertBackbone", ("token_ids", "segment_ids", "padding_mask", "mask_positions")),
    "roberta": ("RobertaMaskedLM", "RobertaBackbone", ("token_ids", "padding_mask", "mask_positions")),
    "albert": ("AlbertMaskedLM", "AlbertBackbone", ("token_ids", "segment_ids", "padding_mask", "mask_positions")),
    "gpt": ("GPT2CausalLM", "GPT2Backbone", ("token_ids", "padding_mask")),
}
#: family -> the anchor backbone's further arguments, from ptmkit's model config.
ANCHOR_EXTRA = {
    "albert": lambda model: {"embedding_dim": model.embedding_dim, "num_groups": model.num_groups, "num_inner_repetitions": model.inner_group_num},
}
ANCHOR = "keras-hub BertMaskedLM, arrays"
#: family -> the anchor's tokens/s the team measured earlier on these 2 cores (printed beside this run's).
TEAM_ANCHOR_TOKENS_PER_SECOND = {"bert": 5700.0}
TARGET_RATIO = 0.95
ISSUE_MODEL = {"vocabulary_size": 8000, "num_layers": 4, "hidden_dim": 256, "num_heads": 4, "intermediate_dim": 1024}
#: ``--quick``: a tiny model and batch (the code paths, not a measurement).
QUICK_OVERRIDES = [
    "model.vocabulary_size=400", "model.num_layers=2", "model.hidden_dim=32", "model.num_heads=2", "model.intermediate_dim=64",
    "model.max_sequence_length=64", "train.batch_size=8", "train.sequence_length=32", "train.heldout_lines=10",
]
QUICK_CORPUS_LINES = 400


def default_corpus() -> Path:
    for path in CORPUS_CANDIDATES:
        if path.exists():
            return path
    return CORPUS_CANDIDATES[0]


# --------------------------------------------------------------------------- peak


def bf16_matmul_peak(n: int = 4096, repeats: int = 5) -> float:
    """GFLOP/s of an ``n x n`` bfloat16 matmul in TensorFlow (oneDNN; median of ``repeats``)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    a, b = (tf.cast(rng.standard_normal((n, n), dtype=np.float32), tf.bfloat16) for _ in range(2))

    @tf.function
    def product(x: Any, y: Any) -> Any:
        return tf.reduce_sum(tf.cast(tf.linalg.matmul(x, y), tf.float32))

    return round(2.0 * n**3 / median_seconds(lambda: product(a, b).numpy(), repeats) / 1e9, 1)


def onednn_kernels(family: str, precision: str, steps: int = 4, quick: bool = False) -> list[dict[str, Any]]:
    """oneDNN's primitives over ``steps`` training steps of ptmkit's ``family`` model under
    ``precision``, from ``ONEDNN_VERBOSE=1`` in a child process: one dict per (primitive,
    implementation, source dtype) with its calls and summed execution milliseconds."""
    import subprocess

    env = {**os.environ, "ONEDNN_VERBOSE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, __file__, "--onednn-probe", "--family", family, "--precision", precision, "--steps", str(steps), *(["--quick"] if quick else [])]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    totals: dict[tuple[str, str, str], list[float]] = {}
    for line in output.splitlines():
        fields = line.split(",")
        if len(fields) < 11 or fields[:4] != ["onednn_verbose", "v1", "primitive", "exec"]:
            continue
        source = next((f.split(":")[0][4:] or f.split(":")[1] for f in fields[8].split() if f.startswith("src")), "?")
        # "src:bf16::blocked..." (primitives) or "src_f32::blocked..." (gemm_api, which names no implementation)
        entry = totals.setdefault((fields[5], fields[6] or "(sgemm-style call)", source), [0, 0.0])
        entry[0] += 1
        entry[1] += float(fields[-1])
    rows = [{"primitive": k[0], "implementation": k[1], "dtype": k[2], "calls": int(v[0]), "ms": round(v[1], 1)} for k, v in totals.items()]
    return sorted(rows, key=lambda r: -r["ms"])


def onednn_probe(family: str, precision: str, steps: int, overrides: list[str]) -> None:
    """What ``--onednn`` runs in the child: ``steps`` fits of one random batch of ptmkit's model."""
    import numpy as np

    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import build_pretraining_model, resolve_config
    from ptmkit.training.setup import precision as policy

    registry = get_registry()
    config = resolve_config(registry, family, None, [*overrides, f"train.mixed_precision={precision}"])
    with policy(config.train.mixed_precision):
        _, model, _ = build_pretraining_model(registry, config)
    rng = np.random.default_rng(0)
    batch, length = config.train.batch_size, config.train.sequence_length
    x = {}
    for spec in model.inputs:
        shape = (batch, *[length if d is None else d for d in spec.shape[1:]])
        if spec.name == "mask_positions":
            shape = (batch, 20)
        x[spec.name] = rng.integers(0, 20 if spec.name == "mask_positions" else 2, shape).astype(spec.dtype)
    x["token_ids"] = rng.integers(5, config.model.vocabulary_size, (batch, length)).astype("int32")
    # one target per prediction slot (masked LM), position (causal LM) or sequence (SOP, NSP), in the output's classes
    slots = 20 if "mask_positions" in x else length
    y = {name: rng.integers(0, out.shape[-1], (batch, *[slots for _ in out.shape[1:-1]])).astype("int32") for name, out in model.output.items()}
    for _ in range(steps):
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0)


def median_seconds(call: Any, repeats: int) -> float:
    """The median wall-clock seconds of ``call()`` over ``repeats`` calls, after one untimed
    warm-up call (tracing, compilation, first allocations)."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_peak(n: int = 4096, repeats: int = 5) -> dict[str, float]:
    """fp32 GFLOP/s of an ``n x n`` matmul with NumPy and with TensorFlow (median of ``repeats``)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    flops = 2.0 * n**3

    numpy_gflops = flops / median_seconds(lambda: np.dot(a, b), repeats) / 1e9

    ta, tb = tf.constant(a), tf.constant(b)

    @tf.function
    def product(x: Any, y: Any) -> Any:
        return tf.reduce_sum(tf.linalg.matmul(x, y))  # a scalar back: no 64 MB copy in the timing

    tf_gflops = flops / median_seconds(lambda: product(ta, tb).numpy(), repeats) / 1e9
    return {"numpy_gflops": round(numpy_gflops, 1), "tensorflow_gflops": round(tf_gflops, 1)}


# --------------------------------------------------------------------------- FLOPs


def flops_per_token(backbone: Any, sequence_length: int, predictions: int, head_transform: bool = True) -> dict[str, float]:
    """Training FLOPs per token; see the module docstring for the formula.

    ``predictions``: positions per sequence the LM head runs on (masked LM: its prediction slots;
    causal LM: ``sequence_length``); ``head_transform``: the head has a dense H -> E transform
    before the tied output projection (BERT's, RoBERTa's and ALBERT's MLM heads; GPT's has none).
    Returns FLOPs per token (floats) by part, ``total`` their sum.
    """
    layers = [layer for item in backbone.transformer_layers for layer in (item if isinstance(item, list) else [item])]
    # ALBERT: each of the num_groups x inner layers runs num_layers / num_groups times (shared weights)
    calls = backbone.num_layers // getattr(backbone, "num_groups", backbone.num_layers)
    n = calls * sum(layer.count_params() for layer in layers)
    hidden, vocab = backbone.hidden_dim, backbone.vocabulary_size
    width = backbone.token_embedding.output_dim  # the MLM head's transform: H -> E, then E -> V (tied)
    dense = 6.0 * n
    attention = 12.0 * calls * len(layers) * hidden * sequence_length
    head = 6.0 * (hidden * width * head_transform + width * vocab) * predictions / sequence_length
    return {
        "non_embedding_parameters": n,
        "dense": dense,
        "attention": attention,
        "lm_head": head,
        "total": dense + attention + head,
    }


# --------------------------------------------------------------------------- timing


def step_timer() -> Any:
    import keras

    class StepTimer(keras.callbacks.Callback):
        """``perf_counter`` at train begin and after every batch."""

        def __init__(self) -> None:
            super().__init__()
            self.stamps: list[tuple[float, float]] = []

        def on_train_begin(self, logs: Any = None) -> None:
            self.stamps = [(time.perf_counter(), time.process_time())]

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.stamps.append((time.perf_counter(), time.process_time()))

    return StepTimer()


def step_times(stamps: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``(wall, process CPU)`` seconds of every step, from consecutive stamps."""
    return [(b[0] - a[0], b[1] - a[1]) for a, b in zip(stamps, stamps[1:], strict=False)]


def stack(batches: list[tuple[dict, dict, dict]]) -> tuple[dict, dict, dict]:
    """Concatenate per-step ``(x, y, w)`` dicts along the batch axis (fit with batch_size and no shuffle
    then yields the same batches in the same order)."""
    import numpy as np

    return tuple({k: np.concatenate([b[i][k] for b in batches]) for k in batches[0][i]} for i in range(3))  # type: ignore[return-value]


class Row:
    """One configuration: a way to run ``warmup + steps`` training steps, timed per round."""

    def __init__(self, name: str, run: Any, note: str = "") -> None:
        self.name, self.run, self.note = name, run, note
        self.rounds: list[list[tuple[float, float]]] = []  # kept (wall, CPU) step times per round
        self.raw: list[list[tuple[float, float]]] = []  # every step, warm-up included

    def add(self, times: list[tuple[float, float]], warmup: int, steps: int) -> list[tuple[float, float]]:
        kept = times[warmup : warmup + steps]
        if len(kept) < steps:
            raise RuntimeError(f"{self.name}: only {len(times)} steps were timed, expected {warmup + steps}")
        self.raw.append(times)
        self.rounds.append(kept)
        return kept

    def times(self) -> list[float]:
        return [t for r in self.rounds for t, _ in r]

    def cpu_times(self) -> list[float]:
        return [c for r in self.rounds for _, c in r]

    def round_medians(self) -> list[float]:
        return [statistics.median(t for t, _ in r) for r in self.rounds]


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``--quick`` fills in its own ``--steps``, ``--warmup``, ``--rounds`` and ``--no-xla``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="timed steps per fit and round (default 20; --quick 2)")
    parser.add_argument("--warmup", type=int, help="steps dropped at the start of each fit (default 3; --quick 1)")
    parser.add_argument("--rounds", type=int, help="interleaved repetitions of every row (default 3; --quick 1)")
    parser.add_argument("--family", choices=sorted(ANCHORS), default="bert", help="the family to measure (default bert)")
    parser.add_argument("--precision", choices=("float32", "bf16"), default="float32",
                        help="the Keras policy of every row: float32 or bf16 (mixed_bfloat16; adds a float32 anchor row)")
    parser.add_argument("--onednn", action="store_true", help="also list oneDNN's kernels and their time (ONEDNN_VERBOSE, a child process)")
    parser.add_argument("--onednn-probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-xla", action="store_true", help="skip the keras-hub XLA row")
    parser.add_argument("--unshared-row", action="store_true",
                        help="add a row of ptmkit's model with one backbone call per objective (before the shared forward pass)")
    parser.add_argument("--corpus", type=Path, default=default_corpus(), help="pre-training corpus (default %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a tiny model on the corpus's first {QUICK_CORPUS_LINES} lines, 1 warm-up + 2 steps, 1 round, no XLA row: the code paths only")
    parser.add_argument("--keep", action="store_true", help="keep the work directory with the pretrain() runs (default: deleted)")
    parser.add_argument("--json", type=Path, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    for name, full, quick in (("steps", 20, 2), ("warmup", 3, 1), ("rounds", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    args.no_xla = args.no_xla or args.quick
    if args.steps < 1 or args.warmup < 1 or args.rounds < 1:
        parser.error("--steps, --warmup and --rounds must be >= 1 (the first step of a fit is always tracing)")
    if not args.onednn_probe and not args.corpus.exists():
        parser.error(f"corpus not found: {args.corpus}")
    return args


def quick_corpus(corpus: Path, work: Path) -> Path:
    """The first :data:`QUICK_CORPUS_LINES` lines of ``corpus``, written under ``work``."""
    with corpus.open(encoding="utf-8") as handle:
        lines = [line for _, line in zip(range(QUICK_CORPUS_LINES), handle, strict=False)]
    small = work / f"{corpus.stem}-{QUICK_CORPUS_LINES}.txt"
    small.write_text("".join(lines), encoding="utf-8")
    return small


def first_batch_losses(anchor_model: Any, ptmkit_model: Any, backbone: Any, batch: tuple[dict, dict, dict], anchor_inputs: tuple[str, ...],
                       objective: str) -> dict[str, Any]:
    """Both models' loss on one batch (``evaluate``: dropout off), in nats per weighted target.

    ``batch`` is ptmkit's ``(x, y, w)`` of one step; the anchor gets ``x``'s ``anchor_inputs`` and the
    ``objective``'s targets and weights. When the anchor's backbone has exactly the weights (names
    and shapes) of ptmkit's ``backbone``, they are copied into it first, so that the two losses must
    agree to round-off. Returns ``anchor``, ``ptmkit`` (its ``objective`` loss), ``log_vocabulary``
    (ln V, the loss of a uniform prediction) and ``weights_copied``.
    """
    import math

    x, y, w = batch
    ours, theirs = backbone.weights, anchor_model.backbone.weights
    copied = [(a.path, tuple(a.shape)) for a in ours] == [(b.path, tuple(b.shape)) for b in theirs]
    if copied:
        anchor_model.backbone.set_weights(backbone.get_weights())
    size = len(x["token_ids"])
    anchor_logs = anchor_model.evaluate({k: x[k] for k in anchor_inputs}, y[objective], sample_weight=w[objective], batch_size=size,
                                        verbose=0, return_dict=True)
    ptmkit_logs = ptmkit_model.evaluate(x, y, sample_weight=w, batch_size=size, verbose=0, return_dict=True)
    return {
        "anchor": round(float(anchor_logs["loss"]), 6),
        "ptmkit": round(float(ptmkit_logs.get(f"{objective}_loss", ptmkit_logs["loss"])), 6),
        "log_vocabulary": round(math.log(backbone.vocabulary_size), 6),
        "weights_copied": copied,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.onednn_probe:
        onednn_probe(args.family, args.precision, args.steps, QUICK_OVERRIDES if args.quick else [])
        return 0

    from ptmkit.training.setup import quiet_tensorflow

    quiet_tensorflow()
    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf
    from rich.console import Console

    import ptmkit.training.progress as progress_module
    from ptmkit.data.pretraining import InstanceSampler, load_token_file, make_step, sampler_options, step_rng
    from ptmkit.data.tokenization import character_table, word_start_table
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.pretrain import build_pretraining_model, pretrain, resolve_config, step_dataset
    from ptmkit.training.schedule import adamw

    task_name, backbone_name, anchor_inputs = ANCHORS[args.family]
    anchor = f"keras-hub {task_name}, arrays"
    total = args.warmup + args.steps
    registry = get_registry()
    family = registry.family(args.family)
    precision_overrides = [*(QUICK_OVERRIDES if args.quick else []), f"train.mixed_precision={args.precision}"]
    config = resolve_config(registry, args.family, None, precision_overrides)
    policy = config.train.mixed_precision
    model_config, train = config.model, config.train
    for key, value in ISSUE_MODEL.items():
        if getattr(model_config, key) != value and not args.quick:
            raise SystemExit(f"ptmkit's default model.{key} is {getattr(model_config, key)}, the issue's setup is {value}")
    model_sizes = {key: getattr(model_config, key) for key in ISSUE_MODEL}  # = ISSUE_MODEL but with --quick
    batch_size, length = train.batch_size, train.sequence_length
    tokens_per_step = batch_size * length
    objective = (train.objectives or list(family.default_objectives))[0]  # the one the anchor trains: mlm, clm
    work = Path(tempfile.mkdtemp(prefix="ptmkit-throughput-"))
    if not args.keep:
        atexit.register(shutil.rmtree, work, True)
    if args.quick:
        args.corpus = quick_corpus(args.corpus, work)
    print(f"ptmkit pre-training throughput: batch {batch_size} x {length}, {args.warmup} warm-up + {args.steps} timed steps, "
          f"{args.rounds} round(s); TF {tf.__version__}, Keras {keras.__version__}, keras-hub {keras_hub.__version__}, "
          f"{os.cpu_count()} CPUs; work dir {work}", flush=True)

    peak_size = 512 if args.quick else 4096
    peak_before = matmul_peak(peak_size)
    print(f"fp32 matmul peak ({peak_size}^3): NumPy {peak_before['numpy_gflops']} GFLOP/s, TF {peak_before['tensorflow_gflops']} GFLOP/s", flush=True)
    bf16_peak = bf16_matmul_peak() if args.precision == "bf16" else None
    if bf16_peak:
        print(f"bf16 matmul peak (4096^3, TF/oneDNN): {bf16_peak} GFLOP/s", flush=True)

    # ---- ptmkit's real path: pretrain() (also produces the tokenized corpus the batches come from)
    pretrain_runs: list[dict[str, Any]] = []

    def run_pretrain(round_index: int) -> list[tuple[float, float]]:
        stamps: list[tuple[float, float]] = []
        original = progress_module.ProgressCallback

        class TimedProgress(original):  # type: ignore[misc,valid-type]
            def on_train_begin(self, logs: Any = None) -> None:
                stamps.append((time.perf_counter(), time.process_time()))
                super().on_train_begin(logs)

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                super().on_train_batch_end(batch, logs)
                stamps.append((time.perf_counter(), time.process_time()))

        out = work / f"pretrain-{round_index}"
        progress_module.ProgressCallback = TimedProgress
        try:
            started = time.perf_counter()
            overrides = [*precision_overrides, f"train.max_steps={total}"]
            metrics = pretrain(args.family, args.corpus, out, overrides=overrides, console=Console(quiet=True))
            wall = time.perf_counter() - started
        finally:
            progress_module.ProgressCallback = original
        pretrain_runs.append({"out": str(out), "wall_seconds": round(wall, 1), "metrics": metrics})
        print(f"  pretrain() round {round_index + 1}: metrics.json tokens_per_second {metrics['tokens_per_second']:.0f}, "
              f"whole call {wall:.1f}s (train {metrics['train_seconds_this_session']}s)", flush=True)
        return step_times(stamps)

    rows: dict[str, Row] = {}
    pretrain_row = Row("ptmkit pretrain() end to end", run_pretrain, "the real `ptmkit train` path: PyDataset, live batches, callbacks")
    rows[pretrain_row.name] = pretrain_row
    pretrain_row.add(pretrain_row.run(0), args.warmup, args.steps)

    # ---- the batches: ptmkit's pipeline over the tokenized corpus of that run
    run_dir = RunDir(pretrain_runs[0]["out"])
    tokenizer = run_dir.load_tokenizer()
    specials = family.special_tokens(tokenizer)
    names = train.objectives or list(family.default_objectives)
    objectives = {name: (registry.objective(name), config.objectives[name]) for name in names}
    token_file = load_token_file(run_dir.path / "tokens", "train")
    # the sampler options ptmkit's pretrain() derives from the objectives: segment pairs (NSP, SOP), word starts
    # (whole-word and n-gram masking, ALBERT's default), static windows
    sampler = InstanceSampler(token_file, family, specials, length, **sampler_options(objectives, word_start_table(tokenizer)))
    characters = character_table(tokenizer, family.inputs)

    def make(step: int) -> Any:
        return make_step(sampler, objectives, step_rng(train.seed, step), batch_size, model_config.vocabulary_size, family.inputs,
                         characters=characters)

    make_times, batches = [], []
    for step in range(total):
        started = time.perf_counter()
        batches.append(make(step))
        make_times.append(time.perf_counter() - started)
    x, y, w = stack(batches)
    # masked LM: the head runs on the prediction slots; causal LM: on every position (its last one has no target)
    masked_lm = "mask_positions" in x
    predictions = x["mask_positions"].shape[1] if masked_lm else length
    masked = float((w[objective] > 0).sum() / (len(batches) * batch_size))  # the weights are relative (mean 1): count, don't sum
    print(f"batches: ptmkit make_step over {token_file.num_tokens:,} training tokens of {args.corpus.name}; "
          f"{objective}: {predictions} prediction slots/sequence, {masked:.1f} used on average; "
          f"make_step {1e3 * statistics.median(make_times):.2f} ms/step (median)", flush=True)

    # ---- the models
    def plain_backbone() -> Any:
        extra = ANCHOR_EXTRA[args.family](model_config) if args.family in ANCHOR_EXTRA else {}
        return getattr(keras_hub.models, backbone_name)(**model_sizes, **extra, dropout=model_config.dropout, max_sequence_length=model_config.max_sequence_length)

    plain_x = {k: x[k] for k in anchor_inputs}
    task = getattr(keras_hub.models, task_name)

    def fit_arrays(model: Any, inputs: Any, targets: Any, weights: Any) -> Any:
        def run(_round: int) -> list[float]:
            timer = step_timer()
            model.fit(inputs, targets, sample_weight=weights, batch_size=batch_size, epochs=1, shuffle=False, verbose=0, callbacks=[timer])
            return step_times(timer.stamps)

        return run

    def fit_dataset(model: Any, make_batch: Any) -> Any:
        def run(_round: int) -> list[float]:
            timer = step_timer()
            # shuffle=False as ptmkit's _fit passes it: Keras would otherwise permute a PyDataset's indices
            model.fit(step_dataset(make_batch, 0, total), epochs=1, shuffle=False, verbose=0, callbacks=[timer])
            return step_times(timer.stamps)

        return run

    keras.utils.set_random_seed(train.seed)
    if args.precision != "float32":  # the anchor in float32 beside it: bf16's speed-up, measured in this process
        fp32_model = task(backbone=plain_backbone(), preprocessor=None)
        fp32_model.compile(jit_compile=False)
        name = f"keras-hub {task_name}, float32"
        rows[name] = Row(name, fit_arrays(fp32_model, plain_x, y[objective], w[objective]), "the anchor under the float32 policy")
    keras.mixed_precision.set_global_policy(policy)  # every model built from here on, as ptmkit's run does
    anchor_model = task(backbone=plain_backbone(), preprocessor=None)
    anchor_model.compile(jit_compile=False)
    defaults = f"{type(anchor_model.optimizer).__name__} {float(anchor_model.optimizer.learning_rate):g}"
    rows[anchor] = Row(anchor, fit_arrays(anchor_model, plain_x, y[objective], w[objective]), f"{defaults} (Task.compile defaults), jit_compile=False")

    adamw_model = task(backbone=plain_backbone(), preprocessor=None)
    adamw_model.compile(optimizer=adamw(train.learning_rate, train.weight_decay, total, train.warmup_ratio), jit_compile=False)
    name = f"keras-hub {task_name} + ptmkit AdamW"
    rows[name] = Row(name, fit_arrays(adamw_model, plain_x, y[objective], w[objective]), "ptmkit's optimizer: decay exclusions, clipnorm 1.0, schedule")

    if not args.no_xla:
        xla_model = task(backbone=plain_backbone(), preprocessor=None)
        xla_model.compile(jit_compile=True)
        name = f"keras-hub {task_name}, XLA"
        rows[name] = Row(name, fit_arrays(xla_model, plain_x, y[objective], w[objective]), "jit_compile=True (Task.compile's 'auto' on TF)")

    backbone, ptmkit_model, _ = build_pretraining_model(registry, config)
    flops = flops_per_token(backbone, length, predictions, head_transform=masked_lm)
    losses = first_batch_losses(anchor_model, ptmkit_model, backbone, batches[0], anchor_inputs, objective)
    print(f"loss on the first batch ({objective}, dropout off): anchor {losses['anchor']:.4f}, ptmkit {losses['ptmkit']:.4f}, "
          f"ln V {losses['log_vocabulary']:.4f}; ptmkit's initial backbone weights copied into the anchor: "
          f"{'yes' if losses['weights_copied'] else 'no (different layouts: each its own initialisation)'}", flush=True)
    name = "ptmkit model, arrays"
    rows[name] = Row(name, fit_arrays(ptmkit_model, x, y, w), "build_pretraining_model() on the same arrays: plugin layer only")
    if args.unshared_row:
        import ptmkit.training.pretrain as pretrain_module

        shared_forward = pretrain_module.SharedForward
        pretrain_module.SharedForward = lambda backbone: backbone  # each objective calls the backbone itself, as before
        try:
            _, unshared_model, _ = build_pretraining_model(registry, config)
        finally:
            pretrain_module.SharedForward = shared_forward
        name = "ptmkit model, arrays, unshared forward"
        rows[name] = Row(name, fit_arrays(unshared_model, x, y, w), "one backbone call per objective (before SharedForward)")
    name = "ptmkit model, PyDataset (pre-made)"
    rows[name] = Row(name, fit_dataset(ptmkit_model, lambda step: batches[step]), "step_dataset returning the same in-memory batches")
    name = "ptmkit model, PyDataset (live pipeline)"
    rows[name] = Row(name, fit_dataset(ptmkit_model, make), "step_dataset + make_step on the tokenized corpus, no callbacks")

    order = [anchor, *[n for n in rows if n not in (anchor, pretrain_row.name)], pretrain_row.name]
    for round_index in range(args.rounds):
        # rotate the order every round, so no row always runs right after the same one
        shift = round_index % len(order)
        print(f"round {round_index + 1}/{args.rounds}", flush=True)
        for name in order[shift:] + order[:shift]:
            row = rows[name]
            if row is pretrain_row and round_index == 0:
                continue  # ran first, to produce the tokenized corpus
            started = time.perf_counter()
            kept = row.add(row.run(round_index), args.warmup, args.steps)
            print(f"  {name:<42} {tokens_per_step / statistics.median(t for t, _ in kept):>8,.0f} tokens/s  "
                  f"(fit {time.perf_counter() - started:.1f}s, load average {os.getloadavg()[0]:.1f})", flush=True)
    sampler.close()

    peak_after = matmul_peak(peak_size)
    peak = max(*peak_before.values(), *peak_after.values())
    print(f"fp32 matmul peak after: NumPy {peak_after['numpy_gflops']} GFLOP/s, TF {peak_after['tensorflow_gflops']} GFLOP/s", flush=True)

    # ---- report
    anchor_tps = tokens_per_step / statistics.median(rows[anchor].times())
    anchor_rounds = rows[anchor].round_medians()
    anchor_cpu = statistics.median(rows[anchor].cpu_times())
    results = []
    for name in order:
        row = rows[name]
        times = row.times()
        tps = tokens_per_step / statistics.median(times)
        result = {
            "name": name,
            "note": row.note,
            "tokens_per_second": round(tps, 1),
            "tokens_per_second_mean": round(tokens_per_step * len(times) / sum(times), 1),
            "median_step_ms": round(1e3 * statistics.median(times), 1),
            "median_step_cpu_ms": round(1e3 * statistics.median(row.cpu_times()), 1),
            "per_round_tokens_per_second": [round(tokens_per_step / m, 1) for m in row.round_medians()],
            "ratio_vs_anchor": round(tps / anchor_tps, 3),
            # same-round ratios: the anchor and the row ran minutes apart at most
            "paired_ratio_vs_anchor": round(statistics.median(a / m for a, m in zip(anchor_rounds, row.round_medians(), strict=True)), 3),
            # CPU time per step barely moves when other jobs compete for the cores: a noise-robust proxy
            "cpu_ratio_vs_anchor": round(anchor_cpu / statistics.median(row.cpu_times()), 3),
            "gflops": round(tps * flops["total"] / 1e9, 1),
            "share_of_peak": round(tps * flops["total"] / 1e9 / peak, 3),
            "share_of_bf16_peak": round(tps * flops["total"] / 1e9 / bf16_peak, 3) if bf16_peak else None,
            "step_ms_per_round": [[round(1e3 * t, 1) for t, _ in r] for r in row.raw],  # warm-up steps included
        }
        if row is pretrain_row:
            reported = [r["metrics"]["tokens_per_second"] for r in pretrain_runs]
            result["metrics_json_tokens_per_second"] = reported
            result["metrics_json_ratio_vs_anchor"] = round(statistics.median(reported) / anchor_tps, 3)
        results.append(result)

    print()
    e = backbone.token_embedding.output_dim  # the LM head's width: H, or ALBERT's embedding size
    h, v, layers = backbone.hidden_dim, backbone.vocabulary_size, backbone.num_layers
    head = f"6*({h}*{e} + {e}*{v})*{predictions}/{length}" if masked_lm else f"6*{e}*{v}"
    print(f"FLOPs/token = 6*N + 12*L*H*S + {'6*(H*E + E*V)*P/S' if masked_lm else '6*E*V (every position)'} = "
          f"6*{flops['non_embedding_parameters']:,} + 12*{layers}*{h}*{length} + {head} = {flops['dense'] / 1e6:.2f}M + "
          f"{flops['attention'] / 1e6:.2f}M + {flops['lm_head'] / 1e6:.2f}M = {flops['total'] / 1e6:.2f} MFLOP/token")
    print(f"fp32 peak = {peak:.1f} GFLOP/s (best of NumPy and TF {peak_size}^3 matmuls, before and after)")
    print()
    header = (f"{'configuration':<42} {'tokens/s':>9} {'mean':>8} {'ms/step':>8} {'CPU ms':>7} {'vs anchor':>9} {'paired':>7} "
              f"{'CPU':>6} {'GFLOP/s':>8} {'% peak':>7}  tokens/s per round")
    print(header)
    print("-" * len(header))
    for r in results:
        rounds = ", ".join(f"{v:,.0f}" for v in r["per_round_tokens_per_second"])
        print(f"{r['name']:<42} {r['tokens_per_second']:>9,.0f} {r['tokens_per_second_mean']:>8,.0f} {r['median_step_ms']:>8.1f} "
              f"{r['median_step_cpu_ms']:>7.0f} {r['ratio_vs_anchor']:>8.3f}x {r['paired_ratio_vs_anchor']:>6.3f}x "
              f"{r['cpu_ratio_vs_anchor']:>5.3f}x "
              f"{r['gflops']:>8.1f} {100 * r['share_of_peak']:>6.1f}%  {rounds}")
    print(f"tokens/s: {tokens_per_step:,} / median step (all rounds); mean: over the mean step; CPU ms: median process CPU time per step "
          "(both cores: up to 2x wall); vs anchor: tokens/s ratio; paired: median over rounds of the same-round ratio; "
          "CPU: anchor CPU ms / row CPU ms (a proxy that other jobs on the machine barely move)")
    end_to_end = results[-1]
    print()
    print(f"ptmkit pretrain() metrics.json tokens_per_second: {', '.join(f'{v:,.0f}' for v in end_to_end['metrics_json_tokens_per_second'])} "
          f"-> {end_to_end['metrics_json_ratio_vs_anchor']:.3f}x the anchor (mean over steps 2..{total}, final checkpoint write included)")
    team_anchor = TEAM_ANCHOR_TOKENS_PER_SECOND.get(args.family) if not args.quick else None
    if team_anchor:
        print(f"team's earlier anchor: {team_anchor:,.0f} tokens/s; this run's anchor {anchor_tps:,.0f} ({anchor_tps / team_anchor:.2f}x of it)")
    for r in results:
        if r["name"].startswith("ptmkit"):
            verdict = "meets" if r["ratio_vs_anchor"] >= TARGET_RATIO else "MISSES"
            print(f"  {r['name']:<42} {r['ratio_vs_anchor']:.3f}x (paired {r['paired_ratio_vs_anchor']:.3f}x, CPU {r['cpu_ratio_vs_anchor']:.3f}x)  "
                  f"{verdict} the >= {TARGET_RATIO}x target")
    if args.precision != "float32":
        fp32 = next(r for r in results if r["name"] == f"keras-hub {task_name}, float32")
        print(f"bf16 peak = {bf16_peak:.1f} GFLOP/s ({bf16_peak / peak:.2f}x the fp32 peak); share of it: "
              + ", ".join(f"{r['name']} {100 * r['share_of_bf16_peak']:.1f}%" for r in results if r is not fp32))
        for r in results:
            if r is not fp32:
                print(f"  {r['name']:<42} {r['tokens_per_second'] / fp32['tokens_per_second']:.2f}x the float32 anchor "
                      f"(paired {r['paired_ratio_vs_anchor'] / fp32['paired_ratio_vs_anchor']:.2f}x)")
    kernels = onednn_kernels(args.family, args.precision, quick=args.quick) if args.onednn else []
    if kernels:
        total_ms = sum(k["ms"] for k in kernels)
        print(f"\noneDNN kernels over 4 training steps of ptmkit's model ({args.precision}; ONEDNN_VERBOSE=1), {total_ms:,.0f} ms in all:")
        for k in kernels:
            print(f"  {k['primitive']:<14} {k['implementation']:<32} {k['dtype']:<5} {k['calls']:>6} calls {k['ms']:>9,.1f} ms {100 * k['ms'] / total_ms:>5.1f}%")
    spread = max(max(r["per_round_tokens_per_second"]) / min(r["per_round_tokens_per_second"]) for r in results) if args.rounds > 1 else 1.0
    if spread > 1.05:
        print(f"note: per-round results differ by up to {100 * (spread - 1):.0f}%: the machine was probably busy; rerun to confirm")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "setup": {"family": args.family, "objective": objective, "batch_size": batch_size, "sequence_length": length,
                      "prediction_slots": predictions, "mean_masked": masked, "quick": args.quick,
                      "model": model_sizes, "warmup": args.warmup, "steps": args.steps, "rounds": args.rounds,
                      "corpus": str(args.corpus), "training_tokens": token_file.num_tokens,
                      "batches": "ptmkit make_step over the corpus tokenized by pretrain()",
                      "make_step_ms_median": round(1e3 * statistics.median(make_times), 3),
                      "versions": {"python": platform.python_version(), "tensorflow": tf.__version__, "keras": keras.__version__,
                                   "keras_hub": keras_hub.__version__, "numpy": np.__version__}, "cpus": os.cpu_count()},
            "peak": {"before": peak_before, "after": peak_after, "gflops": peak, "bf16_gflops": bf16_peak},
            "precision": args.precision,
            "onednn_kernels": kernels,
            "flops_per_token": flops,
            "first_batch_loss": losses,
            "anchor": anchor,
            "team_anchor_tokens_per_second": team_anchor,
            "target_ratio": TARGET_RATIO,
            "results": results,
            "pretrain_runs": pretrain_runs,
        }, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
