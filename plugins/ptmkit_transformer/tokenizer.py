"""The shared source/target BPE vocabulary (Vaswani et al. 2017, section 5.1: "a shared
source-target vocabulary of about 37000 tokens" by byte-pair encoding, Sennrich et al. 2016),
trained with Hugging Face ``tokenizers``.

Text is NFC-normalised and split at whitespace the way SentencePiece does it (``Metaspace``: a
word keeps its leading space as ``▁``), so that decoding gives back the spaces exactly; BPE then
merges characters within words. Characters never seen in training become ``<unk>``. Specials:
``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2 (the decoder's start), ``</s>`` 3 (end of a sentence).
Encoding adds no specials: the family places them (``source </s>``; ``<s> target``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ptmkit.api import DataError

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIALS = (PAD, UNK, BOS, EOS)


def metaspace_tokenizer(model: Any) -> Any:
    """A ``Tokenizer`` around the BPE ``model`` with NFC normalisation and SentencePiece-style
    ``Metaspace`` pre-tokenisation and decoding."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers

    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    return tokenizer


def train_shared_bpe(texts: Iterable[str], vocabulary_size: int, min_frequency: int = 2, extra_specials: Iterable[str] = ()) -> Any:
    """Train a BPE vocabulary of at most ``vocabulary_size`` entries on ``texts`` (source and
    target sentences together: one vocabulary for both languages). ``extra_specials`` (e.g. the
    denoising objectives' ``<mask>`` and sentinels) follow the four specials, ids 4, 5, ...

    Raises:
        DataError: the texts held no character to learn from.
    """
    from tokenizers import models, trainers

    tokenizer = metaspace_tokenizer(models.BPE(unk_token=UNK))
    trainer = trainers.BpeTrainer(vocab_size=vocabulary_size, min_frequency=min_frequency, special_tokens=[*SPECIALS, *extra_specials], show_progress=False)
    seen = {"texts": 0}

    def counted() -> Iterable[str]:
        for text in texts:
            seen["texts"] += 1
            yield text

    tokenizer.train_from_iterator(counted(), trainer)
    if seen["texts"] == 0:
        raise DataError("the sentence pairs gave no text to build a vocabulary from")
    return tokenizer
