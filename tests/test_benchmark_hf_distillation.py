"""``benchmarks/hf_distillation.py``: its transformers side minimises the loss ptmkit's
``--teacher`` minimises (``DistillationLoss``), so the anchor row compares trainers, not losses;
its ``--quick`` mode runs end to end."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from benchmark_quick import run_quick
from safetensors.numpy import load_file

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


def test_hf_distillation_quick(tmp_path: Path) -> None:
    """``--quick`` end to end (issue 21) on the tiny random BERT (2 layers, MiniLM's tokenizer): the
    teacher fine-tuned and exported, its block 1 distilled by ptmkit and by transformers' Trainer
    (in a fresh process); each row counts the model it trained. Accuracies of a random model mean
    nothing and no timing is asserted."""
    printed = run_quick("hf_distillation.py", "--work", str(tmp_path))
    assert re.search(r"^# Soft-target distillation, ptmkit against transformers' Trainer \(--quick: tiny BERT\)$", printed, re.MULTILINE), printed
    rows = re.findall(r"^\| (teacher \(ptmkit\)|ptmkit finetune --teacher --distill logits|transformers Trainer, the same loss) \| (-|42) \| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", printed, re.MULTILINE)
    assert [(row, seed) for row, seed, *_ in rows] == [("teacher (ptmkit)", "-"), ("ptmkit finetune --teacher --distill logits", "42"), ("transformers Trainer, the same loss", "42")], printed
    teacher, ptmkit, transformers = (int(parameters.replace(",", "")) for _, _, parameters, *_ in rows)
    checkpoint = sum(tensor.size for tensor in load_file(str(tmp_path / "tiny-bert" / "model.safetensors")).values())
    hidden, intermediate = 32, 64
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden * intermediate + intermediate + hidden + 4 * hidden
    assert teacher == checkpoint + 2 * hidden + 2 and teacher - ptmkit == layer  # the tiny BERT with a 2-label head; the student lost block 0
    assert ptmkit - transformers == hidden * hidden + hidden  # ptmkit's student keeps the pooler (unused by mean pooling), transformers' has none
    assert all(0.0 <= float(value) <= 1.0 for _, _, _, accuracy, agreement, _ in rows for value in (accuracy, agreement)) and rows[0][4] == "1.000"
    metrics = json.loads((tmp_path / "ptmkit-seed42" / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and f"{metrics['dev_agreement_with_teacher']:.3f}" == rows[1][4]
