"""Quantisation-aware fine-tuning, Q8BERT-style (``finetune.qat``).

Zafrir et al. 2019, "Q8BERT: Quantized 8Bit BERT" (section 2), and its reference implementation,
IntelLabs nlp-architect ``nlp_architect/nn/torch/quantization.py`` (``QuantizedLinear``,
``QuantizedEmbedding``, ``FakeLinearQuantizationWithSTE``):

- every weight matrix of a ``Dense`` / ``EinsumDense`` layer and every ``Embedding`` table
  (``ReversibleEmbedding`` included) is fake-quantised on each forward pass with symmetric linear
  int8 quantisation, one scale per tensor: ``S_W = 127 / max|W|``, ``W_q = clip(round(S_W W),
  -127, 127) / S_W``;
- the input ``x`` of every ``Dense`` / ``EinsumDense`` is fake-quantised the same way with the
  threshold ``T = EMA(max|x|)``: the first training batch sets it, each later one moves it by
  ``T <- T - (1 - decay) (T - max|x|)`` (decay 0.9999, the paper's); at inference (``training``
  false) the threshold is read, not updated (a layer never run in training uses its input's own
  ``max|x|``);
- gradients pass straight through the rounding and the clipping (``x + stop_gradient(q(x) - x)``:
  Bengio et al. 2013's straight-through estimator, the reference's ``backward`` returning
  ``grad_output`` unchanged).

Biases, layer norms, softmax and GELU stay float, as in Q8BERT. The reference's optional
re-quantisation of each layer's output (``requantize_output``) is not done: ``ptmkit export
--int8`` (ONNX Runtime dynamic quantisation) quantises only the matrix products' inputs and
weights. Tables of other layer classes (keras-hub's ``PositionEmbedding``) stay float.

Written once for every family: the quantised layers are found by class anywhere in the model (the
backbone's functional graph and the sublayers its blocks call), and each gets a replacement
``call`` on the instance (a Python attribute; the class, the graph and the saved weights' layout are
unchanged). :func:`remove_fake_quantisation` takes them off. A backbone with a layer that holds a
weight matrix of another kind (a recurrent cell, a custom attention) is refused: its products would
train in float and be quantised only at export, which is post-training quantisation again.

What is saved: the weights on the int8 grid (:meth:`FakeQuantisation.snap_weights`, the fake-
quantised values ``W_q``), so that the saved model is the one QAT evaluated (up to its input
quantisation), and ``ptmkit export --int8 --per-tensor`` quantises each matrix to the same integers:
ONNX Runtime's symmetric int8 weight scale, ``max|W| / 127`` (``--no-reduce-range``) or ``max|W| /
64`` (``--reduce-range``, its 7-bit weights, the export's default on CPUs without VNNI), finds the
grid again when ``finetune.qat_reduce_range`` says which (false: 127, Q8BERT's; true: 64). The EMA thresholds
are not saved (dynamic quantisation at export measures each input's range itself); a resumed run
starts them again from its first batch.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from ptmkit.errors import ConfigError

__all__ = ["FakeQuantisation", "INT8_MAX", "apply_fake_quantisation", "fake_quantize", "fake_quantize_weights", "remove_fake_quantisation"]

#: The symmetric int8 range's end: values are rounded into ``[-127, 127]`` (Q8BERT's ``2^(8-1) - 1``).
INT8_MAX = 127
#: The layers whose matrix products are fake-quantised (inputs and weights).
PRODUCT_LAYERS = (keras.layers.Dense, keras.layers.EinsumDense)
#: Layers whose tables stay float without refusal: added to the activations, not multiplied.
FLOAT_TABLES = ("PositionEmbedding",)


def fake_quantize(x: Any, threshold: Any) -> Any:
    """``clip(round(x * S), -127, 127) / S`` with ``S = 127 / threshold``, gradient 1 everywhere.

    Args:
        x: a float tensor, any shape.
        threshold: a positive scalar (``max|x|`` or its EMA); values beyond it are clipped to it.

    Returns:
        A tensor of ``x``'s shape and dtype whose values lie on the grid ``k / S``, ``k`` an integer
        in ``[-127, 127]``; rounding is half to even (``keras.ops.round``, as ``torch.round``).
    """
    scale = ops.divide(ops.cast(INT8_MAX, x.dtype), ops.cast(ops.stop_gradient(threshold), x.dtype))
    quantized = ops.divide(ops.clip(ops.round(ops.multiply(x, scale)), -INT8_MAX, INT8_MAX), scale)
    return ops.add(x, ops.stop_gradient(ops.subtract(quantized, x)))


def fake_quantize_weights(w: Any, maximum: int = INT8_MAX) -> Any:
    """A weight tensor fake-quantised with one scale, ``maximum / max|w|``, into the integers
    ``[-maximum, maximum]`` (``keras.quantizers.abs_max_quantize`` over all axes; its epsilon, 1e-7,
    is added to ``max|w|``), gradient 1. ``maximum`` 127: Q8BERT's 8 bits; 64: ONNX Runtime's
    reduced-range int8 weights (``ptmkit export --int8 --reduce-range``)."""
    quantized, scale = keras.quantizers.abs_max_quantize(w, axis=tuple(range(len(w.shape))), value_range=(-maximum, maximum), dtype=w.dtype)
    return ops.add(w, ops.stop_gradient(ops.subtract(ops.divide(quantized, scale), w)))


class FakeQuantisation:
    """Fake quantisation put on a model's layers (see the module docstring); the handle that
    snaps the weights and takes it off.

    Attributes:
        products: the ``Dense`` / ``EinsumDense`` layers whose inputs and weights are quantised.
        tables: the ``Embedding`` layers whose tables are quantised.
        thresholds: one float32 scalar ``keras.Variable`` per product layer (its input's EMA of
            ``max|x|``; 0 until its first training batch), not tracked by the model.
    """

    def __init__(self, products: list[Any], tables: list[Any], ema_decay: float, weight_max: int = INT8_MAX) -> None:
        self.products, self.tables, self.ema_decay, self.weight_max = products, tables, ema_decay, weight_max
        self.thresholds = [keras.Variable(0.0, dtype="float32", trainable=False, name=f"{layer.name}_input_threshold") for layer in products]
        for layer, threshold in zip(products, self.thresholds, strict=True):
            layer.call = self._product_call(layer, threshold)
        for layer in tables:
            layer.call = self._table_call(layer)

    def _product_call(self, layer: Any, threshold: Any) -> Any:
        einsum = isinstance(layer, keras.layers.EinsumDense)

        def call(inputs: Any, training: Any = None) -> Any:
            x = self.quantize_input(inputs, threshold, bool(training))
            kernel = fake_quantize_weights(ops.cast(layer.kernel, x.dtype), self.weight_max)
            y = ops.einsum(layer.equation, x, kernel) if einsum else ops.matmul(x, kernel)
            if layer.bias is not None:
                y = ops.add(y, ops.cast(layer.bias, y.dtype))
            return layer.activation(y) if layer.activation is not None else y

        return call

    def _table_call(self, layer: Any) -> Any:
        original = type(layer).call

        def call(inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if args or kwargs.get("reverse"):  # ReversibleEmbedding's output projection: as it was
                return original(layer, inputs, *args, **kwargs)
            ids = inputs if inputs.dtype in ("int32", "int64") else ops.cast(inputs, "int32")
            return ops.cast(ops.take(fake_quantize_weights(layer.embeddings, self.weight_max), ids, axis=0), layer.compute_dtype)

        return call

    def quantize_input(self, x: Any, threshold: Any, training: bool) -> Any:
        """``x`` fake-quantised at its layer's EMA threshold, which a training call updates first."""
        current = ops.cast(ops.max(ops.abs(ops.stop_gradient(x))), "float32")
        if training:
            moved = ops.subtract(threshold, ops.multiply(1.0 - self.ema_decay, ops.subtract(threshold, current)))
            used = ops.where(ops.greater(threshold, 0.0), moved, current)
            threshold.assign(used)
        else:
            used = ops.where(ops.greater(threshold, 0.0), threshold.value, current)
        return fake_quantize(x, used)

    def snap_weights(self) -> int:
        """Replace every quantised weight by its fake-quantised value (on its int8 grid); return
        how many tensors were written."""
        variables = [layer.kernel for layer in self.products] + [layer.embeddings for layer in self.tables]
        for variable in variables:
            variable.assign(fake_quantize_weights(ops.convert_to_tensor(variable), self.weight_max))
        return len(variables)

    def summary(self) -> dict[str, Any]:
        """What the run's manifest and metrics record: the scheme, the decay, the layer counts."""
        return {
            "scheme": "symmetric int8, per tensor; inputs at an EMA of max|x| (Zafrir et al. 2019)",
            "weight_range": [-self.weight_max, self.weight_max],
            "ema_decay": self.ema_decay,
            "product_layers": len(self.products),
            "embedding_tables": len(self.tables),
            "saved_weights": "fake-quantised (on the int8 grid)",
        }


def _quantised_layers(model: Any) -> tuple[list[Any], list[Any], list[str]]:
    """``(product layers, embedding layers, others)``: the second holds ``model``'s layers that
    fake quantisation covers, each once; the third names (``name (Class)``) the layers that hold a
    weight matrix it does not cover."""
    products, tables, others, seen = [], [], [], set()
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if id(layer) in seen or isinstance(layer, keras.Model):
            continue
        seen.add(id(layer))
        if isinstance(layer, PRODUCT_LAYERS):
            products.append(layer)
        elif isinstance(layer, keras.layers.Embedding):
            tables.append(layer)
        elif type(layer).__name__ not in FLOAT_TABLES and any(len(v.shape) >= 2 for v in layer._trainable_variables + layer._non_trainable_variables):
            others.append(f"{layer.name} ({type(layer).__name__})")
    return products, tables, others


def apply_fake_quantisation(model: Any, ema_decay: float = 0.9999, weight_max: int = INT8_MAX) -> FakeQuantisation:
    """Fake-quantise ``model``'s ``Dense`` / ``EinsumDense`` inputs and weights and its embedding
    tables during training and inference (see the module docstring).

    Args:
        model: a built Keras model (the classifier: backbone and head).
        ema_decay: the input thresholds' EMA decay, in (0, 1) (Q8BERT: 0.9999).
        weight_max: the weights' integer range ``[-weight_max, weight_max]``: 127 (Q8BERT), or 64
            to match ONNX Runtime's reduced-range int8 weights (``finetune.qat_reduce_range``).

    Raises:
        ConfigError: a model with a weight matrix in a layer of another kind (a recurrent cell,
            an adapter, a LoRA update: ``finetune.strategy`` adapters and lora are refused by the
            config first), or with no ``Dense`` / ``EinsumDense`` layer.
    """
    products, tables, others = _quantised_layers(model)
    if others:
        raise ConfigError(
            f"finetune.qat: {', '.join(others[:3])}{' and more' if len(others) > 3 else ''} hold weight matrices outside Dense, EinsumDense "
            f"and Embedding layers, which fake quantisation does not cover; fine-tune without --qat and export --int8 (post-training)"
        )
    if not products:
        raise ConfigError("finetune.qat: the model has no Dense or EinsumDense layer to fake-quantise")
    return FakeQuantisation(products, tables, ema_decay, weight_max)


def remove_fake_quantisation(handle: FakeQuantisation) -> None:
    """Give every layer of ``handle`` its class's ``call`` back."""
    for layer in [*handle.products, *handle.tables]:
        vars(layer).pop("call", None)
