"""Graph passes that make a Keras/tf2onnx export optimisable and quantisable by ONNX Runtime.

Keras' ONNX export (``model.export(format="onnx")``, which drives tf2onnx) writes a correct but
unusual graph, and ONNX Runtime's tools only recognise the patterns PyTorch's exporter writes:

* every 2-D projection is a ``Gemm``, which dynamic int8 quantization leaves in float
  (:func:`rewrite_gemm_as_matmul`, in :mod:`ptmkit_export.quantize`);
* layer normalization is a chain of 12 nodes built on ``GlobalAveragePool``
  (``moments/mean``, ``moments/variance``, ``Rsqrt``, a batch-norm style scale and shift) that
  neither ONNX Runtime's graph optimizer nor its transformer optimizer fuses
  (:func:`fuse_layer_normalization` turns it into one ONNX ``LayerNormalization``, opset 17);
* a ``Dense`` on a 3-D input is a ``Tensordot``: ``Reshape`` to 2-D, ``MatMul``, ``Reshape`` back
  to a shape computed at run time from ``Shape``/``Gather``/``Concat``; the reshapes sit between
  the ``MatMul`` and its bias ``Add``, which hides the bias from the optimizer's ``BiasGelu`` and
  ``SkipLayerNormalization`` (bias) fusions (:func:`fold_tensordot_reshapes`: one ``MatMul`` on
  the 3-D input, which broadcasts the same way);
* the exact GELU is written ``(0.5 * x) * (1 + erf(x * 0.7071))``, an operand order none of the
  transformer optimizer's three GELU patterns matches (:func:`fuse_gelu` turns it into
  ``com.microsoft.Gelu``, which the optimizer then merges with the bias ``Add`` into ``BiasGelu``).

Every pass rewrites a model in place, is exact up to float rounding (the tests compare ONNX
Runtime outputs before and after within 1e-5), leaves graph inputs, outputs and their names alone
and returns how many subgraphs it rewrote. :func:`canonicalize` runs them all.

Attention is left as Keras wrote it (einsum projections decomposed by tf2onnx, scores computed as
``K @ Q^T`` then transposed, the padding mask applied through ``SelectV2`` arithmetic): the
transformer optimizer fuses no ``Attention`` node on it, and the export manifest says so.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ptmkit_export.quantize import rewrite_gemm_as_matmul

__all__ = ["canonicalize", "fold_constants", "fold_tensordot_reshapes", "fuse_gelu", "fuse_layer_normalization", "rewrite_gemm_as_matmul", "set_opset"]

#: Lowest default-domain opset with ``LayerNormalization``.
LAYER_NORM_OPSET = 17


class _Graph:
    """Producer/consumer indexes over a graph's top-level nodes (built once, not kept in sync)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.producer = {name: node for node in model.graph.node for name in node.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = collections.defaultdict(list)
        for node in model.graph.node:
            for name in node.input:
                self.consumers[name].append(node)
        self.initializers = {init.name: init for init in model.graph.initializer}
        self.outputs = {value.name for value in model.graph.output}

    def parent(self, node: onnx.NodeProto, index: int, op_type: str) -> onnx.NodeProto | None:
        if index >= len(node.input):
            return None
        parent = self.producer.get(node.input[index])
        return parent if parent is not None and parent.op_type == op_type and parent.domain in ("", "ai.onnx") else None

    def constant(self, name: str) -> np.ndarray | None:
        init = self.initializers.get(name)
        if init is not None:
            return numpy_helper.to_array(init)
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    return numpy_helper.to_array(attribute.t)
        return None

    def scalar(self, name: str) -> float | None:
        value = self.constant(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def only_consumers(self, name: str, allowed: list[onnx.NodeProto]) -> bool:
        """``name`` is read by ``allowed`` nodes only and is not a graph output."""
        ids = {id(node) for node in allowed}
        return name not in self.outputs and all(id(node) in ids for node in self.consumers.get(name, []))


def set_opset(model: onnx.ModelProto, version: int) -> None:
    """Raise the default-domain opset import of ``model`` to at least ``version``.

    Only safe between versions whose ops the graph uses did not change meaning; the passes call it
    for 15 -> 17, where the changes (``Shape``'s ``start``/``end`` came at 15, ``ReduceSum`` axes
    moved to an input at 13, ``Reduce*`` others at 18) do not apply.
    """
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = max(opset.version, version)
            return
    model.opset_import.append(helper.make_opsetid("", version))


def _ensure_domain(model: onnx.ModelProto, domain: str, version: int = 1) -> None:
    if not any(opset.domain == domain for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid(domain, version))


def _replace(model: onnx.ModelProto, remove: list[onnx.NodeProto], add: list[tuple[onnx.NodeProto, onnx.NodeProto]]) -> None:
    """Drop ``remove`` and insert each new node just before its anchor (keeps topological order)."""
    dropped = {id(node) for node in remove}
    before = collections.defaultdict(list)
    for new, anchor in add:
        before[id(anchor)].append(new)
    nodes = []
    for node in model.graph.node:
        nodes.extend(before.get(id(node), []))
        if id(node) not in dropped:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _prune_initializers(model: onnx.ModelProto) -> None:
    used = {name for node in model.graph.node for name in node.input} | {value.name for value in model.graph.output}
    keep = [init for init in model.graph.initializer if init.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)


def fuse_layer_normalization(model: onnx.ModelProto) -> int:
    """Replace Keras' layer normalization subgraph with ONNX ``LayerNormalization`` (in place).

    The pattern, as tf2onnx writes ``keras.layers.LayerNormalization`` over the last axis of a
    3-D ``x`` (``GlobalAveragePool`` averages over every axis after the second)::

        mean = GlobalAveragePool(x)                       var = GlobalAveragePool(d * d), d = x - mean
        r = Reciprocal(Sqrt(var + eps))                   m = r * gamma
        y = x * m + (Neg(mean) * m + beta)

    which is ``(x - mean) / sqrt(var + eps) * gamma + beta``: ``LayerNormalization(x, gamma, beta,
    axis=-1, epsilon=eps)``. ``gamma`` and ``beta`` must be constants (reshaped to 1-D); the
    intermediate results must feed nothing else. The default-domain opset is raised to 17 when a
    fusion happens.

    Returns:
        How many layer normalizations were fused.
    """
    g = _Graph(model)
    remove: list[onnx.NodeProto] = []
    add: list[tuple[onnx.NodeProto, onnx.NodeProto]] = []
    new_inits: list[onnx.TensorProto] = []
    taken = {node.name for node in model.graph.node} | set(g.initializers)
    for out in model.graph.node:
        if out.op_type != "Add" or len(out.input) != 2:
            continue
        match = _match_layer_norm(g, out)
        if match is None:
            continue
        x, eps, gamma, beta, nodes = match
        if not all(g.only_consumers(node.output[0], nodes) for node in nodes if node is not out):
            continue
        base = out.name or out.output[0]
        names = []
        for suffix, value in (("gamma", gamma), ("beta", beta)):
            name, i = f"{base}/layer_norm_{suffix}", 0
            while name in taken:
                i += 1
                name = f"{base}/layer_norm_{suffix}_{i}"
            taken.add(name)
            names.append(name)
            new_inits.append(numpy_helper.from_array(np.ascontiguousarray(value.reshape(-1).astype(np.float32)), name))
        fused = helper.make_node(
            "LayerNormalization", [x, *names], [out.output[0]], name=f"{base}/LayerNormalization", axis=-1, epsilon=eps
        )
        remove.extend(nodes)
        add.append((fused, out))
    if add:
        _replace(model, remove, add)
        model.graph.initializer.extend(new_inits)
        _prune_initializers(model)
        set_opset(model, LAYER_NORM_OPSET)
    return len(add)


def _match_layer_norm(g: _Graph, out: onnx.NodeProto) -> tuple[str, float, np.ndarray, np.ndarray, list[onnx.NodeProto]] | None:
    for i in (0, 1):
        scaled = g.parent(out, i, "Mul")  # x * m
        shift = g.parent(out, 1 - i, "Add")  # Neg(mean) * m + beta
        if scaled is None or shift is None:
            continue
        for j in (0, 1):
            neg_m = g.parent(shift, j, "Mul")
            beta = g.constant(shift.input[1 - j])
            if neg_m is None or beta is None:
                continue
            for k in (0, 1):
                neg = g.parent(neg_m, k, "Neg")
                if neg is None or neg_m.input[1 - k] not in scaled.input:
                    continue
                m_name = neg_m.input[1 - k]
                x = scaled.input[1] if scaled.input[0] == m_name else scaled.input[0]
                mean = g.parent(neg, 0, "GlobalAveragePool")
                m = g.producer.get(m_name)
                if mean is None or mean.input[0] != x or m is None or m.op_type != "Mul":
                    continue
                for a in (0, 1):
                    reciprocal = g.parent(m, a, "Reciprocal")
                    gamma = g.constant(m.input[1 - a])
                    if reciprocal is None or gamma is None:
                        continue
                    sqrt = g.parent(reciprocal, 0, "Sqrt")
                    plus = g.parent(sqrt, 0, "Add") if sqrt is not None else None
                    if plus is None:
                        continue
                    for b in (0, 1):
                        variance = g.parent(plus, b, "GlobalAveragePool")
                        eps = g.scalar(plus.input[1 - b])
                        square = g.parent(variance, 0, "Mul") if variance is not None else None
                        if eps is None or square is None or square.input[0] != square.input[1]:
                            continue
                        diff = g.parent(square, 0, "Sub")
                        if diff is None or list(diff.input) != [x, mean.output[0]]:
                            continue
                        hidden = gamma.reshape(-1).shape[0]
                        if gamma.size != hidden or beta.size != hidden or gamma.ndim > 3 or beta.ndim > 3:
                            continue
                        nodes = [out, scaled, shift, neg_m, neg, mean, m, reciprocal, sqrt, plus, variance, square, diff]
                        return x, eps, gamma, beta, nodes
    return None


def _remove_dead_nodes(model: onnx.ModelProto) -> None:
    """Drop nodes none of whose outputs is read (repeatedly), then unread initializers."""
    while True:
        used = {name for node in model.graph.node for name in node.input} | {value.name for value in model.graph.output}
        keep = [node for node in model.graph.node if any(name in used for name in node.output)]
        if len(keep) == len(model.graph.node):
            break
        del model.graph.node[:]
        model.graph.node.extend(keep)
    _prune_initializers(model)


def fold_tensordot_reshapes(model: onnx.ModelProto) -> int:
    """Replace tf2onnx's ``Tensordot`` (``Reshape`` -> ``MatMul`` -> ``Reshape``) with one ``MatMul`` (in place).

    Pattern, for ``x`` of rank ``r`` and a constant weight ``W`` of shape ``(K, N)``::

        y = Reshape(MatMul(Reshape(x, [-1, K]), W), Concat(Gather(Shape(x), [0, ..., r-2]), [N]))

    (``Cast`` nodes allowed around the shape arithmetic), which is ``MatMul(x, W)``: ONNX
    ``MatMul`` multiplies the last axis and keeps the leading ones. ``x``'s rank is taken from ONNX
    shape inference and must be ``r``; the shape arithmetic left unread is removed.

    Returns:
        How many ``Tensordot``s were folded.
    """
    inferred = onnx.shape_inference.infer_shapes(model)
    ranks = {}
    for value in list(inferred.graph.value_info) + list(inferred.graph.input):
        if value.type.tensor_type.HasField("shape"):
            ranks[value.name] = len(value.type.tensor_type.shape.dim)
    g = _Graph(model)

    def through_casts(name: str) -> onnx.NodeProto | None:
        node = g.producer.get(name)
        while node is not None and node.op_type == "Cast":
            node = g.producer.get(node.input[0])
        return node

    folded = 0
    for reshape_back in list(model.graph.node):
        if reshape_back.op_type != "Reshape":
            continue
        matmul = g.parent(reshape_back, 0, "MatMul")
        if matmul is None or len(g.consumers.get(matmul.output[0], [])) != 1:
            continue
        weight = g.constant(matmul.input[1])
        flatten = g.parent(matmul, 0, "Reshape")
        if weight is None or weight.ndim != 2 or flatten is None or len(g.consumers.get(flatten.output[0], [])) != 1:
            continue
        target = g.constant(flatten.input[1])
        if target is None or target.tolist() != [-1, weight.shape[0]]:
            continue
        x = flatten.input[0]
        concat = through_casts(reshape_back.input[1])
        if concat is None or concat.op_type != "Concat" or len(concat.input) != 2:
            continue
        gather, last = through_casts(concat.input[0]), g.constant(concat.input[1])
        if gather is None or gather.op_type != "Gather" or last is None or last.tolist() != [weight.shape[1]]:
            continue
        shape, index = through_casts(gather.input[0]), g.constant(gather.input[1])
        if shape is None or shape.op_type != "Shape" or shape.input[0] != x or index is None:
            continue
        if any(a.name != "start" or a.i != 0 for a in shape.attribute):  # a Shape of all axes (start=0 is the default)
            continue
        if index.tolist() != list(range(index.size)) or ranks.get(x) != index.size + 1:
            continue
        matmul.input[0] = x
        matmul.output[0] = reshape_back.output[0]
        reshape_back.output[0] = f"{reshape_back.output[0]}__folded"  # now dead; removed below
        folded += 1
    if folded:
        # Move each rewritten MatMul to its old Reshape's place, so nodes stay in topological order.
        order = {id(node): i for i, node in enumerate(model.graph.node)}
        producer_of = {name: node for node in model.graph.node for name in node.output}
        nodes = sorted(model.graph.node, key=lambda node: order[id(node)])
        del model.graph.node[:]
        model.graph.node.extend(_topological(nodes, producer_of))
        _remove_dead_nodes(model)
    return folded


def _topological(nodes: list[onnx.NodeProto], producer_of: dict[str, onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``nodes`` in a topological order, keeping the given order where it already is one."""
    done: set[int] = set()
    out: list[onnx.NodeProto] = []

    def visit(node: onnx.NodeProto) -> None:
        stack = [(node, False)]
        while stack:
            current, expanded = stack.pop()
            if id(current) in done:
                continue
            if expanded:
                done.add(id(current))
                out.append(current)
                continue
            stack.append((current, True))
            for name in reversed(current.input):
                parent = producer_of.get(name)
                if parent is not None and id(parent) not in done:
                    stack.append((parent, False))

    for node in nodes:
        visit(node)
    return out


def fuse_gelu(model: onnx.ModelProto) -> int:
    """Replace the exact GELU as Keras writes it with ``com.microsoft.Gelu`` (in place).

    Pattern: ``(x * 0.5) * (1 + Erf(x * 0.70710678))``, constants on either side of each node.
    ``com.microsoft.Gelu`` computes the same ``0.5 * x * (1 + erf(x / sqrt(2)))``; ONNX Runtime's
    transformer optimizer then folds the preceding bias ``Add`` into ``BiasGelu``. This is an ONNX
    Runtime contrib op, so the pass belongs to the optimised variant (``--optimize``), not the
    portable fp32 graph.

    Returns:
        How many GELUs were fused.
    """
    g = _Graph(model)
    remove: list[onnx.NodeProto] = []
    add: list[tuple[onnx.NodeProto, onnx.NodeProto]] = []
    for erf in model.graph.node:
        if erf.op_type != "Erf":
            continue
        scale = g.parent(erf, 0, "Mul")
        plus = [c for c in g.consumers.get(erf.output[0], []) if c.op_type == "Add"]
        if scale is None or len(plus) != 1:
            continue
        (plus_one,) = plus
        x = None
        for i in (0, 1):
            value = g.scalar(scale.input[1 - i])
            if value is not None and abs(value - 0.7071067811865476) < 1e-6:
                x = scale.input[i]
        other = plus_one.input[1] if plus_one.input[0] == erf.output[0] else plus_one.input[0]
        if x is None or g.scalar(other) != 1.0:
            continue
        products = [c for c in g.consumers.get(plus_one.output[0], []) if c.op_type == "Mul"]
        if len(products) != 1:
            continue
        (product,) = products
        half_name = product.input[1] if product.input[0] == plus_one.output[0] else product.input[0]
        half = g.producer.get(half_name)
        if half is None or half.op_type != "Mul" or x not in half.input:
            continue
        if g.scalar(half.input[1] if half.input[0] == x else half.input[0]) != 0.5:
            continue
        nodes = [scale, erf, plus_one, half, product]
        if not all(g.only_consumers(node.output[0], nodes) for node in nodes if node is not product):
            continue
        base = product.name or product.output[0]
        fused = helper.make_node("Gelu", [x], [product.output[0]], name=f"{base}/Gelu", domain="com.microsoft")
        remove.extend(nodes)
        add.append((fused, product))
    if add:
        _replace(model, remove, add)
        _prune_initializers(model)
        _ensure_domain(model, "com.microsoft")
    return len(add)


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Constant-fold ``model`` with ONNX Runtime's basic graph optimizations; returns a new model.

    tf2onnx leaves some weight reshapes (an ``EinsumDense`` kernel ``(hidden, heads, head_size)``
    reshaped to ``(hidden, heads * head_size)``) as ``Reshape`` nodes run on every call; a ``Gemm``
    reading such a computed weight cannot be rewritten or quantized. ONNX Runtime's basic level
    (constant folding, redundant node elimination) is hardware independent and writes only
    standard ONNX ops. Inputs, outputs and their names are kept.
    """
    import os
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ptmkit-fold-") as tmp:
        src, dst = os.path.join(tmp, "in.onnx"), os.path.join(tmp, "out.onnx")
        onnx.save(model, src)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = dst
        ort.InferenceSession(src, options, providers=["CPUExecutionProvider"])
        folded = onnx.load(dst)
    folded.producer_name, folded.producer_version = model.producer_name, model.producer_version
    return folded


def canonicalize(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Constant folding, Gemm -> MatMul (+ Add), Tensordot -> MatMul, then LayerNormalization.

    The result uses only default-domain ops (opset >= 17 when a layer norm was fused), so it stays
    a portable ONNX model. Returns ``(new model, counts)``, ``counts`` being
    ``{"gemm_to_matmul": n, "tensordot_to_matmul": n, "layer_normalization": n}``.
    """
    model = fold_constants(model)
    counts = {
        "gemm_to_matmul": rewrite_gemm_as_matmul(model),
        "tensordot_to_matmul": fold_tensordot_reshapes(model),
        "layer_normalization": fuse_layer_normalization(model),
    }
    return model, counts
