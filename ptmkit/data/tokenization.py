"""Encoding texts for a backbone with a Hugging Face tokenizer (fine-tuning and export checks).

A family declares its inputs (:class:`ptmkit.contract.InputSpec`); each comes from a tokenizer
field (:mod:`ptmkit_export.fields`, shared with the runtime so that both compute inputs alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ptmkit.contract import InputSpec


def manifest_inputs(inputs: Sequence[InputSpec]) -> list[dict[str, Any]]:
    """The export manifest's ``inputs``: ``name``, ``dtype``, ``encoding`` (the field), ``shape``
    (the named axes; a fixed size replaces its axis name)."""
    return [
        {"name": s.name, "dtype": s.dtype, "encoding": s.field, "shape": [s.sizes.get(axis, axis) for axis in s.axes]}
        for s in inputs
    ]


def character_table(tokenizer: Any, inputs: Sequence[InputSpec]) -> np.ndarray | None:
    """The ``char_ids`` table of ``tokenizer`` when an input is fed from ``char_ids``, else None.

    Raises:
        ValueError: a ``char_ids`` input without a fixed ``characters`` size.
    """
    from ptmkit_export.fields import tokenizer_character_table

    spec = next((s for s in inputs if s.field == "char_ids"), None)
    if spec is None:
        return None
    size = spec.sizes.get(spec.axes[-1])
    if not size:
        raise ValueError(f"input {spec.name!r} (char_ids) needs a fixed size of its last axis {spec.axes[-1]!r} in sizes")
    return tokenizer_character_table(tokenizer, int(size))


def derive_inputs(
    inputs: Sequence[InputSpec], token_ids: np.ndarray, segment_ids: np.ndarray | None, padding_mask: np.ndarray, characters: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """The declared ``inputs`` from ``(batch, sequence)`` token ids, segment ids and padding mask."""
    from ptmkit_export.fields import derive

    return {s.name: derive(s.field, token_ids, segment_ids, padding_mask, np.dtype(s.dtype), characters) for s in inputs}


def encode_texts(tokenizer: Any, texts: list[str], sequence_length: int, inputs: Sequence[InputSpec], pad_id: int) -> dict[str, np.ndarray]:
    """Encode ``texts`` with the tokenizer's post-processor (specials), truncated together and
    padded to ``sequence_length``.

    Returns:
        one ``(len(texts), sequence_length, ...)`` array per declared input.
    """
    from ptmkit_export.clip import clip_text, plain_copy

    tokenizer = plain_copy(tokenizer)  # truncation/padding settings stay local
    texts = [clip_text(tokenizer, text, sequence_length) for text in texts]  # a long text: its prefix, same tokens
    tokenizer.enable_truncation(max_length=sequence_length)
    tokenizer.enable_padding(pad_id=pad_id, length=sequence_length)
    encodings = tokenizer.encode_batch(texts)
    ids = np.asarray([e.ids for e in encodings], np.int32).reshape(len(texts), -1)
    type_ids = np.asarray([e.type_ids for e in encodings], np.int32).reshape(len(texts), -1)
    mask = np.asarray([e.attention_mask for e in encodings], np.int32).reshape(len(texts), -1)
    return derive_inputs(inputs, ids, type_ids, mask, character_table(tokenizer, inputs))


#: The lone punctuation pieces ALBERT's ``_is_start_piece`` takes as word starts.
SENTENCEPIECE_START_PIECES = frozenset('!"#$%&"()*+,-./:;?@[\\]^_`{|}~')


def word_start_table(tokenizer: Any) -> np.ndarray | None:
    """``(vocabulary_size,)`` bool: True for the tokens that begin a word, or None when the
    tokenizer's model does not mark word continuations.

    A WordPiece model (and a BPE model with a ``continuing_subword_prefix``) writes every piece of
    a word but the first with its ``continuing_subword_prefix`` (``##``): those pieces continue a
    word, every other token (added and special tokens included) begins one. This is the rule of
    Google BERT's whole-word masking (``create_pretraining_data.py``), read from the tokenizer's
    own setting. A SentencePiece-style tokenizer (a ``Metaspace`` decoder, e.g. a unigram model)
    writes ``▁`` in front of each word's first piece: as in ALBERT's ``_is_start_piece``
    (``create_pretraining_data.py``), a piece begins a word when it starts with ``▁`` or ``<``, or
    is one punctuation character (:data:`SENTENCEPIECE_START_PIECES`); on encoded text it gives the word boundaries of the encoding's ``word_ids``
    (``tests/test_objective_variants.py`` checks it on the shipped corpus).
    """
    prefix = getattr(tokenizer.model, "continuing_subword_prefix", None)
    space = getattr(tokenizer.decoder, "replacement", None) if type(tokenizer.decoder).__name__ == "Metaspace" else None
    if not prefix and not space:
        return None
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    table = np.ones(max(vocabulary.values()) + 1, bool)
    added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    for token, index in vocabulary.items():
        if token in added:
            continue
        if prefix:
            table[index] = not token.startswith(prefix)
        else:  # ALBERT's _is_start_piece: "▁" words, "<" specials and lone punctuation begin a word
            table[index] = token.startswith((space, "<")) or token in SENTENCEPIECE_START_PIECES
    return table


def train_word_level(texts: Any, vocabulary_size: int, min_frequency: int, specials: Sequence[str], lowercase: bool = False, what: str = "the corpus", key: str = "model.min_frequency") -> Any:
    """A word-level Hugging Face ``tokenizers.Tokenizer`` trained on ``texts``: words are the
    whitespace-separated strings of a line (lower-cased with ``lowercase``); ``specials`` take the
    first ids (the first of them unused by the model here, the second the unknown word), then the
    ``vocabulary_size - len(specials)`` most frequent words occurring ``min_frequency`` times or
    more (``tokenizers``' ``WordLevelTrainer``). No post-processor: the family adds its own.

    Raises:
        DataError: no word of ``what`` occurs ``min_frequency`` times (``key`` names the setting).
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    from ptmkit.errors import DataError

    tokenizer = Tokenizer(models.WordLevel(unk_token=specials[1]))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(vocab_size=vocabulary_size, min_frequency=min_frequency, special_tokens=list(specials), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    if tokenizer.get_vocab_size() <= len(specials):
        raise DataError(f"{what} gave no word occurring at least {key} = {min_frequency} times to build a vocabulary from")
    return tokenizer


def pack_cls_sep(first: list[int], second: list[int] | None, sequence_length: int, cls: int, sep: int) -> tuple[list[int], list[int]]:
    """BERT's packing (Devlin et al. 2019): ``[CLS] first [SEP]`` as segment 0 and ``second [SEP]``
    as segment 1, cut to ``sequence_length``; returns ``(token_ids, segment_ids)``."""
    token_ids = [cls, *first, sep]
    segment_ids = [0] * len(token_ids)
    if second is not None:
        token_ids += [*second, sep]
        segment_ids += [1] * (len(second) + 1)
    return token_ids[:sequence_length], segment_ids[:sequence_length]


class ClsSepInputs:
    """Mixin for a :class:`~ptmkit.contract.ModelFamily` whose texts are packed as BERT's
    ``[CLS] A [SEP] B [SEP]`` (Devlin et al. 2019; also ALBERT, ELECTRA): two special tokens around
    one text, three around a pair, segment ids 0 then 1 (:func:`pack_cls_sep`). The family's
    ``special_tokens`` must give the ``cls`` and ``sep`` roles."""

    def num_special_tokens(self, pair: bool) -> int:
        """2 for one text (``[CLS]``, ``[SEP]``), 3 for a pair."""
        return 3 if pair else 2

    def pack(self, first: list[int], second: list[int] | None, sequence_length: int, specials: Any) -> tuple[list[int], list[int]]:
        """``[CLS] first [SEP]`` (segment 0) and ``second [SEP]`` (segment 1), cut to ``sequence_length``."""
        return pack_cls_sep(first, second, sequence_length, specials["cls"], specials["sep"])
