"""CoVe's input: frozen GloVe vectors, from a word-vector run directory or a GloVe text file, and
the word-level source vocabulary built on them.

The source vocabulary is ``<pad>`` (id 0), ``<unk>`` (id 1), then the vectors' words in their
order (most frequent first), at most ``model.vocabulary_size`` ids in all. A text is split on
whitespace (as ``ptmkit train glove`` reads its corpus; lower-cased first with
``model.lowercase``); a word without a vector is ``<unk>``, whose vector (like ``<pad>``'s) is
zero, as salesforce/cove's torchtext vocabularies give unknown words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import ConfigError, DataError, RunDir, RunDirError

PAD, UNK = "<pad>", "<unk>"


def _text_vectors(path: Path, limit: int) -> tuple[list[str], np.ndarray]:
    """The first ``limit`` words and vectors of a GloVe text file.

    Raises:
        DataError: a line whose dimension differs from the first's, or a value that is no number
            (``file:line``), or no vector at all.
    """
    import itertools
    import warnings

    words: list[str] = []
    rows: list[np.ndarray] = []
    dim = None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(itertools.islice(handle, limit + 1), 1):
            cells = line.rstrip("\n").rstrip(" ").split(" ")
            if number == 1 and len(cells) == 2 and all(cell.isdigit() for cell in cells):
                continue  # word2vec's "count dim" header
            if len(cells) < 2:
                continue
            if dim is None:
                dim = len(cells) - 1
            if len(cells) - 1 != dim:
                raise DataError(f"{path}:{number}: {len(cells) - 1} numbers after the word, but the first vector has {dim}")
            try:
                rows.append(np.asarray(cells[1:], np.float32))
            except ValueError:
                raise DataError(f"{path}:{number}: not a vector line ('word v_1 ... v_{dim}' with numbers)") from None
            words.append(cells[0])
    if not words:
        raise DataError(f"{path}: no word vector in the file (a GloVe text file has 'word v_1 ... v_d' lines)")
    if not np.isfinite(np.stack(rows)).all():
        warnings.warn(f"{path}: vectors hold nan or inf", stacklevel=2)
    return words, np.stack(rows)


def _run_vectors(path: Path) -> tuple[list[str], np.ndarray]:
    """The words and vectors of a run directory whose family provides word vectors.

    Raises:
        RunDirError: not a finished run, or a run of a family without word vectors.
    """
    from ptmkit.api import ProvidesWordVectors, get_registry

    manifest = RunDir(path).manifest()
    family = get_registry().family(manifest["family"])
    if not isinstance(family, ProvidesWordVectors):
        raise RunDirError(f"{path}: a {family.name} run holds no word vectors; model.glove needs a `ptmkit train glove` run or a GloVe text file")
    vectors = family.load_word_vectors(path)
    return list(vectors.words), np.asarray(vectors.vectors, np.float32)


def load_glove(config: Any) -> tuple[list[str], np.ndarray]:
    """``(words, vectors)`` of ``config.glove`` (:class:`~ptmkit_cove.config.CoVeConfig`): the
    first ``vocabulary_size - 2`` distinct words (``<pad>``/``<unk>`` entries dropped) and their
    ``(words, glove_dim)`` float32 vectors.

    Raises:
        ConfigError: no ``model.glove``, a path that does not exist, or vectors of another
            dimension than ``model.glove_dim`` (one line naming both dimensions).
        DataError, RunDirError: an unreadable file or run (:func:`_text_vectors`, :func:`_run_vectors`).
    """
    if not config.glove:
        raise ConfigError(
            f"config key 'model.glove' is empty: a cove run reads {config.glove_dim}-dimensional GloVe vectors "
            "(model.glove_dim) from a `ptmkit train glove` run directory or a GloVe text file; set model.glove = PATH"
        )
    path = Path(config.glove).expanduser()
    if not path.exists():
        raise ConfigError(f"config key 'model.glove' = {config.glove!r}: no such run directory or GloVe file")
    limit = config.vocabulary_size - 2
    words, vectors = _run_vectors(path) if path.is_dir() else _text_vectors(path, limit + 2)
    if vectors.shape[1] != config.glove_dim:
        raise ConfigError(
            f"config key 'model.glove' = {config.glove!r} holds {vectors.shape[1]}-dimensional vectors, but model.glove_dim = {config.glove_dim}; "
            f"set model.glove_dim = {vectors.shape[1]}"
        )
    keep, seen = [], {PAD, UNK}
    for i, word in enumerate(words):
        if word not in seen:
            seen.add(word)
            keep.append(i)
        if len(keep) == limit:
            break
    return [words[i] for i in keep], vectors[keep]


def source_tokenizer(words: list[str], lowercase: bool) -> Any:
    """A word-level ``tokenizers.Tokenizer``: ``<pad>`` 0, ``<unk>`` 1, then ``words``; no
    post-processor (CoVe reads a text's words alone, as salesforce/cove's ``MTLSTM``)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocabulary = {PAD: 0, UNK: 1, **{word: i + 2 for i, word in enumerate(words)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token=UNK))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([PAD, UNK])
    return tokenizer


def embedding_matrix(vectors: np.ndarray, vocabulary_size: int) -> np.ndarray:
    """``(vocabulary_size, dim)`` float32: zero rows for ``<pad>``, ``<unk>`` and unused ids, then
    ``vectors`` from row 2."""
    matrix = np.zeros((vocabulary_size, vectors.shape[1]), np.float32)
    matrix[2 : 2 + len(vectors)] = vectors
    return matrix
