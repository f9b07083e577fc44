"""The RoBERTa backbone: keras-hub's ``RobertaBackbone`` layers, with a pooled output and the
config's activation and epsilon.

Liu et al. 2019, "RoBERTa: A Robustly Optimized BERT Pretraining Approach": BERT's post-LN
encoder (Devlin et al. 2019) without segment embeddings. Inputs ``token_ids`` and
``padding_mask``: ``(batch, sequence)`` int32. Outputs ``sequence_output`` ``(batch, sequence,
hidden_dim)`` and ``pooled_output`` ``(batch, hidden_dim)`` (a tanh dense on the ``<s>`` state,
Hugging Face ``RobertaModel``'s pooler, which its classification heads start from), float32.

The layers and their attribute names are keras-hub's ``RobertaBackbone``'s (``embeddings``, a
``TokenAndPositionEmbedding``; ``embeddings_layer_norm``; ``transformer_layers``), so keras-hub's
Hugging Face RoBERTa converter fills it. keras-hub's backbone returns only the sequence output,
computes GELU with ``keras.activations.gelu``, which TensorFlow lowers to ``Erfc`` (an op
tf2onnx cannot convert), and has no pooler; this one declares its outputs as a dict, computes
the exact GELU through ``Erf`` (which ONNX has and ONNX Runtime fuses) and adds the pooler.

Positions are ``0, 1, ...`` from the left edge. A Hugging Face RoBERTa numbers real tokens from
``padding_idx + 1`` = 2 (rows 0 and 1 are never used by unpadded text); the importer drops those
rows (:mod:`ptmkit_roberta.hf`), so right-padded and unpadded rows see the same embeddings.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub

from ptmkit.api import feedforward_activation
from ptmkit_roberta.config import RobertaConfig


@keras.saving.register_keras_serializable(package="ptmkit_roberta")
class RobertaBackbone(keras_hub.models.Backbone):
    """A RoBERTa encoder stack; see the module docstring.

    Args:
        vocabulary_size: int. Token embeddings.
        num_layers: int. Encoder layers.
        num_heads: int. Attention heads; divides ``hidden_dim``.
        hidden_dim: int. Hidden size.
        intermediate_dim: int. Feed-forward inner size.
        dropout: float. Dropout on embeddings, attention and feed-forward.
        max_sequence_length: int. Position embeddings.
        hidden_activation: ``"gelu"`` (exact), ``"gelu_approximate"`` (tanh) or ``"relu"``.
        layer_norm_epsilon: float. Epsilon of every layer normalisation.

    Raises:
        ValueError: an unknown activation.

    Examples:
        >>> backbone = RobertaBackbone(300, 1, 2, 32, 64, max_sequence_length=64)
        >>> out = backbone({"token_ids": np.ones((2, 5), "int32"), "padding_mask": np.ones((2, 5), "int32")})
        >>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape)
        ((2, 5, 32), (2, 32))
    """

    def __init__(
        self,
        vocabulary_size: int,
        num_layers: int,
        num_heads: int,
        hidden_dim: int,
        intermediate_dim: int,
        dropout: float = 0.1,
        max_sequence_length: int = 512,
        hidden_activation: str = "gelu",
        layer_norm_epsilon: float = 1e-5,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        activation = feedforward_activation(hidden_activation)
        initializer = keras.initializers.TruncatedNormal(stddev=0.02)  # keras-hub's roberta_kernel_initializer
        self.embeddings = keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size=vocabulary_size, sequence_length=max_sequence_length, embedding_dim=hidden_dim,
            embeddings_initializer=initializer, dtype=dtype, name="embeddings",
        )
        self.token_embedding = self.embeddings.token_embedding
        self.embeddings_layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm")
        self.embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        self.transformer_layers = [
            keras_hub.layers.TransformerEncoder(
                num_heads=num_heads, intermediate_dim=intermediate_dim, activation=activation, dropout=dropout,
                layer_norm_epsilon=layer_norm_epsilon, kernel_initializer=initializer, dtype=dtype, name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.pooled_dense = keras.layers.Dense(hidden_dim, kernel_initializer=initializer, activation="tanh", dtype=dtype, name="pooled_dense")
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = self.embeddings_dropout(self.embeddings_layer_norm(self.embeddings(token_ids)))
        for layer in self.transformer_layers:
            x = layer(x, padding_mask=padding_mask)
        pooled = self.pooled_dense(x[:, 0, :])  # the <s> state
        super().__init__(
            inputs={"token_ids": token_ids, "padding_mask": padding_mask},
            outputs={"sequence_output": x, "pooled_output": pooled},
            dtype=dtype,
            **kwargs,
        )
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.hidden_activation = hidden_activation
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
            hidden_activation=self.hidden_activation,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config


def build_backbone(config: RobertaConfig) -> RobertaBackbone:
    """A :class:`RobertaBackbone` of ``config``'s size, activation and epsilon."""
    return RobertaBackbone(
        vocabulary_size=config.vocabulary_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        hidden_dim=config.hidden_dim,
        intermediate_dim=config.intermediate_dim,
        dropout=config.dropout,
        max_sequence_length=config.max_sequence_length,
        hidden_activation=config.hidden_activation,
        layer_norm_epsilon=config.layer_norm_epsilon,
    )
