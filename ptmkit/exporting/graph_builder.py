"""Writing an ONNX graph by hand from a Keras model's weights, with ``onnx.helper``: for a family
whose export is not one ``tf2onnx`` conversion (:func:`ptmkit.exporting.convert.convert_to_onnx`)
but graphs of its own, e.g. a decoder with a key/value cache (:class:`ptmkit.api.WritesOwnExport`).

:class:`OnnxGraph` collects nodes and initializers; its methods write the pieces transformer
blocks are made of (layer norm, dense, attention heads split and merged, scaled dot-product
attention over an additive bias), and :func:`attention_weights` reads a Keras
``MultiHeadAttention`` layer's projections as 2-D matrices. Nothing here imports TensorFlow: the
graphs hold NumPy copies of the weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: The ONNX opset the graphs are written for.
OPSET = 17
#: The domain of ONNX Runtime's contrib ops (``MultiHeadAttention``, ...).
CONTRIB_DOMAIN = "com.microsoft"


class OnnxGraph:
    """Nodes and initializers being collected into one ONNX graph.

    Every method returns the name of the tensor it wrote; :meth:`model` makes the checked
    ``onnx.ModelProto``.
    """

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0
        self._names: set[str] = set()
        self.uses_contrib = False

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        """An initializer ``name`` holding ``value`` as ``dtype`` (written once: a second call with
        the same name returns it unchanged)."""
        from onnx import numpy_helper

        if name in self._names:
            return name
        self._names.add(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, kind: str, inputs: list[str], output: str | None = None, **attributes: Any) -> str:
        """One node of the default domain with one output (``output``, or a fresh name)."""
        from onnx import helper

        self._count += 1
        output = output or f"{kind.lower()}_{self._count}"
        self.nodes.append(helper.make_node(kind, inputs, [output], name=f"{kind}_{self._count}", **attributes))
        return output

    def contrib(self, kind: str, inputs: list[str], outputs: list[str], name: str, **attributes: Any) -> list[str]:
        """One node of ONNX Runtime's contrib domain (:data:`CONTRIB_DOMAIN`), with several outputs."""
        from onnx import helper

        self.uses_contrib = True
        self.nodes.append(helper.make_node(kind, inputs, outputs, name=name, domain=CONTRIB_DOMAIN, **attributes))
        return outputs

    def layer_norm(self, x: str, prefix: str, gamma: np.ndarray, beta: np.ndarray, epsilon: float) -> str:
        """``LayerNormalization`` over the last axis."""
        return self.op("LayerNormalization", [x, self.const(f"{prefix}.gamma", gamma), self.const(f"{prefix}.beta", beta)], axis=-1, epsilon=epsilon)

    def dense(self, x: str, prefix: str, kernel: np.ndarray, bias: np.ndarray | None) -> str:
        """``x @ kernel + bias`` (``bias`` None: no ``Add``)."""
        out = self.op("MatMul", [x, self.const(f"{prefix}.kernel", kernel)])
        return out if bias is None else self.op("Add", [out, self.const(f"{prefix}.bias", bias)])

    def split_heads(self, x: str, heads: int, head_dim: int) -> str:
        """``(batch, sequence, heads * head_dim)`` -> ``(batch, heads, sequence, head_dim)``."""
        shaped = self.op("Reshape", [x, self.const(f"shape_heads_{heads}_{head_dim}", [0, 0, heads, head_dim], np.int64)])
        return self.op("Transpose", [shaped], perm=[0, 2, 1, 3])

    def merge_heads(self, x: str) -> str:
        """``(batch, heads, sequence, head_dim)`` -> ``(batch, sequence, heads * head_dim)``."""
        return self.op("Reshape", [self.op("Transpose", [x], perm=[0, 2, 1, 3]), self.const("shape_merge", [0, 0, -1], np.int64)])

    def attention(self, q: str, keys: str, values: str, bias: str, head_dim: int) -> str:
        """``softmax(q k^T / sqrt(head_dim) + bias) v`` on split heads (``(batch, heads, sequence,
        head_dim)``; ``bias`` broadcasts to ``(batch, heads, queries, keys)``), heads merged: the
        scaled dot-product attention of Vaswani et al. 2017, with the query scaled first as Keras'
        ``MultiHeadAttention`` does."""
        scaled = self.op("Mul", [q, self.const(f"scale_{head_dim}", 1.0 / np.sqrt(head_dim))])
        scores = self.op("Add", [self.op("MatMul", [scaled, self.op("Transpose", [keys], perm=[0, 1, 3, 2])]), bias])
        return self.merge_heads(self.op("MatMul", [self.op("Softmax", [scores], axis=-1), values]))

    def model(self, name: str, inputs: list[Any], outputs: list[Any], producer: str) -> Any:
        """The checked ``onnx.ModelProto`` of the collected graph (opset :data:`OPSET`, plus
        :data:`CONTRIB_DOMAIN` when a contrib node was written).

        Args:
            name: the graph's name.
            inputs: the graph inputs, ``onnx.ValueInfoProto`` (``onnx.helper.make_tensor_value_info``).
            outputs: the graph outputs, likewise.
            producer: the model's ``producer_name``.

        Raises:
            onnx.checker.ValidationError: the graph is not valid ONNX (a bug).
        """
        import onnx
        from onnx import helper

        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(CONTRIB_DOMAIN, 1)] if self.uses_contrib else [])
        model = helper.make_model(graph, opset_imports=opsets, producer_name=producer)
        onnx.checker.check_model(model)
        return model


def attention_weights(layer: Any) -> dict[str, np.ndarray]:
    """A Keras ``MultiHeadAttention`` layer's projections as 2-D matrices and 1-D vectors:
    ``{query,key,value}_kernel`` ``(hidden, heads * head_dim)``, ``{query,key,value}_bias``,
    ``output_kernel`` ``(heads * head_dim, hidden)`` and ``output_bias``, float32."""
    out: dict[str, np.ndarray] = {}
    for name in ("query", "key", "value"):
        dense = getattr(layer, f"_{name}_dense")
        out[f"{name}_kernel"] = np.asarray(dense.kernel, np.float32).reshape(int(dense.kernel.shape[0]), -1)
        out[f"{name}_bias"] = np.asarray(dense.bias, np.float32).reshape(-1)
    out["output_kernel"] = np.asarray(layer._output_dense.kernel, np.float32).reshape(-1, int(layer._output_dense.kernel.shape[-1]))
    out["output_bias"] = np.asarray(layer._output_dense.bias, np.float32)
    return out
