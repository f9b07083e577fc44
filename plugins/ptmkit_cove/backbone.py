"""The CoVe encoder (McCann et al. 2017, "Learned in Translation: Contextualized Word Vectors";
reference implementation salesforce/cove, ``MTLSTM``), on Keras layers, in the order data flows:

    token_ids (batch, sequence) int32
      -> GloVe(w): a frozen embedding table            g: (batch, sequence, glove_dim)
      -> biLSTM layer 1 (forward and backward)          (batch, sequence, 2 * hidden_dim)
      -> biLSTM layer 2, its input layer 1's states     c: (batch, sequence, 2 * hidden_dim)

``padding_mask`` (1 on words, 0 on padding; rows padded on the right) keeps padding out of both
directions: the backward LSTM starts at each row's last word. Outputs (float32, zero at padding):

- ``sequence_output`` ``(batch, sequence, glove_dim + 2 * hidden_dim)``: ``[g; c]``, the paper's
  downstream input ``w~ = [GloVe(w); CoVe(w)]`` (section 5; ``MTLSTM(residual_embeddings=True)``);
- ``pooled_output`` ``(batch, glove_dim + 2 * hidden_dim)``: ``[g; c]`` averaged over each row's
  words (zero for a row without words), what the classification head reads;
- ``cove_output`` ``(batch, sequence, 2 * hidden_dim)``: ``c``, CoVe(w) alone, what the
  translation decoder attends over;
- ``glove_output`` ``(batch, sequence, glove_dim)``: ``g``.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub
from keras import ops


@keras.saving.register_keras_serializable(package="ptmkit_cove")
class CoVeBackbone(keras_hub.models.Backbone):
    """CoVe's frozen GloVe table and biLSTM; see the module docstring for the layers and outputs.

    Args:
        vocabulary_size: int. Rows of the GloVe table (source ids).
        glove_dim: int. The GloVe vectors' dimension.
        hidden_dim: int. Units of each LSTM layer and direction.
        lstm_layers: int. biLSTM layers (the paper: 2).
        dropout: float. Dropout between the biLSTM layers (training only).

    Examples:
        >>> backbone = CoVeBackbone(10, 4, 3, 2)
        >>> out = backbone({"token_ids": np.ones((2, 5), "int32"), "padding_mask": np.ones((2, 5), "int32")})
        >>> tuple(out["sequence_output"].shape)
        (2, 5, 10)
    """

    def __init__(self, vocabulary_size: int, glove_dim: int, hidden_dim: int, lstm_layers: int = 2, dropout: float = 0.0, dtype: Any = None, **kwargs: Any) -> None:
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        mask = ops.not_equal(padding_mask, 0)
        glove = keras.layers.Embedding(vocabulary_size, glove_dim, trainable=False, dtype=dtype, name="glove")(token_ids)
        x = glove
        for k in range(lstm_layers):
            if k:
                x = keras.layers.Dropout(dropout, dtype=dtype, name=f"lstm_dropout_{k}")(x)
            lstm = keras.layers.LSTM(hidden_dim, return_sequences=True, dtype=dtype, name=f"lstm_{k}")
            x = keras.layers.Bidirectional(lstm, merge_mode="concat", dtype=dtype, name=f"bilstm_{k}")(x, mask=mask)
        zero = ops.expand_dims(ops.cast(mask, x.dtype), -1)  # (batch, sequence, 1): padding steps carry no state
        cove = x * zero
        glove = glove * zero
        sequence = ops.concatenate([glove, cove], axis=-1)
        pooled = ops.sum(sequence, axis=1) / ops.maximum(ops.sum(zero, axis=1), 1.0)  # (batch, glove_dim + 2 hidden): the mean over words
        outputs = {"sequence_output": sequence, "pooled_output": pooled, "cove_output": cove, "glove_output": glove}
        kwargs.setdefault("name", "cove_backbone")
        super().__init__(inputs={"token_ids": token_ids, "padding_mask": padding_mask}, outputs=outputs, dtype=dtype, **kwargs)
        self.vocabulary_size, self.glove_dim, self.hidden_dim, self.lstm_layers, self.dropout = vocabulary_size, glove_dim, hidden_dim, lstm_layers, dropout

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(vocabulary_size=self.vocabulary_size, glove_dim=self.glove_dim, hidden_dim=self.hidden_dim, lstm_layers=self.lstm_layers, dropout=self.dropout)
        return config

    def set_glove(self, matrix: Any) -> None:
        """Load the ``(vocabulary_size, glove_dim)`` GloVe table (:func:`ptmkit_cove.glove.embedding_matrix`)."""
        self.get_layer("glove").set_weights([matrix])


def build_backbone(config: Any) -> CoVeBackbone:
    """A :class:`CoVeBackbone` of ``config``'s (:class:`~ptmkit_cove.config.CoVeConfig`) size, its
    GloVe table zero until :meth:`CoVeBackbone.set_glove` or the run's weights fill it."""
    return CoVeBackbone(config.vocabulary_size, config.glove_dim, config.hidden_dim, config.lstm_layers, config.dropout)
