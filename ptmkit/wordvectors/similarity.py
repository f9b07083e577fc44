"""Nearest neighbours and analogies by cosine similarity, computed as gensim 4.4's
``KeyedVectors.most_similar`` (3CosAdd) and ``most_similar_cosmul`` (3CosMul) do, so that the
words, their order and their scores compare.

* 3CosAdd (Mikolov et al. 2013; gensim ``most_similar``): the query is the mean of the unit
  vectors of the positive words and the negated unit vectors of the negative words, itself
  normalised; a word's score is its cosine with the query.
* 3CosMul (Levy & Goldberg 2014, "Linguistic Regularities in Sparse and Explicit Word
  Representations", equation 4; gensim ``most_similar_cosmul``): cosines shifted to [0, 1] as
  ``(1 + cos) / 2`` (their footnote 7), the product over the positive words divided by the product
  over the negative words plus 1e-6.

Both skip the query words themselves (those in the vocabulary) and search the whole vocabulary,
or its first ``restrict_vocab`` words (the most frequent). "a is to b as c is to ?" is
``positive = [b, c], negative = [a]``. A word with a zero vector has cosine 0 with everything
(gensim divides by its zero norm and gets nan).
"""

from __future__ import annotations

import numpy as np

from ptmkit.errors import DataError
from ptmkit.wordvectors import WordVectors

METHODS = ("3cosadd", "3cosmul")


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def most_similar(
    vectors: WordVectors, positive: list[str], negative: list[str] | None = None, topn: int = 10, method: str = "3cosadd", restrict_vocab: int | None = None
) -> list[tuple[str, float]]:
    """The ``topn`` words most similar to the query, best first.

    Args:
        vectors: the word vectors; out-of-vocabulary query words of a subword family (fastText)
            get their n-gram vectors, as in gensim's ``FastTextKeyedVectors``.
        positive: words pulling towards; at least one.
        negative: words pushing away.
        topn: how many words to return (int >= 1).
        method: ``"3cosadd"`` (gensim ``most_similar``) or ``"3cosmul"`` (``most_similar_cosmul``).
        restrict_vocab: search only the first this many words (None: all).

    Returns:
        list of ``(word, score)``, score a float: a cosine in [-1, 1] for 3CosAdd, the 3CosMul
        ratio for 3CosMul.

    Raises:
        DataError: no positive word, an unknown method, or a query word without a vector (out
            of the vocabulary of a family without subwords), named.
    """
    negative = list(negative or [])
    if not positive:
        raise DataError("a similarity query needs at least one positive word")
    if method not in METHODS:
        raise DataError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    query = []
    for word in [*positive, *negative]:
        vector = vectors.vector(word)
        if vector is None:
            raise DataError(f"{word!r}: not in the vocabulary (and no subword information): it has no vector")
        query.append(_unit(np.asarray(vector, np.float64)))
    candidates = _unit(np.asarray(vectors.vectors[:restrict_vocab], np.float64))
    if method == "3cosadd":
        weights = np.concatenate([np.ones(len(positive)), -np.ones(len(negative))])
        scores = candidates @ _unit(weights @ np.stack(query) / len(weights))
    else:
        shifted = (1.0 + candidates @ np.stack(query).T) / 2.0  # (vocab, query words)
        scores = shifted[:, : len(positive)].prod(axis=1) / (shifted[:, len(positive) :].prod(axis=1) + 1e-6)
    excluded = {vectors.index[w] for w in [*positive, *negative] if w in vectors.index}
    best = np.argsort(-scores, kind="stable")[: topn + len(excluded)]
    return [(vectors.words[i], float(scores[i])) for i in best if i not in excluded][:topn]
