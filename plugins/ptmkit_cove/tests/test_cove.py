"""The cove family: the biLSTM against torch's ``nn.LSTM``, translation training, the
``[GloVe; CoVe]`` features through probe and fine-tune, the export, and the refused inputs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from cove_tiny import GLOVE_DIM, TINY_COVE
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def test_bilstm_matches_torch_lstm_with_the_same_weights() -> None:
    """Rows of 6, 3 and 1 words padded to 6: CoVe(w) at each word equals torch's 2-layer
    bidirectional ``nn.LSTM`` run on the row alone (Keras' kernels copied, gates i, f, g, o in
    both), within 1e-5; padding is zero; ``sequence_output`` is ``[GloVe; CoVe]``."""
    import keras
    import torch

    from ptmkit_cove.backbone import CoVeBackbone

    keras.utils.set_random_seed(5)
    backbone = CoVeBackbone(12, 6, 5, 2)
    table = np.random.default_rng(0).normal(0, 1, (12, 6)).astype(np.float32)
    backbone.set_glove(table)
    reference = torch.nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True)
    with torch.no_grad():
        for k in range(2):
            for direction, suffix in (("forward_layer", ""), ("backward_layer", "_reverse")):
                kernel, recurrent, bias = backbone.get_layer(f"bilstm_{k}").__getattribute__(direction).get_weights()
                getattr(reference, f"weight_ih_l{k}{suffix}").copy_(torch.from_numpy(kernel.T))
                getattr(reference, f"weight_hh_l{k}{suffix}").copy_(torch.from_numpy(recurrent.T))
                getattr(reference, f"bias_ih_l{k}{suffix}").copy_(torch.from_numpy(bias))
                getattr(reference, f"bias_hh_l{k}{suffix}").zero_()
    lengths = [6, 3, 1]
    ids = np.zeros((3, 6), np.int32)
    mask = np.zeros((3, 6), np.int32)
    rng = np.random.default_rng(1)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(2, 12, length)
        mask[row, :length] = 1
    out = {k: np.asarray(v) for k, v in backbone({"token_ids": ids, "padding_mask": mask}).items()}
    assert out["sequence_output"].shape == (3, 6, 6 + 2 * 5)
    for row, length in enumerate(lengths):
        with torch.no_grad():
            expected = reference(torch.from_numpy(table[ids[row, :length]])[None])[0][0].numpy()
        np.testing.assert_allclose(out["cove_output"][row, :length], expected, atol=1e-5)
        np.testing.assert_array_equal(out["cove_output"][row, length:], 0.0)
        np.testing.assert_array_equal(out["sequence_output"][row, :length, :6], table[ids[row, :length]])
    np.testing.assert_array_equal(out["sequence_output"][..., 6:], out["cove_output"])


def test_translation_loss_decreases(cove_run) -> None:
    run, metrics = cove_run
    assert metrics["glove_dim"] == GLOVE_DIM and metrics["train_pairs"] == 300 and metrics["languages"] == "en-de"
    assert metrics["train_loss_last"] < metrics["train_loss_first"] - 1.0, metrics
    assert metrics["dev_loss"] < metrics["dev_loss_before"] - 1.0, metrics
    assert metrics["source_unknown_share"] == 0.0  # every training word has a vector
    import json

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["weights"] == "backbone.weights.h5" and manifest["inputs"] == ["token_ids", "padding_mask"]


def _words(texts: list[str], tokenizer) -> tuple[np.ndarray, np.ndarray]:
    encodings = [tokenizer.encode(text, add_special_tokens=False).ids for text in texts]
    length = max(len(e) for e in encodings) + 1  # every row padded
    ids, mask = np.zeros((len(texts), length), np.int32), np.zeros((len(texts), length), np.int32)
    for row, e in enumerate(encodings):
        ids[row, : len(e)], mask[row, : len(e)] = e, 1
    return ids, mask


def test_features_are_glove_then_cove_through_probe_and_finetune(cove_run, cove_data, tmp_path: Path) -> None:
    """``sequence_output`` is ``(batch, sequence, glove_dim + 2 hidden)``: the GloVe file's vector of
    each word (zero for a word without one), then ``cove_output``; probe's sentence features are
    its mean over the words; a fine-tune keeps the encoder frozen."""
    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import finetune, load_backbone, load_classifier, write_tiny_labelled

    run, _ = cove_run
    _, _, vectors = cove_data
    backbone, _, tokenizer, _ = load_backbone(get_registry(), RunDir(run))
    texts = ["Unable to open file", "the server", "zzzunknown file"]
    ids, mask = _words(texts, tokenizer)
    out = {k: np.asarray(v) for k, v in backbone({"token_ids": ids, "padding_mask": mask}).items()}
    assert out["sequence_output"].shape == (3, ids.shape[1], GLOVE_DIM + 2 * 8)
    for row, text in enumerate(texts):
        for i, word in enumerate(text.split()):
            np.testing.assert_array_equal(out["sequence_output"][row, i, :GLOVE_DIM], vectors.get(word, np.zeros(GLOVE_DIM, np.float32)))
    np.testing.assert_array_equal(out["sequence_output"][..., GLOVE_DIM:], out["cove_output"])
    expected = (out["sequence_output"] * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    np.testing.assert_allclose(out["pooled_output"], expected, atol=1e-6)
    features = get_registry().family("cove").sentence_features(run)
    assert features.dim == GLOVE_DIM + 16
    np.testing.assert_allclose(features.featurize(texts), expected, atol=1e-5)

    train, dev = write_tiny_labelled(tmp_path, train=24, dev=8)
    tuned = finetune(run, train, dev, tmp_path / "tuned", overrides=["finetune.epochs=1", "finetune.batch_size=16", "finetune.learning_rate=1e-2"])
    assert tuned["labels"] == 2 and 0.0 <= tuned["dev_accuracy"] <= 1.0
    model, config, _, _ = load_classifier(tmp_path / "tuned")
    assert (config.head.pooling, config.head.freeze_backbone) == ("mean", True)
    for before, after in zip(backbone.weights, model.get_layer(backbone.name).weights, strict=True):
        np.testing.assert_array_equal(np.asarray(before), np.asarray(after))


def test_export_matches_keras_on_padded_rows(cove_run, tmp_path: Path) -> None:
    """The standard ``ptmkit export`` of the run (mean-pooled ``[GloVe; CoVe]``), run by ONNX
    Runtime on rows of 5, 2 and 0 words padded to 6, equals Keras within 1e-4 (the empty row: 0)."""
    import gc

    import onnxruntime as ort

    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import export_run, load_backbone

    run, _ = cove_run
    gc.collect()
    gc.freeze()  # the export collects before each tf2onnx pass: skip the live objects (the root conftest's reason)
    manifest = export_run(run, tmp_path / "export")
    assert manifest["task"] == "embedding"
    assert manifest["recurrence"] == {"kind": "fused", "LSTM": 4, "Loop": 0}  # 2 layers x 2 directions, no Loop
    backbone, *_ = load_backbone(get_registry(), RunDir(run))
    ids = np.zeros((3, 6), np.int32)
    mask = np.zeros((3, 6), np.int32)
    for row, length in enumerate([5, 2, 0]):
        ids[row, :length] = np.arange(2, 2 + length) * (row + 3)
        mask[row, :length] = 1
    states = np.asarray(backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"])
    expected = (states * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
    session = ort.InferenceSession(str(tmp_path / "export" / "model.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"token_ids": ids, "padding_mask": mask})
    np.testing.assert_allclose(got, expected, atol=1e-4)
    np.testing.assert_array_equal(got[2], 0.0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], r"^error: config key 'model.glove' is empty: a cove run reads 8-dimensional GloVe vectors"),
        (["model.glove_dim=100"], r"^error: config key 'model.glove' = '.*glove.txt' holds 8-dimensional vectors, but model.glove_dim = 100; set model.glove_dim = 8$"),
    ],
)
def test_missing_or_mismatched_glove_is_one_line(cove_data, tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str], message: str) -> None:
    import re

    from ptmkit.testing import main

    pairs, glove, _ = cove_data
    argv = ["train", "cove", "--parallel", str(pairs), "--out", str(tmp_path / "run")]
    for override in [*TINY_COVE, *([f"model.glove={glove}"] if overrides else []), *overrides]:
        argv += ["--set", override]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.match(message, err), err
    assert not (tmp_path / "run").exists()


def test_ragged_glove_file_names_the_line(tmp_path: Path) -> None:
    from ptmkit.api import DataError
    from ptmkit_cove.config import CoVeConfig
    from ptmkit_cove.glove import load_glove

    path = tmp_path / "glove.txt"
    path.write_text("the 0.1 0.2 0.3\nof 0.1 0.2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"glove.txt:2: 2 numbers after the word, but the first vector has 3$"):
        load_glove(CoVeConfig(glove=str(path), glove_dim=3))


def test_config_documents_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit.testing import main
    from ptmkit_cove.config import CoVeConfig

    assert main(["config", "cove"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("[model]") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("[")), len(lines))
    model = lines[start:end]
    keys = [line.split(" = ")[0] for line in model if " = " in line and not line.startswith("#")]
    assert keys == [f.name for f in dataclasses.fields(CoVeConfig)]
    assert all(model[model.index(line) - 1].startswith("#") for line in model if " = " in line and not line.startswith("#"))
