"""ULMFiT's word vocabulary with Hugging Face ``tokenizers``: words are the whitespace-separated
strings of a line (lower-cased with ``model.lowercase``), the ``vocabulary_size - 4`` most
frequent of the corpus after ``<pad>``, ``<unk>``, ``<s>`` and ``</s>`` (ids 0-3). A word outside
the vocabulary is ``<unk>``. A text is read as ``<s> words`` (fastai's ``xxbos``), a pair as
``<s> first </s> second``: the language model's windows and the classifier's inputs alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ptmkit.api import train_word_level

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"


def train_word_vocabulary(texts: Iterable[str], vocabulary_size: int, min_frequency: int, lowercase: bool) -> Any:
    """A word-level ``tokenizers.Tokenizer`` of at most ``vocabulary_size`` entries on ``texts``
    (module docstring).

    Raises:
        DataError: the texts held no word occurring ``min_frequency`` times.
    """
    from tokenizers import processors

    tokenizer = train_word_level(texts, vocabulary_size, min_frequency, (PAD, UNK, BOS, EOS), lowercase)
    ids = [(token, tokenizer.token_to_id(token)) for token in (BOS, EOS)]
    tokenizer.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {EOS} $B:1", special_tokens=ids)
    return tokenizer
