"""Parallel corpora: sentence pairs for sequence-to-sequence training (translation).

A parallel file is UTF-8 text (``.gz``/``.bz2`` too), one pair a line: ``SOURCE<TAB>TARGET``,
further tab-separated columns ignored (the shipped ``data/parallel/en-de-*.tsv`` carry a third,
``source``: the gettext domain each pair comes from). An optional header names the two languages
with their codes (``en<TAB>de<TAB>source``): a first line whose first two cells are language
codes (ISO 639: two or three lower-case letters, maybe with a region, ``pt_BR``, ``zh-Hans``).

Rules, as ``ptmkit train --parallel`` and ``ptmkit evaluate --parallel`` apply them:

- a non-blank line without a tab is refused (:class:`~ptmkit.errors.DataError` naming
  ``file:line``): a missing target column is a broken file, not a pair to guess;
- a pair with an empty source or target is skipped and counted in one warning; a file with no
  pair left is refused;
- blank lines are skipped silently.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import NamedTuple

from ptmkit.errors import DataError

#: A language code as the header of a parallel file gives it (``en``, ``deu``, ``pt_BR``, ``zh-Hans``).
LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}([-_][A-Za-z]{2,8})?$")


class ParallelCorpus(NamedTuple):
    """The pairs of a parallel file.

    Attributes:
        sources: source sentences, stripped.
        targets: target sentences, stripped; ``targets[i]`` translates ``sources[i]``.
        lines: the 1-based file line of each pair.
        languages: ``(source, target)`` language codes from the header, or None without one.
        skipped: pairs skipped for an empty side.
    """

    sources: list[str]
    targets: list[str]
    lines: list[int]
    languages: tuple[str, str] | None
    skipped: int

    def __len__(self) -> int:
        return len(self.sources)


def language_header(cells: list[str]) -> tuple[str, str] | None:
    """``(source, target)`` when the first two ``cells`` are language codes, else None."""
    first, second = (cell.strip() for cell in cells[:2])
    return (first, second) if LANGUAGE_CODE.match(first) and LANGUAGE_CODE.match(second) else None


def read_parallel(path: str | Path) -> ParallelCorpus:
    """Read the sentence pairs of ``path`` (module docstring for the format and rules).

    Raises:
        DataError: a missing or unreadable file, a line without a tab (``file:line``), no pair
            left after skipping empty sides.
    """
    from ptmkit.data.readers import _open_text

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {'is a directory, not a parallel file' if path.is_dir() else 'no such parallel file'}")
    stream, _ = _open_text(path)
    sources: list[str] = []
    targets: list[str] = []
    lines: list[int] = []
    languages = None
    skipped = 0
    seen_text = False
    for number, raw in enumerate(stream, 1):
        text = raw.rstrip("\r\n")
        if not text.strip():
            continue
        cells = text.split("\t")
        if len(cells) < 2:
            raise DataError(f"{path}:{number}: no tab: a parallel line is SOURCE<TAB>TARGET (the target column is missing)")
        if not seen_text:
            seen_text = True
            languages = language_header(cells)
            if languages is not None:
                continue
        source, target = cells[0].strip(), cells[1].strip()
        if not source or not target:
            skipped += 1
            continue
        sources.append(source)
        targets.append(target)
        lines.append(number)
    if not sources:
        raise DataError(f"{path}: no sentence pair ({skipped} with an empty source or target skipped)")
    if skipped:
        warnings.warn(f"{path}: skipped {skipped:,} pair(s) with an empty source or target; {len(sources):,} left", stacklevel=2)
    return ParallelCorpus(sources, targets, lines, languages, skipped)
