"""Byte-level BPE with Hugging Face ``tokenizers`` (Radford et al. 2019, section 2.2), for every
family whose vocabulary is learned on bytes.

Text is read as UTF-8 bytes, each byte mapped to a printable character (GPT-2's
``bytes_to_unicode``, ``tokenizers``' ``ByteLevel`` pre-tokeniser), split with GPT-2's regular
expression, and merged with BPE; every string is then encodable without an unknown token. The
tokenizer has GPT-2's layout (``ByteLevel`` pre-tokeniser, post-processor and decoder,
``add_prefix_space`` false), which Hugging Face's byte-level fast tokenizers share; a family sets its own post-processor (the specials it adds around a text) on what
:func:`train_byte_level_bpe` returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ptmkit.errors import DataError


def byte_level_tokenizer(model: Any) -> Any:
    """A ``tokenizers.Tokenizer`` around the BPE ``model`` with GPT-2's byte-level pre-tokeniser
    (``add_prefix_space`` false), post-processor (``trim_offsets`` false) and decoder."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors

    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_byte_level_bpe(texts: Iterable[str], vocabulary_size: int, min_frequency: int, special_tokens: Sequence[str]) -> Any:
    """Train a byte-level BPE vocabulary of at most ``vocabulary_size`` entries on ``texts``.

    Ids: ``special_tokens`` first, in their order (0, 1, ...), then the 256 byte characters,
    then the merges in the order ``tokenizers``' ``BpeTrainer`` learned them.

    Args:
        texts: the corpus' paragraphs, read once.
        vocabulary_size: the most entries, specials and the 256 bytes included.
        min_frequency: a merge must occur this often to enter the vocabulary.
        special_tokens: token strings that are never split (``<|endoftext|>``; ``<s>``, ``<pad>``...).

    Returns:
        a ``tokenizers.Tokenizer`` (:func:`byte_level_tokenizer`'s layout).

    Raises:
        DataError: the texts held no text to learn from.
    """
    from tokenizers import models, pre_tokenizers, trainers

    tokenizer = byte_level_tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=vocabulary_size,
        min_frequency=min_frequency,
        special_tokens=list(special_tokens),
        initial_alphabet=sorted(pre_tokenizers.ByteLevel.alphabet()),
        show_progress=False,
    )
    seen = {"texts": 0}

    def counted() -> Iterator[str]:
        for text in texts:
            seen["texts"] += 1
            yield text

    tokenizer.train_from_iterator(counted(), trainer)
    if seen["texts"] == 0:
        raise DataError("the corpus gave no text to build a vocabulary from")
    return tokenizer
