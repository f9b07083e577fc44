"""The Transformer encoder-decoder as two ONNX graphs, written from the backbone's weights with the
core's :class:`ptmkit.api.OnnxGraph` (no TensorFlow in the graphs), for the lean runtime's
:class:`ptmkit_export.Translator` (:mod:`ptmkit_export.translation`).

- The **encoder**: ``encoder_token_ids``, ``encoder_padding_mask`` ``(batch, source)`` int32 ->
  ``encoder_sequence_output`` ``(batch, source, hidden)`` float32.
- The **decoder with a self-attention key/value cache**: ``token_ids`` ``(batch, sequence)`` int32
  (the new target tokens), ``padding_mask`` ``(batch, past_sequence + sequence)`` int32 (the whole
  target mask), ``encoder_sequence_output``, ``encoder_padding_mask``, and per layer ``i``
  ``past_key_{i}``/``past_value_{i}`` ``(batch, heads, past_sequence, head_dim)`` float32 ->
  ``logits`` ``(batch, sequence, vocabulary)`` and ``present_key_{i}``/``present_value_{i}`` (the
  layout of :mod:`ptmkit_export.decoding`, as GPT's export). Cross-attention recomputes the
  encoder's keys and values at each call.

The computation is :func:`ptmkit_transformer.backbone.build_backbone`'s: token embeddings times
``sqrt(hidden)`` (``scale_embeddings``) plus the stack's positions (a table read from the Keras
position layer itself, so every layout matches; target positions count from the first target
token, as the Keras decoder's do), layer-normalised with ``embedding_layer_norm``; keras-hub's ``TransformerEncoder`` / ``TransformerDecoder``
blocks, post-LN or pre-LN (then a final layer norm per stack); attention
``softmax(q k^T / sqrt(head_dim) + bias) v`` with ``bias`` :data:`MASKED` on padded keys, and on
future keys in the decoder's self-attention; logits ``h E^T`` (tied embedding) plus the final
logits bias where the config has one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptmkit.api import OnnxGraph, attention_weights

#: The attention bias of a key a query may not see (exp(-1e4) is 0 in float32, and finite in float16).
MASKED = -1e4


def _numpy(value: Any) -> np.ndarray:
    """A Keras variable or tensor as float32 NumPy on any backend (torch's need detaching first)."""
    import keras

    return np.asarray(keras.ops.convert_to_numpy(value), np.float32)


def _norm(g: OnnxGraph, x: str, prefix: str, layer: Any) -> str:
    return g.layer_norm(x, prefix, _numpy(layer.gamma), _numpy(layer.beta), float(layer.epsilon))


def _activation(g: OnnxGraph, x: str, name: str) -> str:
    """ReLU, exact GELU ``x/2 (1 + erf(x / sqrt 2))`` (Keras' ``gelu``) or SiLU ``x sigmoid(x)``."""
    if name == "relu":
        return g.op("Relu", [x])
    if name == "silu":
        return g.op("Mul", [x, g.op("Sigmoid", [x])])
    erf = g.op("Erf", [g.op("Mul", [x, g.const("c_inv_sqrt2", 1 / np.sqrt(2))])])
    return g.op("Mul", [g.op("Mul", [x, g.const("c_0.5", 0.5)]), g.op("Add", [erf, g.const("c_1", 1.0)])])


def _residual(g: OnnxGraph, x: str, prefix: str, norm: Any, pre: bool, body: Any) -> str:
    """keras-hub's sub-layer: ``x + body(norm(x))`` (pre-LN) or ``norm(x + body(x))`` (post-LN)."""
    h = _norm(g, x, prefix, norm) if pre else x
    x = g.op("Add", [body(h), x])
    return x if pre else _norm(g, x, prefix, norm)


def _project(g: OnnxGraph, x: str, prefix: str, w: dict[str, np.ndarray], name: str, heads: int) -> str:
    kernel = w[f"{name}_kernel"]
    return g.split_heads(g.dense(x, f"{prefix}.{name}", kernel, w[f"{name}_bias"]), heads, kernel.shape[1] // heads)


def _attention(g: OnnxGraph, x: str, memory: str, prefix: str, layer: Any, heads: int, bias: str, cache: int | None = None) -> str:
    """Multi-head attention of ``x`` over ``memory``; with ``cache`` (the layer number), the keys
    and values of ``memory`` (the new positions) are appended to that layer's past ones."""
    w = attention_weights(layer)
    head_dim = w["query_kernel"].shape[1] // heads
    q = _project(g, x, prefix, w, "query", heads)
    k, v = _project(g, memory, prefix, w, "key", heads), _project(g, memory, prefix, w, "value", heads)
    if cache is not None:
        k = g.op("Concat", [f"past_key_{cache}", k], f"present_key_{cache}", axis=2)
        v = g.op("Concat", [f"past_value_{cache}", v], f"present_value_{cache}", axis=2)
    return g.dense(g.attention(q, k, v, bias, head_dim), f"{prefix}.output", w["output_kernel"], w["output_bias"])


def _feedforward(g: OnnxGraph, x: str, prefix: str, layer: Any, activation: str) -> str:
    inner, outer = layer._feedforward_intermediate_dense, layer._feedforward_output_dense
    h = _activation(g, g.dense(x, f"{prefix}.intermediate", _numpy(inner.kernel), _numpy(inner.bias)), activation)
    return g.dense(h, f"{prefix}.ffn_output", _numpy(outer.kernel), _numpy(outer.bias))


def _embed(g: OnnxGraph, backbone: Any, config: Any, side: str, token_ids: str, positions: str) -> str:
    """Token embeddings (scaled) plus the side's position table rows at ``positions``, layer-normalised
    where ``embedding_layer_norm`` says."""
    table = g.const("token_embedding", _numpy(backbone.token_embedding.embeddings))
    x = g.op("Gather", [table, token_ids], axis=0)
    if config.scale_embeddings:
        x = g.op("Mul", [x, g.const("c_embedding_scale", np.sqrt(config.hidden_dim))])
    places = g.op("Gather", [g.const(f"{side}.positions", position_table(backbone, config, side)), positions], axis=0)
    x = g.op("Add", [x, places])
    return _norm(g, x, f"{side}.embedding_norm", backbone.get_layer(f"{side}_embedding_layer_norm")) if config.embedding_layer_norm else x


def position_table(backbone: Any, config: Any, side: str) -> np.ndarray:
    """``(max_sequence_length, hidden)`` float32: the position encodings (or learned embeddings)
    the Keras ``side`` stack adds at each position, from its own position layer."""
    name = f"{side}_position_embedding" if config.positions == "learned" else f"{side}_position_encoding"
    zeros = np.zeros((1, config.max_sequence_length, config.hidden_dim), np.float32)
    return _numpy(backbone.get_layer(name)(zeros))[0]


def _key_bias(g: OnnxGraph, mask: str) -> str:
    """``(batch, 1, 1, keys)``: 0 on real keys, :data:`MASKED` on padding."""
    real = g.op("Unsqueeze", [g.op("Cast", [mask], to=9), g.const("axes_1_2", [1, 2], np.int64)])
    return g.op("Where", [real, g.const("c_0", 0.0), g.const("c_masked", MASKED)])


def _blocks(backbone: Any, config: Any, side: str) -> list[Any]:
    count = config.encoder_layers if side == "encoder" else config.decoder_layers
    return [backbone.get_layer(f"{side}_layer_{i}") for i in range(count)]


def _final_norm(g: OnnxGraph, backbone: Any, config: Any, x: str, side: str) -> str:
    return _norm(g, x, f"{side}.final_norm", backbone.get_layer(f"{side}_final_layer_norm")) if config.normalization == "pre" else x


def build_encoder_graph(backbone: Any, config: Any) -> Any:
    """The ``onnx.ModelProto`` of the backbone's encoder (module docstring).

    Args:
        backbone: a model of :func:`ptmkit_transformer.backbone.build_backbone`.
        config: its :class:`~ptmkit_transformer.config.TransformerConfig`.

    Raises:
        onnx.checker.ValidationError: the graph is not valid ONNX (a bug).
    """
    from onnx import TensorProto, helper

    g = OnnxGraph()
    pre, heads = config.normalization == "pre", config.num_heads
    length = g.op("Gather", [g.op("Shape", ["encoder_token_ids"]), g.const("axis_1", 1, np.int64)])
    positions = g.op("Range", [g.const("start_0", 0, np.int64), length, g.const("step_1", 1, np.int64)])
    x = _embed(g, backbone, config, "encoder", "encoder_token_ids", positions)
    bias = _key_bias(g, "encoder_padding_mask")
    for i, block in enumerate(_blocks(backbone, config, "encoder")):
        p = f"encoder{i}"
        x = _residual(g, x, f"{p}.attention_norm", block._self_attention_layer_norm, pre,
                      lambda h, p=p, block=block: _attention(g, h, h, f"{p}.attention", block._self_attention_layer, heads, bias))
        x = _residual(g, x, f"{p}.ffn_norm", block._feedforward_layer_norm, pre,
                      lambda h, p=p, block=block: _feedforward(g, h, p, block, config.activation))
    g.op("Identity", [_final_norm(g, backbone, config, x, "encoder")], "encoder_sequence_output")
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", "source"]) for name in ("encoder_token_ids", "encoder_padding_mask")]
    outputs = [helper.make_tensor_value_info("encoder_sequence_output", TensorProto.FLOAT, ["batch", "source", config.hidden_dim])]
    return g.model("transformer_encoder", inputs, outputs, "ptmkit_transformer")


def _self_attention_bias(g: OnnxGraph) -> str:
    """``(batch, 1, sequence, total)``: 0 where new query ``s`` (position ``total - sequence + s``)
    may see key ``t`` (not after it, not padding), :data:`MASKED` elsewhere; and the new tokens'
    positions."""
    total = g.op("Gather", [g.op("Shape", ["padding_mask"]), g.const("axis_1", 1, np.int64)])
    sequence = g.op("Gather", [g.op("Shape", ["token_ids"]), "axis_1"])
    queries = g.op("Range", [g.op("Sub", [total, sequence]), total, g.const("step_1", 1, np.int64)], "positions")
    keys = g.op("Range", [g.const("start_0", 0, np.int64), total, "step_1"])
    causal = g.op("LessOrEqual", [g.op("Unsqueeze", [keys, g.const("i_0", [0], np.int64)]), g.op("Unsqueeze", [queries, g.const("i_1", [1], np.int64)])])
    real = g.op("Unsqueeze", [g.op("Cast", ["padding_mask"], to=9), g.const("axes_1_2", [1, 2], np.int64)])
    return g.op("Where", [g.op("And", [causal, real]), g.const("c_0", 0.0), g.const("c_masked", MASKED)], "self_attention_bias")


def build_decoder_graph(backbone: Any, config: Any) -> Any:
    """The ``onnx.ModelProto`` of the backbone's decoder with a self-attention key/value cache
    (module docstring); ``backbone`` and ``config`` as :func:`build_encoder_graph`'s.

    Raises:
        onnx.checker.ValidationError: the graph is not valid ONNX (a bug).
    """
    from onnx import TensorProto, helper

    g = OnnxGraph()
    pre, heads, head_dim = config.normalization == "pre", config.num_heads, config.hidden_dim // config.num_heads
    self_bias = _self_attention_bias(g)
    x = _embed(g, backbone, config, "decoder", "token_ids", "positions")
    cross_bias = _key_bias(g, "encoder_padding_mask")
    blocks = _blocks(backbone, config, "decoder")
    for i, block in enumerate(blocks):
        p = f"decoder{i}"
        x = _residual(g, x, f"{p}.attention_norm", block._self_attention_layer_norm, pre,
                      lambda h, i=i, p=p, block=block: _attention(g, h, h, f"{p}.attention", block._self_attention_layer, heads, self_bias, cache=i))
        x = _residual(g, x, f"{p}.cross_norm", block._cross_attention_layer_norm, pre,
                      lambda h, p=p, block=block: _attention(g, h, "encoder_sequence_output", f"{p}.cross", block._cross_attention_layer, heads, cross_bias))
        x = _residual(g, x, f"{p}.ffn_norm", block._feedforward_layer_norm, pre,
                      lambda h, p=p, block=block: _feedforward(g, h, p, block, config.activation))
    x = _final_norm(g, backbone, config, x, "decoder")
    logits = g.op("MatMul", [x, g.const("output_embedding", _numpy(backbone.token_embedding.embeddings).T)])
    bias = getattr(backbone, "logits_bias", None)
    if bias is None:
        g.op("Identity", [logits], "logits")
    else:
        g.op("Add", [logits, g.const("final_logits_bias", _numpy(bias.bias))], "logits")
    cache, present = ["batch", heads, "past_sequence", head_dim], ["batch", heads, "total_sequence", head_dim]
    inputs = [
        helper.make_tensor_value_info("token_ids", TensorProto.INT32, ["batch", "sequence"]),
        helper.make_tensor_value_info("padding_mask", TensorProto.INT32, ["batch", "total_sequence"]),
        helper.make_tensor_value_info("encoder_sequence_output", TensorProto.FLOAT, ["batch", "source", config.hidden_dim]),
        helper.make_tensor_value_info("encoder_padding_mask", TensorProto.INT32, ["batch", "source"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", config.vocabulary_size])]
    for i in range(len(blocks)):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_{kind}_{i}", TensorProto.FLOAT, cache))
            outputs.append(helper.make_tensor_value_info(f"present_{kind}_{i}", TensorProto.FLOAT, present))
    return g.model("transformer_decoder_with_cache", inputs, outputs, "ptmkit_transformer")
