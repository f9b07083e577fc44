"""Streaming readers for corpora and labelled files.

Nothing here holds a whole file in memory: readers yield :class:`~ptmkit.contract.Record` items
one line at a time. Formats (chosen by suffix, after ``.gz`` / ``.bz2``):

* plain text (any other suffix): one document or paragraph per line, blank lines skipped;
* fastText ``__label__NAME text`` lines, labels anywhere in the line (``.ft`` files, or, read as
  labelled data, files of another suffix with a ``__label__`` token on any line);
* ``.tsv`` / ``.csv`` with a header naming ``text`` and ``label`` columns;
* ``.jsonl``: one JSON object per line with ``text`` and ``label`` keys.

A directory is read file by file in sorted order. Invalid UTF-8 is replaced by U+FFFD and counted;
:func:`read_corpus` warns once with the count when it is done.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ptmkit.contract import CorpusReader, Record
from ptmkit.errors import DataError

LABEL_PREFIX = "__label__"
_COMPRESSED: dict[str, Callable[..., Any]] = {".gz": gzip.open, ".bz2": bz2.open}
_BOM = b"\xef\xbb\xbf"


def _open_text(path: Path) -> tuple[Iterator[str], dict[str, int]]:
    """Open ``path`` (maybe compressed) as text; the returned dict counts ``lines`` read,
    ``blank`` lines (whitespace only) and ``invalid`` lines (bad UTF-8, replaced).

    A UTF-8 byte order mark at the start of the file is dropped. A file that cannot be read
    (no permission, a corrupted or truncated ``.gz`` / ``.bz2``) raises :class:`DataError`
    naming it, when it is opened or when the bad part is reached.
    """
    opener = _COMPRESSED.get(path.suffix.lower())
    try:
        raw = opener(path, "rb") if opener else open(path, "rb")  # noqa: SIM115 - closed by caller
    except OSError as exc:
        raise DataError(f"{path}: cannot open ({exc.strerror or exc})") from None
    counts = {"lines": 0, "blank": 0, "invalid": 0}

    def lines() -> Iterator[str]:
        with raw:
            try:
                for line in raw:
                    if counts["lines"] == 0 and line.startswith(_BOM):
                        line = line[len(_BOM):]
                    counts["lines"] += 1
                    if counts["lines"] <= 5 and b"\x00" in line:
                        raise DataError(f"{path}:{counts['lines']}: NUL bytes: this looks like a binary file, not text")
                    try:
                        text = line.decode("utf-8")
                    except UnicodeDecodeError:
                        counts["invalid"] += 1
                        text = line.decode("utf-8", errors="replace")
                    if not text.strip():
                        counts["blank"] += 1
                    yield text
            except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
                raise DataError(
                    f"{path}: cannot be read after line {counts['lines']} (corrupted or truncated file? {exc})"
                ) from None

    return lines(), counts


def read_plain(stream: Iterable[str], source: str) -> Iterator[Record]:
    """One document or paragraph per line; blank lines skipped; no labels."""
    for number, line in enumerate(stream, 1):
        text = line.strip()
        if text:
            yield Record(number, text, None)


def read_fasttext(stream: Iterable[str], source: str) -> Iterator[Record]:
    """fastText supervised format: ``__label__A [__label__B] text``, labels anywhere in the line.
    Every label is kept: ``Record.label`` is the first, ``Record.labels`` all of them (in the
    line's order, as fastText's ``Dictionary::getLine`` lists them)."""
    for number, line in enumerate(stream, 1):
        text = line.strip()
        if not text:
            continue
        fields = text.split()
        labels = [f[len(LABEL_PREFIX):] for f in fields if f.startswith(LABEL_PREFIX)]
        words = [f for f in fields if not f.startswith(LABEL_PREFIX)]
        if not labels:
            raise DataError(f"{source}:{number}: no __label__ on this line")
        if not all(labels):
            raise DataError(f"{source}:{number}: empty label (a bare '__label__')")
        if not words:
            raise DataError(f"{source}:{number}: label {labels[0]!r} has no text")
        yield Record(number, " ".join(words), labels[0], tuple(labels))


def _read_delimited(stream: Iterable[str], source: str, delimiter: str) -> Iterator[Record]:
    rows = csv.reader(stream, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)

    def next_row() -> tuple[int, list[str] | None]:
        """The next row and the file line it starts on (a quoted CSV field may span lines)."""
        number = rows.line_num + 1
        try:
            return number, next(rows, None)
        except csv.Error as exc:  # e.g. a field over csv.field_size_limit()
            raise DataError(f"{source}:{number}: {exc}") from None

    number, header = next_row()
    while header is not None and not any(cell.strip() for cell in header):  # blank lines before the header
        number, header = next_row()
    if header is None:
        return
    columns = [h.strip().lower() for h in header]
    missing = [c for c in ("text", "label") if c not in columns]
    if missing:
        raise DataError(f"{source}:{number}: header has no {' or '.join(repr(m) for m in missing)} column (found {header})")
    text_at, label_at = columns.index("text"), columns.index("label")
    while True:
        number, row = next_row()
        if row is None:
            return
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) != len(columns):
            raise DataError(f"{source}:{number}: {len(row)} fields, the header has {len(columns)}")
        text, label = row[text_at].strip(), row[label_at].strip()
        if not label:
            raise DataError(f"{source}:{number}: empty label")
        if not text:
            raise DataError(f"{source}:{number}: empty text (label {label!r})")
        yield Record(number, text, label)


def read_tsv(stream: Iterable[str], source: str) -> Iterator[Record]:
    """Tab-separated values with a ``label`` and a ``text`` column in the header."""
    return _read_delimited(stream, source, "\t")


def read_csv(stream: Iterable[str], source: str) -> Iterator[Record]:
    """Comma-separated values (RFC 4180 quoting) with ``label`` and ``text`` header columns."""
    return _read_delimited(stream, source, ",")


def read_jsonl(stream: Iterable[str], source: str) -> Iterator[Record]:
    """JSON lines: ``{"text": ..., "label": ...}`` per line."""
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{source}:{number}: invalid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise DataError(f"{source}:{number}: expected a JSON object with 'text' and 'label'")
        text, label = _json_field(item, "text", source, number), _json_field(item, "label", source, number)
        if not label:
            raise DataError(f"{source}:{number}: empty or missing 'label'")
        if not text:
            raise DataError(f"{source}:{number}: empty or missing 'text' (label {label!r})")
        yield Record(number, text, label)


def _json_field(item: dict[str, Any], key: str, source: str, number: int) -> str:
    """``item[key]`` as stripped text: a string or a number (labels 0 and 1 are labels); missing is ''."""
    value = item.get(key)
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        raise DataError(f"{source}:{number}: {key!r} must be a string or a number, got a JSON {type(value).__name__}")
    return str(value).strip()


BUILTIN_READERS = [
    CorpusReader("text", (".txt", ".text", ".raw"), read_plain),
    CorpusReader("fasttext", (".ft", ".fasttext"), read_fasttext, labelled=True),
    CorpusReader("tsv", (".tsv",), read_tsv, labelled=True),
    CorpusReader("csv", (".csv",), read_csv, labelled=True),
    CorpusReader("jsonl", (".jsonl", ".ndjson"), read_jsonl, labelled=True),
]


def _format_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSED:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _files(path: Path) -> list[Path]:
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        if not files:
            raise DataError(f"{path}: directory has no files")
        return files
    return [path]


def has_fasttext_label(line: str) -> bool:
    """Whether ``line`` holds a ``__label__`` token anywhere (fastText takes labels at any place
    in a line: ``Dictionary::getLine`` sorts each whitespace-separated token by its prefix)."""
    return any(token.startswith(LABEL_PREFIX) for token in line.split())


def holds_fasttext_labels(path: Path) -> bool:
    """Whether any line of ``path`` holds a ``__label__`` token; reads up to the first one, so the
    answer depends neither on the file's suffix nor on its first line."""
    stream, _ = _open_text(path)
    return any(has_fasttext_label(line) for line in stream)


def texts_of_lines(lines: list[str], source: str) -> list[str]:
    """The texts of already-read lines (standard input): fastText lines' texts when any line holds
    a ``__label__`` token (labels anywhere in the line, as for files), else the stripped non-blank
    lines.

    Raises:
        DataError: a malformed fastText line, naming ``source`` and the line.
    """
    if any(has_fasttext_label(line) for line in lines):
        return [record.text for record in read_fasttext(lines, source)]
    return [line.strip() for line in lines if line.strip()]


def is_labelled(path: str | Path, readers: dict[str, CorpusReader] | None = None) -> bool:
    """Whether the file ``path`` is labelled data: a labelled reader's suffix (``.tsv``, ``.jsonl``,
    ``.ft``...; after ``.gz`` / ``.bz2``), or a ``__label__`` token on any line
    (:func:`holds_fasttext_labels`). For commands that take texts from labelled or plain files."""
    if readers is None:
        from ptmkit.plugins import get_registry

        readers = get_registry().readers
    path = Path(path)
    suffix = _format_suffix(path)
    if any(r.labelled and suffix in r.suffixes for r in readers.values()):
        return True
    return holds_fasttext_labels(path)


def _reader_for(path: Path, readers: dict[str, CorpusReader], labelled: bool) -> CorpusReader:
    suffix = _format_suffix(path)
    by_suffix = {s: r for r in readers.values() for s in r.suffixes}
    reader = by_suffix.get(suffix)
    if labelled and (reader is None or not reader.labelled) and holds_fasttext_labels(path):
        return next(r for r in readers.values() if r.name == "fasttext")
    if reader is None:
        return next(r for r in readers.values() if r.name == "text")
    return reader


def read_records(
    path: str | Path, *, labelled: bool, readers: dict[str, CorpusReader] | None = None, multi_label: bool = False
) -> Iterator[Record]:
    """Stream records from a file or directory, choosing a reader per file by its suffix.

    Args:
        path: a file (maybe ``.gz`` / ``.bz2``) or a directory of files.
        labelled: True for classification data; every record then has a label.
        readers: readers by name (default: every installed reader, from the plugin registry).
        multi_label: the caller uses every label of a line (``Record.all_labels()``); when
            False, a labelled line with several labels is refused rather than cut to one.

    Raises:
        DataError: missing path, a file with no usable record, a malformed line (the message
            names the file and line), labelled data in a format without labels, or (without
            ``multi_label``) a line with several labels.
    """
    if readers is None:
        from ptmkit.plugins import get_registry

        readers = get_registry().readers
    path = Path(path)
    records = lines = blank = 0
    for file in _files(path):
        reader = _reader_for(file, readers, labelled)
        if labelled and not reader.labelled:
            raise DataError(
                f"{file}: no labels found; expected '__label__NAME text' lines, or a .tsv/.csv/.jsonl "
                "file with 'label' and 'text' columns"
            )
        stream, counts = _open_text(file)
        for record in reader.read(stream, str(file)):
            if labelled and not multi_label and len(record.labels) > 1:
                raise DataError(
                    f"{file}:{record.line}: {len(record.labels)} labels on one line ({', '.join(record.labels)}); this command "
                    "takes one label per line (`ptmkit train fasttext-supervised` trains on every label, as fastText does)"
                )
            records += 1
            yield record
        lines += counts["lines"]
        blank += counts["blank"]
        if counts["invalid"]:
            warnings.warn(
                f"{file}: {counts['invalid']} line(s) had invalid UTF-8; the bad bytes were replaced by U+FFFD",
                UnicodeWarning,
                stacklevel=2,
            )
    if records == 0:
        if lines == 0:
            seen = "it is empty"
        elif blank == lines:
            seen = f"{lines} line(s), all blank"
        else:
            seen = f"{lines} line(s), {lines - blank} not blank, but no records: a header only?"
        wanted = "one labelled example per line" if labelled else "one document or paragraph per line"
        raise DataError(f"{path}: no text to read ({seen}); give a file with {wanted}")


def read_corpus(path: str | Path, readers: dict[str, CorpusReader] | None = None) -> Iterator[str]:
    """Stream the texts of a corpus (labels, if any, are dropped). See :func:`read_records`."""
    for record in read_records(path, labelled=False, readers=readers):
        yield record.text


def read_multilabelled(path: str | Path, readers: dict[str, CorpusReader] | None = None) -> tuple[list[str], list[tuple[str, ...]]]:
    """Read a whole labelled file into ``(texts, label tuples)``: every label of each line (one
    for TSV/CSV/JSON lines, one or more for fastText lines). See :func:`read_records`."""
    texts, labels = [], []
    for record in read_records(path, labelled=True, readers=readers, multi_label=True):
        texts.append(record.text)
        labels.append(record.all_labels())
    return texts, labels


def read_labelled(path: str | Path, readers: dict[str, CorpusReader] | None = None) -> tuple[list[str], list[str]]:
    """Read a whole labelled file into ``(texts, labels)`` (fine-tuning sets fit in memory), one
    label per line: a line with several is refused (DataError naming it), never cut to one;
    :func:`read_multilabelled` keeps them all."""
    texts, labels = [], []
    for record in read_records(path, labelled=True, readers=readers):
        texts.append(record.text)
        labels.append(record.label or "")
    return texts, labels
