"""Intrinsic evaluation of word vectors, computed as gensim 4.4's ``KeyedVectors`` does so that the
numbers compare:

* word similarity (``evaluate_word_pairs``): Spearman's rho between human scores and cosine
  similarities over the pairs whose two words are in the vocabulary; pairs with an
  out-of-vocabulary word are counted and skipped;
* analogies (``evaluate_word_analogies``, word2vec's ``compute-accuracy``): 3CosAdd, the word
  nearest (cosine) to ``b - a + c`` among the first ``restrict_vocab`` words, ``a``, ``b`` and
  ``c`` excluded, accuracy per section and overall; questions with a word outside the first
  ``restrict_vocab`` words are counted and skipped.

Both are case-insensitive by default, as gensim: words are upper-cased and a word with several
casings in the vocabulary takes the vector of its most frequent one.

References: Finkelstein et al. 2002 (WordSim-353); Mikolov et al. 2013 (the analogy set,
``questions-words.txt``); gensim ``keyedvectors.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.errors import DataError
from ptmkit.wordvectors import WordVectors

RESTRICT_VOCAB = 300_000  # gensim's default


def _rank(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties averaged (as scipy.stats.rankdata)."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson's r of the tie-averaged ranks)."""
    rx, ry = _rank(np.asarray(x, np.float64)), _rank(np.asarray(y, np.float64))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / denominator) if denominator else float("nan")


def _ok_vocab(vectors: WordVectors, restrict_vocab: int, case_insensitive: bool) -> dict[str, int]:
    keys = vectors.words[:restrict_vocab]
    if case_insensitive:
        return {word.upper(): i for i, word in reversed(list(enumerate(keys)))}
    return {word: i for i, word in enumerate(keys)}


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def evaluate_word_pairs(
    vectors: WordVectors, path: str | os.PathLike[str], restrict_vocab: int = RESTRICT_VOCAB, case_insensitive: bool = True, delimiter: str = "\t"
) -> dict[str, Any]:
    """Spearman's rho of a word-pair similarity file (``word1<TAB>word2<TAB>score``, ``#`` comments).

    Returns:
        dict with ``spearman`` (float), ``pearson``, ``pairs`` (used), ``oov_pairs`` (skipped),
        ``oov_ratio`` (percent, as gensim) and ``file``.

    Raises:
        DataError: a missing file, a line that is not UTF-8 text (named), or a file without one
            usable pair.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such word-pair file")
    ok_vocab = _ok_vocab(vectors, restrict_vocab, case_insensitive)
    gold, model, oov, invalid = [], [], 0, 0
    unit = _unit(vectors.vectors)
    for line in _utf8_lines(path):
        if not line or line.startswith("#"):
            continue
        fields = line.split(delimiter)
        try:
            a, b, score = fields
            similarity = float(score)
        except ValueError:
            invalid += 1
            continue
        if case_insensitive:
            a, b = a.upper(), b.upper()
        if a not in ok_vocab or b not in ok_vocab:
            oov += 1
            continue
        gold.append(similarity)
        model.append(float(unit[ok_vocab[a]] @ unit[ok_vocab[b]]))
    if not gold:
        raise DataError(f"{path}: no pair with both words in the vocabulary ({oov} out-of-vocabulary, {invalid} invalid lines)")
    pearson = float(np.corrcoef(gold, model)[0, 1]) if len(gold) > 1 else float("nan")
    return {
        "file": str(path),
        "spearman": spearman(np.asarray(gold), np.asarray(model)),
        "pearson": pearson,
        "pairs": len(gold),
        "oov_pairs": oov,
        "oov_ratio": round(100.0 * oov / (len(gold) + oov), 4),
    }


def _utf8_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file; DataError (naming the file and line) for other bytes."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}:{number}: not UTF-8 text ({exc.reason}); is it a binary file?") from None


def evaluate_analogies(
    vectors: WordVectors, path: str | os.PathLike[str], restrict_vocab: int = RESTRICT_VOCAB, case_insensitive: bool = True, batch: int = 256
) -> dict[str, Any]:
    """3CosAdd accuracy on an analogy file (``: section`` lines, then ``a b c d`` questions).

    Returns:
        dict with ``accuracy`` (overall, over questions answered), ``correct``, ``questions``
        (answered), ``oov_questions`` (skipped), ``oov_ratio`` (percent), ``sections`` (list of
        ``{section, correct, questions, accuracy}``) and ``file``.

    Raises:
        DataError: a missing file, a line that is not UTF-8 text, or a question before the
            first section header (line named).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such analogy file")
    ok_vocab = _ok_vocab(vectors, restrict_vocab, case_insensitive)
    sections: list[dict[str, Any]] = []
    questions: list[tuple[int, int, int, int, int]] = []  # section, a, b, c, expected (ids)
    oov = total = 0
    for number, line in enumerate(_utf8_lines(path), 1):
        if line.startswith(": "):
            sections.append({"section": line.lstrip(": ").strip(), "correct": 0, "questions": 0})
            continue
        if not sections:
            raise DataError(f"{path}:{number}: a question before the first ': section' line")
        words = line.split()
        if len(words) != 4:
            continue
        total += 1
        if case_insensitive:
            words = [w.upper() for w in words]
        if any(w not in ok_vocab for w in words):
            oov += 1
            continue
        a, b, c, d = (ok_vocab[w] for w in words)
        questions.append((len(sections) - 1, a, b, c, d))
    unit = _unit(vectors.vectors[:restrict_vocab])
    upper = [w.upper() if case_insensitive else w for w in vectors.words[:restrict_vocab]]
    for start in range(0, len(questions), batch):
        chunk = np.asarray(questions[start : start + batch])
        query = unit[chunk[:, 2]] - unit[chunk[:, 1]] + unit[chunk[:, 3]]
        # gensim: mean of the unit vectors (weights +1, +1, -1), itself normalised; the ranking
        # is the same as for the sum.
        scores = unit @ query.T  # (vocab, batch)
        for j, (section, a, b, c, expected) in enumerate(chunk.tolist()):
            column = scores[:, j].copy()
            column[[a, b, c]] = -np.inf
            top = np.argsort(-column, kind="stable")[:5]
            ignore = {upper[a], upper[b], upper[c]}
            predicted = None
            for candidate in top:
                predicted = upper[candidate]
                if predicted in ok_vocab and predicted not in ignore:
                    break
            sections[section]["questions"] += 1
            sections[section]["correct"] += int(predicted == upper[expected])
    for section in sections:
        section["accuracy"] = section["correct"] / section["questions"] if section["questions"] else None
    correct = sum(s["correct"] for s in sections)
    answered = sum(s["questions"] for s in sections)
    return {
        "file": str(path),
        "accuracy": correct / answered if answered else 0.0,
        "correct": correct,
        "questions": answered,
        "oov_questions": oov,
        "oov_ratio": round(100.0 * oov / total, 4) if total else 0.0,
        "sections": sections,
    }
