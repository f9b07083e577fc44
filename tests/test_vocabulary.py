"""The word-level vocabulary against gensim 4.4 on the same corpus: word order and counts,
sub-sampling probabilities, the noise distribution, Huffman codes; and the one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tinyconfig import DATA

from ptmkit.data.readers import read_corpus
from ptmkit.errors import DataError
from ptmkit.wordvectors.vocabulary import (
    build_vocabulary,
    encode_corpus,
    huffman_codes,
    keep_probabilities,
    load_token_file,
    noise_table,
)

gensim = pytest.importorskip("gensim")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:600]
    path = tmp_path_factory.mktemp("vocab") / "wiki-600.txt"
    path.write_text("\n\n".join(lines) + "\n", encoding="utf-8")  # blank lines between: never sentences
    return path


@pytest.fixture(scope="module")
def reference(corpus: Path):  # type: ignore[no-untyped-def]
    from gensim.models import Word2Vec
    from gensim.models.word2vec import LineSentence

    model = Word2Vec(vector_size=8, min_count=3, sample=1e-3, hs=1, negative=5, seed=1, workers=1)
    model.build_vocab(LineSentence(str(corpus)))
    return model


def test_words_and_counts_match_gensim(corpus: Path, reference) -> None:  # type: ignore[no-untyped-def]
    vocabulary = build_vocabulary(corpus, read_corpus(corpus), min_count=3)
    theirs = {w: reference.wv.get_vecattr(w, "count") for w in reference.wv.index_to_key}
    assert dict(zip(vocabulary.words, vocabulary.counts.tolist(), strict=True)) == theirs
    assert np.all(np.diff(vocabulary.counts) <= 0)  # most frequent first (gensim orders ties arbitrarily)
    assert vocabulary.tokens_seen == reference.corpus_total_words


def test_subsampling_probabilities_match_gensim(corpus: Path, reference) -> None:  # type: ignore[no-untyped-def]
    vocabulary = build_vocabulary(corpus, read_corpus(corpus), min_count=3)
    ours = keep_probabilities(vocabulary.counts, 1e-3)
    theirs = np.asarray([reference.wv.get_vecattr(w, "sample_int") for w in vocabulary.words]) / 2**32
    np.testing.assert_allclose(ours, theirs, atol=1e-9)


def test_noise_distribution_matches_gensims_cumulative_table(corpus: Path, reference) -> None:  # type: ignore[no-untyped-def]
    vocabulary = build_vocabulary(corpus, read_corpus(corpus), min_count=3)
    table = noise_table(vocabulary.counts, 0.75)
    ours = np.bincount(table, minlength=len(vocabulary)) / len(table)
    theirs = np.diff(np.r_[0, reference.cum_table]) / reference.cum_table[-1]
    np.testing.assert_allclose(ours, theirs, atol=2e-7)


def test_huffman_codes_are_optimal_prefix_codes_like_gensims(corpus: Path, reference) -> None:  # type: ignore[no-untyped-def]
    vocabulary = build_vocabulary(corpus, read_corpus(corpus), min_count=3)
    huffman = huffman_codes(vocabulary.counts)
    lengths = huffman.lengths()
    theirs = np.asarray([len(reference.wv.get_vecattr(w, "code")) for w in vocabulary.words])
    # Any two Huffman trees of the same counts have the same weighted path length.
    assert int((vocabulary.counts * lengths).sum()) == int((vocabulary.counts * theirs).sum())
    codes = {"".join(map(str, huffman.codes[a:b])) for a, b in zip(huffman.offsets[:-1], huffman.offsets[1:], strict=True)}
    assert len(codes) == len(vocabulary)
    assert not any(a != b and b.startswith(a) for a in codes for b in codes if len(a) < 8)  # prefix-free (short codes)
    assert huffman.points.max() == len(vocabulary) - 2  # inner nodes 0 .. V-2, root first
    assert all(huffman.points[a] == len(vocabulary) - 2 for a in huffman.offsets[:-1])


def test_max_vocab_keeps_the_most_frequent(corpus: Path) -> None:
    vocabulary = build_vocabulary(corpus, read_corpus(corpus), min_count=1, max_vocab=50)
    full = build_vocabulary(corpus, read_corpus(corpus), min_count=1)
    assert vocabulary.words == full.words[:50]


def test_encoded_corpus_drops_unknown_words_and_keeps_long_lines_whole(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    long_line = " ".join(["a", "b", "zz"] * 10_000)  # 30,000 tokens on one line
    corpus.write_text(f"a b\n\n   \nzz zz\n{long_line}\n")
    vocabulary = build_vocabulary(corpus, read_corpus(corpus), min_count=2)
    tokens = encode_corpus(read_corpus(corpus), vocabulary, tmp_path / "tokens")
    assert load_token_file(tmp_path / "tokens").offsets.tolist() == tokens.offsets.tolist()
    assert np.diff(tokens.offsets).tolist() == [2, 2, 30_000]  # blank lines are not sentences
    assert tokens.raw_tokens == 2 + 2 + 30_000
    (chunk, sentence), *rest = list(tokens.chunks(1000))
    assert len(chunk) == 4 and rest[0][0].size == 30_000  # a longer sentence comes whole


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "it is empty): 0 tokens seen, 0 unique words, 0 with count >= min_count=5"),
        ("\n  \n\n", "3 line(s), all blank): 0 tokens seen, 0 unique words, 0 with count >= min_count=5"),
        ("a b c\nd e a\n", "too few words to train on: 6 tokens seen in 2 lines, 5 unique words, 0 with count >= min_count=5 "
         "(at least 2 needed); lower model.min_count (the most frequent word occurs 2 times), e.g. --set model.min_count=1"),
    ],
)
def test_unusable_corpora_get_one_line_errors(tmp_path: Path, text: str, expected: str) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text(text)
    with pytest.raises(DataError) as info:
        build_vocabulary(corpus, read_corpus(corpus), min_count=5)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(corpus)) and expected in message


def test_dynamic_window_weights_near_words_as_word2vec() -> None:
    """word2vec.c / gensim: each center sees ``window - b`` words per side, ``b`` uniform in
    ``0 .. window-1``; so a word at distance ``d`` is a context with probability ``(window - d + 1) / window``."""
    from ptmkit.wordvectors.word_prediction import window_pairs

    window, size = 5, 200_000
    sentence = np.repeat(np.arange(4), size // 4)  # four long sentences: no pair crosses them
    center, context = window_pairs(sentence, window, np.random.default_rng(0))
    assert np.all(sentence[center] == sentence[context])
    distance = np.abs(context - center)
    assert distance.min() == 1 and distance.max() == window
    for d in range(1, window + 1):
        expected = 2 * (size - 4 * d) * (window - d + 1) / window
        assert abs((distance == d).sum() / expected - 1) < 0.01
    assert np.all(np.diff(center) >= 0)  # corpus order, as gensim walks the sentence
