"""SentencePiece-style unigram tokenizers with Hugging Face ``tokenizers``, for every family whose
vocabulary is a unigram language model over pieces (ALBERT, T5, XLNet).

Kudo 2018, "Subword Regularization: Improving Neural Network Translation Models with Multiple
Subword Candidates" (the unigram model) and Kudo & Richardson 2018, "SentencePiece" (the
whitespace handling). A text is normalised and split at whitespace, each word gets the meta
symbol ``▁`` (U+2581) in front (``Metaspace``, ``prepend_scheme="always"``), and its pieces are
those of the Viterbi segmentation under the unigram model. This is the layout Hugging Face
transformers gives the SentencePiece tokenizers it builds from a vocabulary (``AlbertTokenizer``,
``XLNetTokenizer`` in transformers 5): the same normaliser steps (less SentencePiece's
``precompiled_charsmap``, an NFKC table that only the ``sentencepiece`` trainer writes; NFKD is
applied when accents are stripped), the same pre-tokeniser and decoder, so that
``AlbertTokenizer(vocab=...)`` on the pieces and scores of a model trained here tokenizes as it
does, and the ``tokenizer.json`` loads there unchanged.

A family sets its own post-processor (the specials it adds around a text) on what
:func:`train_unigram` returns, as with :func:`ptmkit.data.byte_level_bpe.train_byte_level_bpe`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ptmkit.errors import ConfigError, DataError

#: SentencePiece's meta symbol for a space.
META_SPACE = "\u2581"


def unigram_normalizer(lowercase: bool, strip_accents: bool) -> Any:
    """The normaliser of Hugging Face's SentencePiece tokenizers: LaTeX quotes (``````, ``''``)
    to ``"``, then (``strip_accents``) NFKD and accent removal, then (``lowercase``) lower case."""
    from tokenizers import normalizers

    steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if strip_accents:
        steps += [normalizers.NFKD(), normalizers.StripAccents()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps)


def unigram_tokenizer(model: Any, lowercase: bool = True, strip_accents: bool = True) -> Any:
    """A ``tokenizers.Tokenizer`` around the ``Unigram`` ``model`` with SentencePiece's
    whitespace handling: :func:`unigram_normalizer`, a split at any run of whitespace (tabs and
    newlines included, as SentencePiece's normalisation makes them spaces) and a ``Metaspace``
    pre-tokeniser (``▁`` before every word), and the matching ``Metaspace`` decoder. No
    post-processor: the family adds its specials."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers

    tokenizer = Tokenizer(model)
    tokenizer.normalizer = unigram_normalizer(lowercase, strip_accents)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement=META_SPACE, prepend_scheme="always")]
    )
    tokenizer.decoder = decoders.Metaspace(replacement=META_SPACE, prepend_scheme="always")
    return tokenizer


def train_unigram(
    texts: Iterable[str],
    vocabulary_size: int,
    special_tokens: Sequence[str],
    unk_token: str,
    lowercase: bool = True,
    strip_accents: bool = True,
    max_piece_length: int = 16,
    shrinking_factor: float = 0.75,
) -> Any:
    """Train a unigram vocabulary of ``vocabulary_size`` pieces on ``texts`` (``tokenizers``'
    ``UnigramTrainer``: EM over a seed vocabulary of frequent substrings, pruned by
    ``shrinking_factor`` per round to the pieces whose removal costs the likelihood least;
    every character of the texts is kept, so only a character never seen is unknown).

    Ids: ``special_tokens`` first, in their order (0, 1, ...), then the pieces by decreasing
    log probability (the score each holds in the model).

    Args:
        texts: the corpus' paragraphs, read once.
        vocabulary_size: the pieces, specials included (the trainer may stop short of it on a
            small corpus that has fewer distinct substrings).
        special_tokens: token strings that are never split (``<pad>``, ``[CLS]``...).
        unk_token: the one of ``special_tokens`` that stands for an unknown piece.
        lowercase: lower-case the text first (ALBERT: true; T5, XLNet: false).
        strip_accents: NFKD and drop combining marks first (ALBERT, XLNet: true; T5: false).
        max_piece_length: the longest piece, in characters (SentencePiece's default, 16).
        shrinking_factor: the share of the vocabulary kept at each pruning round (0.75).

    Returns:
        a ``tokenizers.Tokenizer`` (:func:`unigram_tokenizer`'s layout).

    Raises:
        ConfigError: ``unk_token`` is not one of ``special_tokens``.
        DataError: the texts held no text to learn from.
    """
    from tokenizers import models, trainers

    if unk_token not in special_tokens:
        raise ConfigError(f"the unknown token {unk_token!r} must be one of the special tokens {list(special_tokens)}")
    tokenizer = unigram_tokenizer(models.Unigram(), lowercase, strip_accents)
    trainer = trainers.UnigramTrainer(
        vocab_size=vocabulary_size,
        special_tokens=list(special_tokens),
        unk_token=unk_token,
        max_piece_length=max_piece_length,
        shrinking_factor=shrinking_factor,
        show_progress=False,
    )
    seen = {"texts": 0}

    def counted() -> Iterator[str]:
        for text in texts:
            if text.strip():
                seen["texts"] += 1
                yield text

    tokenizer.train_from_iterator(counted(), trainer)
    if seen["texts"] == 0:
        raise DataError("the corpus gave no text to build a vocabulary from")
    return tokenizer
