"""Fused ONNX ``LSTM`` nodes for a model's Keras ``LSTM`` layers, with their padding masks.

tf2onnx writes a masked Keras LSTM as a ``Loop`` over time steps (its LSTM rewriter matches only
the unmasked pattern: onnx/tensorflow-onnx issue 1871; pull request 2030, which would add masks
for post-padded inputs, is still open, and tf2onnx 1.17 emits a ``Loop``). Unmasked, the same
layer becomes one ``LSTM`` node, but then padding changes its outputs (the backward direction
reads a row's padding first), and no ``sequence_lens`` reaches the node. Here each fusible layer (:func:`fusible`) is exported as one ONNX
``LSTM`` node (opset 7+) built from its weights, with ``sequence_lens`` from its mask:

1. while the model is traced (:func:`fused_lstm_calls`), the layer's ``call`` is a placeholder
   op (a ``tf.numpy_function`` that never runs) with inputs ``x (batch, steps, features)``,
   ``lengths (batch,)`` int32, ``h0``, ``c0 (batch, units)``, and outputs ``Y (batch, steps,
   units)``, ``Y_h``, ``Y_c (batch, units)``: what ONNX's LSTM computes over each row's first
   ``lengths`` steps; the ops around it (plain TensorFlow, converted as usual) turn that into
   what Keras returns for the masked layer, padded steps included;
2. tf2onnx keeps the placeholder as a ``KerasLSTM`` node of the ``ptmkit.recurrent`` domain
   (:data:`TF2ONNX_HANDLERS`);
3. :func:`build_lstm_nodes` replaces each such node by ``Transpose -> LSTM -> Squeeze ->
   Transpose`` (ONNX Runtime's LSTM is time-major only) with the layer's weights:

   - gates: Keras' kernels hold them as ``i, f, c, o`` columns, ONNX's ``W``, ``R`` as
     ``i, o, f, c`` rows (``W = kernel.T`` reordered, ``(1, 4 units, features)``);
   - bias: Keras has one, ONNX two (``Wb``, ``Rb``): ``B = [bias; 0]`` reordered the same way;
   - activations ``[recurrent_activation, activation, activation]`` (ONNX's ``f, g, h``):
     ``sigmoid``, ``tanh``, ``relu``, and Keras 3's ``hard_sigmoid`` (``relu6(x + 3) / 6``:
     ONNX ``HardSigmoid`` with alpha 1/6, beta 0.5);
   - ``go_backwards``: direction ``reverse``, which with ``sequence_lens`` reads each row's
     valid steps from the last to the first; Keras' output, in its processing order over the
     whole reversed row (padding first), is that output with padded steps zeroed, flipped in time.

What Keras returns at padded steps (its masked ``rnn`` loop), and how it is rebuilt: forward, the
last valid step's output repeated (zeros with ``zero_output_for_mask``); backward, zeros at the
steps its reversed row starts with. A row without one valid step has ``sequence_lens`` 1 in the
graph (ONNX Runtime refuses 0) and its outputs are replaced by Keras' (zeros; the final states
are the initial ones).

The one assumption: the mask of a fused layer is a prefix mask (each row's valid steps first,
padding at the end), which every packer of ptmkit writes; ``lengths`` is the mask's row sum.
A family opts in (:attr:`ptmkit.contract.ModelFamily.fuse_lstm_export`); other layers (a
subclass with its own ``call``, a stateful one, other activations, a compute dtype other than
float32) keep tf2onnx's conversion. A subclass whose own ``call`` differs from ``LSTM``'s in
training only (a weight-dropped LSTM, say) declares ``exports_as_lstm = True`` to be fused:
the export traces at inference, where it is a plain ``LSTM``. :func:`recurrence` counts what a graph holds, for the
export manifest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

#: The domain and op type of the placeholder node between tf2onnx and :func:`build_lstm_nodes`.
PLACEHOLDER_DOMAIN = "ptmkit.recurrent"
PLACEHOLDER_OP = "KerasLSTM"

#: Keras activation name -> ONNX activation, alpha, beta (None: the ONNX default, unused).
ACTIVATIONS: dict[str, tuple[str, float | None, float | None]] = {
    "sigmoid": ("Sigmoid", None, None),
    "tanh": ("Tanh", None, None),
    "relu": ("Relu", None, None),
    "hard_sigmoid": ("HardSigmoid", 1.0 / 6.0, 0.5),
}

#: Keras' gate blocks (i, f, c, o) in ONNX's order (i, o, f, c).
ONNX_GATE_ORDER = (0, 3, 1, 2)


class LSTMWeights(NamedTuple):
    """One fused layer as ONNX's ``LSTM`` takes it.

    Attributes:
        W: ``(1, 4 units, features)`` float32, gates ``i, o, f, c``.
        R: ``(1, 4 units, units)`` float32.
        B: ``(1, 8 units)`` float32 (``Wb`` then ``Rb``), or None without a bias.
        units: the hidden size.
        direction: ``"forward"`` or ``"reverse"`` (``go_backwards``).
        activations: ONNX names of ``f, g, h``.
        alpha, beta: their ``activation_alpha``/``activation_beta``, or None when none needs one.
        name: the Keras layer's name (for node names and messages).
    """

    W: np.ndarray
    R: np.ndarray
    B: np.ndarray | None
    units: int
    direction: str
    activations: tuple[str, str, str]
    alpha: tuple[float, float, float] | None
    beta: tuple[float, float, float] | None
    name: str


def _activation_name(function: Any) -> str:
    import keras

    name = keras.activations.serialize(function)
    return name if isinstance(name, str) else str(getattr(function, "__name__", name))


def fusible(layer: Any) -> str | None:
    """Why the Keras layer ``layer`` cannot be exported as a fused ``LSTM`` node, or None when it
    can: a ``keras.layers.LSTM`` (or a subclass that keeps its ``call``, or declares
    ``exports_as_lstm = True``: its ``call`` at inference is ``LSTM``'s) on a plain ``LSTMCell``,
    not stateful, float32 compute, activations of :data:`ACTIVATIONS`."""
    import keras

    if not isinstance(layer, keras.layers.LSTM):
        return "not a keras.layers.LSTM"
    own_call = type(layer).call is not keras.layers.LSTM.call and not getattr(layer, "exports_as_lstm", False)
    if own_call or type(layer.cell) is not keras.layers.LSTMCell:
        return f"{layer.name}: a subclass with its own call or cell"
    if layer.stateful:
        return f"{layer.name}: stateful"
    if layer.compute_dtype != "float32":
        return f"{layer.name}: compute dtype {layer.compute_dtype}, not float32"
    for which in ("activation", "recurrent_activation"):
        name = _activation_name(getattr(layer.cell, which))
        if name not in ACTIVATIONS:
            return f"{layer.name}: {which} {name!r} has no ONNX LSTM equivalent here ({', '.join(ACTIVATIONS)})"
    return None


def lstm_weights(layer: Any) -> LSTMWeights:
    """The ONNX ``LSTM`` inputs and attributes of the fusible Keras ``layer`` (see the module
    docstring for the gate order and the bias split)."""
    units = layer.cell.units

    def onnx_rows(matrix: np.ndarray) -> np.ndarray:  # (rows, 4 units), Keras' i f c o -> (1, 4 units, rows), ONNX's i o f c
        blocks = np.split(np.asarray(matrix, np.float32).T, 4, axis=0)
        return np.concatenate([blocks[g] for g in ONNX_GATE_ORDER], axis=0)[None]

    bias = None
    if layer.cell.use_bias:
        b = np.split(np.asarray(layer.cell.bias, np.float32), 4)
        bias = np.concatenate([*(b[g] for g in ONNX_GATE_ORDER), np.zeros(4 * units, np.float32)])[None]
    recurrent, activation = (ACTIVATIONS[_activation_name(f)] for f in (layer.cell.recurrent_activation, layer.cell.activation))
    chosen = (recurrent, activation, activation)
    needs = any(alpha is not None for _, alpha, _ in chosen)
    return LSTMWeights(
        W=onnx_rows(layer.cell.kernel), R=onnx_rows(layer.cell.recurrent_kernel), B=bias, units=units,
        direction="reverse" if layer.go_backwards else "forward", activations=tuple(a for a, _, _ in chosen),  # type: ignore[arg-type]
        alpha=tuple(1.0 if a is None else a for _, a, _ in chosen) if needs else None,  # type: ignore[arg-type]
        beta=tuple(0.0 if b is None else b for _, _, b in chosen) if needs else None,  # type: ignore[arg-type]
        name=layer.name,
    )


def _never_run(*args: Any) -> Any:
    raise RuntimeError("a fused LSTM's placeholder only marks the layer for the ONNX conversion; it does not run")


def _placeholder_call(layer: Any, weights: LSTMWeights, found: dict[str, LSTMWeights]) -> Any:
    """``layer.call`` for the trace: the placeholder op (its ``weights`` read before, eagerly)
    and the ops that give Keras' masked outputs."""

    def call(sequences: Any, initial_state: Any = None, mask: Any = None, training: Any = False) -> Any:
        import tensorflow as tf

        x = tf.convert_to_tensor(sequences)  # (batch, steps, features)
        batch, steps, units = tf.shape(x)[0], tf.shape(x)[1], layer.cell.units
        lengths = tf.fill([batch], steps) if mask is None else tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
        if initial_state is None:
            h0 = c0 = tf.zeros(tf.stack([batch, units]), x.dtype)
        else:
            h0, c0 = (tf.convert_to_tensor(state) for state in initial_state)
        y, h, c = tf.numpy_function(_never_run, [x, tf.maximum(lengths, 1), h0, c0], [x.dtype] * 3, stateful=False, name="fused_lstm")
        found[y.op.get_attr("token").decode()] = weights
        y = tf.ensure_shape(y, [None, None, units])  # tf2onnx reads ranks from the graph, not from set_shape
        h, c = (tf.ensure_shape(state, [None, units]) for state in (h, c))
        valid = tf.sequence_mask(lengths, steps)[:, :, None]  # (batch, steps, 1)
        some = (lengths > 0)[:, None]  # (batch, 1): the row has a valid step
        last = tf.where(some, h, tf.zeros_like(h))
        if layer.go_backwards:  # Keras' order: the whole row reversed, its padding (zeros) first
            sequence = tf.reverse(tf.where(valid, y, tf.zeros_like(y)), axis=[1])
        else:
            sequence = tf.where(valid, y, tf.zeros_like(y) if layer.zero_output_for_mask else last[:, None, :])
        output = sequence if layer.return_sequences else last
        if layer.return_state:
            return output, tf.where(some, h, h0), tf.where(some, c, c0)
        return output

    return call


@contextlib.contextmanager
def fused_lstm_calls(model: Any) -> Iterator[dict[str, LSTMWeights]]:
    """Within the block, every fusible (:func:`fusible`) ``LSTM`` layer of ``model``, nested
    models included, calls the placeholder op when traced (its ``call`` is replaced on the
    instance, and restored on exit); convert the traced function with :data:`TF2ONNX_HANDLERS`,
    then pass the yielded mapping (placeholder token -> :class:`LSTMWeights`, filled while
    tracing) to :func:`build_lstm_nodes`."""
    import logging

    found: dict[str, LSTMWeights] = {}
    layers = [layer for layer in model._flatten_layers(include_self=False, recursive=True) if fusible(layer) is None]
    for layer in layers:
        layer.call = _placeholder_call(layer, lstm_weights(layer), found)
    shapes = logging.getLogger("tf2onnx.shape_inference")
    quiet = _PlaceholderShapeFilter()
    shapes.addFilter(quiet)  # tf2onnx cannot infer the placeholder's shapes (the ops after it restore them): not the user's problem
    try:
        yield found
    finally:
        shapes.removeFilter(quiet)
        for layer in layers:
            del layer.call


class _PlaceholderShapeFilter:
    """Drops tf2onnx's "Cannot infer shape for .../fused_lstm" warnings about the placeholders."""

    def filter(self, record: Any) -> bool:
        return "/fused_lstm" not in record.getMessage()


def _placeholder_handler(ctx: Any, node: Any, name: str, args: Any) -> Any:
    """tf2onnx's handler of the placeholder op: keep it as a ``ptmkit.recurrent`` node."""
    node.type = PLACEHOLDER_OP
    node.domain = PLACEHOLDER_DOMAIN
    return node


#: ``custom_op_handlers`` for ``tf2onnx.convert.from_function`` (a ``tf.numpy_function`` with
#: ``stateful=False`` is a ``PyFuncStateless`` op); pass :func:`placeholder_opset` in ``extra_opset``.
TF2ONNX_HANDLERS = {"PyFuncStateless": (_placeholder_handler, [])}


def placeholder_opset() -> Any:
    """The ``ptmkit.recurrent`` opset import tf2onnx needs while the placeholders are in the graph."""
    from onnx import helper

    return helper.make_opsetid(PLACEHOLDER_DOMAIN, 1)


def build_lstm_nodes(model_proto: Any, found: dict[str, LSTMWeights]) -> int:
    """Replace each placeholder node of ``model_proto`` (in place) by its ONNX ``LSTM`` node and
    the transposes around it, with the weights of ``found`` (from :func:`fused_lstm_calls`);
    drop the ``ptmkit.recurrent`` opset import. Returns the number of nodes replaced.

    Raises:
        KeyError: a placeholder whose token ``found`` does not hold (traced outside the block).
    """
    from onnx import helper, numpy_helper

    graph = model_proto.graph
    nodes = list(graph.node)
    rebuilt = []
    replaced = 0
    axes = {0: "fused_lstm_axes_0", 1: "fused_lstm_axes_1"}
    for node in nodes:
        if node.domain != PLACEHOLDER_DOMAIN or node.op_type != PLACEHOLDER_OP:
            rebuilt.append(node)
            continue
        token = next(helper.get_attribute_value(a) for a in node.attribute if a.name == "token")
        weights = found[token.decode() if isinstance(token, bytes) else token]
        rebuilt.extend(_lstm_subgraph(node, weights, f"fused_lstm_{replaced}", axes, graph, numpy_helper, helper))
        replaced += 1
    if replaced:
        graph.initializer.extend(numpy_helper.from_array(np.array([axis], np.int64), name) for axis, name in axes.items())
    del graph.node[:]
    graph.node.extend(rebuilt)
    kept = [opset for opset in model_proto.opset_import if opset.domain != PLACEHOLDER_DOMAIN]
    del model_proto.opset_import[:]
    model_proto.opset_import.extend(kept)
    return replaced


def _lstm_subgraph(node: Any, weights: LSTMWeights, prefix: str, axes: dict[int, str], graph: Any, numpy_helper: Any, helper: Any) -> list[Any]:
    """``Transpose -> LSTM -> Squeeze -> Transpose`` (and ``Unsqueeze``/``Squeeze`` of the states)
    for one placeholder ``node``; its weights are added to ``graph``'s initializers."""
    x, lengths, h0, c0 = node.input
    y, y_h, y_c = node.output
    names = {key: f"{prefix}/{key}" for key in ("W", "R", "B", "x", "h0", "c0", "Y", "Y_h", "Y_c", "Y_squeezed")}
    graph.initializer.extend([numpy_helper.from_array(weights.W, names["W"]), numpy_helper.from_array(weights.R, names["R"])])
    if weights.B is not None:
        graph.initializer.append(numpy_helper.from_array(weights.B, names["B"]))
    attributes: dict[str, Any] = {"hidden_size": weights.units, "direction": weights.direction, "activations": list(weights.activations)}
    if weights.alpha is not None:
        attributes |= {"activation_alpha": list(weights.alpha), "activation_beta": list(weights.beta or ())}
    inputs = [names["x"], names["W"], names["R"], names["B"] if weights.B is not None else "", lengths, names["h0"], names["c0"]]
    return [
        helper.make_node("Transpose", [x], [names["x"]], name=f"{prefix}/transpose_in", perm=[1, 0, 2]),  # (steps, batch, features)
        helper.make_node("Unsqueeze", [h0, axes[0]], [names["h0"]], name=f"{prefix}/h0"),  # (1, batch, units)
        helper.make_node("Unsqueeze", [c0, axes[0]], [names["c0"]], name=f"{prefix}/c0"),
        helper.make_node("LSTM", inputs, [names["Y"], names["Y_h"], names["Y_c"]], name=f"{prefix}/{weights.name}", **attributes),
        helper.make_node("Squeeze", [names["Y"], axes[1]], [names["Y_squeezed"]], name=f"{prefix}/squeeze_y"),  # (steps, batch, units)
        helper.make_node("Transpose", [names["Y_squeezed"]], [y], name=f"{prefix}/transpose_out", perm=[1, 0, 2]),
        helper.make_node("Squeeze", [names["Y_h"], axes[0]], [y_h], name=f"{prefix}/squeeze_h"),
        helper.make_node("Squeeze", [names["Y_c"], axes[0]], [y_c], name=f"{prefix}/squeeze_c"),
    ]


def recurrence(model_proto: Any) -> dict[str, Any]:
    """What carries the recurrence in an ONNX graph: ``{"kind": "fused" | "loop" | "mixed" | "none",
    "LSTM": n, "Loop": m}``, counting ``LSTM`` and ``Loop`` nodes in the graph and its subgraphs
    (``fused``: LSTM nodes and no Loop)."""
    from onnx import AttributeProto

    counts = {"LSTM": 0, "Loop": 0}

    def walk(graph: Any) -> None:
        for node in graph.node:
            if node.op_type in counts and node.domain in ("", "ai.onnx"):
                counts[node.op_type] += 1
            for attribute in node.attribute:
                if attribute.type == AttributeProto.GRAPH:
                    walk(attribute.g)
                for sub in attribute.graphs:
                    walk(sub)

    walk(model_proto.graph)
    kind = {(True, False): "fused", (False, True): "loop", (True, True): "mixed", (False, False): "none"}[(counts["LSTM"] > 0, counts["Loop"] > 0)]
    return {"kind": kind, **counts}


def graph_recurrence(path: Path) -> dict[str, Any]:
    """:func:`recurrence` of the ONNX file at ``path``."""
    import onnx

    model_proto = onnx.load(str(path))
    try:
        return recurrence(model_proto)
    finally:
        del model_proto
