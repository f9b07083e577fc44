"""The core's unigram tokenizer (:mod:`ptmkit.data.unigram`): its segmentations are the Viterbi
paths of its own unigram model (a plain-Python transcription of Kudo 2018's decoding), its
normaliser does what SentencePiece's converters do, and specials come first."""

from __future__ import annotations

import math
import unicodedata

import pytest

from ptmkit.api import ConfigError, DataError, train_unigram
from ptmkit.testing import TOKENIZER_SENTENCES, tiny_texts

SPECIALS = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def tokenizer():
    return train_unigram([*tiny_texts(300), *TOKENIZER_SENTENCES], 300, SPECIALS, "<unk>")


def viterbi(word: str, scores: dict[str, float], unk_score: float) -> list[str]:
    """The most probable segmentation of ``word`` into pieces of ``scores`` (log probabilities);
    a character no piece covers is one unknown piece of score ``unk_score`` (``tokenizers``'
    rule: the lowest score less 10)."""
    best = [(0.0, 0)] + [(-math.inf, 0)] * len(word)
    for end in range(1, len(word) + 1):
        for start in range(max(0, end - 16), end):
            piece = word[start:end]
            score = scores.get(piece, unk_score if end - start == 1 else None)
            if score is not None and best[start][0] + score > best[end][0]:
                best[end] = (best[start][0] + score, start)
    pieces, end = [], len(word)
    while end:
        start = best[end][1]
        pieces.append(word[start:end])
        end = start
    return pieces[::-1]


def test_pieces_are_the_viterbi_segmentation_of_the_model(tokenizer) -> None:
    import json

    model = json.loads(tokenizer.to_str())["model"]
    scores = {piece: score for piece, score in model["vocab"] if piece not in SPECIALS}
    unk_score = min(scores.values()) - 10.0
    checked = 0
    for text in [*tiny_texts(40, seed=1), "naïve café", "the  doggedness\tof\ncats"]:
        normalized = tokenizer.normalizer.normalize_str(text)
        words = ["\u2581" + w for w in normalized.split()]
        expected = [p for w in words for p in viterbi(w, scores, unk_score)]
        tokens = tokenizer.encode(text).tokens
        assert [t if t != "<unk>" else None for t in tokens] == [p if p in scores else None for p in expected], text
        checked += len(tokens)
    assert checked > 300


def test_specials_come_first_and_the_normaliser_lowercases_and_strips_accents(tokenizer) -> None:
    assert [tokenizer.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3, 4]
    assert 250 <= tokenizer.get_vocab_size() <= 300
    assert tokenizer.normalizer.normalize_str("Crème Brûlée ``q''") == 'creme brulee "q"'
    assert tokenizer.encode("a  b\tc\nd").tokens == tokenizer.encode("a b c d").tokens  # whitespace runs split alike
    encoding = tokenizer.encode("The cat")
    assert encoding.tokens[0].startswith("\u2581") and tokenizer.decode(encoding.ids) == "the cat"
    # NFKD + dropping combining marks, as unicodedata does it
    assert tokenizer.normalizer.normalize_str("São Paulo") == "".join(
        c for c in unicodedata.normalize("NFKD", "são paulo") if not unicodedata.combining(c)
    )


def test_cased_tokenizer_keeps_case_and_accents() -> None:
    cased = train_unigram(
        ["Zürich Zürich Zürich", "The Cat"] * 20, 60, SPECIALS, "<unk>", lowercase=False, strip_accents=False
    )
    assert cased.normalizer.normalize_str("Zürich The") == "Zürich The"
    assert cased.decode(cased.encode("Zürich The Cat").ids) == "Zürich The Cat"


def test_bad_arguments_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="unknown token '<oov>'"):
        train_unigram(["a b"], 50, SPECIALS, "<oov>")
    with pytest.raises(DataError, match="no text"):
        train_unigram(["", "  "], 50, SPECIALS, "<unk>")
