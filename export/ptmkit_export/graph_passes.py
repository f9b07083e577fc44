"""Graph passes that make a Keras/tf2onnx export optimisable and quantisable by ONNX Runtime.

Keras' ONNX export (``model.export(format="onnx")``, which drives tf2onnx) writes a correct but
unusual graph, and ONNX Runtime's tools only recognise the patterns PyTorch's exporter writes:

* every 2-D projection is a ``Gemm``, which dynamic int8 quantization leaves in float
  (:func:`rewrite_gemm_as_matmul`);
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

* Keras' multi-head attention (``EinsumDense`` query/key/value projections decomposed by tf2onnx
  into ``Unsqueeze``/``Reshape``/``MatMul``/``Reshape``/``Squeeze``, scores computed as
  ``K @ Q^T`` then transposed, the padding mask applied by ``SelectV2`` arithmetic before and after
  the softmax) matches none of the transformer optimizer's attention patterns
  (:func:`fuse_attention` recognises it and writes ``com.microsoft.Attention`` + the output
  projection's ``MatMul``, which dynamic int8 turns into ``QAttention``);
* the embeddings (token and segment ``Gather`` behind a ``SelectV2`` that wraps negative ids, a
  ``Slice`` + ``Expand`` of the position table, two ``Add``, a layer norm) match none of the
  optimizer's ``EmbedLayerNormalization`` patterns (:func:`fuse_embed_layer_normalization`).

Two passes prepare an optimised graph for int8 (``ptmkit export --int8`` runs them unless
``--fused-layer-norm`` / ``--exact-gelu``): :func:`unfuse_skip_layer_normalization` (exact) and
:func:`approximate_gelu` (the tanh GELU; not exact, gated).
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = [
    "approximate_gelu", "canonicalize", "fold_constants", "fold_tensordot_reshapes", "fuse_attention", "fuse_embed_layer_normalization", "fuse_gelu",
    "fuse_layer_normalization", "rewrite_gemm_as_matmul", "set_opset", "unfuse_skip_layer_normalization",
]

#: Lowest default-domain opset with ``LayerNormalization``.
LAYER_NORM_OPSET = 17


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _names_used(graph: onnx.GraphProto, used: set[str]) -> set[str]:
    """Every tensor name read by a node of ``graph`` or its subgraphs, or returned by ``graph``."""
    for node in graph.node:
        used.update(node.input)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _names_used(attribute.g, used)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    _names_used(subgraph, used)
    used.update(output.name for output in graph.output)
    return used


class _FreshNames:
    """Hands out names not in ``taken``: ``base``, else ``base_1``, ``base_2``, ...; each one handed out is taken."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken

    def __call__(self, base: str) -> str:
        name, i = base, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name


def rewrite_gemm_as_matmul(model: onnx.ModelProto) -> int:
    """Rewrite, in place, each top-level ``Gemm`` with a constant weight into ``MatMul`` (+ ``Add``).

    A ``Gemm`` computes ``Y = alpha * A' @ B' + beta * C`` with ``A`` of shape ``(M, K)``. It is
    rewritten when ``transA == 0`` and ``B`` is an initializer that is not also a graph input (so it
    cannot be overridden at run time). The new weight initializer holds ``alpha * B'`` with shape
    ``(K, N)`` (``B`` transposed when ``transB == 1``); when ``C`` is present and ``beta != 0`` an
    ``Add`` of ``C`` follows (``beta * C`` folded into a new initializer when ``beta != 1``; a
    ``Gemm`` with a non-constant ``C`` and ``beta != 1`` is left alone). The ``Gemm``'s output name
    is kept, so the rest of the graph and dynamic axes are untouched; weights no node reads any more
    are dropped.

    Args:
        model: an ONNX model; modified in place.

    Returns:
        How many ``Gemm`` nodes were rewritten.
    """
    rewriter = _GemmRewriter(model.graph)
    new_nodes: list[onnx.NodeProto] = []
    rewritten = 0
    for node in model.graph.node:
        replacement = rewriter.rewrite(node)
        if replacement is None:
            new_nodes.append(node)
        else:
            new_nodes.extend(replacement)
            rewritten += 1
    if rewritten:
        rewriter.install(new_nodes)
    return rewritten


class _GemmRewriter:
    """One :func:`rewrite_gemm_as_matmul` pass over ``graph``: the names taken, the ``(K, N)``
    weights made so far (one per ``(B, transB, alpha)``, shared by the Gemms that read it) and the
    initializers they replace."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.initializers = {init.name: init for init in graph.initializer}
        self.graph_inputs = {value.name for value in graph.input}
        taken = {init.name for init in graph.initializer} | self.graph_inputs
        taken.update(name for node in graph.node for name in node.output)
        taken.update(node.name for node in graph.node)
        self.fresh = _FreshNames(taken)
        self.new_weights: dict[tuple[str, int, float], str] = {}
        self.replaced: set[str] = set()

    def _constant(self, name: str) -> bool:
        """An initializer that is not also a graph input (so it cannot be overridden at run time)."""
        return name in self.initializers and name not in self.graph_inputs

    def rewrite(self, node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
        """The ``MatMul`` (+ ``Add``) replacing ``node``; None when it is not a Gemm this pass rewrites."""
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx"):
            return None
        alpha = float(_attr(node, "alpha", 1.0))
        beta = float(_attr(node, "beta", 1.0))
        trans_a = int(_attr(node, "transA", 0))
        trans_b = int(_attr(node, "transB", 0))
        a_name, b_name = node.input[0], node.input[1]
        c_name = node.input[2] if len(node.input) > 2 else ""
        use_c = bool(c_name) and beta != 0.0
        if trans_a or not self._constant(b_name) or (use_c and beta != 1.0 and not self._constant(c_name)):
            return None
        weight_name = self._matmul_weight(b_name, trans_b, alpha)
        if c_name and not use_c:
            self.replaced.add(c_name)  # beta == 0: C is ignored; drop it if nothing else reads it
        base = node.name or node.output[0]
        if use_c and beta != 1.0:
            c_name = self._scaled_bias(c_name, beta)
        matmul_out = self.fresh(f"{base}_matmul:0") if use_c else node.output[0]
        nodes = [onnx.helper.make_node("MatMul", [a_name, weight_name], [matmul_out], name=self.fresh(f"{base}_MatMul"))]
        if use_c:
            nodes.append(onnx.helper.make_node("Add", [matmul_out, c_name], [node.output[0]], name=self.fresh(f"{base}_Add")))
        return nodes

    def _matmul_weight(self, b_name: str, trans_b: int, alpha: float) -> str:
        """The initializer holding ``alpha * B'`` of shape ``(K, N)``: ``B`` itself when it already is."""
        key = (b_name, trans_b, alpha)
        if key not in self.new_weights:
            weight = numpy_helper.to_array(self.initializers[b_name])
            if trans_b:
                weight = weight.T
            if alpha != 1.0:
                weight = weight * np.asarray(alpha, dtype=weight.dtype)
            if not trans_b and alpha == 1.0:
                self.new_weights[key] = b_name  # already (K, N): reuse as is
            else:
                name = self.fresh(f"{b_name}_matmul_weight")
                self.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(weight), name))
                self.new_weights[key] = name
                self.replaced.add(b_name)
        return self.new_weights[key]

    def _scaled_bias(self, c_name: str, beta: float) -> str:
        """A new initializer holding ``beta * C``."""
        bias = numpy_helper.to_array(self.initializers[c_name])
        c_scaled = self.fresh(f"{c_name}_scaled")
        self.graph.initializer.append(numpy_helper.from_array(bias * np.asarray(beta, dtype=bias.dtype), c_scaled))
        self.replaced.add(c_name)
        return c_scaled

    def install(self, new_nodes: list[onnx.NodeProto]) -> None:
        """Make ``new_nodes`` the graph's nodes and drop the replaced initializers no node reads any more."""
        graph = self.graph
        del graph.node[:]
        graph.node.extend(new_nodes)
        used = _names_used(graph, set())
        keep = [init for init in graph.initializer if init.name not in self.replaced or init.name in used]
        del graph.initializer[:]
        graph.initializer.extend(keep)


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
    fresh = _FreshNames({node.name for node in model.graph.node} | set(g.initializers))
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
            name = fresh(f"{base}/layer_norm_{suffix}")
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


def _ancestor_inputs(g: _Graph, name: str, allowed: set[str], limit: int = 64) -> set[str] | None:
    """Graph inputs ``name`` is computed from, when only ``allowed`` op types and constants lie between; else None."""
    inputs, stack, seen = set(), [name], set()
    graph_inputs = {value.name for value in g.graph.input}
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if len(seen) > limit:
            return None
        if current in graph_inputs:
            inputs.add(current)
            continue
        if current in g.initializers:
            continue
        node = g.producer.get(current)
        if node is None or (node.op_type not in allowed and node.op_type != "Constant"):
            return None
        stack.extend(node.input)
    return inputs


def _match_projection(g: _Graph, name: str) -> tuple[str, np.ndarray, np.ndarray] | None:
    """``(x, W (H, N*D), b (N*D,))`` of tf2onnx's ``EinsumDense("abc,cde->abde")`` (+ bias) ending in ``name``.

    Pattern: ``[Add(] Squeeze(Reshape([Add(] MatMul(Reshape(Unsqueeze(x)), W) [, b)])) [, b)]`` with
    constant ``W`` and ``b``: the bias, when there is one, is added after the projection or, when
    tf2onnx wrote a ``Gemm`` with a bias (rewritten to ``MatMul`` + ``Add``), before the reshape.
    """
    node = g.producer.get(name)
    bias = None
    if node is not None and node.op_type == "Add":
        for i in (0, 1):
            parent, value = g.parent(node, i, "Squeeze"), g.constant(node.input[1 - i])
            if parent is not None and value is not None:
                node, bias = parent, value.reshape(-1)
                break
        else:
            return None
    if node is None or node.op_type != "Squeeze":
        return None
    reshape = g.parent(node, 0, "Reshape")
    if reshape is None:
        return None
    inner = g.producer.get(reshape.input[0])
    if inner is not None and inner.op_type == "Add" and bias is None:
        for i in (0, 1):
            parent, value = g.parent(inner, i, "MatMul"), g.constant(inner.input[1 - i])
            if parent is not None and value is not None:
                inner, bias = parent, value.reshape(-1)
                break
    if inner is None or inner.op_type != "MatMul":
        return None
    weight = g.constant(inner.input[1])
    flatten = g.parent(inner, 0, "Reshape")
    unsqueeze = g.parent(flatten, 0, "Unsqueeze") if flatten is not None else None
    if weight is None or unsqueeze is None or weight.ndim != 2:
        return None
    if bias is None:
        bias = np.zeros(weight.shape[1], np.float32)
    if bias.size != weight.shape[1]:
        return None
    return unsqueeze.input[0], weight, bias


def fuse_attention(model: onnx.ModelProto, num_heads: int, mask_input: str) -> int:
    """Replace Keras' multi-head self-attention with ``com.microsoft.Attention`` (in place).

    Recognised per ``Softmax``, as tf2onnx writes ``keras.layers.MultiHeadAttention`` (the
    projections as :func:`_match_projection` describes, the same input ``x`` for query, key and
    value)::

        scores = Transpose(MatMul(Transpose(k), Transpose(q * scale)), [0, 1, 3, 2])
        probs  = Softmax(scores * m + (-1e9) * (1 - m)) * m + 0 * (1 - m)   # m: the key padding mask
        ctx    = Transpose(Unsqueeze(MatMul(probs, Transpose(v))), [0, 3, 1, 2, 4])
        out    = Squeeze(Reshape(MatMul(Reshape(ctx), W_o)))                # before the output bias

    where ``m`` is computed from the graph input ``mask_input`` alone (``Cast``/``Unsqueeze``/
    ``Not``/``Mul``/``Add`` of constants). It becomes ``Attention(x, [W_q W_k W_v], [b_q b_k b_v],
    mask_input, num_heads, scale)`` and ``MatMul(., W_o)`` writing ``out``. The mask must be a 0/1
    int32 ``(batch, sequence)`` input; ONNX Runtime's ``Attention`` masks with -10000 instead of
    -1e9, which gives the same softmax (``exp`` underflows to 0 either way); only a row whose
    every token is padding differs (Keras gives zeros there, ``Attention`` a uniform average).

    Returns:
        How many attention blocks were fused.
    """
    g = _Graph(model)
    matcher = _AttentionMatcher(g, mask_input)
    fresh = _FreshNames({node.name for node in model.graph.node} | set(g.initializers) | {n for node in model.graph.node for n in node.output})
    add: list[tuple[onnx.NodeProto, onnx.NodeProto]] = []
    inits: list[onnx.TensorProto] = []
    for softmax in model.graph.node:
        if softmax.op_type != "Softmax":
            continue
        block = matcher.match(softmax)
        if block is None or block.hidden % num_heads or block.out_weight.shape[0] != block.hidden:
            continue
        attention, projection, weights = _attention_nodes(block, num_heads, mask_input, fresh)
        inits += weights
        add.append((attention, block.squeeze))
        add.append((projection, block.squeeze))
    if add:
        _replace(model, [], add)
        model.graph.initializer.extend(inits)
        _ensure_domain(model, "com.microsoft")
        _remove_dead_nodes(model)
    return len(add) // 2


class _AttentionBlock(NamedTuple):
    """One multi-head attention :func:`fuse_attention` recognised, around ``softmax``."""

    softmax: onnx.NodeProto
    x: str  #: the input of the query, key and value projections
    weights: np.ndarray  #: ``[W_q W_k W_v]``, float32 ``(H, 3 * N * D)``
    biases: np.ndarray  #: ``[b_q b_k b_v]``, float32 ``(3 * N * D,)``
    scale: float  #: the query scale
    out_matmul: onnx.NodeProto  #: the output projection's ``MatMul``
    out_weight: np.ndarray  #: its weight ``(N * D, H)``
    squeeze: onnx.NodeProto  #: the end of the block, before the output bias

    @property
    def hidden(self) -> int:
        return int(self.weights.shape[1] // 3)


class _AttentionMatcher:
    """The pattern matching of :func:`fuse_attention` on one graph (see its docstring for the pattern)."""

    #: Op types allowed between the graph's mask input and the mask ``m``.
    MASK_OPS = frozenset({"Cast", "Unsqueeze", "Not", "Mul", "Add", "Sub"})

    def __init__(self, g: _Graph, mask_input: str) -> None:
        self.g = g
        self.mask_input = mask_input

    def match(self, softmax: onnx.NodeProto) -> _AttentionBlock | None:
        scores = self._scores(softmax)
        if scores is None:
            return None
        q_t, k_t = scores
        query = self._query_scale(q_t)
        if query is None:
            return None
        scale, q_bias_name = query
        output = self._output_chain(softmax)
        if output is None:
            return None
        v_t, out_matmul, out_weight, squeeze = output
        projections = [_match_projection(self.g, name) for name in (q_bias_name, k_t.input[0], v_t.input[0])]
        if any(p is None for p in projections) or len({p[0] for p in projections if p is not None}) != 1:
            return None
        x = projections[0][0]  # type: ignore[index]
        weights = np.concatenate([p[1] for p in projections if p is not None], axis=1).astype(np.float32)
        biases = np.concatenate([p[2] for p in projections if p is not None]).astype(np.float32)
        return _AttentionBlock(softmax, x, weights, biases, scale, out_matmul, out_weight, squeeze)

    def _is_mask(self, name: str) -> bool:
        """``name`` is computed from the graph's mask input alone (through :attr:`MASK_OPS`)."""
        return _ancestor_inputs(self.g, name, set(self.MASK_OPS)) == {self.mask_input}

    def _split_mask(self, node: onnx.NodeProto, op: str) -> tuple[onnx.NodeProto, str] | None:
        """``(the non-mask parent of op type ``op``, the mask operand)`` of a binary node, or None."""
        for i in (0, 1):
            parent = self.g.parent(node, i, op)
            if parent is not None and self._is_mask(node.input[1 - i]):
                return parent, node.input[1 - i]
        return None

    def _only(self, name: str, op: str) -> onnx.NodeProto | None:
        """The one node reading ``name``, when there is one and it is an ``op``."""
        users = self.g.consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0].op_type == op else None

    def _scores(self, softmax: onnx.NodeProto) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
        """``(Transpose(q * scale), Transpose(k))`` of the masked scores the softmax reads.

        Before the softmax: ``Add(Mul(scores, m), masked constant)``, ``scores`` being
        ``Transpose(MatMul(Transpose(k), Transpose(q * scale)), [0, 1, 3, 2])``.
        """
        g = self.g
        masked_add = g.producer.get(softmax.input[0])
        if masked_add is None or masked_add.op_type != "Add":
            return None
        found = None
        for i in (0, 1):
            mul = g.parent(masked_add, i, "Mul")
            if mul is not None and self._is_mask(masked_add.input[1 - i]):
                found = self._split_mask(mul, "Transpose")
                if found is not None:
                    break
        if found is None:
            return None
        scores_t, _ = found
        scores = g.parent(scores_t, 0, "MatMul")
        if _perm(scores_t) != [0, 1, 3, 2] or scores is None:
            return None
        k_t, q_t = g.parent(scores, 0, "Transpose"), g.parent(scores, 1, "Transpose")
        if _perm(k_t) != [0, 2, 1, 3] or _perm(q_t) != [0, 2, 3, 1]:
            return None
        assert k_t is not None and q_t is not None
        return q_t, k_t

    def _query_scale(self, q_t: onnx.NodeProto) -> tuple[float, str] | None:
        """``(scale, the scaled query's name)`` of ``Transpose(q * scale)``, the scale a constant scalar."""
        q_scaled = self.g.parent(q_t, 0, "Mul")
        if q_scaled is None:
            return None
        scale = q_bias_name = None
        for i in (0, 1):
            value = self.g.scalar(q_scaled.input[1 - i])
            if value is not None:
                scale, q_bias_name = value, q_scaled.input[i]
        if scale is None or q_bias_name is None:
            return None
        return scale, q_bias_name

    def _output_chain(self, softmax: onnx.NodeProto) -> tuple[onnx.NodeProto, onnx.NodeProto, np.ndarray, onnx.NodeProto] | None:
        """``(Transpose(v), the output MatMul, its weight W_o, the final Squeeze)`` after the softmax.

        After the softmax: ``Add(Mul(softmax, m), 0-term)`` -> ``MatMul(., Transpose(v))`` ->
        ``Unsqueeze`` -> ``Transpose`` -> ``Reshape`` -> ``MatMul(W_o)`` -> ``Reshape`` -> ``Squeeze``.
        """
        g, only = self.g, self._only
        post_mul = only(softmax.output[0], "Mul")
        post_add = only(post_mul.output[0], "Add") if post_mul is not None else None
        context = only(post_add.output[0], "MatMul") if post_add is not None else None
        if context is None or context.input[0] != post_add.output[0]:
            return None
        v_t = g.parent(context, 1, "Transpose")
        unsqueeze = only(context.output[0], "Unsqueeze")
        if _perm(v_t) != [0, 2, 1, 3] or unsqueeze is None:
            return None
        assert v_t is not None
        axes = g.constant(unsqueeze.input[1]) if len(unsqueeze.input) > 1 else None
        heads_first = [c for c in g.consumers.get(unsqueeze.output[0], []) if c.op_type == "Transpose"]
        if axes is None or axes.tolist() != [1] or len(heads_first) != 1 or _perm(heads_first[0]) != [0, 3, 1, 2, 4]:
            return None
        flatten = only(heads_first[0].output[0], "Reshape")
        out_matmul = only(flatten.output[0], "MatMul") if flatten is not None else None
        out_weight = g.constant(out_matmul.input[1]) if out_matmul is not None else None
        unflatten = only(out_matmul.output[0], "Reshape") if out_matmul is not None else None
        squeeze = only(unflatten.output[0], "Squeeze") if unflatten is not None else None
        if out_weight is None or squeeze is None or out_weight.ndim != 2:
            return None
        assert out_matmul is not None
        return v_t, out_matmul, out_weight, squeeze


def _perm(node: onnx.NodeProto | None) -> list[int] | None:
    """The ``perm`` of a ``Transpose`` node; None for anything else."""
    if node is None or node.op_type != "Transpose":
        return None
    for attribute in node.attribute:
        if attribute.name == "perm":
            return list(attribute.ints)
    return None


def _attention_nodes(
    block: _AttentionBlock, num_heads: int, mask_input: str, fresh: _FreshNames
) -> tuple[onnx.NodeProto, onnx.NodeProto, list[onnx.TensorProto]]:
    """``(Attention, output MatMul, [qkv weight, qkv bias])`` replacing ``block``.

    The output ``MatMul`` takes over the block's output name; the ``Squeeze`` that wrote it gets a
    fresh one, which leaves the old chain dead.
    """
    softmax, squeeze = block.softmax, block.squeeze
    base = softmax.name.rsplit("/", 2)[0] if "/" in softmax.name else softmax.name
    w_name, b_name, ctx_name = fresh(f"{base}/attention_qkv_weight"), fresh(f"{base}/attention_qkv_bias"), fresh(f"{base}/attention_context")
    inits = [numpy_helper.from_array(block.weights, w_name), numpy_helper.from_array(block.biases, b_name)]
    attrs: dict[str, Any] = {"num_heads": num_heads}
    if abs(block.scale - 1.0 / np.sqrt(block.hidden // num_heads)) > 1e-7:
        attrs["scale"] = block.scale
    attention = helper.make_node("Attention", [block.x, w_name, b_name, mask_input], [ctx_name], name=fresh(f"{base}/Attention"), domain="com.microsoft", **attrs)
    projection = helper.make_node("MatMul", [ctx_name, block.out_matmul.input[1]], [squeeze.output[0]], name=fresh(f"{base}/attention_output_MatMul"))
    squeeze.output[0] = fresh(f"{squeeze.output[0]}__replaced")  # the old chain is now dead
    return attention, projection, inits


def fuse_embed_layer_normalization(model: onnx.ModelProto, ids_input: str, segment_input: str | None) -> int:
    """Replace Keras' BERT embeddings + layer norm with ``com.microsoft.EmbedLayerNormalization`` (in place).

    Pattern: ``LayerNormalization(t + p + s)`` (the two ``Add`` in any order) where ``t`` is
    ``Gather(W_token, ids)`` with ``ids`` computed from the graph input ``ids_input`` alone (Keras'
    embedding wraps negative ids with ``SelectV2(ids < 0, ids + V, ids)``), ``s`` the same for
    ``segment_input`` and ``p`` is ``Expand(Slice(W_position, [0, 0], [length, H]))``: the first
    ``length`` rows of the position table, computed from the token ids' shape alone. It becomes
    ``EmbedLayerNormalization(ids, segments, W_token, W_position, W_segment, gamma, beta)`` (int32
    ids). Identical for every valid input; a negative id, which Keras wraps, is an error there.

    Returns:
        1 when the embeddings were fused, else 0.
    """
    g = _Graph(model)
    wrap_ops = {"Cast", "Less", "Not", "Mul", "Add"}
    shape_ops = {"Shape", "Cast", "Slice", "Concat", "Equal", "Mul", "Add", "Gather", "Less", "Not"}
    for norm in model.graph.node:
        if norm.op_type != "LayerNormalization" or norm.domain not in ("", "ai.onnx") or len(norm.input) < 3:
            continue
        top = g.parent(norm, 0, "Add")
        if top is None:
            continue
        leaves: list[str] = []
        adds = [top]
        for name in top.input:
            inner = g.producer.get(name)
            if inner is not None and inner.op_type == "Add" and len(adds) == 1 and len(g.consumers.get(name, [])) == 1:
                adds.append(inner)
                leaves.extend(inner.input)
            else:
                leaves.append(name)
        if len(leaves) != 3:
            continue
        token = segment = position = None
        for name in leaves:
            node = g.producer.get(name)
            if node is None:
                break
            if node.op_type == "Gather" and g.constant(node.input[0]) is not None:
                source = _ancestor_inputs(g, node.input[1], wrap_ops)
                if source == {ids_input}:
                    token = node
                elif segment_input is not None and source == {segment_input}:
                    segment = node
            elif node.op_type == "Expand":
                sliced = g.parent(node, 0, "Slice")
                table = g.constant(sliced.input[0]) if sliced is not None else None
                starts = g.constant(sliced.input[1]) if sliced is not None else None
                if table is None or table.ndim != 2 or starts is None or starts.tolist() != [0, 0] or len(sliced.input) > 3:
                    continue
                if all(_ancestor_inputs(g, name_, shape_ops, limit=256) == {ids_input} for name_ in (sliced.input[2], node.input[1])):
                    position = (node, table)
        if token is None or position is None or (segment_input is not None and segment is None):
            continue
        gamma, beta = g.constant(norm.input[1]), g.constant(norm.input[2])
        epsilon = next((a.f for a in norm.attribute if a.name == "epsilon"), 1e-5)
        axis = next((a.i for a in norm.attribute if a.name == "axis"), -1)
        if gamma is None or beta is None or axis not in (-1, 2):
            continue
        base = norm.name.rsplit("/", 1)[0] if "/" in norm.name else norm.name
        position_name = f"{base}/position_embedding_table"
        model.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(position[1].astype(np.float32)), position_name))
        inputs = [ids_input, segment_input if segment is not None else "", token.input[0], position_name,
                  segment.input[0] if segment is not None else "", norm.input[1], norm.input[2]]
        outputs = [norm.output[0], f"{base}/embed_mask_index"]  # ONNX Runtime's shape inference wants both outputs
        fused = helper.make_node("EmbedLayerNormalization", inputs, outputs, name=f"{base}/EmbedLayerNormalization",
                                 domain="com.microsoft", epsilon=epsilon)
        _replace(model, [norm], [(fused, norm)])
        _ensure_domain(model, "com.microsoft")
        _remove_dead_nodes(model)
        return 1
    return 0


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



def unfuse_skip_layer_normalization(model: onnx.ModelProto) -> int:
    """Split each ``com.microsoft.SkipLayerNormalization`` back into ``Add`` (+ bias ``Add``) and
    ONNX ``LayerNormalization`` (in place; opset raised to 17).

    ``SkipLayerNormalization(input, skip, gamma, beta, bias)`` computes
    ``LayerNorm(input + skip + bias) * gamma + beta`` over the last axis, with ``epsilon``; its
    fourth output, when read, is the sum ``input + skip + bias`` (the next residual). ONNX Runtime's
    transformer optimizer writes it. Split again before dynamic int8, the graph runs faster on
    ONNX Runtime's CPU provider (all-MiniLM-L6-v2, one thread: 12 ``SkipLayerNormalization`` took
    275 ms per batch of 32 x 128, the ``Add`` + ``LayerNormalization`` pairs 136 ms;
    ``benchmarks/results/minilm_inference.md``); the session's own optimizations
    (``ORT_ENABLE_ALL``) leave the pairs as they are after quantization. Exact up to float
    rounding. A node whose mean or inverse standard deviation output (outputs 1-2) is read is
    left alone.

    Returns:
        How many nodes were split.
    """
    g = _Graph(model)
    remove: list[onnx.NodeProto] = []
    add: list[tuple[onnx.NodeProto, onnx.NodeProto]] = []
    for node in model.graph.node:
        if node.op_type != "SkipLayerNormalization" or node.domain != "com.microsoft":
            continue
        outputs = list(node.output) + [""] * (4 - len(node.output))
        if any(name and (g.consumers.get(name) or name in g.outputs) for name in outputs[1:3]):
            continue
        inputs = list(node.input) + [""] * (5 - len(node.input))
        x, skip, gamma, beta, bias = inputs[:5]
        base = node.name or node.output[0]
        summed = outputs[3] or f"{base}/skip_sum"
        new = []
        if bias:
            new.append(helper.make_node("Add", [x, skip], [f"{base}/skip_add"], name=f"{base}/SkipAdd"))
            new.append(helper.make_node("Add", [f"{base}/skip_add", bias], [summed], name=f"{base}/BiasAdd"))
        else:
            new.append(helper.make_node("Add", [x, skip], [summed], name=f"{base}/SkipAdd"))
        norm_inputs = [summed, gamma] + ([beta] if beta else [])
        new.append(helper.make_node("LayerNormalization", norm_inputs, [outputs[0]], name=f"{base}/LayerNorm",
                                    axis=-1, epsilon=float(_attr(node, "epsilon", 1e-12))))
        remove.append(node)
        add.extend((created, node) for created in new)
    if add:
        _replace(model, remove, add)
        set_opset(model, 17)
    return len(remove)


#: ONNX Runtime's exact (erf) GELU ops and their tanh-approximation counterpart.
_EXACT_GELU_OPS = ("Gelu", "BiasGelu")


def approximate_gelu(model: onnx.ModelProto) -> int:
    """Replace ``com.microsoft.Gelu(x)`` and ``BiasGelu(x, bias)`` with ``com.microsoft.FastGelu``
    (same inputs), in place.

    ``FastGelu`` is the tanh approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``
    (Hendrycks & Gimpel 2016, eq. for GELU's approximation; the ``gelu_new`` of BERT's original
    TensorFlow code), within about 1e-3 of the exact GELU; ONNX Runtime's CPU kernel for it is
    vectorised, where ``Erf`` is not as fast. A model trained with the exact GELU changes by that
    much: the export's gate (mean cosine or top-1 agreement to fp32) decides whether it is kept.

    Returns:
        How many nodes were replaced.
    """
    count = 0
    for node in model.graph.node:
        if node.domain == "com.microsoft" and node.op_type in _EXACT_GELU_OPS:
            node.op_type = "FastGelu"
            del node.attribute[:]
            count += 1
    return count


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
