"""ptmkit's RoBERTa plugin: the ``roberta`` model family (Liu et al. 2019) on keras-hub's RoBERTa
layers.

Registered under the entry-point group ``ptmkit.plugins`` exactly as a third-party plugin is; it
touches the core only through :mod:`ptmkit.api`. It provides the family only: the byte-level BPE
is the core's (:func:`ptmkit.api.train_byte_level_bpe`), the masked-LM objective with dynamic
masking and the classification head are the core's, and serve RoBERTa because its backbone
provides what they require.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.api import (
    TOKEN_EMBEDDING,
    GraphOptimizer,
    InputSpec,
    Limits,
    ModelFamily,
    OutputSpec,
    SentenceFeatures,
    SpecialTokens,
    hookimpl,
    pooled_states,
)
from ptmkit_roberta.config import RobertaConfig
from ptmkit_roberta.tokenizer import SPECIAL_TOKEN_NAMES

__all__ = ["RobertaConfig", "RobertaFamily"]


class RobertaFamily(ModelFamily):
    """RoBERTa (Liu et al. 2019): byte-level BPE, BERT's encoder without segment embeddings,
    ``<s> A </s>`` (``<s> A </s></s> B </s>``) inputs; pre-trained by masked LM with dynamic
    masking and no next-sentence prediction (the core's ``mlm`` defaults)."""

    name = "roberta"
    description = "RoBERTa encoder (keras-hub RoBERTa layers) with a byte-level BPE tokenizer; dynamic-masking MLM, no NSP"
    config_class = RobertaConfig
    inputs = (
        InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    outputs = (
        OutputSpec("sequence_output", ("batch", "sequence", "hidden")),
        OutputSpec("pooled_output", ("batch", "hidden")),
    )
    special_token_names = SPECIAL_TOKEN_NAMES
    provides = frozenset({TOKEN_EMBEDDING})
    default_objectives = ("mlm",)  # section 4.2: no NSP; [objectives.mlm] masking = "dynamic" is the core's default
    hf_model_types = frozenset({"roberta"})

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """Probe features: the last layer's ``sequence_output`` mean-pooled over the padding mask
        (:func:`ptmkit.api.pooled_states`), ``ptmkit embed``'s mean pooling."""
        return pooled_states(run_dir)

    def limits(self, config: RobertaConfig) -> Limits:
        """``max_sequence_length`` position embeddings, ``vocabulary_size`` token embeddings."""
        return Limits(config.max_sequence_length, config.vocabulary_size, "model.max_sequence_length")

    def graph_optimizer(self, config: RobertaConfig) -> GraphOptimizer:
        # ONNX Runtime's "bert" fusions cover RoBERTa's graph (the same encoder layers)
        return GraphOptimizer("bert", config.num_heads, config.hidden_dim)

    def scale_config(self, config: RobertaConfig, width_ratio: float) -> RobertaConfig:
        """ELECTRA's generator rule (:func:`ptmkit.api.generator_width`): hidden, feed-forward and
        heads scaled; layers, vocabulary, positions and dropout kept."""
        from ptmkit.api import generator_width

        return dataclasses.replace(config, **generator_width(config.hidden_dim, width_ratio))

    def build_backbone(self, config: RobertaConfig) -> Any:
        from ptmkit_roberta.backbone import build_backbone

        return build_backbone(config)

    def train_tokenizer(self, texts: Iterable[str], config: RobertaConfig) -> Any:
        from ptmkit_roberta.tokenizer import train_roberta_bpe

        return train_roberta_bpe(texts, config.vocabulary_size, config.min_frequency)

    def import_checkpoint(self, directory: Path, out: Path, console: Any) -> dict[str, Any]:
        """A Hugging Face RoBERTa checkpoint as a pre-trained run (:func:`ptmkit_roberta.hf.import_hf`;
        ``ptmkit import-hf`` calls it for ``model_type: roberta``)."""
        from ptmkit_roberta.hf import import_hf

        return import_hf(directory, out, console=console)

    def num_special_tokens(self, pair: bool) -> int:
        return 4 if pair else 2

    def pack(
        self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens
    ) -> tuple[list[int], list[int]]:
        """``<s> first </s>`` or ``<s> first </s></s> second </s>``; segment ids all 0."""
        cls, sep = specials["cls"], specials["sep"]
        token_ids = [cls, *first, sep]
        if second is not None:
            token_ids += [sep, *second, sep]
        return token_ids[:sequence_length], [0] * min(len(token_ids), sequence_length)


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """RoBERTa."""
    return [RobertaFamily()]
