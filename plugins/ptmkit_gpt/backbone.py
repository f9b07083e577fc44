"""The GPT backbone: a decoder-only transformer on keras-hub layers, with positions from the mask.

GPT-1 (Radford et al. 2018, "Improving Language Understanding by Generative Pre-Training") and
GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"): token plus
learned position embeddings, masked (causal) self-attention blocks, and an output layer tied to
the token embedding. GPT-2 normalises before each sub-layer (pre-LN) and after the last block;
GPT-1 after each residual sum (post-LN).

Inputs ``token_ids`` and ``padding_mask``: ``(batch, sequence)`` int32. Output
``sequence_output``: ``(batch, sequence, hidden_dim)`` float32, the hidden state at each position
given the positions up to it.

The layers and their attribute names are keras-hub's ``GPT2Backbone``'s (``token_embedding``,
``position_embedding.position_embeddings``, ``transformer_layers``, ``layer_norm``), so that
keras-hub's Hugging Face GPT-2 weight converter fills it and its weights load into a
``GPT2Backbone`` one for one. One difference: keras-hub numbers positions ``0, 1, ...`` from the
left edge; here a token's position is the number of real tokens before it
(``cumsum(padding_mask) - 1``), as Hugging Face's ``generate`` derives ``position_ids`` from the
attention mask. A left-padded row then sees the positions it would see unpadded, which batched
generation needs; right-padded and unpadded rows get keras-hub's positions.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub
from keras import ops
from keras_hub.src.utils.keras_utils import gelu_approximate


@keras.saving.register_keras_serializable(package="ptmkit_gpt")
class PositionIdEmbedding(keras.layers.Layer):
    """Learned position embeddings looked up by position id.

    Args:
        sequence_length: int. The number of positions.
        hidden_dim: int. The embedding size.
        initializer: the embeddings' initializer.

    Call arguments:
        position_ids: ``(batch, sequence)`` int32 in ``[0, sequence_length)``.

    Returns:
        ``(batch, sequence, hidden_dim)``.
    """

    def __init__(self, sequence_length: int, hidden_dim: int, initializer: Any = "glorot_uniform", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sequence_length = sequence_length
        self.hidden_dim = hidden_dim
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape: Any) -> None:
        self.position_embeddings = self.add_weight(
            name="embeddings", shape=(self.sequence_length, self.hidden_dim), initializer=self.initializer, trainable=True
        )
        self.built = True

    def call(self, position_ids: Any) -> Any:
        return ops.take(self.position_embeddings, ops.cast(position_ids, "int32"), axis=0)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (*input_shape, self.hidden_dim)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(sequence_length=self.sequence_length, hidden_dim=self.hidden_dim, initializer=keras.initializers.serialize(self.initializer))
        return config


def position_ids(padding_mask: Any) -> Any:
    """Each token's position: the number of real tokens before it (0 on left padding).

    ``padding_mask`` ``(batch, sequence)``, 1 on tokens; returns ``(batch, sequence)`` int32.
    """
    return ops.maximum(ops.cumsum(ops.cast(padding_mask, "int32"), axis=1) - 1, 0)


@keras.saving.register_keras_serializable(package="ptmkit_gpt")
class GPTBackbone(keras_hub.models.Backbone):
    """A GPT-1 or GPT-2 decoder stack; see the module docstring.

    Args:
        vocabulary_size: int. Token embeddings (and output logits).
        num_layers: int. Decoder blocks.
        num_heads: int. Attention heads; divides ``hidden_dim``.
        hidden_dim: int. Hidden size.
        intermediate_dim: int. Feed-forward inner size.
        dropout: float. Dropout on embeddings, attention and feed-forward.
        max_sequence_length: int. Position embeddings.
        normalize_first: bool. Pre-LN blocks and a final layer norm (GPT-2); post-LN (GPT-1).
        layer_norm_epsilon: float.

    Examples:
        >>> backbone = GPTBackbone(600, 1, 2, 32, 64, max_sequence_length=64)
        >>> out = backbone({"token_ids": np.ones((2, 5), "int32"), "padding_mask": np.ones((2, 5), "int32")})
        >>> tuple(out["sequence_output"].shape)
        (2, 5, 32)
    """

    def __init__(
        self,
        vocabulary_size: int,
        num_layers: int,
        num_heads: int,
        hidden_dim: int,
        intermediate_dim: int,
        dropout: float = 0.1,
        max_sequence_length: int = 1024,
        normalize_first: bool = True,
        layer_norm_epsilon: float = 1e-5,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        self.token_embedding = keras.layers.ReversibleEmbedding(
            vocabulary_size, hidden_dim, embeddings_initializer=keras.initializers.RandomNormal(stddev=0.01), dtype=dtype, name="token_embedding"
        )
        self.position_embedding = PositionIdEmbedding(
            max_sequence_length, hidden_dim, keras.initializers.RandomNormal(stddev=0.02), dtype=dtype, name="position_embedding"
        )
        self.embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
        self.embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        self.transformer_layers = [
            keras_hub.layers.TransformerDecoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                activation=gelu_approximate,
                kernel_initializer=keras.initializers.RandomNormal(stddev=0.02),
                normalize_first=normalize_first,
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.layer_norm = (
            keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype, name="layer_norm") if normalize_first else None
        )
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = self.embeddings_add((self.token_embedding(token_ids), self.position_embedding(position_ids(padding_mask))))
        x = self.embeddings_dropout(x)
        for layer in self.transformer_layers:  # causal self-attention, pad keys masked
            x = layer(x, decoder_padding_mask=padding_mask)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        super().__init__(inputs={"token_ids": token_ids, "padding_mask": padding_mask}, outputs={"sequence_output": x}, dtype=dtype, **kwargs)
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.normalize_first = normalize_first
        self.layer_norm_epsilon = layer_norm_epsilon

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            hidden_dim=self.hidden_dim,
            intermediate_dim=self.intermediate_dim,
            dropout=self.dropout,
            max_sequence_length=self.max_sequence_length,
            normalize_first=self.normalize_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config

    def logits(self, sequence_output: Any) -> Any:
        """Next-token logits ``(batch, sequence, vocabulary_size)`` from ``sequence_output``,
        through the tied token embedding (``h @ E^T``)."""
        return self.token_embedding(sequence_output, reverse=True)


def build_backbone(config: Any) -> GPTBackbone:
    """A :class:`GPTBackbone` of ``config``'s (:class:`~ptmkit_gpt.config.GPTConfig`) size and variant."""
    return GPTBackbone(
        vocabulary_size=config.vocabulary_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        hidden_dim=config.hidden_dim,
        intermediate_dim=config.intermediate_dim,
        dropout=config.dropout,
        max_sequence_length=config.max_sequence_length,
        normalize_first=config.variant == "gpt2",
        layer_norm_epsilon=config.layer_norm_epsilon,
    )
