"""``ptmkit export RUN --onnx`` of a word-vector run: a graph that maps each word's matrix rows to
its vector, written with ``onnx.helper`` (:func:`ptmkit.exporting.rows.write_onnx`; tf2onnx ran out
of memory on fastText's 2,000,000 bucket rows), checked against the same lookup in Keras, and
written with its vocabulary and manifest. The transformer export's stages in one module: convert
(:func:`build_lookup_model`, ``write_onnx``), check parity, write; no variants, no gate.

The graph takes ``row_ids`` ``(batch, rows)`` int32 and ``row_mask`` ``(batch, rows)`` float32 (1
for a real row, 0 for padding) and returns ``vectors`` ``(batch, dim)`` float32, the masked mean
of the gathered rows: a word's own row for word2vec / GloVe / NNLM (``rows = 1``), its row and its
character n-gram rows for fastText (an out-of-vocabulary word: its n-gram rows only).
:meth:`ptmkit.wordvectors.WordVectors.rows` gives a word's row ids.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.errors import PtmkitError
from ptmkit.io import atomic_write_json, staging_directory
from ptmkit.wordvectors import WordVectors

PARITY_TOLERANCE = 1e-6


class VectorExportError(PtmkitError):
    """The exported graph failed a check; nothing was written."""


def build_lookup_model(matrix: np.ndarray) -> Any:
    """The Keras model ``(row_ids, row_mask) -> vectors`` on an Embedding holding ``matrix``
    ``(rows, dim)`` float32."""
    import keras

    rows, dim = matrix.shape
    row_ids = keras.Input(shape=(None,), dtype="int32", name="row_ids")
    row_mask = keras.Input(shape=(None,), dtype="float32", name="row_mask")
    embedding = keras.layers.Embedding(rows, dim, name="word_rows")
    gathered = embedding(row_ids)
    total = keras.ops.einsum("bn,bnd->bd", row_mask, gathered)
    count = keras.ops.maximum(keras.ops.sum(row_mask, axis=1, keepdims=True), 1.0)
    model = keras.Model({"row_ids": row_ids, "row_mask": row_mask}, total / count, name="word_vectors")
    embedding.set_weights([np.asarray(matrix, np.float32)])
    return model


def encode_words(vectors: WordVectors, words: list[str]) -> tuple[dict[str, np.ndarray], list[str]]:
    """``row_ids`` / ``row_mask`` feeds for ``words``; also the words that have no rows (skipped)."""
    rows, missing = [], []
    for word in words:
        found = vectors.rows(word)
        if found:
            rows.append(found)
        else:
            missing.append(word)
    width = max((len(r) for r in rows), default=1)
    ids = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), np.float32)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1.0
    return {"row_ids": ids, "row_mask": mask}, missing


def export_onnx(
    vectors: WordVectors, target: str | os.PathLike[str], family: str, extra: dict[str, Any] | None = None, probe: list[str] | None = None, lowercase: bool = False
) -> dict[str, Any]:
    """Write ``model.onnx``, ``vocabulary.txt`` and ``manifest.json`` to ``target``.

    The ONNX output is compared with Keras' on the first 200 words, on ``probe`` words (e.g.
    out-of-vocabulary words of a subword family) and on random padded rows; the largest absolute
    difference must be <= :data:`PARITY_TOLERANCE`. The manifest's ``featurizer`` (a
    :class:`ptmkit_export.bag_of_rows.BagOfRows`: ``lowercase``, and ``minn``/``maxn``/``bucket``
    from ``extra["subwords"]`` when given) lets :meth:`ptmkit_export.Predictor.embed` look words up
    without ptmkit.

    Raises:
        VectorExportError: conversion failed or the parity check failed (nothing is written).
    """
    import onnxruntime as ort

    from ptmkit.exporting.rows import row_inputs, write_onnx
    from ptmkit.exporting.write import FORMAT, install
    from ptmkit_export.bag_of_rows import BagOfRows

    target = Path(target)
    model = build_lookup_model(vectors.matrix)
    with staging_directory(target, ".export-") as tmp_name:
        tmp = Path(tmp_name)
        path = tmp / "model.onnx"
        try:
            write_onnx(vectors.matrix, None, path)
        except PtmkitError as exc:
            raise VectorExportError(str(exc)) from exc
        worst = _check_parity(vectors, model, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), probe)
        with open(tmp / "vocabulary.txt", "w", encoding="utf-8") as handle:
            handle.writelines(f"{w}\n" for w in vectors.words)
        subwords = (extra or {}).get("subwords") or {}
        featurizer = BagOfRows(vectors.words, lowercase, int(subwords.get("minn", 0)), int(subwords.get("maxn", 0)), int(subwords.get("bucket", 0)))
        manifest = {
            "format": FORMAT,
            "family": family,
            "task": "word-vectors",
            "inputs": row_inputs(),
            "outputs": [{"name": "vectors", "dtype": "float32", "shape": ["batch", vectors.dim]}],
            "labels": [],
            "vocabulary": "vocabulary.txt",
            "featurizer": featurizer.spec("vocabulary.txt"),
            "rows": int(len(vectors.matrix)),
            "parity_max_abs_diff": worst,
            "variants": {"fp32": {"file": "model.onnx", "ok": True, "problems": [], "parity_max_abs_diff": worst}},
            **(extra or {}),
        }
        atomic_write_json(tmp / "manifest.json", manifest)
        install(tmp, target, ["model.onnx", "vocabulary.txt"])
    return {**manifest, "directory": str(target)}


def _check_parity(vectors: WordVectors, model: Any, session: Any, probe: list[str] | None) -> float:
    """The largest absolute difference of ONNX Runtime's vectors from Keras' (``model``) on the
    first 200 words, the ``probe`` words and 7 random padded rows of 5.

    Raises:
        VectorExportError: over :data:`PARITY_TOLERANCE`.
    """
    words = vectors.words[:200] + list(probe or [])
    feeds, _ = encode_words(vectors, words)
    rng = np.random.default_rng(0)
    random_ids = rng.integers(0, len(vectors.matrix), size=(7, 5)).astype(np.int32)
    random_mask = (rng.random((7, 5)) < 0.7).astype(np.float32)
    random_mask[:, 0] = 1.0
    worst = 0.0
    for feed in (feeds, {"row_ids": random_ids, "row_mask": random_mask}):
        expected = np.asarray(model(feed, training=False))
        actual = session.run(["vectors"], feed)[0]
        worst = max(worst, float(np.max(np.abs(expected - actual))))
    if worst > PARITY_TOLERANCE:
        raise VectorExportError(f"ONNX output differs from Keras by {worst:.2e} > {PARITY_TOLERANCE:g}; nothing written")
    return worst
