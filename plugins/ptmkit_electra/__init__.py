"""ptmkit's ELECTRA plugin: the ``electra`` model family (Clark et al. 2020) on keras-hub's
``ElectraBackbone``.

Registered under the entry-point group ``ptmkit.plugins`` exactly as a third-party plugin is; it
touches the core only through :mod:`ptmkit.api`. It provides the family only: the WordPiece
tokenizer is the core's (:func:`ptmkit.api.train_wordpiece`), and so are the replaced-token
detection objective (``rtd``: a small generator, gen + 50 x disc, the generator dropped at the end),
the masked-LM objectives and the classification head, which serve ELECTRA because its backbone
provides what they require. What the family adds is the backbone (an embedding width apart from
the hidden size), the generator built on the discriminator's embeddings
(:class:`ptmkit.api.SharesEmbeddings`) and ``ptmkit import-hf`` of ELECTRA discriminators.
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
    SpecialTokens,
    generator_width,
    hookimpl,
    pooled_states,
)
from ptmkit_electra.config import ElectraConfig

__all__ = ["ElectraConfig", "ElectraFamily"]


class ElectraFamily(ClsSepInputs, ModelFamily):
    """ELECTRA (Clark et al. 2020): BERT's WordPiece and ``[CLS] A [SEP] B [SEP]`` inputs, an
    encoder whose embeddings are projected to its hidden size, pre-trained by replaced-token
    detection against a generator that shares its embeddings; only the discriminator is kept."""

    name = "electra"
    description = "ELECTRA discriminator (keras-hub ElectraBackbone) with a WordPiece tokenizer; replaced-token detection against a generator sharing its embeddings"
    config_class = ElectraConfig
    inputs = (
        InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),
        InputSpec("segment_ids", ("batch", "sequence"), "int32", field="type_ids"),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    outputs = (
        OutputSpec("sequence_output", ("batch", "sequence", "hidden")),
        OutputSpec("pooled_output", ("batch", "hidden")),
    )
    special_token_names = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
    provides = frozenset({TOKEN_EMBEDDING})
    default_objectives = ("rtd",)
    hf_model_types = frozenset({"electra"})

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """Probe features: the last layer's ``sequence_output`` mean-pooled over the padding mask
        (:func:`ptmkit.api.pooled_states`), ``ptmkit embed``'s mean pooling."""
        return pooled_states(run_dir)

    def limits(self, config: ElectraConfig) -> Limits:
        """``max_sequence_length`` position embeddings, ``vocabulary_size`` token embeddings."""
        return Limits(config.max_sequence_length, config.vocabulary_size, "model.max_sequence_length")

    def graph_optimizer(self, config: ElectraConfig) -> GraphOptimizer:
        # ONNX Runtime's "bert" fusions cover ELECTRA's encoder layers (the same post-LN blocks)
        return GraphOptimizer("bert", config.num_heads, config.hidden_dim)

    def scale_config(self, config: ElectraConfig, width_ratio: float) -> ElectraConfig:
        """ELECTRA's generator (``get_generator_config``, :func:`ptmkit.api.generator_width`):
        hidden, feed-forward and heads scaled; the embedding width, layers, vocabulary, positions
        and dropout kept, so that the generator reads the discriminator's embeddings."""
        return dataclasses.replace(config, **generator_width(config.hidden_dim, width_ratio))

    def build_backbone(self, config: ElectraConfig) -> Any:
        from ptmkit_electra.backbone import build_backbone

        return build_backbone(config)

    def build_on_embeddings(self, model_config: ElectraConfig, backbone: Any) -> Any:
        """ELECTRA's generator on the discriminator's embeddings (:class:`ptmkit.api.SharesEmbeddings`;
        :func:`ptmkit_electra.backbone.build_on_embeddings`)."""
        from ptmkit_electra.backbone import build_on_embeddings

        return build_on_embeddings(model_config, backbone)

    def train_tokenizer(self, texts: Iterable[str], config: ElectraConfig) -> Any:
        from ptmkit.api import train_wordpiece

        return train_wordpiece(texts, config.vocabulary_size, config.lowercase, config.min_frequency)

    def special_tokens(self, tokenizer: Any) -> SpecialTokens:
        from ptmkit.api import wordpiece_special_tokens

        return wordpiece_special_tokens(tokenizer)


    def import_checkpoint(self, directory: Path, out: Path, console: Any) -> dict[str, Any]:
        """A Hugging Face ELECTRA discriminator as a pre-trained run (:func:`ptmkit_electra.hf.import_hf`;
        ``ptmkit import-hf`` calls it for ``model_type: electra``)."""
        from ptmkit_electra.hf import import_hf

        return import_hf(directory, out, console=console)



@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """ELECTRA."""
    return [ElectraFamily()]
