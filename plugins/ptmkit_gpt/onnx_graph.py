"""The GPT decoder as an ONNX graph with a key/value cache, written with ``onnx.helper`` from the
backbone's weights with the core's :class:`ptmkit.api.OnnxGraph`, no TensorFlow in the graph.

Inputs (named axes ``batch``, ``past_sequence``, ``sequence``; ``total = past_sequence + sequence``):

- ``token_ids`` ``(batch, sequence)`` int32: the new tokens;
- ``padding_mask`` ``(batch, total)`` int32: 1 on real tokens, past ones included (left padding 0);
- ``past_key_{i}``, ``past_value_{i}`` ``(batch, num_heads, past_sequence, head_dim)`` float32
  for each layer ``i``: the keys and values of the earlier positions (``past_sequence`` 0 at
  the first step).

Outputs: ``logits`` ``(batch, sequence, vocabulary)`` float32 (through the tied token embedding)
and ``present_key_{i}``, ``present_value_{i}`` ``(batch, num_heads, total, head_dim)``: the
cache to feed back. This is the layout of Hugging Face optimum's decoder exports
(``past_key_values.{i}.key``/``present.{i}.key``), with the full padding mask.

The computation is :class:`~ptmkit_gpt.backbone.GPTBackbone`'s: positions are
``max(cumsum(padding_mask) - 1, 0)`` over the whole mask (the new tokens take the last
``sequence`` of them); each block is keras-hub's ``TransformerDecoder`` (pre-LN for GPT-2, post-LN
for GPT-1), attention ``softmax(q k^T / sqrt(head_dim) + bias) v`` with ``bias`` :data:`MASKED` on
future and padded keys (Keras' masked softmax), GELU in its tanh form (keras-hub's ``gelu_approximate``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptmkit.api import OnnxGraph, attention_weights

#: The attention bias of a key a query may not see: exp(-1e4) is 0 in float32 as -1e9 is, and
#: -1e4 plus any plausible score stays finite in float16 (the fp16 variant; -1e9 would become
#: -65504 there and overflow to -inf, turning a left-padding row's softmax into NaN that its
#: cached values carry into the real rows). Hugging Face's GPT-2 used -1e4 too.
MASKED = -1e4


def _weights(layer: Any) -> dict[str, np.ndarray]:
    """A keras-hub ``TransformerDecoder``'s weights as 2-D matrices and 1-D vectors."""
    out = attention_weights(layer._self_attention_layer)
    for name, dense in (("intermediate", layer._feedforward_intermediate_dense), ("ffn_output", layer._feedforward_output_dense)):
        out[f"{name}_kernel"], out[f"{name}_bias"] = np.asarray(dense.kernel), np.asarray(dense.bias)
    for name, norm in (("attention_norm", layer._self_attention_layer_norm), ("ffn_norm", layer._feedforward_layer_norm)):
        out[f"{name}_gamma"], out[f"{name}_beta"] = np.asarray(norm.gamma), np.asarray(norm.beta)
    return out


def _gelu_tanh(g: OnnxGraph, x: str) -> str:
    """``(x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))) 0.5``: in PyTorch's order of operations,
    which ONNX Runtime's optimizer fuses into one ``FastGelu`` (``--optimize 2``)."""
    cube = g.op("Mul", [g.op("Mul", [x, x]), x])
    inner = g.op("Mul", [g.op("Add", [x, g.op("Mul", [cube, "c_0.044715"])]), "c_sqrt_2_over_pi"])
    return g.op("Mul", [g.op("Mul", [x, g.op("Add", [g.op("Tanh", [inner]), "c_1"])]), "c_0.5"])


def _fused_attention(g: OnnxGraph, x: str, i: int, w: dict[str, np.ndarray], heads: int, bias: str) -> str:
    """:func:`_attention` as one ``com.microsoft.MultiHeadAttention`` node: the three projections'
    biases in its ``bias`` input, the attention bias in its ``attention_bias``, the cache in its
    ``past_key``/``past_value`` inputs and ``present_key``/``present_value`` outputs (the same
    layout: ``(batch, heads, total, head_dim)``); scale ``1 / sqrt(head_dim)``, its default."""
    q, k, v = (g.op("MatMul", [x, g.const(f"layer{i}.{n}.kernel", w[f"{n}_kernel"])]) for n in ("query", "key", "value"))
    qkv_bias = g.const(f"layer{i}.qkv.bias", np.concatenate([w["query_bias"], w["key_bias"], w["value_bias"]]))
    g.contrib("MultiHeadAttention", [q, k, v, qkv_bias, "", bias, f"past_key_{i}", f"past_value_{i}"],
              [f"context_{i}", f"present_key_{i}", f"present_value_{i}"], f"MultiHeadAttention_{i}", num_heads=heads)
    return g.dense(f"context_{i}", f"layer{i}.output", w["output_kernel"], w["output_bias"])


def _attention(g: OnnxGraph, x: str, i: int, w: dict[str, np.ndarray], heads: int, bias: str) -> str:
    """Self-attention of block ``i`` with its cache: present = concat(past, new) on the sequence axis."""
    head_dim = w["query_kernel"].shape[1] // heads
    q, k, v = (g.split_heads(g.dense(x, f"layer{i}.{n}", w[f"{n}_kernel"], w[f"{n}_bias"]), heads, head_dim) for n in ("query", "key", "value"))
    keys = g.op("Concat", [f"past_key_{i}", k], f"present_key_{i}", axis=2)
    values = g.op("Concat", [f"past_value_{i}", v], f"present_value_{i}", axis=2)
    return g.dense(g.attention(q, keys, values, bias, head_dim), f"layer{i}.output", w["output_kernel"], w["output_bias"])


def _block(g: OnnxGraph, x: str, i: int, layer: Any, heads: int, bias: str, pre_norm: bool, epsilon: float, fused: bool = False) -> str:
    """keras-hub's ``TransformerDecoder.call`` without dropout or cross-attention."""
    w = _weights(layer)
    h = g.layer_norm(x, f"layer{i}.attention_norm", w["attention_norm_gamma"], w["attention_norm_beta"], epsilon) if pre_norm else x
    x = g.op("Add", [(_fused_attention if fused else _attention)(g, h, i, w, heads, bias), x])
    if not pre_norm:
        x = g.layer_norm(x, f"layer{i}.attention_norm", w["attention_norm_gamma"], w["attention_norm_beta"], epsilon)
    h = g.layer_norm(x, f"layer{i}.ffn_norm", w["ffn_norm_gamma"], w["ffn_norm_beta"], epsilon) if pre_norm else x
    h = g.dense(_gelu_tanh(g, g.dense(h, f"layer{i}.intermediate", w["intermediate_kernel"], w["intermediate_bias"])),
               f"layer{i}.ffn_output", w["ffn_output_kernel"], w["ffn_output_bias"])
    x = g.op("Add", [h, x])
    if not pre_norm:
        x = g.layer_norm(x, f"layer{i}.ffn_norm", w["ffn_norm_gamma"], w["ffn_norm_beta"], epsilon)
    return x


def _embeddings_and_bias(g: OnnxGraph, backbone: Any) -> tuple[str, str]:
    """The summed token and position embeddings of the new tokens, and the attention bias
    ``(batch, 1, sequence, total)``: 0 where query ``s`` (absolute position ``total - sequence +
    s``) may see key ``t`` (``t`` not after it and not padding), :data:`MASKED` elsewhere."""
    for name, value in (("c_0.044715", 0.044715), ("c_sqrt_2_over_pi", np.sqrt(2 / np.pi)), ("c_0.5", 0.5), ("c_1", 1.0), ("c_masked", MASKED), ("c_0", 0.0)):
        g.const(name, value)
    g.const("i_0", [0], np.int64)
    g.const("i_1", [1], np.int64)
    mask = g.op("Cast", ["padding_mask"], to=7)  # int64
    positions = g.op("Max", [g.op("Sub", [g.op("CumSum", [mask, g.const("axis_1", 1, np.int64)]), "i_1"]), "i_0"])
    # Scalars from the shapes, and a Gather of the new tokens' columns past..total-1: ONNX Runtime's
    # symbolic shape inference follows these (not a Slice with a computed start, nor a Reshape to a
    # scalar), and its optimizer fuses nothing where that inference fails (``--optimize 2``).
    total = g.op("Gather", [g.op("Shape", ["padding_mask"]), "axis_1"])  # scalar total
    sequence = g.op("Gather", [g.op("Shape", ["token_ids"]), "axis_1"])  # scalar sequence
    queries = g.op("Range", [g.op("Sub", [total, sequence]), total, g.const("step_1", 1, np.int64)])
    new_positions = g.op("Gather", [positions, queries], axis=1)
    tokens = g.op("Gather", [g.const("token_embedding", np.asarray(backbone.token_embedding.embeddings)), "token_ids"], axis=0)
    places = g.op("Gather", [g.const("position_embedding", np.asarray(backbone.position_embedding.position_embeddings)), new_positions], axis=0)
    x = g.op("Add", [tokens, places])
    keys = g.op("Range", [g.const("start_0", 0, np.int64), total, "step_1"])
    causal = g.op("LessOrEqual", [g.op("Unsqueeze", [keys, "i_0"]), g.op("Unsqueeze", [queries, "i_1"])])  # (sequence, total)
    real = g.op("Unsqueeze", [g.op("Cast", ["padding_mask"], to=9), g.const("axes_1_2", [1, 2], np.int64)])  # (batch, 1, 1, total)
    bias = g.op("Where", [g.op("And", [causal, real]), "c_0", "c_masked"], "attention_bias")
    return x, bias


def build_decoder_graph(backbone: Any, fused_attention: bool = False) -> Any:
    """The ``onnx.ModelProto`` of ``backbone`` (a :class:`~ptmkit_gpt.backbone.GPTBackbone`) with
    a key/value cache; see the module docstring.

    Args:
        fused_attention: write each block's attention as one ONNX Runtime
            ``com.microsoft.MultiHeadAttention`` node with its cache inputs and outputs (the same
            graph inputs and outputs; runs on ONNX Runtime only): ``ptmkit export --optimize 2``.

    Raises:
        onnx.checker.ValidationError: the graph is not valid ONNX (a bug).
    """
    from onnx import TensorProto, helper

    g = OnnxGraph()
    heads, layers = backbone.num_heads, backbone.num_layers
    head_dim = backbone.hidden_dim // heads
    x, bias = _embeddings_and_bias(g, backbone)
    for i, layer in enumerate(backbone.transformer_layers):
        x = _block(g, x, i, layer, heads, bias, backbone.normalize_first, backbone.layer_norm_epsilon, fused_attention)
    if backbone.layer_norm is not None:
        x = g.layer_norm(x, "final_norm", np.asarray(backbone.layer_norm.gamma), np.asarray(backbone.layer_norm.beta), backbone.layer_norm_epsilon)
    g.op("MatMul", [x, g.const("output_embedding", np.asarray(backbone.token_embedding.embeddings).T)], "logits")
    cache = ["batch", heads, "past_sequence", head_dim]
    present = ["batch", heads, "total_sequence", head_dim]
    inputs = [
        helper.make_tensor_value_info("token_ids", TensorProto.INT32, ["batch", "sequence"]),
        helper.make_tensor_value_info("padding_mask", TensorProto.INT32, ["batch", "total_sequence"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", backbone.vocabulary_size])]
    for i in range(layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_{kind}_{i}", TensorProto.FLOAT, cache))
            outputs.append(helper.make_tensor_value_info(f"present_{kind}_{i}", TensorProto.FLOAT, present))
    return g.model("gpt_decoder_with_cache", inputs, outputs, "ptmkit_gpt")
