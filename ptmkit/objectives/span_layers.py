"""The span-boundary objective's head (SpanBERT, Joshi et al. 2020, section 3.2), a Keras layer.

Kept apart from :mod:`ptmkit.objectives.span` so that loading the objective imports no Keras.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="ptmkit")
class SpanBoundaryHead(keras.layers.Layer):
    """Predict each token of a masked span from the span's two boundary tokens and its position.

    For a masked span ``x_s .. x_e`` and a token ``x_i`` in it, with ``x_{s-1}`` and ``x_{e+1}``
    the encoder's outputs at the unmasked tokens around the span and ``p_{i-s+1}`` a learned
    relative-position embedding (SpanBERT's equations 1-2)::

        h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}]            # (batch, predictions, 3 * hidden)
        h1 = LayerNorm(GeLU(W1 h0))                    # (batch, predictions, hidden)
        y  = LayerNorm(GeLU(W2 h1))                    # (batch, predictions, hidden)
        logits = y @ E^T + b                           # (batch, predictions, vocabulary)

    The output projection is tied to the backbone's token embedding ``E`` (as the MLM head's).

    Args:
        vocabulary_size: int. Rows of the token embedding.
        token_embedding: keras-hub ``ReversibleEmbedding`` of the backbone (``reverse=True`` gives
            ``x @ E^T``).
        max_positions: int. Relative positions embedded (``i - s`` in ``[0, max_positions)``).
        layer_norm_epsilon: float. Epsilon of both layer normalisations.
        kernel_initializer: initializer of the dense and position-embedding weights.

    Call arguments:
        inputs: ``(batch, sequence, hidden)`` float, the backbone's ``sequence_output``.
        left, right: ``(batch, predictions)`` int32 positions of each prediction's boundary tokens.
        offsets: ``(batch, predictions)`` int32, the prediction's position inside its span, from 0.

    Returns:
        ``(batch, predictions, vocabulary_size)`` logits in the layer's compute dtype.
    """

    def __init__(
        self,
        vocabulary_size: int,
        token_embedding: Any,
        max_positions: int,
        layer_norm_epsilon: float = 1e-12,
        kernel_initializer: Any = "glorot_uniform",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.token_embedding = token_embedding
        self.max_positions = max_positions
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, inputs_shape: Any, left_shape: Any = None, right_shape: Any = None, offsets_shape: Any = None) -> None:
        hidden = self.token_embedding.output_dim
        self._position_embedding = keras.layers.Embedding(
            self.max_positions, inputs_shape[-1], embeddings_initializer=self.kernel_initializer, dtype=self.dtype_policy, name="position_embedding"
        )
        self._position_embedding.build((None, None))
        self._dense = []
        self._layer_norm = []
        width = 3 * inputs_shape[-1]
        for index in (1, 2):
            dense = keras.layers.Dense(hidden, activation="gelu", kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy, name=f"dense_{index}")
            dense.build((None, None, width))
            norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=f"layer_norm_{index}")
            norm.build((None, None, hidden))
            self._dense.append(dense)
            self._layer_norm.append(norm)
            width = hidden
        self._bias = self.add_weight(name="output_bias", shape=[self.vocabulary_size], initializer="zeros", dtype=self.dtype)
        self.built = True

    def call(self, inputs: Any, left: Any, right: Any, offsets: Any) -> Any:
        x_left = ops.take_along_axis(inputs, ops.expand_dims(left, -1), axis=1)
        x_right = ops.take_along_axis(inputs, ops.expand_dims(right, -1), axis=1)
        positions = ops.cast(self._position_embedding(offsets), x_left.dtype)
        x = ops.concatenate([x_left, x_right, positions], axis=-1)
        for dense, norm in zip(self._dense, self._layer_norm, strict=True):
            x = norm(dense(x))
        logits = ops.cast(self.token_embedding(x, reverse=True), self.compute_dtype)
        return logits + self._bias

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size,
            token_embedding=keras.layers.serialize(self.token_embedding),
            max_positions=self.max_positions,
            layer_norm_epsilon=self.layer_norm_epsilon,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
        )
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SpanBoundaryHead:
        """The layer from :meth:`get_config`; the token embedding is rebuilt from its config (as
        keras-hub's ``MaskedLMHead``: a fresh, untied layer unless the caller ties it)."""
        config = dict(config)
        config["token_embedding"] = keras.layers.deserialize(config["token_embedding"])
        return cls(**config)
