"""Byte-level BPE for GPT with Hugging Face ``tokenizers`` (Radford et al. 2019, section 2.2),
trained by the core's :func:`ptmkit.api.train_byte_level_bpe`.

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

from ptmkit.api import byte_level_tokenizer
from ptmkit.api import train_byte_level_bpe as _train_bpe

__all__ = ["END_OF_TEXT", "byte_level_tokenizer", "train_byte_level_bpe"]

END_OF_TEXT = "<|endoftext|>"


def train_byte_level_bpe(texts: Iterable[str], vocabulary_size: int, min_frequency: int = 2) -> Any:
    """Train a byte-level BPE vocabulary of at most ``vocabulary_size`` entries on ``texts``
    (:func:`ptmkit.api.train_byte_level_bpe`).

    ``<|endoftext|>`` is id 0, then the 256 byte characters, then the merges in the order they
    were learned.

    Raises:
        DataError: the texts held no character to learn from.
    """
    from tokenizers import processors

    tokenizer = _train_bpe(texts, vocabulary_size, min_frequency, [END_OF_TEXT])
    end = tokenizer.token_to_id(END_OF_TEXT)
    # GPT-1's fine-tuning input (Radford et al. 2018, section 3.3): a start and an extract token
    # around the text; the last-token head reads the extract token's state.
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{END_OF_TEXT} $A {END_OF_TEXT}", special_tokens=[(END_OF_TEXT, end)]),
    ])
    return tokenizer
