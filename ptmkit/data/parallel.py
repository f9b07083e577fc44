"""Parallel corpora: sentence pairs for sequence-to-sequence training (translation).

A parallel file is UTF-8 text (``.gz``/``.bz2`` too), one pair a line: ``SOURCE<TAB>TARGET``,
further tab-separated columns ignored (the shipped ``data/parallel/en-de-*.tsv`` carry a third,
``source``: the gettext domain each pair comes from). An optional header names the two languages
with their codes (``en<TAB>de<TAB>source``): a first line whose first two cells are two different
ISO 639-1 codes (two lower-case letters, maybe with a region or script: ``pt_BR``, ``zh-Hans``).
A pair such as ``yes<TAB>ja`` is a sentence pair, not a header (``yes`` is no ISO 639-1 code).

Rules, as ``ptmkit train --parallel`` and ``ptmkit evaluate --parallel`` apply them:

- a non-blank line without a tab is refused (:class:`~ptmkit.errors.DataError` naming
  ``file:line``): a missing target column is a broken file, not a pair to guess;
- a pair with an empty source or target is skipped and counted in one warning; a file with no
  pair left is refused;
- blank lines are skipped silently (a line holding a tab is a pair, with empty sides: counted).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import NamedTuple

from ptmkit.errors import DataError

#: A language code as the header of a parallel file gives it (``en``, ``pt_BR``, ``zh-Hans``): an
#: ISO 639-1 code (:data:`ISO_639_1`), maybe with a region or script subtag.
LANGUAGE_CODE = re.compile(r"^([a-z]{2})([-_][A-Za-z]{2,8})?$")

#: The ISO 639-1 two-letter language codes (Library of Congress, ISO 639-2 registration authority).
ISO_639_1 = frozenset(
    "aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el "
    "en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu "
    "ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na "
    "nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so "
    "sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu".split()
)


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
    """``(source, target)`` when the first two ``cells`` are two different ISO 639-1 codes, else None."""
    first, second = (cell.strip() for cell in cells[:2])
    return (first, second) if first != second and is_language_code(first) and is_language_code(second) else None


def is_language_code(cell: str) -> bool:
    """Whether ``cell`` is an ISO 639-1 code, maybe with a region or script (``de``, ``pt_BR``)."""
    match = LANGUAGE_CODE.match(cell)
    return match is not None and match.group(1) in ISO_639_1


def read_parallel(path: str | Path) -> ParallelCorpus:
    """Read the sentence pairs of ``path`` (module docstring for the format and rules).

    Raises:
        DataError: a missing or unreadable file, a line without a tab (``file:line``), no pair
            left after skipping empty sides. Lines of invalid UTF-8 are kept, their bad bytes
            replaced, with a warning counting them (as corpora are read).
    """
    from ptmkit.data.readers import _open_text

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {'is a directory, not a parallel file' if path.is_dir() else 'no such parallel file'}")
    stream, counts = _open_text(path)
    sources: list[str] = []
    targets: list[str] = []
    lines: list[int] = []
    languages = None
    skipped = 0
    seen_text = False
    for number, raw in enumerate(stream, 1):
        text = raw.rstrip("\r\n")
        if not text.strip() and "\t" not in text:
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
    if counts["invalid"]:
        warnings.warn(f"{path}: {counts['invalid']:,} line(s) not valid UTF-8, their bad bytes replaced by U+FFFD (re-encode the file as UTF-8)", stacklevel=2)
    return ParallelCorpus(sources, targets, lines, languages, skipped)
