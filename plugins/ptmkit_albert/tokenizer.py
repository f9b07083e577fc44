"""ALBERT's unigram tokenizer (Lan et al. 2020, section 4.1: a SentencePiece vocabulary, Kudo &
Richardson 2018), trained with the core's :func:`ptmkit.api.train_unigram` (Hugging Face
``tokenizers``: ``Unigram`` model, ``Metaspace`` pre-tokeniser, lower case and NFKD accent
stripping as ALBERT's ``do_lower_case`` / ``keep_accents = False``).

The special tokens are ALBERT's, in the order of its released vocabularies and of Hugging Face's
``AlbertTokenizer``: ``<pad>`` 0, ``<unk>`` 1, ``[CLS]`` 2, ``[SEP]`` 3, ``[MASK]`` 4. The
post-processor is BERT's template, as ``AlbertTokenizerFast`` builds it: ``[CLS] A [SEP]`` and
``[CLS] A [SEP] B [SEP]`` with segment ids 0 then 1. The saved ``tokenizer.json`` loads in
``AlbertTokenizerFast(tokenizer_file=...)`` unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ptmkit.api import train_unigram

#: role -> token, as ``AlbertTokenizer``'s defaults name them.
SPECIAL_TOKEN_NAMES = {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


def albert_post_processor(tokenizer: Any) -> Any:
    """``[CLS] $A [SEP]`` / ``[CLS] $A [SEP] $B:1 [SEP]:1`` with ``tokenizer``'s ids of the specials."""
    from tokenizers import processors

    cls, sep = SPECIAL_TOKEN_NAMES["cls"], SPECIAL_TOKEN_NAMES["sep"]
    return processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))],
    )


def train_albert_unigram(
    texts: Iterable[str], vocabulary_size: int, lowercase: bool = True, strip_accents: bool = True
) -> Any:
    """Train ALBERT's unigram vocabulary of at most ``vocabulary_size`` pieces on ``texts``.

    Returns:
        a ``tokenizers.Tokenizer`` with the specials at ids 0-4 and BERT's post-processor.

    Raises:
        DataError: the texts held no text to learn from.
    """
    tokenizer = train_unigram(
        texts, vocabulary_size, list(SPECIAL_TOKEN_NAMES.values()), SPECIAL_TOKEN_NAMES["unk"], lowercase, strip_accents
    )
    tokenizer.post_processor = albert_post_processor(tokenizer)
    return tokenizer
