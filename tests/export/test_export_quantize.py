"""Gemm -> MatMul rewrite and int8 quantization, checked numerically on real and synthetic graphs."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from export_fixtures import INPUTS, MAX_SEQUENCE_LENGTH, VOCABULARY_SIZE, TinyExport
from onnx import TensorProto, helper, numpy_helper

from ptmkit_export.benchmark import make_feeds
from ptmkit_export.quantize import (
    QUANTIZED_MATMUL_OPS,
    auto_reduce_range,
    count_float_weight_matmuls,
    count_ops,
    quantize_int8,
    rewrite_gemm_as_matmul,
)

SHAPES = list(itertools.product([1, 3, 8], [1, 17, MAX_SEQUENCE_LENGTH]))
MANIFEST = {"inputs": INPUTS, "max_sequence_length": MAX_SEQUENCE_LENGTH}


def session(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def gemms_with_initializer_weight(model: onnx.ModelProto) -> int:
    initializers = {init.name for init in model.graph.initializer}
    return sum(1 for node in model.graph.node if node.op_type == "Gemm" and node.input[1] in initializers)


def test_rewrite_keeps_exported_model_equal(tiny_export: TinyExport) -> None:
    original = onnx.load(str(tiny_export.directory / "model.onnx"))
    assert gemms_with_initializer_weight(original) > 0  # tf2onnx writes Dense projections as Gemm
    rewritten = onnx.load(str(tiny_export.directory / "model.onnx"))
    count = rewrite_gemm_as_matmul(rewritten)
    onnx.checker.check_model(rewritten, full_check=True)
    assert count == gemms_with_initializer_weight(original)
    assert gemms_with_initializer_weight(rewritten) == 0
    assert count_ops(rewritten).get("MatMul", 0) == count_ops(original).get("MatMul", 0) + count
    # Dynamic axes survive: every (batch, length) runs, and gives the same numbers.
    before, after = session(original), session(rewritten)
    for batch, length in SHAPES:
        feeds = make_feeds(MANIFEST, batch, length, vocab_high=VOCABULARY_SIZE, seed=batch * 100 + length)
        feeds["padding_mask"][0, length // 2 + 1 :] = 0  # some padding too
        (expected,) = before.run(None, feeds)
        (got,) = after.run(None, feeds)
        assert got.shape == (batch, 3)
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def gemm_model(alpha: float, beta: float, trans_b: int, bias: str | None, shared: bool) -> onnx.ModelProto:
    """x (M, 4) -> Gemm -> (M, 5) [-> second Gemm sharing B]; bias: None, "init" or "input"."""
    rng = np.random.default_rng(trans_b + 2 * (bias is not None))
    weight = rng.normal(size=(5, 4) if trans_b else (4, 5)).astype(np.float32)
    initializers = [numpy_helper.from_array(weight, "W")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", 4])]
    gemm_inputs = ["x", "W"]
    if bias == "init":
        initializers.append(numpy_helper.from_array(rng.normal(size=(5,)).astype(np.float32), "C"))
        gemm_inputs.append("C")
    elif bias == "input":
        inputs.append(helper.make_tensor_value_info("C", TensorProto.FLOAT, [1, 5]))
        gemm_inputs.append("C")
    attributes = {"alpha": alpha, "beta": beta, "transB": trans_b}
    nodes = [helper.make_node("Gemm", gemm_inputs, ["y"], name="g0", **attributes)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 5])]
    if shared:
        nodes.append(helper.make_node("Gemm", ["x", "W"], ["z"], name="g1", transB=trans_b))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["m", 5]))
    graph = helper.make_graph(nodes, "gemm", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(
    ("alpha", "beta", "trans_b", "bias", "shared", "rewritten"),
    [
        (1.0, 1.0, 1, None, False, 1),
        (1.0, 1.0, 0, "init", False, 1),
        (1.0, 1.0, 1, "input", True, 2),
        (2.5, 0.5, 1, "init", True, 2),
        (1.0, 0.0, 0, "init", False, 1),
        (1.0, 0.5, 1, "input", False, 0),  # beta * non-constant C: left alone
    ],
)
def test_rewrite_synthetic_gemm(alpha, beta, trans_b, bias, shared, rewritten) -> None:
    original = gemm_model(alpha, beta, trans_b, bias, shared)
    model = gemm_model(alpha, beta, trans_b, bias, shared)
    assert rewrite_gemm_as_matmul(model) == rewritten
    onnx.checker.check_model(model, full_check=True)
    assert count_ops(model).get("Gemm", 0) == len(original.graph.node) - rewritten
    # No dangling weights: every initializer is read by some node.
    read = {name for node in model.graph.node for name in node.input}
    assert all(init.name in read for init in model.graph.initializer)
    rng = np.random.default_rng(7)
    for rows in (1, 6):
        feeds = {"x": rng.normal(size=(rows, 4)).astype(np.float32)}
        if bias == "input":
            feeds["C"] = rng.normal(size=(1, 5)).astype(np.float32)
        for expected, got in zip(session(original).run(None, feeds), session(model).run(None, feeds), strict=True):
            np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-6)


def test_quantize_summary_and_ops(tiny_export: TinyExport) -> None:
    summary = tiny_export.quantize_summary
    quantized = onnx.load(str(tiny_export.directory / "model.int8.onnx"))
    onnx.checker.check_model(quantized)
    ops = count_ops(quantized)
    print("quantize summary:", {k: v for k, v in summary.items() if not k.startswith("nodes")})
    print("nodes before:", summary["nodes_before"])
    print("nodes after:", summary["nodes_after"])
    assert summary["nodes_after"] == ops
    assert summary["preprocessed"] and summary["preprocess_error"] is None
    assert summary["gemm_rewritten"] == summary["nodes_before"]["Gemm"] == 8  # attention output Gemms too
    assert ops.get("Gemm", 0) == 0
    assert summary["float_weight_matmul"] == count_float_weight_matmuls(quantized) == 0
    # Every projection (4 attention + 2 feed-forward per layer, pooler, logits) is an integer matmul.
    assert summary["quantized_matmul"] == sum(ops.get(op, 0) for op in QUANTIZED_MATMUL_OPS) == 2 * 6 + 2
    assert ops.get("MatMulInteger", 0) + ops.get("DynamicQuantizeMatMul", 0) == summary["quantized_matmul"]
    assert summary["bytes_after"] < summary["bytes_before"]
    assert (summary["per_channel"], summary["reduce_range"], summary["weight_type"]) == (True, auto_reduce_range()[0], "QInt8")  # the CPU's choice
    # The int8 model keeps dynamic axes.
    int8 = session(tiny_export.directory / "model.int8.onnx")
    for batch, length in [(1, 1), (3, 17), (8, MAX_SEQUENCE_LENGTH)]:
        (logits,) = int8.run(None, make_feeds(MANIFEST, batch, length, vocab_high=VOCABULARY_SIZE))
        assert logits.shape == (batch, 3) and np.isfinite(logits).all()


def test_quantize_without_preprocess_and_atomic_write(tiny_export: TinyExport, tmp_path: Path) -> None:
    destination = tmp_path / "model.int8.onnx"
    destination.write_bytes(b"old")
    summary = quantize_int8(tiny_export.directory / "model.onnx", destination, per_channel=False, preprocess=False)
    assert sorted(os.listdir(tmp_path)) == ["model.int8.onnx"]  # no temporary file left behind
    assert not summary["preprocessed"]
    # Without constant folding the two attention-output Gemms (weight behind a Reshape) stay float.
    assert summary["gemm_rewritten"] == 6 and summary["nodes_after"].get("Gemm", 0) == 2
    assert summary["quantized_matmul"] == 12
    onnx.checker.check_model(onnx.load(str(destination)))
    assert oct(destination.stat().st_mode & 0o777) != oct(0o600)

    with pytest.raises(FileNotFoundError, match="ONNX model not found"):
        quantize_int8(tmp_path / "missing.onnx", tmp_path / "out.onnx")
    with pytest.raises(FileNotFoundError, match="output directory not found"):
        quantize_int8(destination, tmp_path / "no" / "out.onnx")


def test_matmuls_with_a_batched_weight_stay_float_and_the_rest_quantize(tmp_path: Path) -> None:
    """A MatMul by a 3-D initializer (XLNet's relative-segment einsum after tf2onnx) would make
    ONNX Runtime's per-channel ``MatMulInteger`` fail at run time; int8 leaves it in float."""
    from ptmkit_export.quantize import batched_weight_matmuls, quantize_int8

    rng = np.random.default_rng(0)
    flat = numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "flat")
    batched = numpy_helper.from_array(rng.normal(size=(4, 8, 2)).astype(np.float32), "batched")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "flat"], ["h"], name="dense"),
            helper.make_node("Reshape", ["h", "shape"], ["h4"], name="split"),
            helper.make_node("MatMul", ["h4", "batched"], ["y"], name="segments"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [flat, batched, numpy_helper.from_array(np.array([1, 3, 8], np.int64), "shape")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert batched_weight_matmuls(model) == ["segments"]
    onnx.save(model, str(tmp_path / "fp32.onnx"))
    summary = quantize_int8(tmp_path / "fp32.onnx", tmp_path / "int8.onnx", per_channel=True)
    assert summary["batched_weight_matmul"] == 1 and summary["float_weight_matmul"] == 1
    x = rng.normal(size=(3, 8)).astype(np.float32)
    expected = (x @ flat_array(flat)).reshape(1, 3, 8) @ flat_array(batched)
    (out,) = session(tmp_path / "int8.onnx").run(None, {"x": x})
    assert out.shape == (4, 3, 2) and np.max(np.abs(out - expected)) < 0.1 * np.max(np.abs(expected))


def flat_array(tensor: onnx.TensorProto) -> np.ndarray:
    return numpy_helper.to_array(tensor)
