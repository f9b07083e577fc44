"""The main job on real data, small: pre-train -> fine-tune -> export ONNX + int8 -> predict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tinyconfig import DATA

from ptmkit.rundir import RunDir
from ptmkit_bert import BertFamily


def test_pretraining_run_directory(tiny_pretrained: Path) -> None:
    run = RunDir(tiny_pretrained)
    manifest = run.manifest()
    assert manifest["stage"] == "pretrain" and manifest["family"] == "bert"
    assert manifest["objectives"] == ["mlm", "nsp"]
    assert manifest["plugin"]["distribution"] == "ptmkit"
    metrics = run.read_json("metrics.json")
    assert metrics["steps"] == 8
    # Untrained, masked-LM loss is about ln(vocabulary) = ln(600) = 6.4; eight steps lower it a little.
    assert 4.0 < metrics["heldout_mlm_loss"] < 6.6
    assert metrics["heldout_mlm_perplexity"] == pytest.approx(np.exp(metrics["heldout_mlm_loss"]), rel=1e-2)
    assert 0.0 <= metrics["heldout_nsp_accuracy"] <= 1.0
    for name in ("config.toml", "tokenizer.json", "backbone.weights.h5", "checkpoints/latest.json"):
        assert (tiny_pretrained / name).exists(), name
    assert list((tiny_pretrained / "logs").rglob("events.out.tfevents.*")), "TensorBoard logs"
    # No temporary file is left behind by the atomic writes.
    assert not [p for p in tiny_pretrained.rglob(".*tmp-*")]


def test_finetune_export_predict(tiny_pretrained: Path, tmp_path: Path) -> None:
    from ptmkit.exporting import export_run
    from ptmkit.training.finetune import finetune

    out = tmp_path / "polarity"
    metrics = finetune(
        tiny_pretrained,
        DATA / "classify" / "polarity-200-train.txt",
        DATA / "classify" / "polarity-200-dev.txt",
        out,
        overrides=["finetune.epochs=2", "finetune.sequence_length=32"],
    )
    assert metrics["train_examples"] == 160 and metrics["dev_examples"] == 40 and metrics["labels"] == 2
    assert 0.0 <= metrics["dev_accuracy"] <= 1.0 and 0.0 <= metrics["dev_macro_f1"] <= 1.0
    assert metrics["dev_majority_accuracy"] == 0.5  # 80 neg / 80 pos in train (tie: neg), 20 of the 40 dev lines are neg
    assert json.loads((out / "labels.json").read_text()) == ["neg", "pos"]
    import h5py

    with h5py.File(out / "model.weights.h5") as stored_weights:  # the model alone, not Adam's two moments
        assert "optimizer" not in stored_weights
        stored_values: list[int] = []
        stored_weights.visititems(lambda _, item: stored_values.append(item.size) if isinstance(item, h5py.Dataset) else None)
    from ptmkit.training.finetune import load_classifier as _load

    assert sum(stored_values) == _load(out)[0].count_params()

    manifest = export_run(out, int8=True)
    export_dir = Path(manifest["directory"])
    assert sorted(p.name for p in export_dir.iterdir()) == ["manifest.json", "model.int8.onnx", "model.onnx", "tokenizer.json"]
    fp32 = manifest["variants"]["fp32"]
    assert set(fp32["parity_max_abs_diff"]) == {"1x17", "3x32", "8x1"}  # other than the trace shapes
    assert max(fp32["parity_max_abs_diff"].values()) <= 1e-4
    int8 = manifest["variants"]["int8"]
    assert 0.0 <= int8["dev_agreement_with_fp32"] <= 1.0
    assert int8["quantization"]["quantized_matmul"] > 0
    assert int8["bytes"] < fp32["bytes"]
    assert fp32["latency_ms_b1x128"] > 0 and int8["latency_ms_b1x128"] > 0
    stored = json.loads((export_dir / "manifest.json").read_text())
    assert stored["variants"] == manifest["variants"] and stored["labels"] == ["neg", "pos"]

    # fp32 ONNX through the lean runtime agrees with Keras on real text.
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.training.finetune import load_classifier
    from ptmkit_export import Predictor

    texts = ["a gorgeous , witty , seductive movie .", "dull , plodding and utterly forgettable .", "ok"]
    model, _, tokenizer, _ = load_classifier(out)
    predictor = Predictor(export_dir, variant="fp32")
    expected = model.predict(encode_texts(tokenizer, texts, 32, BertFamily.inputs, 0), verbose=0)
    np.testing.assert_allclose(predictor.logits(texts), expected, atol=1e-4)

    # `ptmkit predict` runs without importing TensorFlow or Keras.
    code = (
        "import sys; from ptmkit.cli import main; code = main(['predict', sys.argv[1], '--text', 'a fine film', "
        "'--variant', 'fp32']); assert code == 0, code; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'keras_hub', 'tf2onnx')); "
        "print('HEAVY', heavy)"
    )
    result = subprocess.run([sys.executable, "-c", code, str(export_dir)], capture_output=True, text=True, timeout=120, env=os.environ)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    prediction = json.loads(lines[0])
    assert prediction["text"] == "a fine film" and prediction["label"] in ("neg", "pos")
    assert abs(sum(prediction["probabilities"].values()) - 1.0) < 1e-6
    assert lines[-1] == "HEAVY []"


def test_int8_export_of_embeddings_needs_dev_texts(tiny_pretrained: Path) -> None:
    """A run without a head exports embeddings; its int8 check needs texts, and none are recorded."""
    from ptmkit.exporting import ExportError, export_run

    with pytest.raises(ExportError, match="no dev file recorded in the run; pass --dev FILE"):
        export_run(tiny_pretrained, int8=True)
    assert not (tiny_pretrained / "export").exists()


def test_majority_accuracy() -> None:
    from ptmkit.training.finetune import majority_accuracy

    train, dev = np.array([2, 2, 0, 1, 2]), np.array([2, 0, 0, 2, 1, 1, 2, 2])
    assert majority_accuracy(train, dev) == 4 / 8  # label 2 is the training majority; 4 dev labels are 2
    assert majority_accuracy(np.array([1, 0]), np.array([0, 1, 1])) == 1 / 3  # a tie goes to the lowest id
    assert majority_accuracy(np.array([], dtype=int), dev) == 0.0
