"""The BiLSTM student (Tang et al. 2019, section 3.1), on Keras layers, in the order data flows:

    token_ids (batch, sequence) int32
      -> word embeddings, initialised from static vectors     (batch, sequence, embedding_dim)
      -> one bidirectional LSTM layer                          (batch, sequence, 2 * units)
      -> pooled: [forward state at the last word; backward state at the first word]
         (``pooling = "last"``), or the maximum over words   (batch, 2 * units)
      -> dropout -> Dense(hidden_dim, ReLU)                   (batch, hidden_dim)

``padding_mask`` (1 on words, 0 on padding; rows padded on the right) keeps padding out of both
directions: the backward LSTM starts at each row's last word. Outputs (float32): ``sequence_output``
``(batch, sequence, 2 * units)``, zero at padding; ``pooled_output`` ``(batch, hidden_dim)``, the
ReLU layer's output, which the core's classification head maps to logits (Dropout -> Dense), as
BERT's tanh pooler is read.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub
from keras import ops


@keras.saving.register_keras_serializable(package="ptmkit_bilstm")
class BiLSTMBackbone(keras_hub.models.Backbone):
    """Embeddings, one biLSTM layer, pooling and a ReLU layer; see the module docstring.

    Args:
        vocabulary_size: int. Rows of the embedding table.
        embedding_dim: int. Width of the word embeddings.
        units: int. LSTM units a direction.
        hidden_dim: int. Width of the ReLU layer (``pooled_output``).
        pooling: str. ``"last"`` or ``"max"``.
        dropout: float. Dropout before the ReLU layer.
        trainable_embeddings: bool. Whether the embedding table trains.

    Examples:
        >>> backbone = BiLSTMBackbone(10, 4, 3, 5)
        >>> out = backbone({"token_ids": np.ones((2, 6), "int32"), "padding_mask": np.ones((2, 6), "int32")})
        >>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape)
        ((2, 6, 6), (2, 5))
    """

    def __init__(
        self, vocabulary_size: int, embedding_dim: int, units: int, hidden_dim: int, pooling: str = "last", dropout: float = 0.0,
        trainable_embeddings: bool = True, dtype: Any = None, **kwargs: Any,
    ) -> None:
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        mask = ops.not_equal(padding_mask, 0)
        embedded = keras.layers.Embedding(vocabulary_size, embedding_dim, trainable=trainable_embeddings, dtype=dtype, name="word_embeddings")(token_ids)
        lstm = keras.layers.LSTM(units, return_sequences=True, dtype=dtype, name="lstm")
        states = keras.layers.Bidirectional(lstm, merge_mode="concat", dtype=dtype, name="bilstm")(embedded, mask=mask)
        words = ops.expand_dims(ops.cast(mask, states.dtype), -1)  # (batch, sequence, 1)
        states = states * words  # padding steps carry no state
        if pooling == "last":
            # the forward direction ends at each row's last word, the backward one at its first
            last = ops.maximum(ops.sum(ops.cast(mask, "int32"), axis=1) - 1, 0)  # (batch,)
            forward = ops.take_along_axis(states[..., :units], ops.reshape(last, (-1, 1, 1)), axis=1)[:, 0]
            pooled = ops.concatenate([forward, states[:, 0, units:]], axis=-1)
        else:
            # the maximum over words; a row without words pools to 0
            pooled = ops.max(ops.where(words > 0, states, -1e9), axis=1) * ops.minimum(ops.sum(words, axis=1), 1.0)
        hidden = keras.layers.Dropout(dropout, dtype=dtype, name="pooled_dropout")(pooled)
        hidden = keras.layers.Dense(hidden_dim, activation="relu", dtype=dtype, name="hidden")(hidden)
        kwargs.setdefault("name", "bilstm_backbone")
        super().__init__(
            inputs={"token_ids": token_ids, "padding_mask": padding_mask}, outputs={"sequence_output": states, "pooled_output": hidden},
            dtype=dtype, **kwargs,
        )
        self.vocabulary_size, self.embedding_dim, self.units, self.hidden_dim = vocabulary_size, embedding_dim, units, hidden_dim
        self.pooling, self.dropout, self.trainable_embeddings = pooling, dropout, trainable_embeddings

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size, embedding_dim=self.embedding_dim, units=self.units, hidden_dim=self.hidden_dim,
            pooling=self.pooling, dropout=self.dropout, trainable_embeddings=self.trainable_embeddings,
        )
        return config


def build_backbone(config: Any) -> BiLSTMBackbone:
    """A :class:`BiLSTMBackbone` of ``config``'s (:class:`~ptmkit_bilstm.config.BiLSTMConfig`) size.

    Raises:
        ConfigError: ``vocabulary_size`` or ``embedding_dim`` still 0 (a config not written by
            ``ptmkit train bilstm``).
    """
    from ptmkit.api import ConfigError

    if not config.vocabulary_size or not config.embedding_dim:
        raise ConfigError(
            "config keys 'model.vocabulary_size' and 'model.embedding_dim' are 0: `ptmkit train bilstm --corpus TEXTS --set "
            "model.word_vectors=RUN` sets them from the vectors"
        )
    return BiLSTMBackbone(
        config.vocabulary_size, config.embedding_dim, config.units, config.hidden_dim, config.pooling, config.dropout, config.trainable_embeddings,
    )
