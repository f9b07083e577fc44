"""Word-vector files in the formats the field reads: word2vec text and binary (Mikolov et al.'s
word2vec.c ``-binary 0/1``), GloVe text (Pennington et al.'s ``glove.6B.100d.txt``: no header) and
fastText ``.vec`` (a word2vec text file as fastText writes it: header, then one word per line with
a space after every number).

Text formats write each float32 with 9 significant digits, so a file read back gives the same
float32 values. Every file is written atomically. Readers check every line and raise
:class:`ptmkit.errors.DataError` naming the file and line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ptmkit.errors import DataError
from ptmkit.io import atomic_path
from ptmkit.wordvectors import WordVectors

FORMATS = ("word2vec", "word2vec-binary", "glove", "fasttext-vec")


def _lines(words: list[str], vectors: np.ndarray, trailing: str) -> Iterator[str]:
    for word, row in zip(words, vectors, strict=True):
        yield word + " " + " ".join(format(float(v), ".9g") for v in row) + trailing + "\n"


def write_vectors(path: str | os.PathLike[str], words: list[str], vectors: np.ndarray, fmt: str) -> None:
    """Write ``vectors`` ``(V, dim)`` float32 for ``words`` to ``path`` in format ``fmt``
    (one of :data:`FORMATS`).

    Raises:
        DataError: an unknown format, or (word2vec and fastText formats) a word containing
            whitespace, which those formats cannot hold; GloVe's can (the last ``dim`` fields are
            the numbers).
    """
    if fmt not in FORMATS:
        raise DataError(f"unknown vector format {fmt!r}; choose one of {', '.join(FORMATS)}")
    vectors = np.asarray(vectors, np.float32)
    if fmt != "glove":
        bad = next((w for w in words if not w or any(c.isspace() for c in w)), None)
        if bad is not None:
            raise DataError(f"{path}: the {fmt} format cannot hold the word {bad!r} (whitespace); use --vectors glove")
    count, dim = vectors.shape
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        if fmt == "word2vec-binary":
            out.write(f"{count} {dim}\n".encode())
            for word, row in zip(words, vectors, strict=True):
                out.write(word.encode("utf-8") + b" " + row.astype("<f4").tobytes() + b"\n")
            return
        if fmt != "glove":
            out.write(f"{count} {dim}\n".encode())
        trailing = " " if fmt == "fasttext-vec" else ""
        for line in _lines(words, vectors, trailing):
            out.write(line.encode("utf-8"))


def _parse(path: Path, number: int, fields: list[str], dim: int) -> np.ndarray:
    try:
        row = np.asarray([float(x) for x in fields], np.float32)
    except ValueError:
        raise DataError(f"{path}:{number}: expected {dim} numbers after the word") from None
    if not np.isfinite(row).all():
        raise DataError(f"{path}:{number}: nan or inf among the {dim} numbers (a diverged training run?)")
    return row


def _trailing_numbers(fields: list[str]) -> int:
    count = 0
    for field in reversed(fields):
        try:
            float(field)
        except ValueError:
            break
        count += 1
    return count


BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark, which some editors put first


def read_vectors(path: str | os.PathLike[str], fmt: str | None = None) -> WordVectors:
    """Read a word-vector file; ``fmt`` (one of :data:`FORMATS`) is guessed when None: word2vec
    text when the first line is ``count dim`` and the whole next line is a word and ``dim``
    numbers, word2vec binary when a ``count dim`` header is followed by anything else, else GloVe.
    ``fasttext-vec`` reads as ``word2vec`` (the same text format). The guess reads whole lines,
    whatever their length, so it holds at any dimension.

    GloVe lines are split on single spaces and their last ``dim`` fields are the numbers, so a
    token containing spaces is read whole; ``dim`` is the smallest positive count of trailing numeric
    fields over the first 100 lines.

    Raises:
        DataError: an unknown ``fmt``, a missing or empty file, a bad header, a line with the wrong number of fields,
            a non-number, nan or inf (file and line named), text that is not UTF-8, a truncated
            binary file.
    """
    path = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise DataError(f"unknown vector format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not path.is_file():
        raise DataError(f"{path}: no such vector file")
    with open(path, "rb") as handle:
        head = handle.readline(MAX_HEADER).removeprefix(BOM)
        header = head.split()
        has_header = len(header) == 2 and all(h.isdigit() for h in header)
        limit = _first_line_limit(int(header[1])) if has_header else 0
        first = handle.readline(limit) if has_header else b""
    if not head.strip():
        raise DataError(f"{path}:1: empty vector file")
    if fmt is None:
        if not has_header:
            fmt = "glove"
        else:
            fmt = "word2vec" if _is_text_line(first, int(header[1]), first.endswith(b"\n") or len(first) < limit) else "word2vec-binary"
    if fmt == "word2vec-binary":
        if not has_header:
            raise DataError(f"{path}:1: expected a 'count dim' header line (word2vec binary)")
        return _read_binary(path)
    if fmt in ("word2vec", "fasttext-vec"):
        if not has_header:
            raise DataError(f"{path}:1: expected a 'count dim' header line (or give --format glove)")
        return _read_text(path, int(header[0]), int(header[1]))
    return _read_text(path, None, None)


MAX_HEADER = 256  # a "count dim" line is a few bytes; a longer first line is GloVe's first vector
MAX_WORD_BYTES = 1 << 20


def _first_line_limit(dim: int) -> int:
    """Bytes enough for a word2vec text line of ``dim`` numbers at any precision (``repr`` of a
    float64 is at most 24 characters) and a long word: the sniffing never depends on a fixed
    prefix such as 4 KB, which one 400-d line already exceeds."""
    return MAX_WORD_BYTES + 32 * (dim + 1)


def _is_text_line(line: bytes, dim: int, whole: bool) -> bool:
    """Whether ``line``, the whole first line after a ``count dim`` header, is a text line ending
    in ``dim`` numbers (word2vec text, whatever the word's encoding), rather than a word and
    ``4 dim`` bytes of float32 (word2vec binary, whose bytes hold a newline or a non-number long
    before ``dim`` space-separated numbers). ``whole``: the line was read to its end (a newline,
    or the end of the file)."""
    if not whole:
        return False
    fields = line.rstrip(b"\r\n ").split(b" ")
    if len(fields) < dim + 1:
        return False
    try:
        [float(field) for field in fields[-dim:]]
    except ValueError:
        return False
    return True


def _read_text(path: Path, count: int | None, dim: int | None) -> WordVectors:
    words: list[str] = []
    rows: list[np.ndarray] = []
    with open(path, encoding="utf-8-sig", errors="strict") as handle:  # -sig: a leading byte-order mark is skipped
        try:
            lines = iter(enumerate(handle, 1))
            if count is not None:
                next(lines)
            else:
                probe = []
                for _, line in zip(range(100), handle, strict=False):
                    probe.append(_trailing_numbers(line.rstrip("\n").rstrip(" ").split(" ")))
                dim = min((p for p in probe if p), default=0)
                if dim == 0:
                    raise DataError(f"{path}: not a vector file (no line ending in numbers in the first 100)")
                handle.seek(0)
                lines = iter(enumerate(handle, 1))
            assert dim is not None
            for number, line in lines:
                fields = line.rstrip("\n").rstrip(" ").split(" ")
                if len(fields) < dim + 1:
                    raise DataError(f"{path}:{number}: expected a word and {dim} numbers, got {len(fields)} fields")
                if count is not None and len(fields) != dim + 1:
                    raise DataError(f"{path}:{number}: expected a word and {dim} numbers, got {len(fields)} fields")
                words.append(" ".join(fields[:-dim]))
                rows.append(_parse(path, number, fields[-dim:], dim))
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: not UTF-8 text ({exc.reason}); is it a binary file?") from None
    if count is not None and len(words) != count:
        raise DataError(f"{path}: the header says {count} vectors, the file has {len(words)}")
    if not words:
        raise DataError(f"{path}: no vectors in the file")
    return _vectors(path, words, np.stack(rows))


def _read_binary(path: Path) -> WordVectors:
    with open(path, "rb") as handle:
        header = handle.readline().split()
        count, dim = int(header[0]), int(header[1])
        words, rows = [], []
        for i in range(count):
            word = bytearray()
            while (char := handle.read(1)) != b" ":
                if not char:
                    raise DataError(f"{path}: truncated after {i} of {count} vectors")
                if char != b"\n":
                    word += char
            data = handle.read(4 * dim)
            if len(data) != 4 * dim:
                raise DataError(f"{path}: truncated in vector {i + 1} of {count} ({word.decode('utf-8', 'replace')!r})")
            words.append(word.decode("utf-8", errors="replace"))
            rows.append(np.frombuffer(data, "<f4"))
            if not np.isfinite(rows[-1]).all():
                raise DataError(f"{path}: vector {i + 1} of {count} ({words[-1]!r}) holds nan or inf (a diverged training run?)")
    return _vectors(path, words, np.stack(rows) if rows else np.zeros((0, dim), np.float32))


def _vectors(path: Path, words: list[str], matrix: np.ndarray) -> WordVectors:
    try:
        return WordVectors(words, matrix)
    except ValueError:
        seen: set[str] = set()
        duplicate = next(w for w in words if w in seen or seen.add(w))  # type: ignore[func-returns-value]
        raise DataError(f"{path}: the word {duplicate!r} appears twice") from None
