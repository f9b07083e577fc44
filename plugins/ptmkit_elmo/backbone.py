"""The ELMo biLM backbone (Peters et al. 2018, "Deep contextualized word representations";
reference implementation: allenai/bilm-tf), on Keras layers, in the order data flows:

    char_ids (batch, sequence, characters)
      -> character embeddings                 (batch, sequence, characters, char_embedding_dim)
      -> filters of widths 1..7, max over characters, ReLU   (batch, sequence, sum filter_counts)
      -> highway layers, linear projection    x: (batch, sequence, projection_dim)
      -> forward LSTM layers  (left to right)  f_k: (batch, sequence, projection_dim)
      -> backward LSTM layers (right to left)  b_k: (batch, sequence, projection_dim)

Each LSTM layer's output is projected to ``projection_dim``; from the second layer on, the layer's
input is added to its projected output (bilm-tf's residual connection). The forward and backward
LMs share the token encoder and the softmax (:attr:`ELMoBackbone.softmax`, a dense layer over the
word vocabulary, outside the backbone's graph: the bidirectional-LM objective and the held-out
scoring apply it to ``forward_output`` and ``backward_output``).

Two departures from bilm-tf, both to keep Keras' (and cuDNN's, and ONNX's) fused LSTM kernels,
which have neither: the projection is applied to each layer's output sequence, outside the
recurrence (bilm-tf's ``LSTMCell(num_proj=...)`` feeds the projected state back into the cell),
and cell and projection values are not clipped (bilm-tf clips both at 3). bilm-tf also marks each
word's start and end with two reserved character ids; here a word's characters are its UTF-8
bytes only (the core's ``char_ids`` field).

Outputs (all float32, ``hidden = 2 * projection_dim``):

- ``sequence_output`` ``(batch, sequence, hidden)``: ``[f_top; b_top]``;
- ``hidden_states`` ``(batch, lstm_layers + 1, sequence, hidden)``: ``[x; x]``, then ``[f_k; b_k]``
  for each layer: the layers ELMo's scalar mix weighs (bilm-tf's layer 0 repeats the token
  representation for both directions);
- ``pooled_output`` ``(batch, hidden)``: ``[f_top at the row's last token; b_top at its first]``,
  each direction's summary of the whole row;
- ``forward_output``, ``backward_output`` ``(batch, sequence, projection_dim)``: ``f_top`` (reads
  positions ``<= i``) and ``b_top`` (reads positions ``>= i``), the LMs' states.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub
from keras import ops

from ptmkit_elmo.tokenizer import MAX_CHARACTERS

#: ``char_ids`` values: 0 pads, byte ``b`` is ``b + 1`` (:mod:`ptmkit_export.fields`).
CHARACTER_IDS = 257


@keras.saving.register_keras_serializable(package="ptmkit_elmo")
class Highway(keras.layers.Layer):
    """One highway layer (Srivastava et al. 2015), as bilm-tf's character encoder has them:
    ``t = sigmoid(x W_t + b_t)``, ``y = t * relu(x W_h + b_h) + (1 - t) * x``, with ``b_t``
    initialised to -2 (bilm-tf's ``b_carry``) so that the layer starts close to the identity.

    Args:
        dim: int. The input's (and output's) last axis.

    Call arguments:
        x: ``(..., dim)`` float. Returns the same shape.
    """

    def __init__(self, dim: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dim = dim
        self.transform = keras.layers.Dense(dim, activation="relu", dtype=self.dtype_policy, name="transform")
        self.gate = keras.layers.Dense(dim, activation="sigmoid", bias_initializer=keras.initializers.Constant(-2.0), dtype=self.dtype_policy, name="gate")

    def build(self, input_shape: Any) -> None:
        self.transform.build(input_shape)
        self.gate.build(input_shape)
        self.built = True

    def call(self, x: Any) -> Any:
        t = self.gate(x)
        return t * self.transform(x) + (1.0 - t) * x

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(dim=self.dim)
        return config


def _char_cnn(char_ids: Any, config: dict[str, Any], dtype: Any) -> Any:
    """``(batch, sequence, characters)`` int32 -> ``(batch, sequence, projection_dim)``."""
    chars = keras.layers.Embedding(CHARACTER_IDS, config["char_embedding_dim"], dtype=dtype, name="char_embedding")(char_ids)
    pooled = []
    for width, count in zip(config["filter_widths"], config["filter_counts"], strict=True):
        # a (1, width) kernel slides over each word's characters, never across words
        conv = keras.layers.Conv2D(count, (1, width), dtype=dtype, name=f"char_conv_{width}")(chars)  # (batch, sequence, characters - width + 1, count)
        pooled.append(ops.max(conv, axis=2))
    x = keras.layers.Activation("relu", dtype=dtype, name="char_cnn_relu")(ops.concatenate(pooled, axis=-1) if len(pooled) > 1 else pooled[0])
    for i in range(config["highway_layers"]):
        x = Highway(sum(config["filter_counts"]), dtype=dtype, name=f"highway_{i}")(x)
    return keras.layers.Dense(config["projection_dim"], dtype=dtype, name="token_projection")(x)


def _lstm_stack(x: Any, mask: Any, config: dict[str, Any], backward: bool, dtype: Any) -> list[Any]:
    """Each layer's projected output, ``(batch, sequence, projection_dim)``, of one direction."""
    direction = "backward" if backward else "forward"
    outputs = []
    for k in range(config["lstm_layers"]):
        h = keras.layers.LSTM(config["lstm_dim"], return_sequences=True, go_backwards=backward, dtype=dtype, name=f"{direction}_lstm_{k}")(x, mask=mask)
        if backward:  # go_backwards returns the sequence reversed; padding comes first and is skipped by the mask
            h = ops.flip(h, axis=1)
        h = keras.layers.Dense(config["projection_dim"], use_bias=False, dtype=dtype, name=f"{direction}_projection_{k}")(h)
        if k > 0:
            h = h + x  # bilm-tf's residual connection between the layers
        x = keras.layers.Dropout(config["dropout"], dtype=dtype, name=f"{direction}_dropout_{k}")(h)
        outputs.append(h)
    return outputs


@keras.saving.register_keras_serializable(package="ptmkit_elmo")
class ELMoBackbone(keras_hub.models.Backbone):
    """ELMo's character CNN and biLSTM; see the module docstring for the layers and outputs.

    Args:
        vocabulary_size: int. The shared softmax's size (words, specials included).
        max_characters: int. Characters per token (the ``char_ids`` input's last axis).
        char_embedding_dim, filter_widths, filter_counts, highway_layers, projection_dim,
        lstm_dim, lstm_layers, dropout: as :class:`~ptmkit_elmo.config.ELMoConfig`.

    Examples:
        >>> backbone = ELMoBackbone(20, 8, 4, [1, 2], [3, 5], 1, 6, 10, 2)
        >>> out = backbone({"char_ids": np.ones((2, 5, 8), "int32"), "padding_mask": np.ones((2, 5), "int32")})
        >>> tuple(out["hidden_states"].shape), tuple(out["pooled_output"].shape)
        ((2, 3, 5, 12), (2, 12))
    """

    def __init__(
        self,
        vocabulary_size: int,
        max_characters: int,
        char_embedding_dim: int,
        filter_widths: list[int],
        filter_counts: list[int],
        highway_layers: int,
        projection_dim: int,
        lstm_dim: int,
        lstm_layers: int,
        dropout: float = 0.1,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        settings = dict(
            vocabulary_size=vocabulary_size, max_characters=max_characters, char_embedding_dim=char_embedding_dim,
            filter_widths=list(filter_widths), filter_counts=list(filter_counts), highway_layers=highway_layers,
            projection_dim=projection_dim, lstm_dim=lstm_dim, lstm_layers=lstm_layers, dropout=dropout,
        )
        self.softmax = keras.layers.Dense(vocabulary_size, dtype=dtype, name="softmax")
        self.softmax.build((None, projection_dim))
        char_ids = keras.Input(shape=(None, max_characters), dtype="int32", name="char_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        mask = ops.not_equal(padding_mask, 0)
        x = _char_cnn(char_ids, settings, dtype)
        x = keras.layers.Dropout(dropout, dtype=dtype, name="token_dropout")(x)
        forward = _lstm_stack(x, mask, settings, backward=False, dtype=dtype)
        backward = _lstm_stack(x, mask, settings, backward=True, dtype=dtype)
        layers = [ops.concatenate([x, x], axis=-1)] + [ops.concatenate([f, b], axis=-1) for f, b in zip(forward, backward, strict=True)]
        last = ops.maximum(ops.sum(ops.cast(mask, "int32"), axis=1) - 1, 0)  # (batch,) index of each row's last token
        last_forward = ops.squeeze(ops.take_along_axis(forward[-1], ops.reshape(last, (-1, 1, 1)), axis=1), axis=1)
        pooled = ops.concatenate([last_forward, backward[-1][:, 0, :]], axis=-1)
        outputs = {
            "sequence_output": layers[-1],
            "hidden_states": ops.stack(layers, axis=1),
            "pooled_output": pooled,
            "forward_output": forward[-1],
            "backward_output": backward[-1],
        }
        kwargs.setdefault("name", "elmo_backbone")
        super().__init__(inputs={"char_ids": char_ids, "padding_mask": padding_mask}, outputs=outputs, dtype=dtype, **kwargs)
        for key, value in settings.items():
            setattr(self, key, value)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            {key: getattr(self, key) for key in (
                "vocabulary_size", "max_characters", "char_embedding_dim", "filter_widths", "filter_counts",
                "highway_layers", "projection_dim", "lstm_dim", "lstm_layers", "dropout",
            )}
        )
        return config

    def logits(self, states: Any) -> Any:
        """Word logits ``(..., vocabulary_size)`` from either direction's states ``(..., projection_dim)``
        through the shared softmax layer."""
        return self.softmax(states)


def build_backbone(config: Any) -> ELMoBackbone:
    """An :class:`ELMoBackbone` of ``config``'s (:class:`~ptmkit_elmo.config.ELMoConfig`) size."""
    return ELMoBackbone(
        vocabulary_size=config.vocabulary_size,
        max_characters=MAX_CHARACTERS,
        char_embedding_dim=config.char_embedding_dim,
        filter_widths=config.filter_widths,
        filter_counts=config.filter_counts,
        highway_layers=config.highway_layers,
        projection_dim=config.projection_dim,
        lstm_dim=config.lstm_dim,
        lstm_layers=config.lstm_layers,
        dropout=config.dropout,
    )
