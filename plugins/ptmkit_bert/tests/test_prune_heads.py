"""``ptmkit compress --prune-heads`` on BERT (Michel et al. 2019): the pruned classifier computes
what the unpruned one computes with those heads' outputs zeroed, it is smaller by the hand-counted
parameters, the importance is ``|dL/dxi|`` of a head gate, and impossible specs are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tinyconfig import DATA, TINY

TRAIN, DEV = DATA / "classify" / "polarity-200-train.txt", DATA / "classify" / "polarity-200-dev.txt"
HIDDEN, HEADS, HEAD_DIM = 32, 4, 8


@pytest.fixture(scope="module")
def classifier(tiny_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fine-tuned two-block BERT with four heads of 8 in each block."""
    from ptmkit.testing import finetune, pretrain

    root = tmp_path_factory.mktemp("prune")
    pretrain(
        "bert",
        tiny_corpus,
        root / "bert",
        overrides=[*TINY, "model.num_layers=2", "model.num_heads=4", "train.max_steps=3"],
        objectives=["mlm"],
    )
    finetune(
        root / "bert",
        TRAIN,
        DEV,
        root / "ft",
        overrides=["finetune.epochs=1", "finetune.sequence_length=32", "finetune.learning_rate=1e-3"],
    )
    return root / "ft"


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "token_ids": rng.integers(5, 600, (3, 16)).astype("int32"),
        "segment_ids": np.zeros((3, 16), "int32"),
        "padding_mask": np.array([[1] * 16, [1] * 9 + [0] * 7, [1] * 4 + [0] * 12], "int32"),
    }


def _output_kernels(model: object) -> list:
    import keras

    from ptmkit.api import get_registry

    (backbone,) = [layer for layer in model.layers if isinstance(layer, keras.Model)]  # the classifier's backbone
    return get_registry().family("bert").head_output_kernels(backbone)


def test_pruned_heads_compute_the_unpruned_model_with_those_heads_zeroed(classifier: Path, tmp_path: Path) -> None:
    from ptmkit.testing import load_classifier, main

    out = tmp_path / "pruned"
    assert main(["compress", str(classifier), "--out", str(out), "--prune-heads-spec", "0:1,3;1:0"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "finetune" and manifest["compressed_from"]["heads"] == {"0": [1, 3], "1": [0]}
    pruned, config, _, _ = load_classifier(out)
    assert config.model.attention_heads == [2, 3]
    full, _, _, _ = load_classifier(classifier)
    # per removed head: query, key and value kernels (hidden x head_dim) and biases (head_dim), and the output kernel's head_dim rows
    removed = 3 * (3 * (HIDDEN * HEAD_DIM + HEAD_DIM) + HEAD_DIM * HIDDEN)
    assert (
        manifest["parameters"] == {"before": full.count_params(), "after": full.count_params() - removed}
        and pruned.count_params() == full.count_params() - removed
    )
    # the mask: a head's context vectors enter the block only through its rows of the output kernel
    for block, heads in ((0, [1, 3]), (1, [0])):
        kernel = _output_kernels(full)[block]
        values = kernel.numpy()
        values[heads] = 0.0
        kernel.assign(values)
    x = _inputs()
    np.testing.assert_allclose(
        np.asarray(pruned.predict(x, verbose=0)), np.asarray(full.predict(x, verbose=0)), atol=1e-5
    )


def test_importance_is_the_absolute_gradient_of_a_head_gate(classifier: Path) -> None:
    import tensorflow as tf

    from ptmkit.testing import head_importance, load_classifier

    model, _, _, _ = load_classifier(classifier)
    x, y = _inputs(), np.array([0, 1, 1], np.int32)
    scores = head_importance(model, _output_kernels(model), x, y, batch_size=8)
    kernel = _output_kernels(model)[1]
    original = kernel.numpy()

    def loss(gate: float, head: int) -> float:  # the head's output scaled by the gate
        values = original.copy()
        values[head] *= gate
        kernel.assign(values)
        logits = model(x, training=False)
        return float(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)))

    eps = 0.25  # the gradients are ~1e-5: a wide central difference keeps float32 round-off below 1%
    numeric = [abs(loss(1 + eps, h) - loss(1 - eps, h)) / (2 * eps) for h in range(HEADS)]
    kernel.assign(original)
    np.testing.assert_allclose(scores[1], numeric, rtol=2e-2, atol=1e-6)


def test_heads_per_layer_removes_each_layers_least_important(classifier: Path, tmp_path: Path) -> None:
    from ptmkit.testing import main

    out = tmp_path / "pruned"
    assert main(["compress", str(classifier), "--out", str(out), "--heads-per-layer", "1", "--data", str(TRAIN)]) == 0
    recorded = json.loads((out / "manifest.json").read_text())["compressed_from"]
    assert recorded["heads"] == {
        str(block): [int(np.argmin(score))] for block, score in enumerate(recorded["importance"])
    }


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--prune-heads-spec", "1:0,1,2,3", "layer 1 has 4 heads; cannot prune 4 of them (at least one must remain)"),
        ("--prune-heads-spec", "0:4", "layer 0 has 4 heads (0-3); cannot prune head 4"),
        ("--prune-heads-spec", "2:0", "layer 2 does not exist (the backbone has 2 layers)"),
        ("--heads-per-layer", "4", "layer 0 has 4 heads; cannot prune 4 of them (at least one must remain)"),
    ],
)
def test_pruning_too_many_heads_is_refused_in_one_line(
    classifier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    from ptmkit.testing import main

    assert main(["compress", str(classifier), "--out", str(tmp_path / "x"), option, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(message) and len(err.splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_the_pruned_run_exports_a_smaller_onnx_model_that_computes_the_same_logits(
    classifier: Path, tmp_path: Path
) -> None:
    import onnxruntime as ort

    from ptmkit.testing import load_classifier, main

    out = tmp_path / "pruned"
    assert main(["compress", str(classifier), "--out", str(out), "--prune-heads-spec", "0:0,1,2;1:3"]) == 0
    sizes = {}
    for run in (classifier, out):
        assert main(["export", str(run), "--out", str(tmp_path / run.name / "export")]) == 0
        sizes[run.name] = (tmp_path / run.name / "export" / "model.onnx").stat().st_size
    removed = 4 * (3 * (HIDDEN * HEAD_DIM + HEAD_DIM) + HEAD_DIM * HIDDEN)  # parameters of 4 heads
    # at least the removed float32 parameters (tf2onnx may also store folded copies of the projections)
    assert sizes[classifier.name] - sizes["pruned"] >= 4 * removed
    session = ort.InferenceSession(
        str(tmp_path / "pruned" / "export" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    x = _inputs()
    feed = {i.name: x[i.name].astype(np.int64 if "int64" in i.type else np.int32) for i in session.get_inputs()}
    model, _, _, _ = load_classifier(out)
    np.testing.assert_allclose(session.run(None, feed)[0], np.asarray(model.predict(x, verbose=0)), atol=1e-5)
