"""ELMo's word vocabulary with Hugging Face ``tokenizers``: words are the whitespace-separated
strings of a line (``str.split()``; lower-cased with ``model.lowercase``), the
``vocabulary_size - 4`` most frequent of the corpus after ``<pad>``, ``<unk>``, ``<S>`` and ``</S>``
(ids 0-3), most frequent first (so the softmax's words are the first ids). A word outside the
vocabulary is ``<unk>``. Encoding with special tokens (fine-tuning)
wraps a text in ``<S> ... </S>``, as bilm-tf wraps each sentence.

The character CNN reads each word's UTF-8 bytes (the core's ``char_ids`` field, computed from
the vocabulary entry), so every character of every script has ids and none is outside the
character vocabulary; the corpus reader has already replaced bytes that are not UTF-8 with
U+FFFD, whose three bytes are then the one spelling every such byte gets. A word longer than
:data:`MAX_CHARACTERS` bytes is cut to its first :data:`MAX_CHARACTERS`; the vocabulary's cut words
are counted in a warning when the vocabulary is built.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from ptmkit.api import train_word_level

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<S>", "</S>"
#: Characters (UTF-8 bytes) the character CNN reads per word (bilm-tf's ``max_characters_per_token``).
MAX_CHARACTERS = 50


def long_words(tokenizer: Any, limit: int = MAX_CHARACTERS) -> list[str]:
    """The vocabulary's words longer than ``limit`` UTF-8 bytes, which ``char_ids`` cut."""
    return sorted(word for word in tokenizer.get_vocab() if len(word.encode("utf-8")) > limit)


def train_word_vocabulary(texts: Iterable[str], vocabulary_size: int, min_frequency: int, lowercase: bool) -> Any:
    """A word-level ``tokenizers.Tokenizer`` of at most ``vocabulary_size`` entries on ``texts``
    (module docstring); warns (``UserWarning``) when some of its words will be cut.

    Raises:
        DataError: the texts held no word.
    """
    from tokenizers import processors

    tokenizer = train_word_level(texts, vocabulary_size, min_frequency, (PAD, UNK, BOS, EOS), lowercase)
    ids = [(token, tokenizer.token_to_id(token)) for token in (BOS, EOS)]
    tokenizer.post_processor = processors.TemplateProcessing(single=f"{BOS} $A {EOS}", pair=f"{BOS} $A {EOS} $B:1 {EOS}:1", special_tokens=ids)
    cut = long_words(tokenizer)
    if cut:
        warnings.warn(
            f"{len(cut):,} of the vocabulary's {tokenizer.get_vocab_size():,} words are longer than {MAX_CHARACTERS} UTF-8 bytes "
            f"(e.g. {cut[0][:60]!r}); the character CNN reads their first {MAX_CHARACTERS}",
            stacklevel=2,
        )
    return tokenizer
