"""AWD-LSTM's AR and TAR (Merity et al. 2017, section 4.6; fastai's ``RNNRegularizer``) against
NumPy on fixed inputs with padding, and through the core's causal-LM objective: Keras' training
loss is the cross-entropy plus both terms, the held-out (evaluation) loss is the cross-entropy
alone, and with both coefficients 0 the training loss is the cross-entropy exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

LENGTHS = (6, 4, 1, 0)  # tokens of each row, right-padded to 6; the last row is padding only


def _mask() -> np.ndarray:
    mask = np.zeros((len(LENGTHS), 6), np.int32)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1
    return mask


def numpy_ar_tar(dropped: np.ndarray, raw: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """Mean of ``dropped ** 2`` over every (token, feature), mean of ``(h_t - h_{t-1}) ** 2``
    over every (consecutive token pair, feature), row by row: padding never enters."""
    squares, differences = [], []
    for row in range(mask.shape[0]):
        length = int(mask[row].sum())
        squares.extend((dropped[row, :length] ** 2).ravel())
        differences.extend(((raw[row, 1:length] - raw[row, : length - 1]) ** 2).ravel() if length > 1 else [])
    return float(np.mean(squares)), float(np.mean(differences))


def test_ar_and_tar_equal_numpy_and_skip_padding() -> None:
    from ptmkit_ulmfit.backbone import ActivationRegularization

    rng = np.random.default_rng(0)
    dropped = rng.normal(size=(4, 6, 3)).astype(np.float32)
    raw = rng.normal(size=(4, 6, 3)).astype(np.float32)
    mask = _mask()
    dropped[mask == 0] = 50.0  # padding: would dominate both means if it entered them
    raw[mask == 0] = -50.0
    layer = ActivationRegularization(alpha=2.0, beta=0.5)
    out = layer(dropped, raw, mask, training=True)
    assert np.array_equal(np.asarray(out), dropped)
    ar, tar = (float(loss) for loss in layer.losses)
    expected_ar, expected_tar = numpy_ar_tar(dropped, raw, mask)
    assert ar == pytest.approx(2.0 * expected_ar, rel=1e-6) and tar == pytest.approx(0.5 * expected_tar, rel=1e-6)
    layer(dropped, raw, mask, training=False)
    assert layer.losses == []  # nothing at inference
    only_tar = ActivationRegularization(alpha=0.0, beta=1.0)
    only_tar(dropped, raw, mask, training=True)
    assert [float(loss) for loss in only_tar.losses] == [pytest.approx(expected_tar, rel=1e-6)]


def _clm_model(registry: Any, overrides: list[str]) -> tuple[Any, Any, Any]:
    """``(backbone, training model, clm)``: the core's causal-LM objective on a tiny ULMFiT
    backbone without dropout (a training forward pass equals the inference one), compiled as the
    core's pre-training compiles it (its losses, plain SGD)."""
    import keras

    from ptmkit.api import resolve_config

    config = resolve_config(registry, "ulmfit", None, [
        "model.vocabulary_size=30", "model.embedding_dim=5", "model.hidden_dim=7", "model.num_layers=2", "model.embedding_dropout=0",
        "model.input_dropout=0", "model.weight_dropout=0", "model.hidden_dropout=0", "model.output_dropout=0", *overrides,
    ])
    family = registry.family("ulmfit")
    backbone = family.build_backbone(config.model)
    rng = np.random.default_rng(1)  # weights of scale 1: states far from 0, AR and TAR far from 0
    backbone.set_weights([rng.normal(size=v.shape).astype(np.float32) for v in backbone.get_weights()])
    clm = registry.objective("clm")
    inputs = {spec.name: keras.Input(shape=(None,), dtype="int32", name=spec.name) for spec in family.inputs}
    extra, outputs, losses, _ = clm.build(backbone, inputs, config.objectives["clm"])
    model = keras.Model({**inputs, **extra}, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=losses)
    return backbone, model, (clm, config)


@pytest.mark.usefixtures("in_tree_plugins")
def test_training_loss_adds_ar_and_tar_and_heldout_loss_does_not() -> None:
    from ptmkit.api import get_registry

    registry = get_registry()
    backbone, model, (clm, config) = _clm_model(registry, ["model.ar_alpha=2.0", "model.tar_beta=1.0"])
    rng = np.random.default_rng(3)
    mask = _mask()[:3]  # every row with a target
    ids = (rng.integers(4, 30, mask.shape) * mask).astype(np.int32)
    x = {"token_ids": ids, "padding_mask": mask}
    _, y, w = clm.prepare(x, rng, config.objectives["clm"], None, 30)
    w = {"clm": w["clm"] / w["clm"].mean()}  # the core's relative sample weights (mean 1 per step)
    # references from an inference pass: the cross-entropy over the real targets, AR and TAR
    sequence = np.asarray(backbone(x, training=False)["sequence_output"], np.float64)
    logits = np.asarray(backbone.token_embedding(sequence.astype(np.float32), reverse=True), np.float64)
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(log_probs, y["clm"][..., None], -1)[..., 0]
    cross_entropy = float((nll * w["clm"]).sum() / w["clm"].sum())
    ar, tar = numpy_ar_tar(sequence, sequence, mask)  # no output dropout: AR's and TAR's states are the same

    heldout = model.test_on_batch(x, y, sample_weight=w, return_dict=True)["loss"]
    assert heldout == pytest.approx(cross_entropy, rel=1e-5)  # evaluation: no AR/TAR
    trained = model.train_on_batch(x, y, sample_weight=w, return_dict=True)["loss"]
    assert trained == pytest.approx(cross_entropy + 2.0 * ar + 1.0 * tar, rel=1e-5)
    assert 2.0 * ar + tar > 0.02 * cross_entropy  # far beyond the tolerance: a missing term fails the check

    _, plain, _ = _clm_model(registry, ["model.ar_alpha=0", "model.tar_beta=0"])
    plain.set_weights(model.get_weights())
    assert plain.train_on_batch(x, y, sample_weight=w, return_dict=True)["loss"] == plain.test_on_batch(x, y, sample_weight=w, return_dict=True)["loss"]


@pytest.mark.usefixtures("in_tree_plugins")
def test_coefficients_are_validated_and_recorded(capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit.api import ConfigError, get_registry, resolve_config

    registry = get_registry()
    model = resolve_config(registry, "ulmfit").model
    assert (model.ar_alpha, model.tar_beta) == (2.0, 1.0)  # fastai's language_model_learner / text_classifier_learner
    backbone = registry.family("ulmfit").build_backbone(resolve_config(registry, "ulmfit", None, ["model.vocabulary_size=20", "model.tar_beta=0.5"]).model)
    assert {k: backbone.get_config()[k] for k in ("ar_alpha", "tar_beta")} == {"ar_alpha": 2.0, "tar_beta": 0.5}
    with pytest.raises(ConfigError, match=r"'model\.ar_alpha' must be >= 0"):
        resolve_config(registry, "ulmfit", None, ["model.ar_alpha=-1"])


@pytest.mark.usefixtures("in_tree_plugins")
def test_ar_reads_the_dropped_output_and_tar_the_raw_one() -> None:
    """With output dropout only: AR is over the (dropped) ``sequence_output`` of the training
    pass, TAR over the last layer's raw states (the inference pass's ``sequence_output``)."""
    from ptmkit.api import get_registry

    backbone, _, _ = _clm_model(get_registry(), ["model.output_dropout=0.5"])
    mask = _mask()
    x = {"token_ids": (np.arange(24).reshape(4, 6) % 25 + 4).astype(np.int32) * mask, "padding_mask": mask}
    raw = np.asarray(backbone(x, training=False)["sequence_output"], np.float64)
    dropped = np.asarray(backbone(x, training=True)["sequence_output"], np.float64)
    assert (dropped[mask == 1] == 0).mean() > 0.2  # the locked dropout did drop
    ar, tar = (float(loss) for loss in backbone.losses)
    assert ar == pytest.approx(2.0 * numpy_ar_tar(dropped, raw, mask)[0], rel=1e-5)
    assert tar == pytest.approx(1.0 * numpy_ar_tar(dropped, raw, mask)[1], rel=1e-5)
