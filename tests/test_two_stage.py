"""Two-stage fine-tuning (``ptmkit finetune FINE_TUNED_RUN ...``; Phang et al. 2018's STILTs): on
the tiny BERT run, stage 1 on polarity, stage 2 on WordNet supersenses. Stage 2 must start from
stage 1's encoder weights (equal tensors) with a new head sized for its own labels, and its
manifest must record the chain of tasks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "classify"
POLARITY_TRAIN, POLARITY_DEV = DATA / "polarity-200-train.txt", DATA / "polarity-200-dev.txt"
TINY_FINETUNE = ["finetune.epochs=1", "finetune.batch_size=16", "finetune.sequence_length=16", "finetune.max_train_examples=48", "finetune.learning_rate=1e-2"]


def supersense_files(directory: Path, rows: int = 64) -> tuple[Path, Path, int]:
    """The first ``rows`` supersense examples as a training file, and its rows whose label occurs
    at least twice as a dev file; returns ``(train, dev, labels in train)``."""
    lines = (DATA / "wordnet-supersense-train-20k.tsv").read_text(encoding="utf-8").splitlines()
    header, body = lines[0], lines[1 : rows + 1]
    labels = [line.split("\t")[0] for line in body]
    dev = [line for line in body if labels.count(line.split("\t")[0]) >= 2]
    train_file, dev_file = directory / "supersense-train.tsv", directory / "supersense-dev.tsv"
    train_file.write_text("\n".join([header, *body]) + "\n", encoding="utf-8")
    dev_file.write_text("\n".join([header, *dev]) + "\n", encoding="utf-8")
    return train_file, dev_file, len(set(labels))


@pytest.fixture(scope="module")
def stage_one(tiny_pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ptmkit.training.finetune import finetune

    out = tmp_path_factory.mktemp("stage1") / "polarity"
    finetune(tiny_pretrained, POLARITY_TRAIN, POLARITY_DEV, out, overrides=TINY_FINETUNE)
    return out


def _weights(model: object) -> list[np.ndarray]:
    import keras

    backbone = next(layer for layer in model.layers if isinstance(layer, keras.Model))  # type: ignore[attr-defined]
    return [np.asarray(w) for w in backbone.get_weights()]


def test_stage_two_starts_from_the_stage_one_encoder_with_a_new_head(stage_one: Path, tiny_pretrained: Path, tmp_path: Path) -> None:
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import build_classifier, finetune, load_classifier, load_encoder

    train, dev, labels = supersense_files(tmp_path)
    stage_one_model, config, _, _ = load_classifier(stage_one)
    trained = _weights(stage_one_model)
    backbone, _ = load_encoder(get_registry(), RunDir(stage_one))
    start = [np.asarray(w) for w in backbone.get_weights()]
    assert len(start) == len(trained) and all(np.array_equal(a, b) for a, b in zip(start, trained, strict=True))
    original, _ = load_encoder(get_registry(), RunDir(tiny_pretrained))
    assert not all(np.array_equal(a, np.asarray(b)) for a, b in zip(trained, original.get_weights(), strict=True))  # stage 1 moved it
    head = build_classifier(get_registry(), config, backbone, labels).get_layer("logits")
    assert head.kernel.shape == (32, labels) and np.all(np.asarray(head.bias) == 0)

    # stage 2 with the encoder frozen: its run keeps stage 1's encoder exactly, and its head is the new one
    out = tmp_path / "supersense"
    metrics = finetune(stage_one, train, dev, out, overrides=["finetune.strategy=features", "finetune.max_train_examples=0"])
    model = load_classifier(out)[0]
    assert all(np.array_equal(a, b) for a, b in zip(_weights(model), trained, strict=True))
    assert model.get_layer("logits").kernel.shape == (32, labels)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["start"] == "encoder" and metrics["labels"] == labels
    assert [(step["train"], step["labels"]) for step in manifest["chain"]] == [(str(POLARITY_TRAIN.resolve()), 2), (str(train.resolve()), labels)]


def test_a_pretraining_run_starts_a_chain_of_one(stage_one: Path, tiny_pretrained: Path) -> None:
    manifest = json.loads((stage_one / "manifest.json").read_text())
    assert manifest["start"] == "pretrained"
    assert manifest["chain"] == [{"run": str(stage_one.resolve()), "train": str(POLARITY_TRAIN.resolve()), "head": "classification", "labels": 2}]


def test_same_labels_continue_the_head_too(stage_one: Path, tmp_path: Path) -> None:
    from ptmkit.console import default_console
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import _classifier_to_train, _stage_start, load_classifier, load_encoder

    parent = RunDir(stage_one)
    trained, config, _, manifest = load_classifier(stage_one)
    backbone, _ = load_encoder(get_registry(), parent)
    model, _, _ = _classifier_to_train(get_registry(), config, backbone, 2, default_console())
    assert _stage_start(parent, manifest, config, ["neg", "pos"], model, default_console()) == "encoder+head"
    np.testing.assert_array_equal(np.asarray(model.get_layer("logits").kernel), np.asarray(trained.get_layer("logits").kernel))
