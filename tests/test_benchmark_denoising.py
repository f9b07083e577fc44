"""``benchmarks/denoising.py --quick`` end to end on two rows (scratch, bart): the script cannot
rot, and each row holds finite scores. No BLEU or timing is asserted (a 30-step tiny model)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~2 min; the objectives themselves are tested in plugins/ptmkit_transformer/tests/test_denoising.py
def test_denoising_benchmark_quick(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "denoising.py"), "--quick", "--rows", "scratch,bart", "--work", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {name: json.loads((tmp_path / "rows" / f"{name}.json").read_text()) for name in ("scratch", "bart")}
    for row in rows.values():
        assert 0.0 <= row["test_bleu"] <= 100.0 and 0.0 <= row["test_chrf"] <= 100.0 and math.isfinite(row["dev_loss"])
        assert row["settings"]["quick"] is True and row["ran"]["commit"]
    assert math.isfinite(rows["bart"]["pretrain_last_loss"]) and rows["bart"]["pretrain"]["seconds"] > 0 and rows["bart"]["pretrain"]["resumed_from_step"] == 0
    assert rows["scratch"]["pretrain"] is None and rows["scratch"]["finetune"]["seconds"] > 0
    text = (tmp_path / "denoising.md").read_text()
    assert "| scratch |" in text and "| bart |" in text and f"| machine | {os.cpu_count()} CPU cores (" in text
    assert json.loads((tmp_path / "bart" / "translation" / "manifest.json").read_text())["init"] == str((tmp_path / "bart" / "pretrain").resolve())
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "denoising.py"), "--quick", "--rows", "bart", "--work", str(tmp_path)],
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "| bart |" in again.stdout  # the kept row, not a second run
    assert json.loads((tmp_path / "rows" / "bart.json").read_text()) == rows["bart"]
