"""Byte-level BPE for GPT with Hugging Face ``tokenizers`` (Radford et al. 2019, section 2.2).

Text is read as UTF-8 bytes, each byte mapped to a printable character (GPT-2's ``bytes_to_unicode``,
``tokenizers``' ``ByteLevel`` pre-tokeniser), split with GPT-2's regular expression, and merged
with BPE; every string is then encodable without an unknown token. The one special token,
``<|endoftext|>``, separates documents and starts every pre-training window. The trained
``tokenizer.json`` has GPT-2's layout (``ByteLevel`` pre-tokeniser, post-processor and decoder,
``add_prefix_space`` false), so Hugging Face's ``GPT2TokenizerFast`` and ``ptmkit_export`` read it;
encoding with special tokens (fine-tuning) puts ``<|endoftext|>`` before and after a text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ptmkit.api import DataError

END_OF_TEXT = "<|endoftext|>"


def byte_level_tokenizer(model: Any) -> Any:
    """A ``Tokenizer`` around the BPE ``model`` with GPT-2's byte-level pre-tokeniser,
    post-processor and decoder."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors

    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_byte_level_bpe(texts: Iterable[str], vocabulary_size: int, min_frequency: int = 2) -> Any:
    """Train a byte-level BPE vocabulary of at most ``vocabulary_size`` entries on ``texts``.

    ``<|endoftext|>`` is id 0, then the 256 byte characters, then the merges in the order they
    were learned.

    Raises:
        DataError: the texts held no character to learn from.
    """
    from tokenizers import models, pre_tokenizers, processors, trainers

    tokenizer = byte_level_tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=vocabulary_size,
        min_frequency=min_frequency,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=sorted(pre_tokenizers.ByteLevel.alphabet()),
        show_progress=False,
    )
    seen = {"texts": 0}

    def counted() -> Iterable[str]:
        for text in texts:
            seen["texts"] += 1
            yield text

    tokenizer.train_from_iterator(counted(), trainer)
    if seen["texts"] == 0:
        raise DataError("the corpus gave no text to build a vocabulary from")
    end = tokenizer.token_to_id(END_OF_TEXT)
    # GPT-1's fine-tuning input (Radford et al. 2018, section 3.3): a start and an extract token
    # around the text; the last-token head reads the extract token's state.
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{END_OF_TEXT} $A {END_OF_TEXT}", special_tokens=[(END_OF_TEXT, end)]),
    ])
    return tokenizer
