"""``benchmarks/hf_distillation.py``: its transformers side minimises the loss ptmkit's
``--teacher`` minimises (``DistillationLoss``), so the anchor row compares trainers, not losses."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
torch = pytest.importorskip("torch")


@pytest.mark.parametrize(("temperature", "alpha"), [(2.0, 0.5), (1.0, 0.9), (4.0, 0.0)])
def test_soft_target_loss_equals_ptmkits(temperature: float, alpha: float) -> None:
    from ptmkit.training.distillation import DistillationLoss, distillation_targets

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import hf_distillation
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    rng = np.random.default_rng(0)
    student, teacher = rng.normal(0, 3, (8, 5)).astype(np.float32), rng.normal(0, 3, (8, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 8)
    ours = DistillationLoss(temperature, alpha, reduction=None)(distillation_targets(labels, teacher), student)
    theirs = hf_distillation.soft_target_loss(torch.from_numpy(student), torch.from_numpy(teacher), torch.from_numpy(labels), temperature, alpha)
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-5, atol=1e-6)
    assert float(theirs.min()) > 0  # a loss that is not trivially zero
