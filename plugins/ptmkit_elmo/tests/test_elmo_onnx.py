"""The elmo family's ONNX export: ``ptmkit export --int8`` with fused ``LSTM`` nodes
(:attr:`ELMoFamily.fuse_lstm_export`) and its gate; the backbone's graphs against Keras at padded
steps and an all-padding row: ``test_lstm_onnx_benchmark.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def test_export_int8_with_fused_lstm_nodes(elmo_run, tmp_path: Path) -> None:
    """``ptmkit export --int8`` of the pre-trained run: parity, the manifest's ``recurrence``
    (four fused LSTM nodes), an int8 graph with integer LSTMs whose embeddings the gate finds
    equal to fp32's; its speed verdict is what it measured (a model this small is not faster in
    int8: quantizing activations costs more than its few multiplications save)."""
    import onnx

    from ptmkit.testing import main

    run, corpus, _ = elmo_run
    out = tmp_path / "export"
    assert main(["export", str(run), "--out", str(out), "--int8", "--dev", str(corpus)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["recurrence"] == {"kind": "fused", "LSTM": 4, "Loop": 0}
    assert max(manifest["variants"]["fp32"]["parity_max_abs_diff"].values()) <= 1e-4
    int8 = manifest["variants"]["int8"]
    assert int8["agreement_ok"] is True and int8["dev_mean_cosine_to_fp32"] > 0.99
    assert int8["ok"] is not bool(int8["problems"]) and all(p.startswith("slower than fp32") for p in int8["problems"])
    ops = [node.op_type for node in onnx.load(str(out / "model.int8.onnx")).graph.node]
    assert ops.count("DynamicQuantizeLSTM") == 4 and "Loop" not in ops
