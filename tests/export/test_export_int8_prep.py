"""The int8 preparation passes (unfused skip layer norm, tanh GELU) and the int4 variant, on the
tiny Keras/tf2onnx BERT classifier of conftest's ``tiny_export`` (2 layers, 2 heads, hidden 32)
and on small hand-built graphs. Outputs are compared with ONNX Runtime before and after, and with
NumPy transcriptions of the ops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from export_fixtures import TinyExport, corpus_lines
from onnx import TensorProto, helper, numpy_helper

from ptmkit_export import Predictor
from ptmkit_export.graph_passes import approximate_gelu, unfuse_skip_layer_normalization
from ptmkit_export.optimize import optimize_transformer
from ptmkit_export.quantize import count_ops, quantize_int4, quantize_int8

HEADS, HIDDEN, LAYERS = 2, 32, 2
BERT_GRAPH = {"mask_input": "padding_mask", "ids_input": "token_ids", "segment_input": "segment_ids", "model_type": "bert"}


def session(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def skip_layer_norm_model(bias: bool, sum_output: bool) -> onnx.ModelProto:
    """One ``SkipLayerNormalization(x, skip, gamma, beta[, bias])`` over a width of 6."""
    rng = np.random.default_rng(3)
    inputs = ["x", "skip", "gamma", "beta"] + (["bias"] if bias else [])
    outputs = ["y", "", "", "sum"] if sum_output else ["y"]
    node = helper.make_node("SkipLayerNormalization", inputs, outputs, name="sln", domain="com.microsoft", epsilon=1e-5)
    inits = [numpy_helper.from_array(rng.normal(size=6).astype(np.float32), name) for name in inputs[2:]]
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["b", "t", 6])  # noqa: E731
    graph = helper.make_graph([node], "sln", [value("x"), value("skip")], [value("y")] + ([value("sum")] if sum_output else []), inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize(("bias", "sum_output"), [(False, False), (True, False), (True, True)])
def test_unfused_skip_layer_norm_matches_numpy(bias: bool, sum_output: bool) -> None:
    model = skip_layer_norm_model(bias, sum_output)
    rng = np.random.default_rng(4)
    feeds = {name: rng.normal(size=(2, 5, 6)).astype(np.float32) for name in ("x", "skip")}
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    summed = feeds["x"] + feeds["skip"] + (weights["bias"] if bias else 0)
    mean, var = summed.mean(-1, keepdims=True), summed.var(-1, keepdims=True)
    expected = (summed - mean) / np.sqrt(var + 1e-5) * weights["gamma"] + weights["beta"]
    fused_out = session(model).run(None, feeds)
    assert unfuse_skip_layer_normalization(model) == 1
    ops = count_ops(model)
    assert "SkipLayerNormalization" not in ops and ops == {"Add": 2 if bias else 1, "LayerNormalization": 1}
    assert next(o.version for o in model.opset_import if o.domain == "") == 17
    onnx.checker.check_model(model)
    got = session(model).run(None, feeds)
    np.testing.assert_allclose(got[0], expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got[0], fused_out[0], atol=1e-5, rtol=0)
    if sum_output:
        np.testing.assert_allclose(got[1], summed, atol=1e-6, rtol=0)


def test_fast_gelu_is_the_tanh_approximation() -> None:
    rng = np.random.default_rng(5)
    bias = rng.normal(size=8).astype(np.float32)
    nodes = [helper.make_node("BiasGelu", ["x", "bias"], ["h"], domain="com.microsoft"), helper.make_node("Gelu", ["h"], ["y"], domain="com.microsoft")]
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", 8])  # noqa: E731
    graph = helper.make_graph(nodes, "gelu", [value("x")], [value("y")], [numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    x = rng.normal(size=(4, 8)).astype(np.float32) * 3
    assert approximate_gelu(model) == 2
    assert count_ops(model) == {"FastGelu": 2}
    tanh_gelu = lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))  # noqa: E731
    (got,) = session(model).run(None, {"x": x})
    np.testing.assert_allclose(got, tanh_gelu(tanh_gelu(x + bias)), atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def optimized(tiny_export: TinyExport, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("int8-prep") / "opt.onnx"
    optimize_transformer(tiny_export.directory / "model.onnx", path, 2, HEADS, HIDDEN, **BERT_GRAPH)
    return path


def test_int8_without_skip_layer_norm(tiny_export: TinyExport, optimized: Path, tmp_path: Path) -> None:
    fused = quantize_int8(optimized, tmp_path / "fused.onnx")
    unfused = quantize_int8(optimized, tmp_path / "int8.onnx", unfuse_layer_norm=True, fast_gelu=True)
    assert fused["skip_layer_norm_unfused"] == 0 and fused["nodes_after"]["SkipLayerNormalization"] == 2 * LAYERS
    assert unfused["skip_layer_norm_unfused"] == 2 * LAYERS
    assert unfused["gelu_approximated"] == 0  # keras-hub's tiny BERT already has the tanh GELU (FastGelu)
    ops = count_ops(onnx.load(str(tmp_path / "int8.onnx")))
    assert "SkipLayerNormalization" not in ops and ops["LayerNormalization"] == 2 * LAYERS
    assert ops["QAttention"] == LAYERS and ops["MatMulInteger"] + ops.get("DynamicQuantizeMatMul", 0) == 3 * LAYERS + 2
    assert unfused["float_weight_matmul"] == 0
    predictor = Predictor(tiny_export.directory, variant="fp32", threads=1)
    feeds = predictor.encode(corpus_lines()[100:200])
    (fp32,) = session(tiny_export.directory / "model.onnx").run(None, feeds)
    (a,) = session(tmp_path / "fused.onnx").run(None, feeds)
    (b,) = session(tmp_path / "int8.onnx").run(None, feeds)
    np.testing.assert_allclose(b, a, atol=1e-4, rtol=0)  # unfusing is exact: the same int8 graph otherwise
    assert np.mean(np.argmax(fp32, -1) == np.argmax(b, -1)) >= 0.95


def test_int4_weight_only(tiny_export: TinyExport, optimized: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx_ir")
    summary = quantize_int4(optimized, tmp_path / "int4.onnx")
    ops = count_ops(onnx.load(str(tmp_path / "int4.onnx")))
    # Attention's fused q/k/v weights are no MatMul: the output projection, the two feed-forward
    # layers per layer, the pooler and the head are.
    assert summary["matmul_nbits"] == ops["MatMulNBits"] == 3 * LAYERS + 2
    assert summary["block_size"] == 32 and summary["float_weight_matmul"] == 0
    predictor = Predictor(tiny_export.directory, variant="fp32", threads=1)
    feeds = predictor.encode(corpus_lines()[100:200])
    (fp32,) = session(tiny_export.directory / "model.onnx").run(None, feeds)
    (int4,) = session(tmp_path / "int4.onnx").run(None, feeds)
    cosines = np.sum(fp32 * int4, -1) / (np.linalg.norm(fp32, axis=-1) * np.linalg.norm(int4, axis=-1))
    assert cosines.mean() > 0.99, cosines.mean()
