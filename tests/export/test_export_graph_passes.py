"""Graph passes, transformer optimisation and the int8 modes on a real Keras/tf2onnx export.

The model is conftest's ``tiny_export``: a 2-layer keras-hub ``BertBackbone`` (2 heads, hidden 32,
tanh-approximate GELU) + ``Dense(3)``, exported with ``keras.Model.export(format="onnx")``. Every
pass must keep ONNX Runtime's outputs within 1e-5 at several shapes, with padding.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from export_fixtures import INPUTS, MAX_SEQUENCE_LENGTH, VOCABULARY_SIZE, TinyExport, corpus_lines
from onnx import TensorProto, helper, numpy_helper

from ptmkit_export import Predictor
from ptmkit_export.benchmark import make_feeds
from ptmkit_export.graph_passes import (
    canonicalize,
    fold_constants,
    fold_tensordot_reshapes,
    fuse_attention,
    fuse_embed_layer_normalization,
    fuse_gelu,
    fuse_layer_normalization,
)
from ptmkit_export.optimize import optimize_transformer
from ptmkit_export.quantize import (
    UnknownNodeError,
    auto_reduce_range,
    count_ops,
    quantizable_matmuls,
    quantize_int8,
    quantize_int8_static,
    rewrite_gemm_as_matmul,
)

SHAPES = list(itertools.product([1, 3], [1, 17, MAX_SEQUENCE_LENGTH]))
MANIFEST = {"inputs": INPUTS, "max_sequence_length": MAX_SEQUENCE_LENGTH}
LAYERS, HEADS, HIDDEN = 2, 2, 32
#: What ptmkit export passes for a BERT run (from BertFamily's declared inputs and graph_optimizer).
BERT_GRAPH = {"mask_input": "padding_mask", "ids_input": "token_ids", "segment_input": "segment_ids", "model_type": "bert"}
#: Weight matmuls of the tiny classifier: per layer the query, key, value and output projections and
#: the two feed-forward layers, plus the pooler and the Dense(3) head.
LINEAR_LAYERS = LAYERS * 6 + 2


def session(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def assert_same_outputs(before: onnx.ModelProto | Path, after: onnx.ModelProto | Path, atol: float = 1e-5) -> None:
    a, b = session(before), session(after)
    for batch, length in SHAPES:
        feeds = make_feeds(MANIFEST, batch, length, vocab_high=VOCABULARY_SIZE, seed=batch * 100 + length)
        feeds["padding_mask"][0, length // 2 + 1 :] = 0
        (expected,) = a.run(None, feeds)
        (got,) = b.run(None, feeds)
        np.testing.assert_allclose(got, expected, atol=atol, rtol=0)


@pytest.fixture(scope="module")
def exported(tiny_export: TinyExport) -> onnx.ModelProto:
    return onnx.load(str(tiny_export.directory / "model.onnx"))


def test_fold_constants_and_gemm_rewrite_keep_outputs(exported: onnx.ModelProto) -> None:
    folded = fold_constants(exported)
    assert_same_outputs(exported, folded)
    assert rewrite_gemm_as_matmul(folded) == 8  # every Gemm: tf2onnx's 2-D Dense and EinsumDense projections
    assert count_ops(folded).get("Gemm", 0) == 0
    assert [i.name for i in folded.graph.input] == [i.name for i in exported.graph.input]
    assert_same_outputs(exported, folded)


def test_layer_normalization_fusion_keeps_outputs(exported: onnx.ModelProto) -> None:
    model = onnx.ModelProto()
    model.CopyFrom(exported)
    assert count_ops(model)["GlobalAveragePool"] == 2 * (2 * LAYERS + 1)  # mean and variance of each layer norm
    assert fuse_layer_normalization(model) == 2 * LAYERS + 1  # embeddings + 2 per layer
    ops = count_ops(model)
    assert ops["LayerNormalization"] == 2 * LAYERS + 1 and "GlobalAveragePool" not in ops and "Reciprocal" not in ops
    assert {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")} == {17}
    onnx.checker.check_model(model, full_check=True)
    assert_same_outputs(exported, model)
    assert fuse_layer_normalization(model) == 0  # idempotent


def test_tensordot_folding_keeps_outputs(exported: onnx.ModelProto) -> None:
    model = fold_constants(exported)
    rewrite_gemm_as_matmul(model)
    before = count_ops(model)
    assert fold_tensordot_reshapes(model) == 2 * LAYERS  # the feed-forward Dense layers (3-D input)
    after = count_ops(model)
    assert after["MatMul"] == before["MatMul"] and after["Reshape"] == before["Reshape"] - 2 * 2 * LAYERS
    assert after["Shape"] < before["Shape"]  # the run-time shape arithmetic went with the reshapes
    onnx.checker.check_model(model, full_check=True)
    assert_same_outputs(exported, model)
    assert fold_tensordot_reshapes(model) == 0


def test_attention_fusion_keeps_outputs(exported: onnx.ModelProto) -> None:
    model, _ = canonicalize(exported)
    assert fuse_attention(model, HEADS, "padding_mask") == LAYERS
    ops = count_ops(model)
    assert ops["Attention"] == LAYERS and "Softmax" not in ops and "Transpose" not in ops
    attention = next(node for node in model.graph.node if node.op_type == "Attention")
    assert attention.domain == "com.microsoft" and attention.input[3] == "padding_mask"
    onnx.checker.check_model(model)
    assert_same_outputs(exported, model)  # with padding: rows of 1, length // 2 + 1 and full length
    assert fuse_attention(model, HEADS, "padding_mask") == 0


def test_embedding_fusion_keeps_outputs(exported: onnx.ModelProto) -> None:
    model, _ = canonicalize(exported)
    gathers = count_ops(model)["Gather"]
    assert fuse_embed_layer_normalization(model, "token_ids", "segment_ids") == 1
    ops = count_ops(model)
    assert ops["EmbedLayerNormalization"] == 1 and ops["LayerNormalization"] == 2 * LAYERS
    assert ops["Gather"] == gathers - 2  # the token and segment lookups (the rest are shape arithmetic)
    onnx.checker.check_model(model)
    a, b = session(exported), session(model)
    rng = np.random.default_rng(5)
    for batch, length in SHAPES:
        feeds = make_feeds(MANIFEST, batch, length, vocab_high=VOCABULARY_SIZE, seed=batch + length)
        feeds["segment_ids"] = rng.integers(0, 2, size=(batch, length)).astype(np.int32)  # both segments
        feeds["padding_mask"][0, length // 2 + 1 :] = 0
        np.testing.assert_allclose(b.run(None, feeds)[0], a.run(None, feeds)[0], atol=1e-5, rtol=0)
    assert fuse_embed_layer_normalization(model, "token_ids", "segment_ids") == 0


def test_canonicalize_counts(exported: onnx.ModelProto) -> None:
    model, counts = canonicalize(exported)
    assert counts == {"gemm_to_matmul": 8, "tensordot_to_matmul": 2 * LAYERS, "layer_normalization": 5}
    assert all(node.domain in ("", "ai.onnx") for node in model.graph.node)  # standard ONNX only
    assert_same_outputs(exported, model)


def exact_gelu_model() -> onnx.ModelProto:
    """``y = (0.5 * (x W + b)) * (1 + erf((x W + b) * 0.7071))``: Keras' exact GELU as tf2onnx writes it."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["h"]),
        helper.make_node("Mul", ["h", "c0707"], ["scaled"]),
        helper.make_node("Erf", ["scaled"], ["erf"]),
        helper.make_node("Add", ["one", "erf"], ["plus"]),
        helper.make_node("Mul", ["half", "h"], ["halved"]),
        helper.make_node("Mul", ["halved", "plus"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(size=(8, 16)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=16).astype(np.float32), "b"),
        numpy_helper.from_array(np.array(0.70710677, np.float32), "c0707"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    graph = helper.make_graph(
        nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])], inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_gelu_fusion_keeps_outputs() -> None:
    model = exact_gelu_model()
    fused = onnx.ModelProto()
    fused.CopyFrom(model)
    assert fuse_gelu(fused) == 1
    assert count_ops(fused) == {"Add": 1, "Gelu": 1, "MatMul": 1}
    x = np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32) * 3
    (expected,) = session(model).run(None, {"x": x})
    (got,) = session(fused).run(None, {"x": x})
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_optimize_levels_report_real_fusions(tiny_export: TinyExport, tmp_path: Path) -> None:
    src = tiny_export.directory / "model.onnx"
    level1 = optimize_transformer(src, tmp_path / "l1.onnx", 1, HEADS, HIDDEN)
    assert level1["fused"]["LayerNormalization"] == 5 and level1["fused"]["SkipLayerNormalization"] == 0
    assert_same_outputs(src, tmp_path / "l1.onnx")
    for level in (2, 3):
        info = optimize_transformer(src, tmp_path / f"l{level}.onnx", level, HEADS, HIDDEN, **BERT_GRAPH)
        fused = {op: n for op, n in info["fused"].items() if n}
        # Keras attention -> Attention; tanh GELU (keras-hub) -> FastGelu; residual Add + LayerNormalization ->
        # SkipLayerNormalization.
        assert fused == {"Attention": LAYERS, "SkipLayerNormalization": 2 * LAYERS, "EmbedLayerNormalization": 1, "FastGelu": LAYERS}
        assert info["passes"]["attention"] == LAYERS and info["attention_fused"] is True and info["notes"] == []
        assert info["passes"]["embed_layer_normalization"] == 1
        assert_same_outputs(src, tmp_path / f"l{level}.onnx", atol=1e-5)
    unfused = optimize_transformer(src, tmp_path / "no-mask.onnx", 2, HEADS, HIDDEN, **(BERT_GRAPH | {"mask_input": None}))
    assert unfused["fused"]["Attention"] == 0 and "attention is not fused" in unfused["notes"][0]
    with pytest.raises(ValueError, match="one of 0, 1, 2, 3"):
        optimize_transformer(src, tmp_path / "x.onnx", 5, HEADS, HIDDEN)
    with pytest.raises(ValueError, match="needs the model.s type, num_heads"):
        optimize_transformer(src, tmp_path / "x.onnx", 2)


@pytest.mark.parametrize("level", [0, 2])
def test_int8_dynamic_quantizes_every_linear_layer(tiny_export: TinyExport, tmp_path: Path, level: int) -> None:
    src = tiny_export.directory / "model.onnx"
    if level:
        optimize_transformer(src, tmp_path / "opt.onnx", level, HEADS, HIDDEN, **BERT_GRAPH)
        src = tmp_path / "opt.onnx"
    summary = quantize_int8(src, tmp_path / "int8.onnx")
    ops = count_ops(onnx.load(str(tmp_path / "int8.onnx")))
    assert summary["float_weight_matmul"] == 0
    # Level 2 fuses attention: its query, key and value projections are quantized inside QAttention.
    attention = LAYERS if level >= 2 else 0
    assert summary["quantized_attention"] == ops.get("QAttention", 0) == attention
    assert ops.get("MatMulInteger", 0) + 3 * attention == LINEAR_LAYERS
    assert summary["quantized_matmul"] == ops.get("MatMulInteger", 0)
    assert ops.get("DynamicQuantizeLinear", 0) >= LINEAR_LAYERS - 2 * LAYERS - 3 * attention  # q/k/v share one input
    assert "Gemm" not in ops


def test_exclude_nodes(tiny_export: TinyExport, tmp_path: Path) -> None:
    src = tiny_export.directory / "model.onnx"
    model = fold_constants(onnx.load(str(src)))
    rewrite_gemm_as_matmul(model)
    names = quantizable_matmuls(model)
    assert len(names) == LINEAR_LAYERS
    summary = quantize_int8(src, tmp_path / "int8.onnx", exclude_nodes=[names[-1]])
    assert summary["float_weight_matmul"] == 1 and summary["quantized_matmul"] == LINEAR_LAYERS - 1
    assert summary["excluded_nodes"] == [names[-1]]
    with pytest.raises(UnknownNodeError, match="no node named 'nope' in the graph; quantizable MatMul nodes: "):
        quantize_int8(src, tmp_path / "bad.onnx", exclude_nodes=["nope"])
    assert not (tmp_path / "bad.onnx").exists()


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_static_qdq_keeps_top1(tiny_export: TinyExport, tmp_path: Path, method: str) -> None:
    predictor = Predictor(tiny_export.directory, variant="fp32", threads=1)
    lines = corpus_lines()
    calibration = [predictor.encode(lines[i : i + 16]) for i in range(0, 64, 16)]
    summary = quantize_int8_static(tiny_export.directory / "model.onnx", tmp_path / "qdq.onnx", calibration, method=method)
    ops = count_ops(onnx.load(str(tmp_path / "qdq.onnx")))
    assert summary["mode"] == "static-qdq" and summary["quantized_matmul"] == LINEAR_LAYERS
    assert ops["QuantizeLinear"] > 0 and ops["DequantizeLinear"] > ops["QuantizeLinear"]
    texts = lines[100:200]
    feeds = predictor.encode(texts)
    (fp32,) = session(tiny_export.directory / "model.onnx").run(None, feeds)
    (qdq,) = session(tmp_path / "qdq.onnx").run(None, feeds)
    agreement = float(np.mean(np.argmax(fp32, -1) == np.argmax(qdq, -1)))
    assert agreement >= 0.95, agreement
    with pytest.raises(ValueError, match="calibration method must be one of"):
        quantize_int8_static(tiny_export.directory / "model.onnx", tmp_path / "x.onnx", calibration, method="kl")


def test_reduce_range_follows_vnni() -> None:
    assert auto_reduce_range("processor: 0\nflags\t\t: fpu sse avx2 avx512f avx512_vnni\n")[0] is False
    assert auto_reduce_range("flags\t\t: fpu sse avx2 avx_vnni\n")[0] is False
    reduce, reason = auto_reduce_range("flags\t\t: fpu sse avx2 avx512f\n")
    assert reduce is True and "lacks AVX-512 VNNI" in reason
    assert auto_reduce_range("Features\t: fp asimd\n")[0] is False  # ARM: no x86 flags line
