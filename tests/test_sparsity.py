"""Gradual magnitude pruning in ``ptmkit finetune`` (Zhu & Gupta 2017): the schedule against their
eq. 1 worked by hand, the mask against NumPy, and a fine-tuned run whose kernels end at the
configured sparsity with the zeros where the smallest weights were."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tinyconfig import DATA


def test_the_schedule_is_zhu_and_gupta_cubic_held_between_pruning_steps() -> None:
    from ptmkit.training.sparsity import polynomial_sparsity

    # s_f = 0.5, t_0 = 10, n dt = 40, dt = 10: s = 0.5 (1 - (1 - k / 4)^3) at t = 10 + 10 k
    expected = {
        5: 0.0,
        10: 0.0,
        19: 0.0,
        20: 0.5 * (1 - 0.75**3),
        29: 0.5 * (1 - 0.75**3),
        30: 0.5 * (1 - 0.5**3),
        40: 0.5 * (1 - 0.25**3),
        50: 0.5,
        90: 0.5,
    }
    for step, value in expected.items():
        assert polynomial_sparsity(step, 0.5, 10, 50, 10) == pytest.approx(value, abs=1e-12), step


def test_the_mask_drops_the_smallest_magnitudes() -> None:
    from ptmkit.training.sparsity import magnitude_mask

    weights = np.array([[0.3, -0.1, 2.0], [-0.05, 1.0, -0.7]], np.float32)
    assert magnitude_mask(weights, 0.5).tolist() == [[0, 0, 1], [0, 1, 1]]  # |0.05|, |0.1|, |0.3| go
    assert magnitude_mask(weights, 0.0).sum() == 6 and magnitude_mask(weights, 0.9).sum() == 1


def test_a_fine_tuned_run_ends_at_the_configured_sparsity(tiny_pretrained: Path, tmp_path: Path) -> None:
    from ptmkit.training.finetune import finetune, load_classifier
    from ptmkit.training.sparsity import prunable_kernels

    out = tmp_path / "sparse"
    train, dev = DATA / "classify" / "polarity-200-train.txt", DATA / "classify" / "polarity-200-dev.txt"
    finetune(
        tiny_pretrained,
        train,
        dev,
        out,
        overrides=[
            "finetune.epochs=1",
            "finetune.sequence_length=32",
            "finetune.sparsity=0.6",
            "finetune.sparsity_end=0.5",
            "finetune.sparsity_every=2",
        ],
    )
    model, _, _, _ = load_classifier(out)
    kernels = prunable_kernels(model)
    assert len(kernels) >= 7  # q, k, v, output, two feed-forward, pooler, logits
    for kernel in kernels:
        values = kernel.numpy()
        assert int(np.sum(values == 0)) == int(0.6 * values.size), kernel.path
    embeddings = [v for v in model.weights if "embedding" in v.path]
    assert embeddings and all(np.sum(v.numpy() == 0) < 0.01 * np.prod(v.shape) for v in embeddings)


def test_bad_sparsity_keys_are_refused() -> None:
    from ptmkit.config import FinetuneConfig, build_dataclass
    from ptmkit.errors import ConfigError

    with pytest.raises(ConfigError, match="'finetune.sparsity' must be in"):
        build_dataclass(FinetuneConfig, {"sparsity": 1.0}, "finetune", "x.toml")
    with pytest.raises(ConfigError, match="must satisfy 0 <= begin < end <= 1"):
        build_dataclass(
            FinetuneConfig, {"sparsity": 0.5, "sparsity_begin": 0.8, "sparsity_end": 0.5}, "finetune", "x.toml"
        )
