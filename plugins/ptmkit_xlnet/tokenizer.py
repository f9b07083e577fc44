"""XLNet's unigram tokenizer (Yang et al. 2019, section 3.1: a SentencePiece vocabulary, Kudo &
Richardson 2018), trained with the core's :func:`ptmkit.api.train_unigram` (Hugging Face
``tokenizers``: ``Unigram`` model, ``Metaspace`` pre-tokeniser, NFKD accent stripping as
XLNet's ``keep_accents = False``; cased).

The special tokens are XLNet's, in the order of its released ``spiece.model``: ``<unk>`` 0,
``<s>`` 1, ``</s>`` 2, ``<cls>`` 3, ``<sep>`` 4, ``<pad>`` 5, ``<mask>`` 6, ``<eod>`` 7,
``<eop>`` 8. XLNet puts its specials at the **end** (transformers' ``XLNetTokenizer``
template): ``A <sep> <cls>`` and ``A <sep> B <sep> <cls>``, segment ids 0 for ``A`` and its
``<sep>``, 1 for ``B`` and its ``<sep>``, 2 for ``<cls>``. The saved ``tokenizer.json`` loads in
``XLNetTokenizer(tokenizer_file=...)`` unchanged.

Padding: transformers pads XLNet on the **left** (``padding_side = "left"``, pad segment id 3) so
that ``<cls>`` is the last position; ptmkit pads every family on the right (its batches, the
runtime, the server) and reads the classification state at the last *real* token
(:class:`ptmkit_xlnet.backbone.XLNetBackbone`'s ``pooled_output``). With relative positions the
real tokens' states do not depend on the side the padding is on (the tests compare ptmkit's
right-padded batch with transformers' left-padded one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ptmkit.api import train_unigram

#: role -> token, as ``XLNetTokenizer``'s defaults name them.
SPECIAL_TOKEN_NAMES = {
    "unk": "<unk>",
    "bos": "<s>",
    "eos": "</s>",
    "cls": "<cls>",
    "sep": "<sep>",
    "pad": "<pad>",
    "mask": "<mask>",
}
#: Every special token, in the order of their ids (``<eod>``, ``<eop>``: XLNet's document and
#: paragraph ends, with no role here).
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>")
#: The segment id of ``<cls>`` (transformers' ``SEG_ID_CLS``).
CLS_SEGMENT = 2


def xlnet_post_processor(tokenizer: Any) -> Any:
    """``$A <sep> <cls>`` / ``$A <sep> $B:1 <sep>:1 <cls>:2`` with ``tokenizer``'s ids of the specials."""
    from tokenizers import processors

    cls, sep = SPECIAL_TOKEN_NAMES["cls"], SPECIAL_TOKEN_NAMES["sep"]
    return processors.TemplateProcessing(
        single=f"$A:0 {sep}:0 {cls}:{CLS_SEGMENT}",
        pair=f"$A:0 {sep}:0 $B:1 {sep}:1 {cls}:{CLS_SEGMENT}",
        special_tokens=[(sep, tokenizer.token_to_id(sep)), (cls, tokenizer.token_to_id(cls))],
    )


def train_xlnet_unigram(
    texts: Iterable[str], vocabulary_size: int, lowercase: bool = False, strip_accents: bool = True
) -> Any:
    """Train XLNet's unigram vocabulary of at most ``vocabulary_size`` pieces on ``texts``.

    Returns:
        a ``tokenizers.Tokenizer`` with the specials at ids 0-8 and XLNet's post-processor.

    Raises:
        DataError: the texts held no text to learn from.
    """
    tokenizer = train_unigram(texts, vocabulary_size, list(SPECIAL_TOKENS), "<unk>", lowercase, strip_accents)
    tokenizer.post_processor = xlnet_post_processor(tokenizer)
    return tokenizer


def pack_xlnet(first: list[int], second: list[int] | None, sep: int, cls: int) -> tuple[list[int], list[int]]:
    """``first <sep> <cls>`` or ``first <sep> second <sep> <cls>`` with XLNet's segment ids."""
    if second is None:
        return [*first, sep, cls], [0] * (len(first) + 1) + [CLS_SEGMENT]
    ids = [*first, sep, *second, sep, cls]
    return ids, [0] * (len(first) + 1) + [1] * (len(second) + 1) + [CLS_SEGMENT]
