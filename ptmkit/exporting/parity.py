"""Stage 2 of ``ptmkit export``, check parity: ONNX Runtime's outputs against Keras' at shapes
other than the trace's.

Batch 1 x 17, batch 3 x the fine-tuning length and batch 8 x 1 (:func:`parity_shapes`), each with
random padding and each length within the model's declared ``max_sequence_length``, on random
inputs fed as the family declares them (:func:`random_inputs`); the max abs difference must be
<= :data:`PARITY_TOLERANCE` (:func:`report_parity`). Also the helpers that feed a dev set to ONNX
Runtime in batches (:func:`length_batches`, :func:`run_batches`) and compare outputs
(:func:`cosine`), which the gate and the calibration reuse.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.contract import InputSpec
from ptmkit.errors import ExportError

PARITY_TOLERANCE = 1e-4


def random_inputs(
    rng: np.random.Generator, inputs: Sequence[InputSpec], batch: int, length: int, vocabulary_size: int, pad_id: int,
    characters: np.ndarray | None = None, full: bool = False,
) -> dict[str, np.ndarray]:
    """The declared ``inputs`` for random token ids with random lengths (at least 1; the first
    row full; every row with ``full``) and the rest padded with ``pad_id``: one segment, the
    padding mask, ``char_ids`` from the ``characters`` table
    (:func:`ptmkit.data.tokenization.derive_inputs`)."""
    from ptmkit.data.tokenization import derive_inputs

    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0] = length  # one full row, so the longest shape is exercised
    if full:
        lengths[:] = length
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
    token_ids = np.where(mask == 1, rng.integers(0, vocabulary_size, size=(batch, length)), pad_id).astype(np.int32)
    return derive_inputs(inputs, token_ids, None, mask, characters)


def parity_shapes(sequence_length: int, max_sequence_length: int | None) -> list[tuple[int, int]]:
    """The ``(batch, length)`` shapes the parity check runs, other than the trace's: batch 1 x 17,
    batch 3 x ``sequence_length`` and batch 8 x 1, each length cut to ``max_sequence_length``
    (a model with 16 positions cannot read 17 tokens)."""
    limit = max_sequence_length or max(17, sequence_length)
    return [(1, min(17, limit)), (3, min(sequence_length, limit)), (8, 1)]


def check_parity(
    model: Any, session: Any, shapes: list[tuple[int, int]], vocabulary_size: int, pad_id: int, output_name: str | Sequence[str] = "logits",
    inputs: Sequence[InputSpec] = (), characters: np.ndarray | None = None,
) -> dict[str, float]:
    """Max abs difference of ONNX Runtime vs Keras outputs at each ``(batch, length)`` shape, on
    :func:`random_inputs` of the declared ``inputs`` (a sequence of output names: a model that
    returns a list of as many outputs, the largest difference over them)."""
    rng = np.random.default_rng(0)
    diffs = {}
    for batch, length in shapes:
        feeds = random_inputs(rng, inputs, batch, length, vocabulary_size, pad_id, characters)
        with warnings.catch_warnings():
            # Keras warns that attention's softmax over a length-1 axis is constant: true, and meant.
            warnings.filterwarnings("ignore", message="You are using a softmax over axis")
            expected = model(feeds, training=False)  # eager: predict() would retrace per shape
        names = [output_name] if isinstance(output_name, str) else list(output_name)
        wanted = [expected] if isinstance(output_name, str) else list(expected)
        actual = session.run(names, feeds)
        diffs[f"{batch}x{length}"] = max(float(np.max(np.abs(np.asarray(e) - a))) for e, a in zip(wanted, actual, strict=True))
    return diffs

def report_parity(parity: dict[str, float], console: Console) -> float:
    """Print the largest ONNX-vs-Keras difference per shape (``parity``, from :func:`check_parity`);
    return the largest.

    Raises:
        ExportError: a difference over :data:`PARITY_TOLERANCE` (nothing is written).
    """
    worst = max(parity.values())
    console.print(f"ONNX vs Keras max abs difference: {worst:.2e} " + ", ".join(f"{k}: {v:.1e}" for k, v in parity.items()))
    if worst > PARITY_TOLERANCE:
        raise ExportError(f"ONNX output differs from Keras by {worst:.2e} > {PARITY_TOLERANCE:g} ({parity}); nothing written")
    return worst


def length_batches(feeds: dict[str, np.ndarray], mask_input: str | None = None, batch_size: int = 32) -> list[dict[str, np.ndarray]]:
    """Split padded inputs into batches of ``batch_size`` rows, each cut to its longest row when
    ``mask_input`` names the padding-mask input; the batches keep the original row order when
    concatenated (rows are not reordered)."""
    count = len(next(iter(feeds.values())))
    mask = feeds.get(mask_input) if mask_input else None
    batches = []
    for i in range(0, count, batch_size):
        chunk = {k: v[i : i + batch_size] for k, v in feeds.items()}
        if mask is not None:
            longest = max(1, int(mask[i : i + batch_size].sum(axis=1).max()))
            chunk = {k: np.ascontiguousarray(v[:, :longest]) for k, v in chunk.items()}
        batches.append(chunk)
    return batches


def run_batches(session: Any, batches: list[dict[str, np.ndarray]], output: str) -> np.ndarray:
    """``output`` of every batch, concatenated; ONNX Runtime's CPU arena hands its memory back after
    each batch (``memory.enable_memory_arena_shrinkage``), so that the dev set's longest batch does
    not stay allocated in every session while the next variant is built."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return np.concatenate([session.run([output], batch, options)[0] for batch in batches])


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two ``(n, d)`` arrays; ``(n,)`` float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum(a * b, -1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)
