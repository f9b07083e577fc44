"""ptmkit.data.readers: formats, blank lines, bad UTF-8, malformed lines (file:LINE) and streaming."""

from __future__ import annotations

import bz2
import gzip
import json
import tracemalloc
import warnings
from collections import Counter
from pathlib import Path

import pytest

from ptmkit.data.readers import BUILTIN_READERS, read_corpus, read_labelled, read_records
from ptmkit.errors import DataError, PtmkitError

DATA = Path(__file__).resolve().parents[1] / "data"
POLARITY = DATA / "classify" / "polarity-200.txt"
SUPERSENSE_DEV = DATA / "classify" / "wordnet-supersense-dev.tsv"
ENWIKI = DATA / "corpus" / "enwiki-106.txt"
READERS = {r.name: r for r in BUILTIN_READERS}


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def no_warnings_list(path: Path, **kwargs) -> list[str]:
    """read_corpus as a list, failing on a UnicodeWarning (valid UTF-8 must read silently)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnicodeWarning)
        return list(read_corpus(path, **kwargs))


# -- plain text, compressed files, directories -----------------------------------------------------


def test_plain_text_lines_are_stripped_and_blank_lines_skipped(tmp_path: Path) -> None:
    path = write(tmp_path / "c.txt", "first doc\n\n   \n\t\n  second doc  \r\nthird\n")
    assert no_warnings_list(path) == ["first doc", "second doc", "third"]
    records = list(read_records(path, labelled=False))
    assert [r.line for r in records] == [1, 5, 6]
    assert all(r.label is None for r in records)
    assert "" not in [r.text for r in records]


def test_unknown_suffix_and_no_final_newline_read_as_plain_text(tmp_path: Path) -> None:
    path = write(tmp_path / "corpus.data", "alpha\nbeta")
    assert no_warnings_list(path) == ["alpha", "beta"]


def test_gzip_and_bz2_read_like_the_plain_file(tmp_path: Path) -> None:
    text = "één\n\nzwei drei\nvier\n"
    plain = write(tmp_path / "c.txt", text)
    gz = write(tmp_path / "c.txt.gz", gzip.compress(text.encode("utf-8")))
    bz = write(tmp_path / "c.txt.bz2", bz2.compress(text.encode("utf-8")))
    expected = ["één", "zwei drei", "vier"]
    assert no_warnings_list(plain) == expected
    assert no_warnings_list(gz) == expected
    assert no_warnings_list(bz) == expected


def test_directory_is_read_file_by_file_in_sorted_order(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    write(root / "b.txt", "b1\nb2\n")
    write(root / "a.txt", "a1\n")
    write(root / "c" / "nested.txt.gz", gzip.compress(b"c1\n\nc2\n"))
    write(root / ".hidden.txt", "never read\n")
    assert no_warnings_list(root) == ["a1", "b1", "b2", "c1", "c2"]


def test_directory_without_files_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(DataError, match=r"empty-dir: directory has no files"):
        list(read_corpus(tmp_path / "empty-dir"))


def test_missing_path_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(DataError) as info:
        list(read_corpus(missing))
    assert str(missing) in str(info.value)
    assert "no such file or directory" in str(info.value)
    assert isinstance(info.value, PtmkitError) and info.value.exit_code == 2


def test_real_corpus_line_count() -> None:
    assert sum(1 for _ in read_corpus(ENWIKI)) == 5861  # 5,861 lines, none blank


# -- empty and blank files ---------------------------------------------------------------------------


def test_empty_file_says_it_is_empty(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.txt", b"")
    with pytest.raises(DataError) as info:
        list(read_corpus(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "empty" in message


def test_blank_only_file_says_how_many_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "blank.txt", "\n   \n\t\n\r\n")
    with pytest.raises(DataError) as info:
        list(read_corpus(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "4 line(s), all blank" in message


def test_empty_gzip_file_is_empty_too(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.txt.gz", gzip.compress(b""))
    with pytest.raises(DataError, match=r"empty\.txt\.gz: no text to read \(it is empty\)"):
        list(read_corpus(path))


def test_header_only_tsv_is_not_called_blank(tmp_path: Path) -> None:
    path = write(tmp_path / "header.tsv", "label\ttext\n\n")
    with pytest.raises(DataError) as info:
        read_labelled(path)
    message = str(info.value)
    assert message.startswith(f"{path}: no text to read")
    assert "2 line(s)" in message and "all blank" not in message and "header" in message


# -- invalid UTF-8 ---------------------------------------------------------------------------------


def test_invalid_utf8_is_replaced_and_warned_once_with_file_and_count(tmp_path: Path) -> None:
    path = write(tmp_path / "latin.txt", b"caf\xe9 au lait\nplain line\nna\xefve \xff\xfe\n\nok\n")
    with pytest.warns(UnicodeWarning) as caught:
        texts = list(read_corpus(path))
    assert texts == ["caf\ufffd au lait", "plain line", "na\ufffdve \ufffd\ufffd", "ok"]
    messages = [str(w.message) for w in caught if issubclass(w.category, UnicodeWarning)]
    assert len(messages) == 1
    assert str(path) in messages[0]
    assert "2 line(s)" in messages[0]
    assert "U+FFFD" in messages[0]


def test_valid_utf8_gives_no_warning(tmp_path: Path) -> None:
    path = write(tmp_path / "ok.txt", "naïve café — 東京\n")
    assert no_warnings_list(path) == ["naïve café — 東京"]


def test_shipped_polarity_file_is_the_sources_text_in_utf8() -> None:
    """Pang & Lee's sentences are Windows-1252 (cp1252), as in gensim's test data that ships them:
    6 lines held an em dash, é, ó, í as single bytes. The shipped copy is that text in UTF-8,
    and reads without a warning."""
    import gensim

    source = Path(gensim.__file__).parent / "test" / "test_data" / "pang_lee_polarity.cor"
    assert POLARITY.read_bytes() == source.read_bytes().decode("cp1252").encode("utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records = list(read_records(POLARITY, labelled=True))
    assert len(records) == 200
    assert Counter(r.label for r in records) == {"neg": 100, "pos": 100}
    assert [r.line for r in records if any(c in r.text for c in "—éóí")] == [27, 32, 58, 144, 158, 197]


def test_a_users_cp1252_file_is_still_read_with_a_warning() -> None:
    """The same lines as a user may have them (gensim's cp1252 copy): replaced and warned about."""
    import gensim

    source = Path(gensim.__file__).parent / "test" / "test_data" / "pang_lee_polarity.cor"
    readers = {r.name: r for r in BUILTIN_READERS}
    with pytest.warns(UnicodeWarning, match=r"pang_lee_polarity\.cor: 6 line\(s\) had invalid UTF-8"):
        records = list(read_records(source, labelled=True, readers=readers))
    assert [r.line for r in records if "\ufffd" in r.text] == [27, 32, 58, 144, 158, 197]


def test_every_shipped_data_file_is_utf8() -> None:
    files = sorted(p for p in DATA.rglob("*") if p.is_file())
    assert len(files) >= 9
    for path in files:
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise AssertionError(f"{path}:{number}: not UTF-8 ({exc.reason})") from None


def test_utf8_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    assert no_warnings_list(write(tmp_path / "bom.txt", bom + b"first\nsecond\n")) == ["first", "second"]
    assert read_labelled(write(tmp_path / "bom.tsv", bom + b"label\ttext\npos\tgood\n")) == (["good"], ["pos"])
    assert read_labelled(write(tmp_path / "bomft.txt", bom + b"__label__pos good\n")) == (["good"], ["pos"])


# -- corrupted compressed files ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("garbage.txt.gz", b"this is not gzip data"),
        ("truncated.txt.gz", gzip.compress(b"some words here\n" * 2000)[:60]),
        ("garbage.txt.bz2", b"not bzip2 either"),
    ],
    ids=["garbage-gz", "truncated-gz", "garbage-bz2"],
)
def test_corrupted_compressed_file_is_a_data_error_naming_it(tmp_path: Path, name: str, data: bytes) -> None:
    path = write(tmp_path / name, data)
    with pytest.raises(DataError) as info:
        list(read_corpus(path))
    assert str(info.value).startswith(f"{path}: ")
    assert "corrupted or truncated" in str(info.value)


# -- fastText ------------------------------------------------------------------------------------


def test_fasttext_labels_are_all_kept_and_leave_the_text(tmp_path: Path) -> None:
    """Every label of a line is kept (fastText's rule); a reader of one label per line refuses
    the line rather than keep the first label only."""
    from ptmkit.data.readers import read_multilabelled

    path = write(
        tmp_path / "train.txt",
        "__label__pos __label__extra a fine film\n\n__label__neg  dull ,  slow\n",
    )
    records = list(read_records(path, labelled=True, multi_label=True))
    assert [(r.line, r.text, r.label, r.all_labels()) for r in records] == [(1, "a fine film", "pos", ("pos", "extra")), (3, "dull , slow", "neg", ("neg",))]
    assert read_multilabelled(path) == (["a fine film", "dull , slow"], [("pos", "extra"), ("neg",)])
    with pytest.raises(DataError, match=r"train\.txt:1: 2 labels on one line \(pos, extra\); this command takes one label per line"):
        read_labelled(path)


def test_labelled_txt_picks_fasttext_even_compressed(tmp_path: Path) -> None:
    data = b"\n__label__a one\n__label__b two\n"
    assert read_labelled(write(tmp_path / "l.txt", data)) == (["one", "two"], ["a", "b"])
    assert read_labelled(write(tmp_path / "l.txt.gz", gzip.compress(data))) == (["one", "two"], ["a", "b"])


def test_fasttext_file_read_as_corpus_drops_the_labels(tmp_path: Path) -> None:
    path = write(tmp_path / "l.ft", "__label__a one two\n__label__b three\n")
    assert no_warnings_list(path) == ["one two", "three"]


@pytest.mark.parametrize(
    ("content", "where", "what"),
    [
        ("__label__pos good\n\n__label__ no name here\n", ":3:", "empty label"),
        ("__label__pos good\n__label__neg   \n", ":2:", "label 'neg' has no text"),
        ("__label__pos good\n__label__a __label__b\n", ":2:", "label 'a' has no text"),
        ("__label__pos good\nno label at all\n", ":2:", "no __label__"),
    ],
    ids=["bare-label", "no-text", "labels-only", "no-label"],
)
def test_fasttext_malformed_line_names_file_and_line(tmp_path: Path, content: str, where: str, what: str) -> None:
    path = write(tmp_path / "bad.txt", content)
    with pytest.raises(DataError) as info:
        read_labelled(path)
    assert str(info.value).startswith(f"{path}{where} ")
    assert what in str(info.value)


def test_plain_text_read_as_labelled_data_is_a_clear_error(tmp_path: Path) -> None:
    path = write(tmp_path / "plain.txt", "just a sentence\nanother one\n")
    with pytest.raises(DataError) as info:
        read_labelled(path)
    message = str(info.value)
    assert message.startswith(f"{path}: no labels found")
    assert "__label__" in message and ".tsv" in message


def test_real_corpus_is_not_labelled_data() -> None:
    with pytest.raises(DataError, match=r"enwiki-106\.txt: no labels found"):
        read_labelled(ENWIKI)


# -- TSV / CSV / JSONL -----------------------------------------------------------------------------


def test_tsv_columns_in_any_order_and_case(tmp_path: Path) -> None:
    path = write(tmp_path / "d.tsv", "id\tText\tLABEL\n1\tgood film\tpos\n\n2\t\"quoted\" stays\tneg\n")
    records = list(read_records(path, labelled=True))
    assert [(r.line, r.text, r.label) for r in records] == [(2, "good film", "pos"), (4, '"quoted" stays', "neg")]


def test_real_supersense_dev_has_5000_rows_and_45_labels() -> None:
    texts, labels = read_labelled(SUPERSENSE_DEV)
    assert len(texts) == len(labels) == 5000
    assert len(set(labels)) == 45
    assert labels[0] == "verb.change" and texts[0] == "cause to become ice or icy"


def test_csv_quoting_and_multiline_fields_keep_file_line_numbers(tmp_path: Path) -> None:
    path = write(tmp_path / "d.csv", 'label,text\npos,"good, really"\nneg,"two\nlines"\n,missing label\n')
    with pytest.raises(DataError) as info:
        read_labelled(path)
    assert str(info.value) == f"{path}:5: empty label"  # line 5 of the file, the 4th row
    good = write(tmp_path / "ok.csv", 'label,text\npos,"good, really"\nneg,"two\nlines"\npos,after\n')
    records = list(read_records(good, labelled=True))
    assert [(r.line, r.text, r.label) for r in records] == [(2, "good, really", "pos"), (3, "two\nlines", "neg"), (5, "after", "pos")]


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("h.tsv", "label\tsentence\npos\tx\n", ":1: header has no 'text' column"),
        ("h.csv", "category,text\npos,x\n", ":1: header has no 'label' column"),
        ("h2.tsv", "a\tb\npos\tx\n", ":1: header has no 'text' or 'label' column"),
        ("l.tsv", "label\ttext\npos\tfine\n\n\tno label\n", ":4: empty label"),
        ("t.tsv", "label\ttext\npos\tfine\nneg\t   \n", ":3: empty text (label 'neg')"),
        ("f.tsv", "label\ttext\npos\tfine\nneg\tone\textra\n", ":3: 3 fields, the header has 2"),
        ("f.csv", "label,text\npos,fine\npos,fine\nneg\n", ":4: 1 fields, the header has 2"),
        ("big.tsv", "label\ttext\npos\t" + "x" * 200_000 + "\n", ":2: field larger than field limit"),
    ],
    ids=["no-text-column", "no-label-column", "neither", "empty-label", "empty-text", "tsv-fields", "csv-fields", "huge-field"],
)
def test_delimited_errors_name_file_and_line(tmp_path: Path, name: str, content: str, expected: str) -> None:
    path = write(tmp_path / name, content)
    with pytest.raises(DataError) as info:
        read_labelled(path)
    assert str(info.value).startswith(f"{path}{expected}")


def test_jsonl_records(tmp_path: Path) -> None:
    lines = [json.dumps({"text": " a good film ", "label": "pos", "id": 1}), "", json.dumps({"label": "neg", "text": "bad"})]
    path = write(tmp_path / "d.jsonl", "\n".join(lines) + "\n")
    records = list(read_records(path, labelled=True))
    assert [(r.line, r.text, r.label) for r in records] == [(1, "a good film", "pos"), (3, "bad", "neg")]


def test_jsonl_numeric_labels_are_labels(tmp_path: Path) -> None:
    path = write(tmp_path / "n.jsonl", '{"text": "bad", "label": 0}\n{"text": "good", "label": 1}\n')
    assert read_labelled(path) == (["bad", "good"], ["0", "1"])


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"text": "a", "label": "x"}\n\n{"text": "b", "label": "y"\n', ":3: invalid JSON"),
        ('{"text": "a", "label": "x"}\n["b", "y"]\n', ":2: expected a JSON object"),
        ('{"text": "a", "label": "x"}\n{"text": "b", "label": ""}\n', ":2: empty or missing 'label'"),
        ('{"text": "a", "label": "x"}\n{"text": "b"}\n', ":2: empty or missing 'label'"),
        ('{"text": "a", "label": "x"}\n\n\n{"text": "  ", "label": "y"}\n', ":4: empty or missing 'text' (label 'y')"),
        ('{"text": ["a"], "label": "x"}\n', ":1: 'text' must be a string or a number"),
    ],
    ids=["invalid-json", "not-an-object", "empty-label", "missing-label", "blank-text", "list-text"],
)
def test_jsonl_errors_name_file_and_line(tmp_path: Path, content: str, expected: str) -> None:
    path = write(tmp_path / "bad.jsonl", content)
    with pytest.raises(DataError) as info:
        read_labelled(path)
    assert str(info.value).startswith(f"{path}{expected}")


def test_explicit_readers_argument_restricts_formats(tmp_path: Path) -> None:
    path = write(tmp_path / "d.tsv", "label\ttext\npos\tgood\n")
    only_text = {"text": READERS["text"]}
    assert list(read_corpus(path, readers=only_text)) == ["label\ttext", "pos\tgood"]
    assert list(read_corpus(path, readers=READERS)) == ["good"]


# -- streaming ---------------------------------------------------------------------------------------


def test_read_corpus_is_lazy_it_sees_lines_appended_after_the_first_item(tmp_path: Path) -> None:
    path = write(tmp_path / "grow.txt", "line 1\nline 2\n")
    stream = read_corpus(path)
    assert next(stream) == "line 1"
    with open(path, "a", encoding="utf-8") as handle:  # a reader that had slurped the file would miss these
        handle.write("line 3\nline 4\n")
    assert list(stream) == ["line 2", "line 3", "line 4"]


def test_generator_reads_nothing_before_the_first_next(tmp_path: Path) -> None:
    path = tmp_path / "later.txt"
    stream = read_corpus(path)  # the file does not exist yet: nothing may be opened until next()
    write(path, "created afterwards\n")
    assert list(stream) == ["created afterwards"]


def test_read_corpus_memory_stays_flat_on_a_large_file(tmp_path: Path) -> None:
    line = ("streaming " * 20).strip() + "\n"  # ~200 bytes
    count = 60_000  # ~12 MB
    path = tmp_path / "big.txt"
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            handle.write(f"{i} {line}")
    size = path.stat().st_size
    assert size > 10_000_000
    tracemalloc.start()
    try:
        stream = read_corpus(path)
        first = [next(stream) for _ in range(3)]
        _, peak_first = tracemalloc.get_traced_memory()
        seen = 3 + sum(1 for _ in stream)
        _, peak_all = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first[0].startswith("0 streaming") and first[2].startswith("2 streaming")
    assert seen == count
    assert peak_first < 1_000_000, f"first items cost {peak_first:,} bytes for a {size:,}-byte file"
    assert peak_all < 1_000_000, f"a full pass peaked at {peak_all:,} bytes for a {size:,}-byte file"


# -- labels anywhere on a fastText line ----------------------------------------------------------

LABELS_AT_END = Path(__file__).parent / "data" / "fasttext-labels" / "labels_at_end.txt"  # issue 15's case


def test_labels_may_stand_anywhere_on_a_line_whatever_the_suffix(tmp_path: Path) -> None:
    """fastText takes __label__ tokens anywhere in a line: the case file is labelled data as .txt
    and as .ft, and so is a file whose first line has no label at all."""
    readers = {r.name: r for r in BUILTIN_READERS}
    as_ft = tmp_path / "labels_at_end.ft"
    as_ft.write_bytes(LABELS_AT_END.read_bytes())
    texts, labels = read_labelled(LABELS_AT_END, readers=readers)
    assert (texts, labels) == read_labelled(as_ft, readers=readers)
    assert len(texts) == 60 and sorted(set(labels)) == ["bad", "good"]
    assert texts[0] == "storm rain cloud rain wet wet" and labels[0] == "bad"
    middle = write(tmp_path / "middle.txt", "a film __label__pos that works\n__label__neg dull\n")
    assert read_labelled(middle, readers=readers) == (["a film that works", "dull"], ["pos", "neg"])
    from ptmkit.data.readers import is_labelled  # what predict --file and the row export's --dev ask

    assert is_labelled(LABELS_AT_END, readers) and is_labelled(middle, readers)
    assert not is_labelled(write(tmp_path / "plain.txt", "a __labelled__ text\n"), readers)
    unlabelled_first = write(tmp_path / "later.txt", "no label here\n__label__pos good\n")
    with pytest.raises(DataError, match=r"later\.txt:1: no __label__ on this line"):
        read_labelled(unlabelled_first, readers=readers)  # labelled data, not "no labels found"; the line is named


def test_the_case_trains_on_60_examples_with_2_labels(tmp_path: Path) -> None:
    from inplugins import registered

    from ptmkit.cli import main

    out = tmp_path / "sup"
    with registered():
        assert main(["train", "fasttext-supervised", "--corpus", str(LABELS_AT_END), "--out", str(out), "--set", "model.epochs=1", "--set", "model.vector_size=8"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["train_examples"], metrics["labels"]) == (60, 2)
