"""ptmkit's XLNet plugin: the ``xlnet`` model family (Yang et al. 2019) on keras-hub's XLNet
encoder layers (``XLNetEncoder``, ``TwoStreamRelativeAttention``).

Registered under the entry-point group ``ptmkit.plugins`` exactly as a third-party plugin is; it
touches the core only through :mod:`ptmkit.api`. It provides the family only: the unigram
tokenizer is the core's (:func:`ptmkit.api.train_unigram`), the permutation-LM objective
(``plm``) and the classification head are the core's, and serve XLNet because its backbone
provides what they require (two-stream attention, a tied token embedding, a pooled output).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.api import (
    TOKEN_EMBEDDING,
    TWO_STREAM_ATTENTION,
    InputSpec,
    Limits,
    ModelFamily,
    OutputSpec,
    SentenceFeatures,
    SpecialTokens,
    hookimpl,
    pooled_states,
)
from ptmkit_xlnet.config import XLNetConfig
from ptmkit_xlnet.tokenizer import SPECIAL_TOKEN_NAMES

__all__ = ["XLNetConfig", "XLNetFamily"]


class XLNetFamily(ModelFamily):
    """XLNet (Yang et al. 2019): a cased unigram vocabulary, a Transformer-XL encoder with relative
    positional encodings and two-stream attention, ``A <sep> B <sep> <cls>`` inputs (the specials
    at the end); pre-trained by permutation LM (section 2, the core's ``plm``)."""

    name = "xlnet"
    description = "XLNet encoder (keras-hub XLNetEncoder: relative attention, two streams) with a unigram tokenizer; permutation LM"
    config_class = XLNetConfig
    inputs = (
        InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),
        InputSpec("segment_ids", ("batch", "sequence"), "int32", field="type_ids"),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    outputs = (
        OutputSpec("sequence_output", ("batch", "sequence", "hidden")),
        OutputSpec("pooled_output", ("batch", "hidden")),
    )
    special_token_names = SPECIAL_TOKEN_NAMES
    provides = frozenset({TOKEN_EMBEDDING, TWO_STREAM_ATTENTION})
    default_objectives = ("plm",)  # section 2.3: permutation LM, partial prediction K = 6
    hf_model_types = frozenset({"xlnet"})

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """Probe features: the last layer's ``sequence_output`` mean-pooled over the padding mask
        (:func:`ptmkit.api.pooled_states`), ``ptmkit embed``'s mean pooling."""
        return pooled_states(run_dir)

    def limits(self, config: XLNetConfig) -> Limits:
        """No position embeddings (relative encodings are computed for any length);
        ``vocabulary_size`` token embeddings."""
        return Limits(None, config.vocabulary_size, None)

    def build_backbone(self, config: XLNetConfig) -> Any:
        from ptmkit_xlnet.backbone import build_backbone

        return build_backbone(config)

    def train_tokenizer(self, texts: Iterable[str], config: XLNetConfig) -> Any:
        from ptmkit_xlnet.tokenizer import train_xlnet_unigram

        return train_xlnet_unigram(texts, config.vocabulary_size, config.lowercase, config.strip_accents)

    def import_checkpoint(self, directory: Path, out: Path, console: Any) -> dict[str, Any]:
        """A Hugging Face XLNet checkpoint as a pre-trained run (:func:`ptmkit_xlnet.hf.import_hf`;
        ``ptmkit import-hf`` calls it for ``model_type: xlnet``)."""
        from ptmkit_xlnet.hf import import_hf

        return import_hf(directory, out, console=console)

    def num_special_tokens(self, pair: bool) -> int:
        return 3 if pair else 2

    def pack(
        self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens
    ) -> tuple[list[int], list[int]]:
        """``first <sep> <cls>`` or ``first <sep> second <sep> <cls>``; segment ids 0, then 1,
        and 2 for ``<cls>`` (transformers' ``XLNetTokenizer``)."""
        from ptmkit_xlnet.tokenizer import pack_xlnet

        return pack_xlnet(first, second, specials["sep"], specials["cls"])


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """XLNet."""
    return [XLNetFamily()]
