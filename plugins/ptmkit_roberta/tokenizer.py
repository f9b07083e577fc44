"""Byte-level BPE for RoBERTa (Liu et al. 2019, section 4.4), trained with the core's
:func:`ptmkit.api.train_byte_level_bpe` (GPT-2's byte-level BPE, Hugging Face ``tokenizers``).

The special tokens are fairseq's and Hugging Face's RoBERTa tokens, in their order: ``<s>`` 0,
``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, then ``<mask>`` 4 (a RoBERTa checkpoint has ``<mask>`` last;
a trained vocabulary keeps all specials first). The post-processor is ``RobertaProcessing``:
``<s> A </s>`` and, for a pair, ``<s> A </s></s> B </s>``, all segment ids 0, as Hugging Face's
``RobertaTokenizerFast`` encodes; the saved ``tokenizer.json`` loads there unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ptmkit.api import train_byte_level_bpe

#: role -> token, as ``RobertaTokenizer``'s defaults name them.
SPECIAL_TOKEN_NAMES = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}


def train_roberta_bpe(texts: Iterable[str], vocabulary_size: int, min_frequency: int = 2) -> Any:
    """Train RoBERTa's byte-level BPE on ``texts`` (at most ``vocabulary_size`` entries).

    Returns:
        a ``tokenizers.Tokenizer`` with the specials at ids 0-4 and RoBERTa's post-processor.

    Raises:
        DataError: the texts held no text to learn from.
    """
    from tokenizers import processors

    tokenizer = train_byte_level_bpe(texts, vocabulary_size, min_frequency, list(SPECIAL_TOKEN_NAMES.values()))
    cls, sep = SPECIAL_TOKEN_NAMES["cls"], SPECIAL_TOKEN_NAMES["sep"]
    tokenizer.post_processor = processors.RobertaProcessing(
        (sep, tokenizer.token_to_id(sep)), (cls, tokenizer.token_to_id(cls)), trim_offsets=True, add_prefix_space=False
    )
    return tokenizer
