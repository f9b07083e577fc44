"""Distillation from soft targets (Hinton et al. 2015) in ``ptmkit finetune --teacher``: the loss
against a NumPy computation of its formula, and a student fine-tuned from a tiny teacher."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "classify"
TRAIN, DEV = DATA / "polarity-200-train.txt", DATA / "polarity-200-dev.txt"


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


@pytest.mark.parametrize(("temperature", "alpha"), [(2.0, 0.5), (1.0, 1.0), (4.0, 0.0)])
def test_the_loss_is_alpha_t2_kl_plus_hard_cross_entropy(temperature: float, alpha: float) -> None:
    import keras

    from ptmkit.training.distillation import DistillationLoss, distillation_targets

    rng = np.random.default_rng(0)
    student, teacher = rng.normal(size=(6, 4)) * 3, rng.normal(size=(6, 4)) * 3
    labels = rng.integers(0, 4, 6)
    log_t, log_s = _log_softmax(teacher / temperature), _log_softmax(student / temperature)
    kl = (np.exp(log_t) * (log_t - log_s)).sum(-1) * temperature**2
    hard = -_log_softmax(student)[np.arange(6), labels]
    expected = (alpha * kl + (1 - alpha) * hard).mean()
    loss = DistillationLoss(temperature, alpha)(distillation_targets(labels, teacher), student.astype(np.float32))
    assert float(keras.ops.convert_to_numpy(loss)) == pytest.approx(expected, rel=1e-5)
    assert DistillationLoss.from_config(DistillationLoss(temperature, alpha).get_config()).temperature == temperature


@pytest.mark.parametrize("alpha", [0.5, 1.0, 0.0])
def test_the_mse_loss_is_tangs_squared_logit_distance_plus_hard_cross_entropy(alpha: float) -> None:
    """``finetune.distill_loss = "mse"``: Tang et al. 2019's eq. 2, ``||z_s - z_t||^2`` on raw
    logits (no temperature), mixed with the gold labels' cross-entropy by alpha."""
    import keras

    from ptmkit.training.distillation import DistillationLoss, distillation_targets

    student = np.array([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [3.0, 1.0, -1.0], [-0.5, 2.5, 1.5]])
    teacher = np.array([[2.0, -1.0, 0.0], [1.0, -1.0, 0.5], [3.0, 1.0, -1.0], [0.5, 0.5, 4.0]])
    labels = np.array([0, 2, 0, 1])
    squared = ((student - teacher) ** 2).sum(-1)  # [2.25, 2.25, 0, 11.25]
    hard = -_log_softmax(student)[np.arange(4), labels]
    expected = (alpha * squared + (1 - alpha) * hard).mean()
    loss = DistillationLoss(7.0, alpha, soft="mse")(distillation_targets(labels, teacher), student.astype(np.float32))  # T has no effect
    assert float(keras.ops.convert_to_numpy(loss)) == pytest.approx(expected, rel=1e-6)
    if alpha == 1.0:
        assert float(keras.ops.convert_to_numpy(loss)) == pytest.approx(15.75 / 4, rel=1e-6)


def test_distill_loss_rejects_an_unknown_name() -> None:
    from ptmkit.config import FinetuneConfig
    from ptmkit.errors import ConfigError

    with pytest.raises(ConfigError, match="finetune.distill_loss"):
        FinetuneConfig(distill_loss="l1").validate()


@pytest.fixture(scope="module")
def teacher(tiny_pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ptmkit.training.finetune import finetune

    out = tmp_path_factory.mktemp("teacher") / "teacher"
    finetune(tiny_pretrained, TRAIN, DEV, out, overrides=["finetune.epochs=2", "finetune.sequence_length=32", "finetune.learning_rate=1e-3"])
    return out


def test_a_student_learns_from_the_teachers_soft_targets(tiny_pretrained: Path, teacher: Path, tmp_path: Path) -> None:
    from ptmkit.cli import main

    out = tmp_path / "student"
    code = main(["finetune", str(tiny_pretrained), "--train", str(TRAIN), "--dev", str(DEV), "--out", str(out), "--teacher", str(teacher),
                 "--set", "finetune.epochs=2", "--set", "finetune.sequence_length=32", "--set", "finetune.learning_rate=1e-3",
                 "--set", "finetune.distill_alpha=0.9"])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    # the teacher's dev accuracy, recomputed from its logits, is the one its own run measured
    assert metrics["teacher_dev_accuracy"] == json.loads((teacher / "metrics.json").read_text())["dev_accuracy"]
    assert 0.0 <= metrics["dev_agreement_with_teacher"] <= 1.0 and metrics["dev_examples"] == 40
    assert json.loads((out / "inputs.json").read_text())["teacher"] == str(teacher.resolve())
    config = (out / "config.toml").read_text()
    assert "distill_alpha = 0.9" in config and "distill_temperature = 2.0" in config


def test_a_teacher_with_other_labels_or_no_head_is_refused_in_one_line(tiny_pretrained: Path, teacher: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit.cli import main

    three = tmp_path / "three.txt"
    three.write_text("__label__pos good film\n__label__neg bad film\n__label__meh a film\n", encoding="utf-8")
    args = ["finetune", str(tiny_pretrained), "--dev", str(DEV), "--out", str(tmp_path / "s")]
    assert main([*args, "--train", str(three), "--teacher", str(teacher)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --teacher {teacher}: its labels differ from {three.resolve()}'s ('meh' in one and not the other)"
    assert main([*args, "--train", str(TRAIN), "--teacher", str(tiny_pretrained)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --teacher {tiny_pretrained}: is a pretrain run; the teacher is a fine-tuned run (one with a head)"
    assert main([*args, "--train", str(TRAIN), "--teacher", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip() == f"error: --teacher {tmp_path / 'nowhere'}: no such run directory; the teacher is a fine-tuned run (ptmkit finetune ... --out DIR)"
    assert not (tmp_path / "s").exists()
