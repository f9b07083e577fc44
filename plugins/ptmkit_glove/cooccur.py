"""Co-occurrence counting for GloVe without a dense matrix.

As stanfordnlp/GloVe ``cooccur.c``: a word pair at distance ``d <= window`` within a line adds
``1 / d`` to ``X[i, j]`` and to ``X[j, i]`` (symmetric); out-of-vocabulary words are dropped
before distances are measured. The corpus is read chunk by chunk; each chunk's pairs are reduced
to distinct ``(i, j)`` keys (``i * V + j``, int64) and merged into a sorted sparse accumulator, so
memory is ``O(non-zero pairs + chunk_tokens x window)``: never ``V x V``, never the corpus.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ptmkit.api import EncodedCorpus


@dataclasses.dataclass
class Cooccurrences:
    """Sparse ``X``: ``rows``, ``cols`` int32 and ``values`` float64, ``(nnz,)`` each, sorted by (row, col)."""

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)


def _reduce(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, np.int64)
    return keys[starts], np.add.reduceat(values, starts) if len(keys) else values


def count_cooccurrences(tokens: EncodedCorpus, vocabulary_size: int, window: int, chunk_tokens: int = 200_000) -> Cooccurrences:
    """``X`` of the encoded corpus (see the module docstring)."""
    size = np.int64(vocabulary_size)
    acc_keys = np.zeros(0, np.int64)
    acc_values = np.zeros(0, np.float64)
    pending_keys: list[np.ndarray] = []
    pending_values: list[np.ndarray] = []
    pending = 0
    for ids, sentence in tokens.chunks(chunk_tokens):
        ids = ids.astype(np.int64)
        for distance in range(1, window + 1):
            left = np.arange(len(ids) - distance)
            right = left + distance
            same = sentence[left] == sentence[right]
            a, b = ids[left[same]], ids[right[same]]
            weight = np.full(len(a), 1.0 / distance)
            pending_keys += [a * size + b, b * size + a]
            pending_values += [weight, weight]
            pending += 2 * len(a)
        if pending >= 2 * chunk_tokens * window:  # about one chunk's pairs: merged right away
            acc_keys, acc_values = _merge(acc_keys, acc_values, pending_keys, pending_values)
            pending_keys, pending_values, pending = [], [], 0
    acc_keys, acc_values = _merge(acc_keys, acc_values, pending_keys, pending_values)
    return Cooccurrences((acc_keys // size).astype(np.int32), (acc_keys % size).astype(np.int32), acc_values)


def _merge(keys: np.ndarray, values: np.ndarray, new_keys: list[np.ndarray], new_values: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if not new_keys:
        return keys, values
    chunk_keys, chunk_values = _reduce(np.concatenate(new_keys), np.concatenate(new_values))
    return _reduce(np.concatenate([keys, chunk_keys]), np.concatenate([values, chunk_values]))
