"""The lean runtime's bag-of-rows featurizer (``ptmkit_export.bag_of_rows``) against gensim 4.4's
fastText hashing and n-grams (``ft_hash_bytes``, ``compute_ngrams_bytes``, ``ft_ngram_hashes``) and
against the rows the fastText plugin trains on (``ptmkit_fasttext.subwords``,
``ptmkit_fasttext.supervised.text_rows``), on Wikipedia lines with accented, Cyrillic, CJK and
Georgian words plus emoji; and the one-line errors of a bad ``featurizer`` manifest object."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from tinyconfig import DATA

from ptmkit_export import bag_of_rows
from ptmkit_export.bag_of_rows import BagOfRows, character_ngrams, fasttext_hash
from ptmkit_export.errors import ExportDirError


def real_texts() -> list[str]:
    """Wikipedia lines with non-ASCII words, and a few lines in several scripts with emoji."""
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()
    chosen = [line for line in lines if any(ord(c) > 127 for c in line)][:30]  # accented Latin, Greek
    scripts = [(0x0400, 0x04FF), (0x10A0, 0x10FF), (0x3040, 0x30FF), (0x4E00, 0x9FFF)]  # Cyrillic, Georgian, kana, CJK
    chosen += [line for line in lines if any(lo <= ord(c) <= hi for c in line for lo, hi in scripts)][:12]
    return chosen + [
        "Москва — столица России 🙂👍 and 東京大学 is in 日本",
        "naïveté příliš ŽLUŤOUČKÝ kůň ÉCOLE Straße ΣΊΣΥΦΟΣ",
        "👩‍👩‍👧 family emoji 🇫🇷 flag  tabs\tand\u00a0no-break spaces",
        "",
        "   ",
    ]


def vocabulary(texts: list[str], lowercase: bool) -> list[str]:
    counts = Counter(w for t in texts for w in (t.lower() if lowercase else t).split())
    return [w for w, c in counts.most_common() if c >= 2]  # frequent words known, the rest unknown


def test_hash_and_character_ngrams_equal_gensims() -> None:
    """The runtime's hash and n-grams (the fastText plugin trains with the same functions)."""
    pytest.importorskip("gensim")
    from gensim.models.fasttext import ft_ngram_hashes
    from gensim.models.fasttext_inner import compute_ngrams_bytes, ft_hash_bytes

    words = sorted({w for t in real_texts() for w in t.split()})
    assert any("Москва" in w for w in words) and any("東京" in w for w in words) and any("🙂" in w for w in words)
    assert any("ანბანი" in w for w in words) and any("算盤" in w for w in words) and any("космонавт" in w for w in words)  # from Wikipedia
    for word in words:
        data = word.encode("utf-8")
        assert fasttext_hash(data) == ft_hash_bytes(data), word
        for minn, maxn in ((3, 6), (1, 3), (2, 4)):
            ngrams = character_ngrams(word, minn, maxn)
            assert ngrams == compute_ngrams_bytes(word, minn, maxn), word
        featurizer = BagOfRows([], minn=3, maxn=6, bucket=2_000_000)
        assert list(featurizer.rows(word)) == list(ft_ngram_hashes(word, 3, 6, 2_000_000)), word


@pytest.mark.parametrize(
    ("lowercase", "minn", "maxn", "bucket", "word_ngrams"),
    [(False, 0, 0, 0, 1), (True, 0, 0, 0, 1), (False, 0, 0, 5003, 2), (True, 0, 0, 2_000_000, 3),
     (True, 3, 6, 2_000_000, 1), (False, 2, 4, 10_007, 2), (True, 1, 3, 50, 4)],
)
def test_rows_equal_the_training_codes(lowercase: bool, minn: int, maxn: int, bucket: int, word_ngrams: int) -> None:
    """Same rows, in the same order, as ``supervised.text_rows`` (fastText's ``getLine``): word and
    character n-gram rows of each word, then word n-grams over the hashes of all words."""
    from ptmkit_fasttext.supervised import text_rows

    texts = real_texts()
    words = vocabulary(texts, lowercase)
    index = {w: i for i, w in enumerate(words)}
    featurizer = BagOfRows(words, lowercase, minn, maxn, bucket, word_ngrams)
    for text in texts:
        tokens = (text.lower() if lowercase else text).split()
        expected = text_rows(tokens, index, word_ngrams, bucket, minn, maxn)
        assert featurizer.rows(text) == expected, text
        assert all(0 <= r < len(words) + bucket for r in expected)
    feeds = featurizer.encode(texts)
    assert feeds["row_ids"].dtype == np.int32 and feeds["row_mask"].dtype == np.float32
    lengths = [len(featurizer.rows(t)) for t in texts]
    assert feeds["row_ids"].shape == (len(texts), max(lengths)) and feeds["row_mask"].sum(axis=1).tolist() == lengths
    assert feeds["row_mask"][-1].sum() == 0  # a blank text: all padding, the model's mean is 0


@pytest.mark.parametrize(("minn", "maxn", "bucket", "word_ngrams"), [(0, 0, 0, 1), (2, 4, 10_007, 2), (0, 0, 5003, 3)])
def test_end_of_line_rows_equal_the_training_codes(minn: int, maxn: int, bucket: int, word_ngrams: int) -> None:
    """``end_of_line``: the text's tokens then fastText's ``</s>`` (an ova run's
    ``FastTextClassifierConfig.tokens``): its own row (no character n-grams) and the word n-grams
    ending with it, as ``supervised.text_rows`` gives them; a blank text is ``</s>``'s row alone."""
    from ptmkit_fasttext.supervised import FastTextClassifierConfig, text_rows

    texts = real_texts()
    words = ["</s>", *vocabulary(texts, True)]
    index = {w: i for i, w in enumerate(words)}
    config = FastTextClassifierConfig(lowercase=True, minn=minn, maxn=maxn, bucket=bucket or 1, word_ngrams=word_ngrams, loss="ova")
    featurizer = BagOfRows(words, True, minn, maxn, bucket, word_ngrams, end_of_line=True)
    plain = BagOfRows(words, True, minn, maxn, bucket, word_ngrams)
    for text in texts:
        expected = text_rows(config.tokens(text), index, word_ngrams, bucket, minn, maxn)
        assert featurizer.rows(text) == expected, text
        if word_ngrams == 1:
            assert expected == [*plain.rows(text), 0]
        else:  # one more n-gram of each length that ends with </s>
            assert len(expected) == len(plain.rows(text)) + 1 + min(word_ngrams - 1, len(text.split())), text
    assert featurizer.rows("") == [0] and featurizer.spec("v.txt")["end_of_line"] is True


def test_a_known_words_rows_are_subword_vectors_rows() -> None:
    """A one-word text has the rows fastText averages into that word's vector."""
    from ptmkit_fasttext.subwords import SubwordVectors

    words = ["москва", "night", "東京大学", "</s>"]
    vectors = SubwordVectors(words, np.zeros((len(words) + 97, 2), np.float32), None, 2, 5, 97)
    featurizer = BagOfRows(words, minn=2, maxn=5, bucket=97)
    for word in [*words, "unknownword", "🙂👍"]:
        assert featurizer.rows(word) == (vectors.rows(word) or []), word


def write_export(directory: Path, featurizer: dict[str, object], words: str = "a\nb\n") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocabulary.txt").write_text(words, encoding="utf-8")
    (directory / "model.onnx").write_bytes(b"")
    manifest = {
        "format": "ptmkit-export/1", "task": "fasttext-classifier", "labels": ["x", "y"],
        "inputs": [{"name": "row_ids", "dtype": "int32", "encoding": "row_ids"}, {"name": "row_mask", "dtype": "float32", "encoding": "row_mask"}],
        "outputs": [{"name": "logits"}], "featurizer": featurizer, "variants": {"fp32": {"file": "model.onnx"}},
    }
    (directory / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return directory


GOOD = {"kind": "bag-of-rows", "vocabulary": "vocabulary.txt", "lowercase": True, "minn": 3, "maxn": 6, "bucket": 100, "word_ngrams": 2}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "wordpiece"}, "key 'featurizer.kind' is 'wordpiece'"),
        ({"bucket": "100"}, "key 'featurizer.bucket' must be int"),
        ({"lowercase": 1}, "key 'featurizer.lowercase' must be bool"),
        ({"minn": 7}, "key 'featurizer': need 1 <= minn <= maxn"),
        ({"bucket": 0}, "key 'featurizer': character or word n-grams need bucket > 0"),
        ({"vocabulary": "missing.txt"}, "missing.txt: vocabulary file not found"),
        ({"word_ngrams": None}, "key 'featurizer.word_ngrams' must be int"),
        ({"end_of_line": "yes"}, "key 'featurizer.end_of_line' must be bool"),
    ],
)
def test_bad_featurizer_objects_are_one_line_errors(tmp_path: Path, change: dict[str, object], message: str) -> None:
    from ptmkit_export.manifest import read_manifest

    export = write_export(tmp_path / "export", GOOD | change)
    with pytest.raises(ExportDirError) as caught:
        read_manifest(export)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(export) in str(caught.value)


def test_a_featurizer_without_a_key_or_a_row_count_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    from ptmkit_export.manifest import read_manifest

    export = write_export(tmp_path / "e1", {k: v for k, v in GOOD.items() if k != "maxn"})
    with pytest.raises(ExportDirError, match=r"manifest.json: key 'featurizer.maxn' is missing"):
        read_manifest(export)
    export = write_export(tmp_path / "e2", GOOD)
    manifest = read_manifest(export)
    assert bag_of_rows.load(export, manifest["featurizer"], rows=102).rows_total == 102
    with pytest.raises(ExportDirError, match=r"the model has 103 rows but 2 words \+ featurizer.bucket 100 = 102"):
        bag_of_rows.load(export, manifest["featurizer"], rows=103)
