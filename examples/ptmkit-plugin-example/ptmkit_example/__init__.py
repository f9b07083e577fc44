"""A tiny Transformer encoder family for ptmkit (``ptmkit train tiny-encoder``).

Token and position embeddings, one keras-hub ``TransformerEncoder`` block and a masked mean
over the tokens (Vaswani et al. 2017; BERT's ``[CLS] A [SEP]`` packing, Devlin et al. 2019),
with a WordPiece tokenizer trained by Hugging Face ``tokenizers``. It reads two inputs,
``token_ids`` and ``padding_mask``: no segment ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ptmkit.api import (
    POOLED_OUTPUT,
    SEQUENCE_OUTPUT,
    TOKEN_EMBEDDING,
    ConfigError,
    InputSpec,
    Limits,
    ModelFamily,
    OutputSpec,
    SpecialTokens,
    check_positive,
    check_unit_interval,
    hookimpl,
)

SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


@dataclasses.dataclass
class TinyEncoderConfig:
    """The ``[model]`` section of a ``tiny-encoder`` run.

    Attributes:
        vocabulary_size: WordPiece vocabulary size, special tokens included.
        hidden_dim: width of the embeddings and of the encoder's output.
        num_heads: attention heads; must divide ``hidden_dim``.
        intermediate_dim: width of the feed-forward layer.
        max_sequence_length: learnt positions: the longest sequence, special tokens included.
        dropout: dropout rate in the encoder block, in [0, 1].
    """

    vocabulary_size: int = 2000
    hidden_dim: int = 64
    num_heads: int = 2
    intermediate_dim: int = 128
    max_sequence_length: int = 128
    dropout: float = 0.1

    def validate(self) -> None:
        """Raises ConfigError naming the first bad key."""
        check_positive(self, "model", "vocabulary_size", "hidden_dim", "num_heads", "intermediate_dim", "max_sequence_length")
        check_unit_interval(self, "model", "dropout")
        if self.hidden_dim % self.num_heads:
            raise ConfigError(f"config key 'model.hidden_dim' ({self.hidden_dim}) must be a multiple of 'model.num_heads' ({self.num_heads})")


def train_wordpiece(texts: Iterable[str], vocabulary_size: int) -> Any:
    """A lower-cased WordPiece tokenizer trained on ``texts``; it adds ``[CLS] A [SEP]``
    (pair: ``[CLS] A [SEP] B [SEP]``) to what it encodes."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token=SPECIALS["unk"]))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocabulary_size, special_tokens=list(SPECIALS.values()), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    cls, sep = ((token, tokenizer.token_to_id(token)) for token in (SPECIALS["cls"], SPECIALS["sep"]))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[cls, sep]
    )
    return tokenizer


def build_encoder(config: TinyEncoderConfig) -> Any:
    """The backbone: inputs ``token_ids`` and ``padding_mask`` (``(batch, sequence)`` int32, mask 1
    on tokens); outputs ``sequence_output`` ``(batch, sequence, hidden_dim)`` and
    ``pooled_output`` ``(batch, hidden_dim)`` float32, the mean of the tokens' states."""
    import keras
    import keras_hub
    from keras import ops

    token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
    embedding = keras_hub.layers.TokenAndPositionEmbedding(
        config.vocabulary_size, config.max_sequence_length, config.hidden_dim, name="embeddings"
    )
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="embeddings_norm")(embedding(token_ids))
    x = keras_hub.layers.TransformerEncoder(
        config.intermediate_dim, config.num_heads, dropout=config.dropout, name="encoder"
    )(x, padding_mask=padding_mask)
    weights = ops.expand_dims(ops.cast(padding_mask, x.dtype), -1)
    pooled = ops.sum(x * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)
    backbone = keras.Model(
        {"token_ids": token_ids, "padding_mask": padding_mask},
        {"sequence_output": x, "pooled_output": pooled},
        name="tiny_encoder",
    )
    backbone.token_embedding = embedding.token_embedding  # a ReversibleEmbedding: masked LM ties to it
    backbone.vocabulary_size = config.vocabulary_size
    return backbone


class TinyEncoder(ModelFamily):
    """The ``tiny-encoder`` family: what it declares, and the hooks the core calls."""

    name = "tiny-encoder"
    description = "tiny Transformer encoder (keras-hub) with a WordPiece tokenizer; token_ids + padding_mask"
    config_class = TinyEncoderConfig
    inputs = (
        InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    outputs = (
        OutputSpec(SEQUENCE_OUTPUT, ("batch", "sequence", "hidden")),
        OutputSpec(POOLED_OUTPUT, ("batch", "hidden")),
    )
    special_token_names = SPECIALS
    provides = frozenset({TOKEN_EMBEDDING})
    default_objectives = ("mlm",)

    def limits(self, config: TinyEncoderConfig) -> Limits:
        return Limits(config.max_sequence_length, config.vocabulary_size, "model.max_sequence_length")

    def build_backbone(self, config: TinyEncoderConfig) -> Any:
        return build_encoder(config)

    def train_tokenizer(self, texts: Iterable[str], config: TinyEncoderConfig) -> Any:
        return train_wordpiece(texts, config.vocabulary_size)

    def num_special_tokens(self, pair: bool) -> int:
        return 3 if pair else 2

    def pack(
        self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens
    ) -> tuple[list[int], list[int]]:
        cls, sep = specials["cls"], specials["sep"]
        ids = [cls, *first, sep]
        segments = [0] * len(ids)
        if second is not None:
            ids += [*second, sep]
            segments += [1] * (len(second) + 1)
        return ids[:sequence_length], segments[:sequence_length]


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    return [TinyEncoder()]
