"""``train.mixed_precision``: bf16 (Keras ``mixed_bfloat16``) pre-training on the CPU.

The run computes in bfloat16 and keeps float32 variables; its held-out masked-LM loss after 40
tiny steps lands next to the float32 run's (measured: 6.012 bf16 against 6.009 fp32 at seed 42,
5.894 against 5.885 at seed 7), and the process is back in float32 afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path

import keras
import numpy as np
from tinyconfig import TINY

from ptmkit.plugins import get_registry
from ptmkit.training.pretrain import build_pretraining_model, resolve_config
from ptmkit.training.setup import precision

STEPS = [*TINY, "train.max_steps=40", "train.checkpoint_every=40", "train.learning_rate=3e-3"]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bf16_loss  # noqa: E402


def test_bf16_pretraining_matches_float32_and_restores_the_policy(tmp_path: Path) -> None:
    """``benchmarks/bf16_loss.py --quick`` in this process: the tiny BERT's two runs (its
    configuration is :data:`STEPS`), and the report it writes."""
    effective = dict(item.split("=", 1) for item in STEPS)  # the last of a key wins, as in --set
    assert dict(item.split("=", 1) for item in bf16_loss.QUICK) == {k: v for k, v in effective.items() if k != "train.max_steps"}
    runs = bf16_loss.main(["--quick", "--work", str(tmp_path)])
    fp32, bf16 = runs["float32-seed42"], runs["bf16-seed42"]
    assert keras.mixed_precision.global_policy().name == "float32"
    assert "mixed_precision = \"mixed_bfloat16\"" in (tmp_path / "bf16-seed42" / "config.toml").read_text()
    assert fp32["heldout_mlm_loss"] < np.log(600) - 0.25  # both learned ...
    assert abs(bf16["heldout_mlm_loss"] - fp32["heldout_mlm_loss"]) < 0.05  # ... the same amount
    relative = (bf16["heldout_mlm_loss"] - fp32["heldout_mlm_loss"]) / fp32["heldout_mlm_loss"]
    assert f"| float32 | 42 | {fp32['heldout_mlm_loss']:.4f} |" in (tmp_path / "report.md").read_text()
    assert f"bf16 is {100 * relative:+.2f}% from float32" in (tmp_path / "report.md").read_text()


def test_bf16_computes_in_bfloat16_with_float32_variables_and_logits() -> None:
    registry = get_registry()
    config = resolve_config(registry, "bert", None, [*TINY, "train.mixed_precision=bf16"])
    with precision(config.train.mixed_precision):
        backbone, model, _ = build_pretraining_model(registry, config)
    assert keras.mixed_precision.global_policy().name == "float32"
    dense = [layer for layer in backbone._flatten_layers() if isinstance(layer, keras.layers.Dense)]
    assert dense and {layer.compute_dtype for layer in dense} == {"bfloat16"}
    assert {v.dtype for v in model.trainable_variables} == {"float32"}
    assert all(output.dtype == "float32" for output in model.outputs)
