"""ptmkit's BERT plugin: the ``bert`` model family on keras-hub's BertBackbone.

Registered under the entry-point group ``ptmkit.plugins`` exactly as a third-party plugin is. It
provides the family only; the masked-LM and next-sentence objectives and the classification head
live in the core and serve BERT because its backbone provides what they require.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ptmkit
from ptmkit.contract import POOLED_OUTPUT, SEQUENCE_OUTPUT, TOKEN_EMBEDDING, ModelFamily, SpecialTokens
from ptmkit_bert.config import BertConfig

__all__ = ["BertConfig", "BertFamily"]


class BertFamily(ModelFamily):
    """BERT (Devlin et al. 2019): WordPiece, a transformer encoder, ``[CLS] A [SEP] B [SEP]`` inputs."""

    name = "bert"
    description = "BERT encoder (keras-hub BertBackbone) with a WordPiece tokenizer"
    config_class = BertConfig
    provides = frozenset({SEQUENCE_OUTPUT, POOLED_OUTPUT, TOKEN_EMBEDDING})
    default_objectives = ("mlm",)

    def build_backbone(self, config: BertConfig) -> Any:
        from ptmkit_bert.backbone import build_backbone

        return build_backbone(config)

    def train_tokenizer(self, texts: Iterable[str], config: BertConfig) -> Any:
        from ptmkit_bert.tokenizer import train_wordpiece

        return train_wordpiece(texts, config.vocabulary_size, config.lowercase, config.min_frequency)

    def special_tokens(self, tokenizer: Any) -> SpecialTokens:
        from ptmkit_bert.tokenizer import special_tokens

        return special_tokens(tokenizer)

    def num_special_tokens(self, pair: bool) -> int:
        return 3 if pair else 2

    def pack(
        self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens
    ) -> tuple[list[int], list[int]]:
        token_ids = [specials.cls, *first, specials.sep]
        segment_ids = [0] * len(token_ids)
        if second is not None:
            token_ids += [*second, specials.sep]
            segment_ids += [1] * (len(second) + 1)
        return token_ids[:sequence_length], segment_ids[:sequence_length]


@ptmkit.hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """BERT."""
    return [BertFamily()]
