"""The Transformer encoder-decoder (Vaswani et al. 2017, "Attention Is All You Need") on
keras-hub's ``TransformerEncoder`` / ``TransformerDecoder`` layers.

One token embedding (keras-hub's ``ReversibleEmbedding``) serves three roles, as in the paper's
section 3.4: the encoder's input embedding, the decoder's input embedding, and, transposed, the
pre-softmax projection (``logits = h @ E^T``, plus a learned bias over the vocabulary where
``final_logits_bias`` says, as in transformers' BART and Marian); embeddings are multiplied by
``sqrt(d_model)`` (unless ``scale_embeddings`` is off) before positions are added. Positions are
the paper's sinusoids (keras-hub's ``SinePositionEncoding``, interleaved; or Marian's layout,
all sines then all cosines: :class:`HalvesSinePositions`) or learned (``PositionEmbedding``, one
table per stack), optionally layer-normalised (``embedding_layer_norm``, as BART). Blocks are post-LN as in the paper, or pre-LN with a final layer norm per
stack; the feed-forward activation is ``activation`` (ReLU in the paper).

Inputs, each ``(batch, sequence)`` int32: ``encoder_token_ids``, ``encoder_padding_mask`` (1 on
tokens), ``decoder_token_ids``, ``decoder_padding_mask``. Outputs: ``encoder_sequence_output``
``(batch, source, hidden)`` and ``decoder_sequence_output`` ``(batch, target, hidden)`` float32;
the decoder attends causally to itself and to the encoder's non-padding positions.

:func:`build_backbone` also returns nothing more than the ``keras.Model``; its ``encoder`` and
``decoder`` attributes are functional models on the same layers (shared weights), for
translation: ``encoder(ids, mask) -> states`` once per source, ``decoder(ids, mask, states,
source mask) -> logits`` once per step.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import keras_hub
import numpy as np
from keras import ops

from ptmkit_transformer.config import TransformerConfig


def halves_sinusoids(positions: int, dim: int) -> np.ndarray:
    """``(positions, dim)`` float32: row ``p`` is ``[sin(p w_0) ... sin(p w_{d/2-1}) | cos(p w_0)
    ... cos(p w_{d/2-1})]`` with ``w_i = 10000^(-2i/dim)``, computed in float64 then rounded, as
    transformers' ``MarianSinusoidalPositionalEmbedding.create_weight`` (``modeling_marian.py``)
    and fairseq's ``SinusoidalPositionalEmbedding`` lay them out (``dim`` even)."""
    angles = np.arange(positions, dtype=np.float64)[:, None] / np.power(10000.0, 2 * (np.arange(dim // 2, dtype=np.float64)) / dim)[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


class HalvesSinePositions(keras.layers.Layer):
    """Fixed sinusoidal positions in the halves layout (:func:`halves_sinusoids`), for the first
    ``max_positions`` positions: ``(batch, sequence, hidden)`` in, the same shape of position
    encodings out (no weights: a constant table)."""

    def __init__(self, max_positions: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_positions = int(max_positions)

    def call(self, inputs: Any) -> Any:
        shape = ops.shape(inputs)
        table = ops.convert_to_tensor(halves_sinusoids(self.max_positions, int(inputs.shape[-1])), dtype=self.compute_dtype)
        return ops.broadcast_to(table[None, : shape[1], :], shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "max_positions": self.max_positions}


class LogitsBias(keras.layers.Layer):
    """A learned ``(vocabulary,)`` bias added to ``(..., vocabulary)`` logits (transformers'
    ``final_logits_bias`` of BART and Marian; initialised to zeros)."""

    def __init__(self, vocabulary_size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.bias = self.add_weight(shape=(self.vocabulary_size,), initializer="zeros", name="bias")

    def call(self, logits: Any) -> Any:
        return logits + ops.cast(self.bias, logits.dtype)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocabulary_size": self.vocabulary_size}


def kernel_initializer(config: TransformerConfig) -> Any:
    """The blocks' kernel initializer: ``N(0, init_std)`` (transformers' Marian and BART) where
    ``config.init_std`` is set, else Glorot-uniform (fairseq's Transformer)."""
    return keras.initializers.RandomNormal(stddev=config.init_std) if config.init_std else keras.initializers.GlorotUniform()


class _Stack:
    """Embedding, positions, dropout, blocks and (pre-LN) final norm of one side."""

    def __init__(self, config: TransformerConfig, side: str, embedding: Any) -> None:
        self.config, self.embedding, self.side = config, embedding, side
        if config.positions == "learned":
            self.positions = keras_hub.layers.PositionEmbedding(config.max_sequence_length, name=f"{side}_position_embedding")
        elif config.sinusoid_layout == "halves":
            self.positions = HalvesSinePositions(config.max_sequence_length, name=f"{side}_position_encoding")
        else:
            self.positions = keras_hub.layers.SinePositionEncoding(name=f"{side}_position_encoding")
        self.embedding_norm = (
            keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name=f"{side}_embedding_layer_norm") if config.embedding_layer_norm else None
        )
        self.dropout = keras.layers.Dropout(config.dropout, name=f"{side}_embeddings_dropout")
        layer = keras_hub.layers.TransformerEncoder if side == "encoder" else keras_hub.layers.TransformerDecoder
        count = config.encoder_layers if side == "encoder" else config.decoder_layers
        self.blocks = [
            layer(
                intermediate_dim=config.intermediate_dim, num_heads=config.num_heads, dropout=config.dropout, activation=config.activation,
                layer_norm_epsilon=config.layer_norm_epsilon, normalize_first=config.normalization == "pre",
                kernel_initializer=kernel_initializer(config), name=f"{side}_layer_{i}",
            )
            for i in range(count)
        ]
        self.final_norm = (
            keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name=f"{side}_final_layer_norm") if config.normalization == "pre" else None
        )

    def __call__(self, token_ids: Any, padding_mask: Any, encoder_states: Any = None, encoder_mask: Any = None) -> Any:
        x = self.embedding(token_ids)
        if self.config.scale_embeddings:
            x = keras.layers.Rescaling(math.sqrt(self.config.hidden_dim), name=f"{self.side}_embedding_scale")(x)
        x = keras.layers.Add(name=f"{self.side}_add_positions")([x, self.positions(x)])
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        x = self.dropout(x)
        for block in self.blocks:
            if encoder_states is None:
                x = block(x, padding_mask=padding_mask)
            else:
                x = block(x, encoder_sequence=encoder_states, decoder_padding_mask=padding_mask, encoder_padding_mask=encoder_mask)
        return self.final_norm(x) if self.final_norm is not None else x


def build_backbone(config: TransformerConfig) -> keras.Model:
    """The encoder-decoder backbone of ``config`` (module docstring), with ``token_embedding``,
    ``encoder`` and ``decoder`` attributes."""
    embedding = keras_hub.layers.ReversibleEmbedding(
        config.vocabulary_size, config.hidden_dim, tie_weights=True,
        embeddings_initializer=keras.initializers.RandomNormal(stddev=config.init_std or config.hidden_dim**-0.5), name="token_embedding",
    )
    encoder_stack, decoder_stack = _Stack(config, "encoder", embedding), _Stack(config, "decoder", embedding)
    bias = LogitsBias(config.vocabulary_size, name="final_logits_bias") if config.final_logits_bias else None
    names = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in names}
    encoded = encoder_stack(inputs["encoder_token_ids"], inputs["encoder_padding_mask"])
    decoded = decoder_stack(inputs["decoder_token_ids"], inputs["decoder_padding_mask"], encoded, inputs["encoder_padding_mask"])
    backbone = keras.Model(inputs, {"encoder_sequence_output": encoded, "decoder_sequence_output": decoded}, name="transformer_backbone")

    source_ids, source_mask = keras.Input((None,), dtype="int32", name="encoder_token_ids"), keras.Input((None,), dtype="int32", name="encoder_padding_mask")
    encoder = keras.Model([source_ids, source_mask], encoder_stack(source_ids, source_mask), name="transformer_encoder")
    target_ids, target_mask = keras.Input((None,), dtype="int32", name="decoder_token_ids"), keras.Input((None,), dtype="int32", name="decoder_padding_mask")
    states = keras.Input((None, config.hidden_dim), dtype="float32", name="encoder_sequence_output")
    memory_mask = keras.Input((None,), dtype="int32", name="encoder_padding_mask")
    hidden = decoder_stack(target_ids, target_mask, states, memory_mask)
    logits = embedding(hidden, reverse=True)
    decoder = keras.Model([target_ids, target_mask, states, memory_mask], logits if bias is None else bias(logits), name="transformer_decoder")
    backbone.token_embedding, backbone.encoder, backbone.decoder, backbone.logits_bias = embedding, encoder, decoder, bias
    return backbone


def output_logits(backbone: keras.Model, decoder_states: Any) -> Any:
    """``(batch, target, vocabulary)`` logits: the decoder's states times the transposed token
    embedding (the tied pre-softmax projection), plus the final logits bias where the config has
    one, in float32."""
    logits = ops.cast(backbone.token_embedding(decoder_states, reverse=True), "float32")
    return logits if getattr(backbone, "logits_bias", None) is None else backbone.logits_bias(logits)
