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


def test_invalid_utf8_is_counted_in_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_bytes(b"\xef\xbb\xbfen\tde\nthe door\tdie T\xfcr\nthe house\tdas Haus\n")  # a BOM, then Latin-1's \xfc on line 2
    with pytest.warns(UserWarning, match=r"1 line\(s\) not valid UTF-8, their bad bytes replaced by U\+FFFD"):
        pairs = read_parallel(path)
    assert pairs.languages == ("en", "de") and pairs.targets == ["die T\ufffdr", "das Haus"]


def test_tab_only_line_is_a_pair_with_empty_sides(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text("one\teins\n\t\n  \n\t \ntwo\tzwei\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="skipped 2 pair"):  # lines 2 and 4; line 3 is blank
        pairs = read_parallel(path)
    assert pairs.lines == [1, 5] and pairs.skipped == 2


@pytest.mark.parametrize(
    ("first_line", "languages"),
    [
        ("en\tde", ("en", "de")),
        ("pt_BR\tzh-Hans\tsource", ("pt_BR", "zh-Hans")),
        ("yes\tja", None),  # "yes" is no ISO 639-1 code: a pair (English "yes", Japanese-ish "ja")
        ("no\tno", None),  # the same code twice: a pair
        ("ok\tja", None),  # "ok" is no ISO 639-1 code
        ("deu\teng", None),  # three-letter codes are not headers
    ],
)
def test_header_only_for_two_different_iso_639_1_codes(tmp_path: Path, first_line: str, languages: tuple[str, str] | None) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text(f"{first_line}\nHello\tHallo\n", encoding="utf-8")
    pairs = read_parallel(path)
    assert pairs.languages == languages
    assert len(pairs) == (1 if languages else 2)
