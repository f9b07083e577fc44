"""fastText's subword model: character n-grams with ``<`` / ``>`` boundary marks, hashed into
``bucket`` rows after the word rows; a word's vector is the mean of its own row and its n-gram
rows, and an out-of-vocabulary word's the mean of its n-gram rows.

Reference implementation: facebookresearch/fastText ``src/dictionary.cc`` (``hash``,
``computeSubwords``): 32-bit FNV-1a over the UTF-8 bytes, each byte taken as a *signed* char and
sign-extended (bytes >= 0x80 of non-ASCII text hash as ``0xFFFFFFxx``), n-grams counted in
characters (UTF-8 continuation bytes never start one), the 1-grams ``<`` and ``>`` left out.
gensim 4.4's ``ft_hash_bytes`` / ``compute_ngrams_bytes`` agree with it.
"""

from __future__ import annotations

import numpy as np

from ptmkit.api import Subwords, WordVectors
from ptmkit_export.bag_of_rows import EOS, character_ngrams, fasttext_hash

# fastText's hash and character n-grams live in the lean runtime, which computes a word's rows
# at inference without ptmkit (ptmkit depends on ptmkit-export); tested there against gensim's.
fnv1a = fasttext_hash
char_ngrams = character_ngrams


def ngram_rows(word: str, minn: int, maxn: int, bucket: int, nwords: int) -> list[int]:
    """Matrix rows of ``word``'s n-grams: ``nwords + fnv1a(ngram) % bucket``."""
    if bucket <= 0 or word == EOS:
        return []
    return [nwords + fnv1a(g) % bucket for g in char_ngrams(word, minn, maxn)]


def vocabulary_subwords(words: list[str], minn: int, maxn: int, bucket: int) -> Subwords:
    """Rows of each vocabulary word: its own row, then its n-gram rows (fastText's ``getSubwords``)."""
    rows: list[int] = []
    offsets = [0]
    nwords = len(words)
    for i, word in enumerate(words):
        rows.append(i)
        rows.extend(ngram_rows(word, minn, maxn, bucket, nwords))
        offsets.append(len(rows))
    return Subwords(np.asarray(rows, np.int32), np.asarray(offsets, np.int64))


class SubwordVectors(WordVectors):
    """fastText vectors: ``matrix`` has ``len(words) + bucket`` rows.

    Args:
        words, matrix, counts: as :class:`~ptmkit.wordvectors.WordVectors`.
        minn, maxn, bucket: the n-gram lengths and hash buckets the matrix was trained with.

    Raises:
        ValueError: ``matrix`` rows differ from ``len(words) + bucket`` (the hashing parameters
            do not belong to this matrix; vectors are never re-hashed).
    """

    subword_family = True
    probe_words = ("qwertyuiop", "naïveté", "Москва", "東京大学", "🙂👍")

    def __init__(self, words: list[str], matrix: np.ndarray, counts: np.ndarray | None, minn: int, maxn: int, bucket: int) -> None:
        if matrix.shape[0] != len(words) + bucket:
            raise ValueError(f"the matrix has {matrix.shape[0]:,} rows, but {len(words):,} words + bucket {bucket:,} = {len(words) + bucket:,}")
        self.minn, self.maxn, self.bucket = minn, maxn, bucket
        self.subwords = vocabulary_subwords(list(words), minn, maxn, bucket)
        matrix = np.asarray(matrix, np.float32)
        vectors = np.empty((len(words), matrix.shape[1]), np.float32)
        offsets = self.subwords.offsets
        for start in range(0, len(words), 4096):
            stop = min(start + 4096, len(words))
            rows = self.subwords.rows[offsets[start] : offsets[stop]]
            sums = np.add.reduceat(matrix[rows].astype(np.float64), offsets[start:stop] - offsets[start], axis=0)
            vectors[start:stop] = sums / np.diff(offsets[start : stop + 1])[:, None]
        super().__init__(words, matrix, counts, vectors)

    def rows(self, word: str) -> list[int] | None:
        i = self.index.get(word)
        if i is not None:
            return self.subwords.rows[self.subwords.offsets[i] : self.subwords.offsets[i + 1]].tolist()
        return ngram_rows(word, self.minn, self.maxn, self.bucket, len(self.words))

    def export_metadata(self) -> dict[str, object]:
        """What a runtime needs to compute row ids: the hashing parameters."""
        return {"subwords": {"minn": self.minn, "maxn": self.maxn, "bucket": self.bucket, "hash": "fasttext-fnv1a-signed-char", "eos": EOS}}
