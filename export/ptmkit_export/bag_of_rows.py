"""Texts to bags of matrix rows, as fastText's classifier reads them (Joulin et al. 2017, "Bag of
Tricks for Efficient Text Classification"; Bojanowski et al. 2017, "Enriching Word Vectors with
Subword Information"), without TensorFlow, Keras or any ptmkit plugin.

A text is split at whitespace (``str.split()``), optionally lower-cased, and becomes the rows of:

- each word, in order: an in-vocabulary word's own row (``0 .. len(words) - 1``), then, when
  ``maxn > 0``, the rows of its character n-grams (``minn .. maxn`` characters of ``<word>``,
  the 1-grams ``<`` and ``>`` left out; an out-of-vocabulary word gets its n-gram rows only;
  fastText's ``Dictionary::addSubwords`` / ``computeSubwords``);
- then, when ``word_ngrams > 1``, one row per word n-gram of 2 .. ``word_ngrams`` words
  (``Dictionary::addWordNgrams``: ``h = h * 116049371 + hash(next word)`` in 64-bit unsigned
  arithmetic over the hashes of all words, known or not).

Hashed rows are ``len(words) + h % bucket``, with fastText's ``Dictionary::hash``: 32-bit FNV-1a
over the UTF-8 bytes, each byte taken as a *signed* char (bytes >= 0x80 hash as ``0xFFFFFFxx``).
fastText's end-of-line token ``</s>`` gets no n-grams. The model then takes the masked mean of the
rows (:func:`encode` pads them into ``row_ids`` / ``row_mask``).

This re-implements ``ptmkit_fasttext.subwords`` and ``ptmkit_fasttext.supervised.text_rows``
(the runtime depends on no plugin); a test checks that both give the same rows.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit_export.errors import ExportDirError

KIND = "bag-of-rows"
FNV_OFFSET = 2166136261
FNV_PRIME = 16777619
WORD_NGRAM_MULTIPLIER = 116049371
EOS = "</s>"  # fastText's end-of-line token: a word without character n-grams
_MASK64 = 0xFFFFFFFFFFFFFFFF


def fasttext_hash(data: bytes) -> int:
    """fastText's ``Dictionary::hash``: 32-bit FNV-1a over ``data`` taken as signed chars.

    Returns:
        int in ``[0, 2**32)``.
    """
    h = FNV_OFFSET
    for byte in data:
        h ^= byte | 0xFFFFFF00 if byte & 0x80 else byte
        h = (h * FNV_PRIME) & 0xFFFFFFFF
    return h


def character_ngrams(word: str, minn: int, maxn: int) -> list[bytes]:
    """The character n-grams of ``<word>`` (``minn .. maxn`` characters, counted as code points) as
    UTF-8 bytes, in fastText's ``computeSubwords`` order; none when ``maxn`` is 0."""
    data = b"<" + word.encode("utf-8") + b">"
    size = len(data)
    out = []
    for i in range(size):
        if data[i] & 0xC0 == 0x80:  # a UTF-8 continuation byte never starts an n-gram
            continue
        j, n = i, 1
        while j < size and n <= maxn:
            j += 1
            while j < size and data[j] & 0xC0 == 0x80:
                j += 1
            if n >= minn and not (n == 1 and (i == 0 or j == size)):
                out.append(data[i:j])
            n += 1
    return out


class BagOfRows:
    """fastText's featurizer: texts to the rows of their words, character n-grams and word n-grams.

    Args:
        words: the vocabulary; ``words[i]`` owns row ``i``.
        lowercase: lower-case texts (``str.lower``) before splitting.
        minn, maxn: character n-gram lengths (``maxn = 0``: no character n-grams).
        bucket: hash rows after the word rows (0: no hashed rows).
        word_ngrams: longest word n-gram (1: words only).
        end_of_line: end each text with fastText's end-of-line word ``</s>`` (``Dictionary::getLine``
            reads a line's end as that word: its row when the vocabulary has it, no character
            n-grams, and the word n-grams that end with it), as fastText's ``predict`` and
            training read every line; False: the text's words only.

    Raises:
        ValueError: negative or inconsistent parameters (``minn`` outside ``1 .. maxn`` while
            ``maxn > 0``; character or word n-grams with ``bucket = 0``), duplicate words.
    """

    def __init__(
        self, words: Sequence[str], lowercase: bool = False, minn: int = 0, maxn: int = 0, bucket: int = 0, word_ngrams: int = 1, end_of_line: bool = False
    ) -> None:
        if min(minn, maxn, bucket) < 0 or word_ngrams < 1:
            raise ValueError(f"minn {minn}, maxn {maxn}, bucket {bucket} must be >= 0 and word_ngrams {word_ngrams} >= 1")
        if maxn > 0 and not 1 <= minn <= maxn:
            raise ValueError(f"need 1 <= minn <= maxn for character n-grams, got minn {minn}, maxn {maxn}")
        if (maxn > 0 or word_ngrams > 1) and bucket == 0:
            raise ValueError("character or word n-grams need bucket > 0")
        self.words = list(words)
        self.index = {word: i for i, word in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise ValueError("duplicate words in the vocabulary")
        self.lowercase, self.minn, self.maxn, self.bucket, self.word_ngrams = lowercase, minn, maxn, bucket, word_ngrams
        self.end_of_line = bool(end_of_line)
        self.word_rows = functools.lru_cache(maxsize=1 << 16)(self._word_rows)

    @property
    def rows_total(self) -> int:
        """Rows of the matrix this featurizer indexes: ``len(words) + bucket``."""
        return len(self.words) + self.bucket

    def _word_rows(self, word: str) -> tuple[int, ...]:
        own = self.index.get(word)
        rows = [] if own is None else [own]
        if self.maxn > 0 and word != EOS:
            nwords = len(self.words)
            rows += [nwords + fasttext_hash(g) % self.bucket for g in character_ngrams(word, self.minn, self.maxn)]
        return tuple(rows)

    def rows(self, text: str) -> list[int]:
        """The rows of one text, in fastText's order (each word's rows, then word n-gram rows).

        Returns:
            list of int in ``[0, rows_total)``; empty when no word is known and there are no
            hashed rows (e.g. an empty text).
        """
        tokens = (text.lower() if self.lowercase else text).split()
        if self.end_of_line:
            tokens.append(EOS)
        rows = [r for token in tokens for r in self.word_rows(token)]
        if self.word_ngrams > 1:
            hashes = [fasttext_hash(token.encode("utf-8")) for token in tokens]
            nwords = len(self.words)
            for i in range(len(hashes)):
                h = hashes[i]
                for j in range(i + 1, min(len(hashes), i + self.word_ngrams)):
                    h = (h * WORD_NGRAM_MULTIPLIER + hashes[j]) & _MASK64
                    rows.append(nwords + h % self.bucket)
        return rows

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Model inputs for ``texts``.

        Returns:
            ``{"row_ids": (batch, n) int32, "row_mask": (batch, n) float32}`` with ``n`` the
            longest text's row count (at least 1); ``row_mask`` is 1 on real rows, 0 on padding
            (padding ids are 0). A text without rows is all padding: the model's mean is then
            the zero vector.
        """
        return pad_rows([self.rows(text) for text in texts])

    def spec(self, vocabulary: str) -> dict[str, Any]:
        """The manifest's ``featurizer`` object, naming the vocabulary file ``vocabulary``."""
        return {"kind": KIND, "vocabulary": vocabulary, "lowercase": self.lowercase, "minn": self.minn, "maxn": self.maxn,
                "bucket": self.bucket, "word_ngrams": self.word_ngrams, "hash": "fasttext-fnv1a-signed-char", "eos": EOS,
                "end_of_line": self.end_of_line}

    def __repr__(self) -> str:
        return (f"BagOfRows({len(self.words):,} words, lowercase={self.lowercase}, minn={self.minn}, maxn={self.maxn}, "
                f"bucket={self.bucket:,}, word_ngrams={self.word_ngrams}, end_of_line={self.end_of_line})")


def pad_rows(items: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """``row_ids`` ``(batch, n)`` int32 and ``row_mask`` ``(batch, n)`` float32 for lists of rows,
    padded with id 0 / mask 0 to the longest (``n >= 1``)."""
    width = max((len(r) for r in items), default=1) or 1
    ids = np.zeros((len(items), width), np.int32)
    mask = np.zeros((len(items), width), np.float32)
    for i, r in enumerate(items):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1.0
    return {"row_ids": ids, "row_mask": mask}


#: Keys of a manifest's ``featurizer`` object and the JSON types they hold (``end_of_line``, bool,
#: is optional: exports before it have none, and read texts without ``</s>``).
SPEC_KEYS: dict[str, type] = {"kind": str, "vocabulary": str, "lowercase": bool, "minn": int, "maxn": int, "bucket": int, "word_ngrams": int}


def validate_spec(spec: Any, where: str) -> None:
    """Check a manifest's ``featurizer`` object.

    Raises:
        ExportDirError: one line naming ``where`` (the manifest) and the key: not an object, a
            missing key, a value of the wrong type, an unknown ``kind``, or parameters
            :class:`BagOfRows` refuses.
    """
    if not isinstance(spec, Mapping):
        raise ExportDirError(f"{where}: key 'featurizer' must be an object, got {type(spec).__name__}")
    for key, kind in SPEC_KEYS.items():
        if key not in spec:
            raise ExportDirError(f"{where}: key 'featurizer.{key}' is missing")
        value = spec[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ExportDirError(f"{where}: key 'featurizer.{key}' must be {kind.__name__}, got {value!r}")
    if not isinstance(spec.get("end_of_line", False), bool):
        raise ExportDirError(f"{where}: key 'featurizer.end_of_line' must be bool, got {spec['end_of_line']!r}")
    if spec["kind"] != KIND:
        raise ExportDirError(f"{where}: key 'featurizer.kind' is {spec['kind']!r}; this runtime reads {KIND!r}")
    try:
        BagOfRows([], bool(spec["lowercase"]), spec["minn"], spec["maxn"], spec["bucket"], spec["word_ngrams"])
    except ValueError as exc:
        raise ExportDirError(f"{where}: key 'featurizer': {exc}") from None


def load(export_dir: str | os.PathLike[str], spec: Mapping[str, Any], rows: int | None = None) -> BagOfRows:
    """The featurizer a manifest's ``featurizer`` object describes (checked with :func:`validate_spec`).

    Args:
        export_dir: the export directory; ``spec["vocabulary"]`` is a UTF-8 file in it, one word a
            line, line ``i`` owning row ``i``.
        spec: the manifest's ``featurizer`` object.
        rows: the model's row count, when known: it must equal ``len(words) + bucket``.

    Raises:
        ExportDirError: a bad spec, a missing or unreadable vocabulary file, duplicate words, or a
            row count that does not fit the vocabulary and ``bucket`` (never re-hashed).
    """
    where = Path(export_dir) / "manifest.json"
    validate_spec(spec, str(where))
    path = Path(export_dir) / spec["vocabulary"]
    try:
        words = path.read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        raise ExportDirError(f"{path}: vocabulary file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ExportDirError(f"{path}: cannot read the vocabulary ({exc})") from None
    if words and words[-1] == "":
        words.pop()
    try:
        featurizer = BagOfRows(words, spec["lowercase"], spec["minn"], spec["maxn"], spec["bucket"], spec["word_ngrams"], spec.get("end_of_line", False))
    except ValueError as exc:
        raise ExportDirError(f"{path}: {exc}") from None
    if rows is not None and rows != featurizer.rows_total:
        raise ExportDirError(f"{where}: the model has {rows:,} rows but {len(words):,} words + featurizer.bucket {spec['bucket']:,} = {featurizer.rows_total:,}")
    return featurizer
