"""The XLNet backbone: keras-hub's ``XLNetEncoder`` layers (``TwoStreamRelativeAttention``) with
relative positions, masks and segments computed batch by batch.

Yang et al. 2019, "XLNet", section 2.3 and appendix A.2; Dai et al. 2019, "Transformer-XL",
section 3.3 (relative positional encodings). Tokens are embedded (no position embedding); each
layer's attention score between query ``i`` and key ``j`` is ``(q_i + u)·k_j`` (content) ``+
(q_i + v)·W_r R_{i-j}`` (position: sinusoids of the distance ``i - j``, Transformer-XL's ``rel_shift``)
``+ (q_i + b)·s_{ij}`` (segment: a learnt vector for "same segment" or "another"), scaled by
``1/sqrt(head_dim)``; post-LN blocks follow. Inputs ``token_ids``, ``segment_ids``,
``padding_mask``: ``(batch, sequence)`` int32. Outputs ``sequence_output`` ``(batch, sequence,
hidden_dim)`` (the content stream) and ``pooled_output`` ``(batch, hidden_dim)``: a tanh dense on
the state of the last real token (``<cls>`` in XLNet's packing; Hugging Face's
``SequenceSummary`` with ``summary_type = "last"``), float32.

keras-hub 0.32's ``XLNetBackbone`` gives wrong states for a batch of more than one sequence: it
``reshape``s ``(batch, sequence)`` and ``(2 sequence, batch, hidden)`` tensors where it means to
transpose them (the padding mask and the relative encodings), and it has no query stream.
:class:`XLNetBackbone` keeps keras-hub's encoder layers (their weights and the two-stream
attention) and computes the relative encodings, masks and segment matrix itself; Hugging Face
``XLNetModel``'s states are matched to 1e-4 (``tests/test_xlnet_hf.py``).

Two streams (:class:`ptmkit.api.TwoStreamAttention`): :meth:`XLNetBackbone.query_stream_output`
runs the content stream under a permutation's content mask and the query stream, started from the
learnt ``mask_emb`` at the positions to predict, under its query mask (the core's ``plm``).
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub
from keras import ops
from keras_hub.src.models.xlnet.xlnet_encoder import XLNetEncoder

from ptmkit.api import feedforward_activation
from ptmkit_xlnet.config import XLNetConfig


def _initializer(stddev: float = 0.02) -> Any:
    return keras.initializers.TruncatedNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="ptmkit_xlnet")
class RelativePositionEncoding(keras.layers.Layer):
    """Sinusoids of the relative distances ``L, L-1, ..., -L+1`` for a sequence of length ``L``:
    ``(batch, 2 L, hidden_dim)``, ``[sin(d f), cos(d f)]`` with ``f_k = 10000^(-2k/hidden_dim)``
    (Hugging Face ``XLNetModel.relative_positional_encoding``, ``attn_type = "bi"``); distances
    clamped to ``[-clamp_len, clamp_len]`` when ``clamp_len`` > 0."""

    def __init__(self, hidden_dim: int, clamp_len: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.clamp_len = clamp_len

    def call(self, token_ids: Any) -> Any:
        batch, length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        frequencies = ops.arange(0, self.hidden_dim, 2, dtype="float32")
        inverse = 1.0 / ops.power(10000.0, frequencies / float(self.hidden_dim))
        distances = ops.cast(length - ops.arange(0, 2 * length), "float32")
        if self.clamp_len > 0:
            distances = ops.clip(distances, -float(self.clamp_len), float(self.clamp_len))
        angles = distances[:, None] * inverse[None, :]
        encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
        encoding = ops.broadcast_to(encoding[None], (batch, 2 * length, self.hidden_dim))
        return ops.cast(encoding, self.compute_dtype)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (input_shape[0], None, self.hidden_dim)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hidden_dim": self.hidden_dim, "clamp_len": self.clamp_len}


@keras.saving.register_keras_serializable(package="ptmkit_xlnet")
class AttentionMasks(keras.layers.Layer):
    """The content and query streams' ``(batch, sequence, sequence)`` bool masks (True: query ``i``
    may attend to key ``j``): padding keys hidden, a token always sees itself in the content stream
    (Hugging Face's ``non_tgt_mask``); with a permutation's masks, both must allow."""

    def call(self, padding_mask: Any, content_mask: Any = None, query_mask: Any = None) -> tuple[Any, Any]:
        keys = ops.cast(padding_mask, "bool")[:, None, :]
        positions = ops.arange(ops.shape(padding_mask)[1])
        itself = ops.equal(positions[:, None], positions[None, :])[None]
        content = keys if content_mask is None else ops.logical_and(keys, ops.cast(content_mask, "bool"))
        query = keys if query_mask is None else ops.logical_and(keys, ops.cast(query_mask, "bool"))
        length = ops.shape(padding_mask)[1]
        shape = (ops.shape(padding_mask)[0], length, length)
        return ops.broadcast_to(ops.logical_or(content, itself), shape), ops.broadcast_to(query, shape)

    def compute_output_spec(self, padding_mask: Any, content_mask: Any = None, query_mask: Any = None) -> Any:
        shape = (padding_mask.shape[0], padding_mask.shape[1], padding_mask.shape[1])
        return keras.KerasTensor(shape, dtype="bool"), keras.KerasTensor(shape, dtype="bool")


@keras.saving.register_keras_serializable(package="ptmkit_xlnet")
class SegmentMatrix(keras.layers.Layer):
    """``(batch, sequence, sequence)`` bool, True where query and key are in different segments."""

    def call(self, segment_ids: Any) -> Any:
        return ops.not_equal(segment_ids[:, :, None], segment_ids[:, None, :])

    def compute_output_spec(self, segment_ids: Any) -> Any:
        return keras.KerasTensor((segment_ids.shape[0], segment_ids.shape[1], segment_ids.shape[1]), dtype="bool")


@keras.saving.register_keras_serializable(package="ptmkit_xlnet")
class QueryStreamStart(keras.layers.Layer):
    """The query stream's first states: the learnt ``mask_emb`` ``(1, 1, hidden_dim)`` at every
    prediction slot of ``target_mapping`` ``(batch, predictions, sequence)``."""

    def __init__(self, hidden_dim: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim

    def build(self, input_shape: Any) -> None:
        self.mask_emb = self.add_weight(shape=(1, 1, self.hidden_dim), initializer=_initializer(), name="mask_emb")

    def call(self, target_mapping: Any) -> Any:
        shape = (ops.shape(target_mapping)[0], ops.shape(target_mapping)[1], self.hidden_dim)
        return ops.broadcast_to(ops.cast(self.mask_emb, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (input_shape[0], input_shape[1], self.hidden_dim)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hidden_dim": self.hidden_dim}


@keras.saving.register_keras_serializable(package="ptmkit_xlnet")
class LastToken(keras.layers.Layer):
    """The state of each sequence's last real token (padding on either side): ``(batch, hidden)``."""

    def call(self, states: Any, padding_mask: Any) -> Any:
        positions = ops.arange(1, ops.shape(padding_mask)[1] + 1)[None, :]
        last = ops.argmax(ops.cast(padding_mask, "int32") * positions, axis=1)
        return ops.take_along_axis(states, ops.cast(last, "int32")[:, None, None], axis=1)[:, 0, :]

    def compute_output_shape(self, states_shape: Any, padding_mask_shape: Any) -> tuple[Any, ...]:
        return (states_shape[0], states_shape[2])


@keras.saving.register_keras_serializable(package="ptmkit_xlnet")
class XLNetLayer(XLNetEncoder):
    """keras-hub's ``XLNetEncoder`` (relative two-stream attention, post-LN feed-forward) that
    always returns two tensors, ``(content, query)``, the query stream ``(batch, predictions,
    hidden)``, or ``(content, content)`` when it is given no query stream: keras-hub's returns
    ``(content, None)``, which a functional graph cannot carry, and a Keras layer must return as
    many tensors at every call (the functional graph reads the count of its first call's)."""

    def call(self, output_content: Any, output_query: Any = None, **kwargs: Any) -> Any:
        content, query = super().call(output_content, output_query=output_query, **kwargs)
        return content, content if query is None else query

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            num_heads=self.num_heads,
            hidden_dim=self.hidden_dim,
            head_dim=self.head_dim,
            intermediate_dim=self.intermediate_dim,
            dropout=self.dropout,
            activation=keras.activations.serialize(keras.activations.get(self.activation)),
            layer_norm_epsilon=self.layer_norm_epsilon,
            kernel_initializer_range=self.kernel_initializer_range,
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config

    def compute_output_spec(self, output_content: Any, output_query: Any = None, **kwargs: Any) -> Any:
        content = keras.KerasTensor(output_content.shape, dtype=self.compute_dtype)
        shape = output_content.shape if output_query is None else output_query.shape
        return content, keras.KerasTensor(shape, dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="ptmkit_xlnet")
class XLNetBackbone(keras_hub.models.Backbone):
    """An XLNet encoder (module docstring) on keras-hub's ``XLNetEncoder`` layers.

    Args:
        vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, dropout,
        hidden_activation, layer_norm_epsilon, clamp_len: as :class:`ptmkit_xlnet.XLNetConfig`.

    Raises:
        ValueError: an unknown activation.

    Examples:
        >>> backbone = XLNetBackbone(vocabulary_size=300, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64)
        >>> ones = np.ones((2, 5), "int32")
        >>> out = backbone({"token_ids": ones, "segment_ids": 0 * ones, "padding_mask": ones})
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
        hidden_activation: str = "gelu",
        layer_norm_epsilon: float = 1e-12,
        clamp_len: int = -1,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        activation = feedforward_activation(hidden_activation)
        self.token_embedding = keras_hub.layers.ReversibleEmbedding(
            vocabulary_size, hidden_dim, embeddings_initializer=_initializer(), dtype=dtype, name="token_embedding"
        )
        self.relative_positions = RelativePositionEncoding(
            hidden_dim, clamp_len, dtype=dtype, name="relative_positions"
        )
        self.attention_masks = AttentionMasks(dtype=dtype, name="attention_masks")
        self.segment_matrix = SegmentMatrix(dtype=dtype, name="segment_matrix")
        self.query_start = QueryStreamStart(hidden_dim, dtype=dtype, name="query_stream_start")
        self.query_start.build((None, None, None))  # mask_emb exists (and is saved) before a query stream runs
        self.query_start.trainable = False  # until a query stream runs: fine-tuning reads the content stream alone
        self.embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        self.transformer_layers = [
            XLNetLayer(
                num_heads=num_heads,
                hidden_dim=hidden_dim,
                head_dim=hidden_dim // num_heads,
                intermediate_dim=intermediate_dim,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.output_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="output_dropout")
        self.last_token = LastToken(dtype=dtype, name="last_token")
        self.sequence_summary = keras.layers.Dense(
            hidden_dim, activation="tanh", kernel_initializer=_initializer(), dtype=dtype, name="sequence_summary"
        )

        inputs = {
            "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
            "segment_ids": keras.Input(shape=(None,), dtype="int32", name="segment_ids"),
            "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
        }
        content, _ = self._streams(inputs)
        sequence_output = self.output_dropout(content)
        pooled_output = self.sequence_summary(self.last_token(sequence_output, inputs["padding_mask"]))
        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": sequence_output, "pooled_output": pooled_output},
            dtype=dtype,
            **kwargs,
        )
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.hidden_activation = hidden_activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.clamp_len = clamp_len

    def _streams(
        self, inputs: dict[str, Any], content_mask: Any = None, query_mask: Any = None, target_mapping: Any = None
    ) -> tuple[Any, Any]:
        """Both streams' last states (the query stream's None without ``target_mapping``)."""
        content = self.embeddings_dropout(self.token_embedding(inputs["token_ids"]))
        relative = self.embeddings_dropout(self.relative_positions(inputs["token_ids"]))
        segments = self.segment_matrix(inputs["segment_ids"])
        content_attention, query_attention = self.attention_masks(inputs["padding_mask"], content_mask, query_mask)
        query = None if target_mapping is None else self.embeddings_dropout(self.query_start(target_mapping))
        for layer in self.transformer_layers:
            content, streamed = layer(
                output_content=content,
                attn_mask_content=content_attention,
                attn_mask_query=query_attention,
                pos_emb=relative,
                seg_mat=segments,
                output_query=query,
                target_mapping=target_mapping,
            )
            query = None if query is None else streamed
        return content, query

    def query_stream_output(
        self, inputs: dict[str, Any], content_mask: Any, query_mask: Any, target_mapping: Any
    ) -> Any:
        """The query stream's last states, ``(batch, predictions, hidden)`` (see
        :class:`ptmkit.api.TwoStreamAttention`); the masks' 1 allows, padding keys are hidden."""
        self.query_start.trainable = True
        _, query = self._streams(inputs, content_mask, query_mask, target_mapping)
        return self.output_dropout(query)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            hidden_dim=self.hidden_dim,
            intermediate_dim=self.intermediate_dim,
            dropout=self.dropout,
            hidden_activation=self.hidden_activation,
            layer_norm_epsilon=self.layer_norm_epsilon,
            clamp_len=self.clamp_len,
        )
        return config


def build_backbone(config: XLNetConfig) -> XLNetBackbone:
    """Return an :class:`XLNetBackbone` of the configured size, activation, epsilon and clamp."""
    return XLNetBackbone(
        vocabulary_size=config.vocabulary_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        hidden_dim=config.hidden_dim,
        intermediate_dim=config.intermediate_dim,
        dropout=config.dropout,
        hidden_activation=config.hidden_activation,
        layer_norm_epsilon=config.layer_norm_epsilon,
        clamp_len=config.clamp_len,
    )
