"""Transformer graph optimisation and fp16 conversion of an exported ONNX model.

:func:`optimize_transformer` runs ptmkit's own passes (:mod:`ptmkit_export.graph_passes`) and
then ONNX Runtime's transformer optimizer (``onnxruntime.transformers.optimizer.optimize_model``)
with the model type the family declares (``"bert"`` for BERT-like encoders), its head count and
hidden size, and counts what was fused.
Levels, as ``ptmkit export --optimize`` takes them:

* ``0``: nothing (the graph as Keras/tf2onnx wrote it).
* ``1``: ptmkit's standard-ONNX passes only: constant folding, ``Gemm`` -> ``MatMul`` (+ ``Add``),
  layer normalization -> ONNX ``LayerNormalization`` (opset 17). A portable ONNX model.
* ``2``: level 1, then Keras' multi-head attention -> ``com.microsoft.Attention``, its embeddings
  -> ``com.microsoft.EmbedLayerNormalization`` and the exact GELU -> ``com.microsoft.Gelu``
  (ptmkit's passes), then ONNX Runtime's transformer fusions (``SkipLayerNormalization``,
  ``BiasGelu``/``FastGelu``, and the others when their patterns are found) on top of ONNX Runtime's basic optimizations. Needs ONNX Runtime (contrib
  ops), runs on any of its execution providers.
* ``3``: level 2 with ONNX Runtime's extended optimizations baked in (``FusedMatMul``,
  ``MatMul`` + ``Add`` fusion, ...); still hardware independent (the layout level, which is not,
  is never saved).

An ONNX Runtime session applies its own in-memory optimizations to any of these at load time; the
point of levels 2-3 is the transformer fusions that the session does not do by itself.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import onnx

from ptmkit_export import graph_passes

#: ``--optimize`` levels.
LEVELS = (0, 1, 2, 3)

#: Fused op types reported, in this order; ``Attention`` counts ``MultiHeadAttention`` too.
FUSED_OPS = (
    "Attention",
    "MultiHeadAttention",
    "SkipLayerNormalization",
    "LayerNormalization",
    "EmbedLayerNormalization",
    "BiasGelu",
    "FastGelu",
    "Gelu",
)

#: ONNX Runtime ``optimize_model`` ``opt_level`` for each of our levels >= 2.
_ORT_OPT_LEVEL = {2: 1, 3: 2}


def count_ops(model: onnx.ModelProto) -> dict[str, int]:
    """``{op type: count}`` of the top-level nodes of ``model``, sorted by op type."""
    return dict(sorted(collections.Counter(node.op_type for node in model.graph.node).items()))


def fused_counts(model: onnx.ModelProto) -> dict[str, int]:
    """How many nodes of each op type of :data:`FUSED_OPS` ``model`` holds (zeros included)."""
    ops = collections.Counter(node.op_type for node in model.graph.node)
    return {op: ops.get(op, 0) for op in FUSED_OPS}


def optimize_transformer(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    level: int,
    num_heads: int | None = None,
    hidden_size: int | None = None,
    mask_input: str | None = None,
    ids_input: str | None = None,
    segment_input: str | None = None,
    model_type: str | None = None,
) -> dict[str, Any]:
    """Write an optimised copy of the fp32 ONNX model ``src`` to ``dst``; see the module docstring.

    Args:
        src: the fp32 model (as exported).
        dst: where to write the optimised model (its directory must exist).
        level: 0-3 (:data:`LEVELS`).
        num_heads, hidden_size: the transformer's attention head count and hidden width, from the
            model family's config; required for levels >= 2 (the attention fusion needs them).
        mask_input: the graph input holding the 0/1 padding mask, which the fused ``Attention``
            reads (the model family's ``attention_mask`` input); ``None`` (or a name the graph
            lacks) leaves attention unfused.
        ids_input, segment_input: the graph inputs of token ids and segment ids, which the fused
            ``EmbedLayerNormalization`` reads; ``ids_input=None`` leaves the embeddings unfused.
        model_type: ONNX Runtime's transformer-optimizer model type (``"bert"``, ``"gpt2"``,
            ...), from the model family's declaration; required for levels >= 2.

    Returns:
        ``{"level", "passes": {pass: count}, "fused": {op: count}, "attention_fused": bool,
        "notes": [str], "nodes_before", "nodes_after"}`` (node counts per op type).

    Raises:
        ValueError: ``level`` not in 0-3, or ``num_heads``/``hidden_size``/``model_type`` missing
            for level >= 2.
    """
    if level not in LEVELS:
        raise ValueError(f"optimize level must be one of {', '.join(map(str, LEVELS))}, got {level}")
    if level >= 2 and (not num_heads or not hidden_size or not model_type):
        raise ValueError(f"optimize level {level} needs the model's type, num_heads and hidden_size")
    original = onnx.load(str(src))
    model, passes, nodes_before = original, {}, count_ops(original)
    if level >= 1:
        model, passes = graph_passes.canonicalize(original)
    del original  # one copy of the weights at a time: the ORT optimizer below makes two more
    if level >= 2:
        inputs = {value.name for value in model.graph.input}
        passes["attention"] = graph_passes.fuse_attention(model, int(num_heads or 0), mask_input) if mask_input in inputs else 0
        segments = segment_input if segment_input in inputs else None
        passes["embed_layer_normalization"] = graph_passes.fuse_embed_layer_normalization(model, ids_input, segments) if ids_input in inputs else 0
        passes["gelu"] = graph_passes.fuse_gelu(model)
        with tempfile.TemporaryDirectory(prefix="ptmkit-optimize-") as tmp:
            fused = Path(tmp) / "in.onnx"
            onnx.save(model, str(fused))
            producer = (model.producer_name, model.producer_version)
            del model  # ONNX Runtime's optimizer reads the file and makes its own copies
            model = _ort_transformer_optimizer(fused, level, str(model_type), int(num_heads or 0), int(hidden_size or 0))
        model.producer_name, model.producer_version = producer
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    fused = fused_counts(model)
    attention = fused["Attention"] + fused["MultiHeadAttention"]
    notes = []
    if level >= 2 and attention == 0:
        notes.append(
            "attention is not fused: the attention subgraph matches neither ptmkit's Keras pattern nor ONNX Runtime's; "
            "it runs as separate MatMul/Softmax nodes"
        )
    return {
        "level": level,
        "passes": passes,
        "fused": fused,
        "attention_fused": attention > 0,
        "notes": notes,
        "nodes_before": nodes_before,
        "nodes_after": count_ops(model),
    }


def _ort_transformer_optimizer(src: Path, level: int, model_type: str, num_heads: int, hidden_size: int) -> onnx.ModelProto:
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions(model_type)
    quiet = logging.getLogger("onnxruntime.transformers")
    previous = quiet.level
    quiet.setLevel(logging.ERROR)  # "Model producer not matched: Expected pytorch": known, and why we pass model_type
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            optimized = optimize_model(
                str(src),
                model_type=model_type,
                num_heads=num_heads,
                hidden_size=hidden_size,
                optimization_options=options,
                opt_level=_ORT_OPT_LEVEL[level],
                use_gpu=False,
            )
    finally:
        quiet.setLevel(previous)
    return optimized.model


def convert_fp16(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> dict[str, Any]:
    """Write a float16 copy of ``src`` to ``dst``, keeping float32 graph inputs and outputs.

    Uses ONNX Runtime's own converter (``onnxruntime.transformers`` ``OnnxModel.convert_float_to_float16``,
    no extra dependency); ops without fp16 kernels stay float32 with ``Cast`` nodes around them.
    Meant for GPUs: on CPU ONNX Runtime has few fp16 kernels and the model is slower than fp32.

    Returns:
        ``{"casts": number of Cast nodes, "nodes_after": {op: count}}``.
    """
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = onnx.load(str(src))
    wrapper = OnnxModel(model)
    with contextlib.redirect_stdout(io.StringIO()):
        wrapper.convert_float_to_float16(keep_io_types=True, use_symbolic_shape_infer=True)
    onnx.save(wrapper.model, str(dst))
    ops = count_ops(wrapper.model)
    return {"casts": ops.get("Cast", 0), "nodes_after": ops}
