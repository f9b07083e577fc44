"""BERT's WordPiece tokenizer: normalisation matches the vocabulary; inputs truncated together."""

from __future__ import annotations

import numpy as np
from tinyconfig import DATA

from ptmkit.testing import encode_texts
from ptmkit_bert import BertFamily
from ptmkit_bert.tokenizer import SPECIALS, train_wordpiece

TEXTS = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:300]


def test_uncased_vocabulary_lowercases_and_strips_accents() -> None:
    tokenizer = train_wordpiece(TEXTS + ["Zürich Zürich Zürich café café"], 800, lowercase=True)
    assert tokenizer.normalizer.normalize_str("Zürich CAFÉ") == "zurich cafe"
    vocab = tokenizer.get_vocab()
    assert not any(token != token.lower() for token in vocab if token not in SPECIALS)


def test_cased_vocabulary_is_neither_lowercased_nor_accent_stripped() -> None:
    tokenizer = train_wordpiece(TEXTS + ["Zürich Zürich Zürich café café"], 800, lowercase=False)
    assert tokenizer.normalizer.normalize_str("Zürich CAFÉ") == "Zürich CAFÉ"
    vocab = tokenizer.get_vocab()
    assert any(token[0].isupper() for token in vocab if token not in SPECIALS)
    assert "ü" in vocab or "##ü" in vocab


def test_specials_come_first_and_ids_do_not_depend_on_hash_order() -> None:
    tokenizer = train_wordpiece(TEXTS, 600, lowercase=True)
    assert [tokenizer.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3, 4]
    learned = sorted(tokenizer.get_vocab(), key=tokenizer.get_vocab().get)[len(SPECIALS) :]
    assert learned == sorted(learned)


def test_inputs_are_truncated_together_to_the_maximum_length() -> None:
    tokenizer = train_wordpiece(TEXTS, 600, lowercase=True)
    long_text = " ".join(TEXTS[:3])
    arrays = encode_texts(tokenizer, [long_text, "the"], 16, BertFamily.inputs, pad_id=0)
    assert {a.shape for a in arrays.values()} == {(2, 16)}
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    assert arrays["token_ids"][0, 0] == cls_id and arrays["token_ids"][0, -1] == sep_id
    assert arrays["padding_mask"][0].all()
    short = arrays["token_ids"][1]
    assert short[0] == cls_id and short[2] == sep_id and (short[3:] == 0).all()
    np.testing.assert_array_equal(arrays["padding_mask"][1], [1, 1, 1] + [0] * 13)
    # The tokenizer object itself is left without truncation or padding.
    assert tokenizer.truncation is None and tokenizer.padding is None
