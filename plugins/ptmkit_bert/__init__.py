"""ptmkit's BERT plugin: the ``bert`` model family on keras-hub's BertBackbone.

Registered under the entry-point group ``ptmkit.plugins`` exactly as a third-party plugin is. It
provides the family only; the masked-LM and next-sentence objectives and the classification head
live in the core and serve BERT because its backbone provides what they require.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.api import (
    POSITIONS_AND_LANGUAGES,
    SELF_ATTENTION_MASK,
    TOKEN_EMBEDDING,
    ClsSepInputs,
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
from ptmkit_bert.config import BertConfig
from ptmkit_bert.hf import import_hf

__all__ = ["BertConfig", "BertFamily", "import_hf"]


class BertFamily(ClsSepInputs, ModelFamily):
    """BERT (Devlin et al. 2019): WordPiece, a transformer encoder, ``[CLS] A [SEP] B [SEP]`` inputs."""

    name = "bert"
    description = "BERT encoder (keras-hub BertBackbone) with a WordPiece tokenizer"
    config_class = BertConfig
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
    provides = frozenset({TOKEN_EMBEDDING, SELF_ATTENTION_MASK, POSITIONS_AND_LANGUAGES})
    default_objectives = ("mlm",)
    hf_model_types = frozenset({"bert"})

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """Probe features: the last layer's ``sequence_output`` mean-pooled over the padding mask
        (:func:`ptmkit.api.pooled_states`), ``ptmkit embed``'s mean pooling."""
        return pooled_states(run_dir)

    def limits(self, config: BertConfig) -> Limits:
        """``max_sequence_length`` position embeddings (an imported checkpoint's
        ``max_position_embeddings``), ``vocabulary_size`` token embeddings."""
        return Limits(config.max_sequence_length, config.vocabulary_size, "model.max_sequence_length")

    def graph_optimizer(self, config: BertConfig) -> GraphOptimizer | None:
        """ONNX Runtime's BERT fusions; none once heads are pruned (its attention fusion assumes
        ``num_heads`` heads in every block)."""
        if any(h != config.num_heads for h in config.attention_heads):
            return None
        return GraphOptimizer("bert", config.num_heads, config.hidden_dim)

    def scale_config(self, config: BertConfig, width_ratio: float) -> BertConfig:
        """ELECTRA's generator rule (:func:`ptmkit.api.generator_width`): hidden, feed-forward and
        heads scaled; layers, vocabulary, positions and dropout kept."""
        from ptmkit.api import generator_width

        return dataclasses.replace(config, **generator_width(config.hidden_dim, width_ratio))

    def build_backbone(self, config: BertConfig) -> Any:
        from ptmkit_bert.backbone import build_backbone

        return build_backbone(config)

    def keep_layers(self, model_config: BertConfig, backbone: Any, layers: list[int]) -> tuple[BertConfig, Any]:
        """A BERT of the transformer blocks ``layers`` of ``backbone`` (:class:`ptmkit.api.KeepsLayers`);
        embeddings and pooler kept."""
        from ptmkit_bert.backbone import keep_layers

        return keep_layers(model_config, backbone, layers)

    def blocks(self, backbone: Any) -> list[Any]:
        """The ``transformer_layer_i`` blocks, first first (:class:`ptmkit.api.ReplacesModules`):
        each is called as ``block(x, padding_mask=...)``."""
        return list(backbone.transformer_layers)

    def share_layers(self, model_config: BertConfig, backbone: Any, sublayers: str, init: str) -> tuple[BertConfig, Any]:
        """A BERT whose blocks share their ``sublayers`` (:class:`ptmkit.api.SharesLayers`)."""
        from ptmkit_bert.backbone import share_layers

        return share_layers(model_config, backbone, sublayers, init)

    def attention_heads(self, model_config: BertConfig) -> list[int]:
        """Heads in each block (:class:`ptmkit.api.PrunesHeads`)."""
        from ptmkit_bert.backbone import attention_heads

        return attention_heads(model_config)

    def head_output_kernels(self, backbone: Any) -> list[Any]:
        """Each block's attention output kernel ``(heads, head_dim, hidden)`` (:class:`ptmkit.api.PrunesHeads`)."""
        return [layer._self_attention_layer._output_dense.kernel for layer in backbone.transformer_layers]

    def prune_heads(self, model_config: BertConfig, backbone: Any, heads: dict[int, list[int]]) -> tuple[BertConfig, Any]:
        """A BERT without attention heads ``heads``, physically removed (:class:`ptmkit.api.PrunesHeads`)."""
        from ptmkit_bert.backbone import prune_heads

        return prune_heads(model_config, backbone, heads)

    def attention_internals(self, backbone: Any) -> Any:
        """Each block's input and output states, attention scores and values, through
        ``backbone``'s layers (:class:`ptmkit.api.ExposesAttention`; what ``ptmkit finetune
        --distill tinybert|minilm`` reads in teacher and student)."""
        from ptmkit_bert.backbone import attention_internals

        return attention_internals(backbone)

    def train_tokenizer(self, texts: Iterable[str], config: BertConfig) -> Any:
        from ptmkit_bert.tokenizer import train_wordpiece

        return train_wordpiece(texts, config.vocabulary_size, config.lowercase, config.min_frequency)

    def special_tokens(self, tokenizer: Any) -> SpecialTokens:
        from ptmkit_bert.tokenizer import special_tokens

        return special_tokens(tokenizer)


    def import_checkpoint(self, directory: Path, out: Path, console: Any) -> dict[str, Any]:
        """A Hugging Face BERT checkpoint as a pre-trained run (:func:`ptmkit_bert.hf.import_hf`;
        ``ptmkit import-hf`` calls it for ``model_type: bert``), reported on ``console``."""
        manifest = import_hf(directory, out, console=console)
        if console is not None:
            pooling = manifest["pooling"]
            weights = manifest["imported_from"]["weights"]
            console.print(
                f"imported {weights['tensors']} tensors ({weights['bytes'] / 1e6:.1f} MB) into {out}; "
                f"pooling: {pooling['mode']}{' + L2 normalisation' if pooling['normalize'] else ''}"
                + ("" if weights["pooler"] else "; no pooler in the checkpoint (initialised randomly)"),
                markup=False, highlight=False,
            )
        return manifest



@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """BERT."""
    return [BertFamily()]
