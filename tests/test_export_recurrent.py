"""Fused ONNX ``LSTM`` nodes for Keras LSTM layers (:mod:`ptmkit.exporting.recurrent`): ONNX
Runtime against Keras, padded steps included, on rows of different lengths and a row that is all
padding; the gate order and the bias split by hand; what :func:`recurrence` reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ptmkit.contract import InputSpec

INPUTS = (
    InputSpec("features", ("batch", "sequence", "width"), "float32", field="ids", sizes={"width": 5}),
    InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
)


def _model() -> object:
    """Every way a Keras LSTM returns through a mask: forward sequences (a random bias, Keras 3's
    ``hard_sigmoid`` gates), backward (``go_backwards``) sequences, a ``Bidirectional`` wrapper
    (its layers zero padded outputs), and the last output with both states, stacked on the
    forward one."""
    import keras

    keras.utils.set_random_seed(3)
    x = keras.Input((None, 5), name="features")
    padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
    mask = keras.ops.not_equal(padding_mask, 0)
    forward = keras.layers.LSTM(7, return_sequences=True, bias_initializer="random_normal", recurrent_activation="hard_sigmoid")(x, mask=mask)
    backward = keras.layers.LSTM(7, return_sequences=True, go_backwards=True, bias_initializer="random_normal")(x, mask=mask)
    both = keras.layers.Bidirectional(keras.layers.LSTM(7, return_sequences=True, bias_initializer="random_normal"), merge_mode="sum")(x, mask=mask)
    last, h, c = keras.layers.LSTM(21, return_state=True, bias_initializer="random_normal")(forward, mask=mask)
    states = keras.ops.stack([last, h, c], axis=1)  # (batch, 3, 21)
    out = keras.ops.concatenate([keras.ops.concatenate([forward, backward, both], axis=-1), states], axis=1)  # (batch, sequence + 3, 21)
    return keras.Model({"features": x, "padding_mask": padding_mask}, out)


def _feeds(lengths: list[int], steps: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "features": rng.normal(size=(len(lengths), steps, 5)).astype(np.float32),
        "padding_mask": (np.arange(steps)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32),
    }


def test_fused_lstm_nodes_equal_keras_at_every_step(tmp_path: Path) -> None:
    """Fused: five ``LSTM`` nodes, no ``Loop``, equal to Keras within 1e-4 at valid and padded
    steps (full, shorter, length-1 and all-padding rows; a second shape)."""
    import onnx
    import onnxruntime as ort

    from ptmkit.exporting.convert import convert_to_onnx
    from ptmkit.exporting.recurrent import recurrence

    model = _model()
    fused = tmp_path / "fused.onnx"
    convert_to_onnx(model, fused, INPUTS, "out", fuse_lstm=True)
    graph = onnx.load(str(fused))
    assert recurrence(graph) == {"kind": "fused", "LSTM": 5, "Loop": 0}
    assert not any(opset.domain == "ptmkit.recurrent" for opset in graph.opset_import)
    session = ort.InferenceSession(str(fused), providers=["CPUExecutionProvider"])
    for lengths, steps in (([6, 3, 0, 1], 6), ([2, 9], 9)):
        feeds = _feeds(lengths, steps)
        expected = np.asarray(model(feeds, training=False))
        actual = session.run(["out"], feeds)[0]
        np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=0)
        assert np.abs(expected[:, :steps]).max() > 0.05  # not all zeros by accident


def test_recurrence_counts_loops_in_subgraphs() -> None:
    """A ``Loop`` (its body holding another) is ``loop``; with an ``LSTM`` beside it, ``mixed``."""
    from onnx import TensorProto, helper

    from ptmkit.exporting.recurrent import recurrence

    def graph(nodes: list, name: str) -> object:
        return helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [])

    inner = helper.make_node("Loop", ["", ""], [], body=graph([helper.make_node("Identity", ["x"], ["y"])], "inner"))
    outer = helper.make_node("Loop", ["", ""], [], body=graph([inner], "body"))
    assert recurrence(helper.make_model(graph([outer], "main"))) == {"kind": "loop", "LSTM": 0, "Loop": 2}
    lstm = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=1)
    assert recurrence(helper.make_model(graph([outer, lstm], "main")))["kind"] == "mixed"
    assert recurrence(helper.make_model(graph([lstm], "main")))["kind"] == "fused"
    assert recurrence(helper.make_model(graph([], "main")))["kind"] == "none"


def test_weights_in_onnx_gate_order_by_hand() -> None:
    """Keras' columns i, f, c, o become ONNX's rows i, o, f, c; the bias goes to ``Wb``, ``Rb`` is
    zero; ``hard_sigmoid`` is HardSigmoid(1/6, 0.5) in the first (gate) slot."""
    import keras

    from ptmkit.exporting.recurrent import fusible, lstm_weights

    layer = keras.layers.LSTM(2, go_backwards=True, recurrent_activation="hard_sigmoid", activation="relu")
    layer.build((None, None, 3))
    kernel = np.arange(3 * 8, dtype=np.float32).reshape(3, 8)  # column j: gate j // 2
    layer.cell.kernel.assign(kernel)
    layer.cell.bias.assign(np.arange(8, dtype=np.float32))
    weights = lstm_weights(layer)
    i, f, c, o = (kernel[:, 2 * g : 2 * g + 2].T for g in range(4))
    np.testing.assert_array_equal(weights.W[0], np.concatenate([i, o, f, c]))
    np.testing.assert_array_equal(weights.B[0], [0, 1, 6, 7, 2, 3, 4, 5] + [0] * 8)
    assert weights.W.shape == (1, 8, 3) and weights.R.shape == (1, 8, 2) and weights.direction == "reverse"
    assert weights.activations == ("HardSigmoid", "Relu", "Relu") and weights.alpha[0] == pytest.approx(1 / 6) and weights.beta[0] == 0.5
    assert fusible(layer) is None
    assert "stateful" in fusible(keras.layers.LSTM(2, stateful=True))
    assert "'softsign'" in fusible(keras.layers.LSTM(2, activation="softsign"))
    assert fusible(keras.layers.GRU(2)) == "not a keras.layers.LSTM"


def test_a_subclass_with_its_own_call_is_fused_only_when_it_says_it_exports_as_lstm() -> None:
    import keras

    from ptmkit.exporting.recurrent import fusible

    class Noisy(keras.layers.LSTM):
        def call(self, sequences, initial_state=None, mask=None, training=False):  # noqa: ANN001, ANN202
            return super().call(sequences, initial_state=initial_state, mask=mask, training=training)

    class TrainingOnly(Noisy):
        exports_as_lstm = True  # its call differs from LSTM's in training only

    assert fusible(keras.layers.LSTM(4)) is None
    assert fusible(Noisy(4, name="noisy")) == "noisy: a subclass with its own call or cell"
    assert fusible(TrainingOnly(4)) is None
    assert fusible(keras.layers.GRU(4)) == "not a keras.layers.LSTM"
