"""Latency measurement helpers for exported models (no TensorFlow, no Keras).

Example::

    session = onnxruntime.InferenceSession("export/model.onnx", providers=["CPUExecutionProvider"])
    feeds = make_feeds(read_manifest("export"), batch=1, length=64)
    print(median_latency_ms(session, feeds))
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def median_latency_ms(
    session_or_predictor_fn: Any | Callable[[Any], Any],
    feeds: Any,
    warmup: int = 3,
    repeats: int = 20,
) -> float:
    """Median wall-clock time of one call, in milliseconds.

    Args:
        session_or_predictor_fn: an ``onnxruntime.InferenceSession`` (anything with a ``run``
            method; called as ``run(None, feeds)``) or a callable called as ``fn(feeds)``, e.g.
            ``predictor.logits`` with ``feeds`` a list of texts.
        feeds: the session's input dict (``{name: np.ndarray}``, see :func:`make_feeds`) or the
            callable's single argument.
        warmup: untimed calls first (>= 0); the first calls pay for memory allocation.
        repeats: timed calls (>= 1), each timed alone with ``time.perf_counter``.

    Returns:
        The median of the ``repeats`` timings, in milliseconds (float).

    Raises:
        ValueError: ``warmup < 0`` or ``repeats < 1``.
        TypeError: ``session_or_predictor_fn`` has no ``run`` method and is not callable.
    """
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    run = getattr(session_or_predictor_fn, "run", None)
    if callable(run):

        def call() -> Any:
            return run(None, feeds)

    elif callable(session_or_predictor_fn):

        def call() -> Any:
            return session_or_predictor_fn(feeds)

    else:
        raise TypeError(f"expected an InferenceSession or a callable, got {type(session_or_predictor_fn).__name__}")
    for _ in range(warmup):
        call()
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1000.0


def make_feeds(
    manifest: dict[str, Any], batch: int, length: int, vocab_high: int = 100, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random model inputs of a fixed shape, for timing.

    Args:
        manifest: a manifest dict (see :func:`ptmkit_export.manifest.read_manifest`); only its
            ``inputs`` (and ``max_sequence_length`` when present) are read.
        batch: rows (>= 1).
        length: tokens per row (>= 1, <= ``max_sequence_length``).
        vocab_high: token ids are drawn uniformly from ``[0, vocab_high)``; keep it below the
            model's vocabulary size.
        seed: seed of the ``numpy.random.default_rng`` generator.

    Returns:
        ``{input name: array of shape (batch, length)}`` in the manifest's dtype (int32 by
        default): ``ids`` inputs random, ``attention_mask`` inputs all ones (no padding),
        ``type_ids`` inputs all zeros.

    Raises:
        ValueError: ``batch``, ``length`` or ``vocab_high`` < 1, ``length`` over
            ``max_sequence_length``, or an input with an unknown ``encoding``.
    """
    if batch < 1 or length < 1 or vocab_high < 1:
        raise ValueError(f"batch, length and vocab_high must be >= 1, got {batch}, {length}, {vocab_high}")
    limit = manifest.get("max_sequence_length")
    if isinstance(limit, int) and length > limit:
        raise ValueError(f"length {length} is over the model's max_sequence_length {limit}")
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in manifest["inputs"]:
        dtype = np.dtype(spec.get("dtype", "int32"))
        encoding = spec.get("encoding")
        if encoding == "ids":
            feeds[spec["name"]] = rng.integers(0, vocab_high, size=(batch, length)).astype(dtype)
        elif encoding == "attention_mask":
            feeds[spec["name"]] = np.ones((batch, length), dtype=dtype)
        elif encoding == "type_ids":
            feeds[spec["name"]] = np.zeros((batch, length), dtype=dtype)
        else:
            raise ValueError(f"input {spec['name']!r} has unknown encoding {encoding!r}")
    return feeds
