"""Parallel files (:mod:`ptmkit.data.parallel`): the pairs, the header, and the one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptmkit.data.parallel import read_parallel
from ptmkit.errors import DataError

DATA = Path(__file__).resolve().parents[1] / "data" / "parallel"


def test_shipped_dev_file_has_its_header_and_every_pair() -> None:
    pairs = read_parallel(DATA / "en-de-dev.tsv")
    assert pairs.languages == ("en", "de")
    assert len(pairs) == 1000 and pairs.skipped == 0 and pairs.lines[0] == 2
    first = (DATA / "en-de-dev.tsv").read_text(encoding="utf-8").splitlines()[1].split("\t")
    assert (pairs.sources[0], pairs.targets[0]) == (first[0], first[1])


def test_line_without_tab_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text("en\tde\nHello world\tHallo Welt\n\nno tab on this line\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{path}:4: no tab: .*target column is missing"):
        read_parallel(path)


def test_empty_sides_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text("one two\tein zwei\n \tleer\nthree\t\nfour\tvier\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="skipped 2 pair"):
        pairs = read_parallel(path)
    assert pairs.languages is None  # no header: the first line is a pair
    assert pairs.sources == ["one two", "four"] and pairs.targets == ["ein zwei", "vier"] and pairs.lines == [1, 4]
    path.write_text("en\tde\n\tnur Ziel\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"no sentence pair \(1 with an empty source or target skipped\)"):
        read_parallel(path)
