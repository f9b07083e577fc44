"""ptmkit's ALBERT plugin: the ``albert`` model family (Lan et al. 2020) on keras-hub's
``AlbertBackbone``.

Registered under the entry-point group ``ptmkit.plugins`` exactly as a third-party plugin is; it
touches the core only through :mod:`ptmkit.api`. It provides the family only: the unigram
tokenizer is the core's (:func:`ptmkit.api.train_unigram`), the masked-LM and sentence-order
objectives and the classification heads are the core's, and serve ALBERT because its backbone
provides what they require.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.api import (
    TOKEN_EMBEDDING,
    ClsSepInputs,
    GraphOptimizer,
    InputSpec,
    Limits,
    ModelFamily,
    OutputSpec,
    SentenceFeatures,
    hookimpl,
    pooled_states,
)
from ptmkit_albert.config import AlbertConfig
from ptmkit_albert.tokenizer import SPECIAL_TOKEN_NAMES

__all__ = ["AlbertConfig", "AlbertFamily"]


class AlbertFamily(ClsSepInputs, ModelFamily):
    """ALBERT (Lan et al. 2020): a unigram vocabulary, BERT's encoder with a factorised embedding
    and cross-layer parameter sharing, ``[CLS] A [SEP] B [SEP]`` inputs; pre-trained by masked LM
    and sentence-order prediction (section 3.1, the core's ``mlm`` and ``sop``)."""

    name = "albert"
    description = "ALBERT encoder (keras-hub AlbertBackbone: factorised embedding, shared layers) with a unigram tokenizer; MLM + SOP"
    config_class = AlbertConfig
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
    provides = frozenset({TOKEN_EMBEDDING})
    default_objectives = ("mlm", "sop")  # section 3.1 / 4.1: MLM + SOP
    hf_model_types = frozenset({"albert"})

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """Probe features: the last layer's ``sequence_output`` mean-pooled over the padding mask
        (:func:`ptmkit.api.pooled_states`), ``ptmkit embed``'s mean pooling."""
        return pooled_states(run_dir)

    def limits(self, config: AlbertConfig) -> Limits:
        """``max_sequence_length`` position embeddings, ``vocabulary_size`` token embeddings."""
        return Limits(config.max_sequence_length, config.vocabulary_size, "model.max_sequence_length")

    def graph_optimizer(self, config: AlbertConfig) -> GraphOptimizer:
        # ONNX Runtime's "bert" fusions cover ALBERT's encoder layers (the same post-LN blocks)
        return GraphOptimizer("bert", config.num_heads, config.hidden_dim)

    def scale_config(self, config: AlbertConfig, width_ratio: float) -> AlbertConfig:
        """ELECTRA's generator rule (:func:`ptmkit.api.generator_width`): hidden, feed-forward and
        heads scaled; embedding size, layers, sharing, vocabulary and positions kept."""
        from ptmkit.api import generator_width

        return dataclasses.replace(config, **generator_width(config.hidden_dim, width_ratio))

    def build_backbone(self, config: AlbertConfig) -> Any:
        from ptmkit_albert.backbone import build_backbone

        return build_backbone(config)

    def train_tokenizer(self, texts: Iterable[str], config: AlbertConfig) -> Any:
        from ptmkit_albert.tokenizer import train_albert_unigram

        return train_albert_unigram(texts, config.vocabulary_size, config.lowercase, config.strip_accents)

    def import_checkpoint(self, directory: Path, out: Path, console: Any) -> dict[str, Any]:
        """A Hugging Face ALBERT checkpoint as a pre-trained run (:func:`ptmkit_albert.hf.import_hf`;
        ``ptmkit import-hf`` calls it for ``model_type: albert``)."""
        from ptmkit_albert.hf import import_hf

        return import_hf(directory, out, console=console)




@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """ALBERT."""
    return [AlbertFamily()]
