"""Static word vectors: the in-memory form every word-vector family loads its runs into, and the
functions that evaluate, write and export them without knowing the family.

A :class:`WordVectors` holds a lookup *matrix* and, for each word, the rows whose mean is its
vector: one row for word2vec, GloVe and NNLM; the word's row and its hashed character n-gram rows
for fastText, which is also how fastText builds vectors of out-of-vocabulary words. The ONNX
export (:mod:`ptmkit.exporting.vectors`) is that mean over gathered rows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class WordVectors:
    """Word vectors, most frequent word first.

    Args:
        words: the vocabulary, index = word id.
        matrix: ``(rows, dim)`` float32 lookup matrix; rows ``0 .. len(words)-1`` are the words'
            own rows.
        counts: ``(len(words),)`` int64 corpus counts, or None when unknown.
        vectors: ``(len(words), dim)`` float32 in-vocabulary vectors when they differ from the
            first ``len(words)`` matrix rows (fastText: word row and n-gram rows averaged).

    Subclasses with subword information override :meth:`rows` for out-of-vocabulary words.
    """

    subword_family = False

    def __init__(self, words: Sequence[str], matrix: np.ndarray, counts: np.ndarray | None = None, vectors: np.ndarray | None = None) -> None:
        self.words = list(words)
        self.matrix = np.asarray(matrix, np.float32)
        self.counts = counts
        self.index = {word: i for i, word in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise ValueError("duplicate words in the vocabulary")
        self.vectors = self.matrix[: len(self.words)] if vectors is None else np.asarray(vectors, np.float32)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def rows(self, word: str) -> list[int] | None:
        """Matrix rows whose mean is ``word``'s vector, or None when it has none (out of vocabulary)."""
        i = self.index.get(word)
        return None if i is None else [i]

    def vector(self, word: str) -> np.ndarray | None:
        """``(dim,)`` float32 vector of ``word``, or None when it has none (out of vocabulary in a
        family without subwords; gensim's ``KeyedVectors`` raises ``KeyError`` there).

        A subword family's out-of-vocabulary word is the mean of its n-gram rows, and the zero
        vector when it has no n-gram (shorter than ``minn`` characters): fastText's
        ``getWordVector`` and gensim's ``FastTextKeyedVectors.get_vector`` give the same.
        """
        i = self.index.get(word)
        if i is not None:
            return self.vectors[i]
        rows = self.rows(word)
        if rows:
            return self.matrix[rows].mean(axis=0)
        return np.zeros(self.dim, np.float32) if self.subword_family else None


VOCABULARY_FILE = "vocabulary.tsv"
VECTORS_FILE = "vectors.npy"


def save_matrix(path: str | os.PathLike[str], matrix: np.ndarray) -> None:
    """Save a float32 matrix as ``.npy``, atomically.

    Raises:
        DataError: the matrix holds nan or inf (a diverged training run); nothing is written.
    """
    from ptmkit.errors import DataError
    from ptmkit.io import atomic_path

    matrix = np.asarray(matrix, np.float32)
    for start in range(0, len(matrix), 65536):  # chunks: no full-size temporary for 2M-row matrices
        bad = np.flatnonzero(~np.isfinite(matrix[start : start + 65536]).all(axis=1))
        if len(bad):
            raise DataError(
                f"{path}: row {start + int(bad[0])} holds nan or inf, so the vectors were not saved: the training diverged "
                "(lower the learning rate, model.alpha or model.learning_rate)"
            )
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.save(handle, matrix)


def load_matrix(path: str | os.PathLike[str], rows: int | None = None) -> np.ndarray:
    """Load a matrix saved by :func:`save_matrix` (memory-mapped).

    Raises:
        RunDirError: a missing or corrupted file, or (``rows``) a row count other than expected.
    """
    from ptmkit.errors import RunDirError

    try:
        matrix = np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise RunDirError(f"{path}: missing") from None
    except (ValueError, OSError) as exc:
        raise RunDirError(f"{path}: corrupted matrix file ({exc})") from None
    if matrix.ndim != 2 or (rows is not None and matrix.shape[0] != rows):
        raise RunDirError(f"{path}: shape {matrix.shape} does not match the vocabulary ({rows} rows)")
    return np.asarray(matrix, np.float32)


def load_run_vectors(run_dir: str | os.PathLike[str]) -> WordVectors:
    """The vectors of a run that stores ``vocabulary.tsv`` and ``vectors.npy`` (one row per word)."""
    from ptmkit.errors import RunDirError
    from ptmkit.wordvectors.vocabulary import Vocabulary

    run_dir = Path(run_dir)
    if not (run_dir / VOCABULARY_FILE).exists():
        raise RunDirError(f"{run_dir / VOCABULARY_FILE}: missing (is this a finished word-vector run?)")
    vocabulary = Vocabulary.load(run_dir / VOCABULARY_FILE)
    return WordVectors(vocabulary.words, load_matrix(run_dir / VECTORS_FILE, len(vocabulary)), vocabulary.counts)


