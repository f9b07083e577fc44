"""``benchmarks/seq2seq_reference.py --quick`` end to end on one seed a side (10 steps of a tiny
model): both sides train, translate and are scored, each run's row is kept, a second invocation
reuses the kept rows without training, a ``--set`` variant's ptmkit row sits beside the defaults'
with its own label and mean, and rows of other settings are refused. No BLEU is asserted
(10 steps); the full comparison is the script's job, its figures in benchmarks/results/."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = [sys.executable, str(ROOT / "benchmarks" / "seq2seq_reference.py"), "--quick", "--steps", "10", "--test-sentences", "5", "--seeds", "1"]


def test_seq2seq_reference_quick_keeps_its_rows(tmp_path: Path) -> None:
    import importlib.util

    for module in ("torch", "transformers", "accelerate"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the test extra installs {module}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    page = tmp_path / "page.md"
    done = subprocess.run([*SCRIPT, "--work", str(tmp_path / "work"), "--out", str(page)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {side: json.loads((tmp_path / "work" / "rows" / f"{side}-1.json").read_text()) for side in ("ptmkit", "transformers")}
    for side, row in rows.items():
        assert row["side"] == side and 0.0 <= row["bleu"] <= 100.0 and row["sentences"] == 5 and row["seconds"] > 0
        assert side == "transformers" or row["resumed_from_step"] == 0
        assert row["settings"] == {"steps": 10, "test_sentences": 5, "quick": True} and row["ran"]["commit"]
    assert (tmp_path / "work" / "tokenizer.json").exists() is False  # the reference read the ptmkit run's tokenizer
    text = page.read_text()
    assert "| ptmkit | 1 |" in text and "| transformers | 1 |" in text and "goal ptmkit >= transformers - 1" in text

    again = subprocess.run([*SCRIPT, "--work", str(tmp_path / "work")], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    for side in ("ptmkit", "transformers"):  # reused, not rerun: a rerun would write another date, load or seconds
        assert json.loads((tmp_path / "work" / "rows" / f"{side}-1.json").read_text()) == rows[side]
    assert "Seq2SeqTrainer" not in again.stderr and "train_runtime" not in again.stdout
    variant = subprocess.run([*SCRIPT, "--work", str(tmp_path / "work"), "--ptmkit-only", "--set", "clip_norm=0.5"], env=env, capture_output=True, text=True, timeout=600)
    assert variant.returncode == 0, variant.stderr[-3000:]
    row = json.loads((tmp_path / "work" / "rows" / "ptmkit-clip_norm_0.5-1.json").read_text())
    assert row["model_sets"] == ["clip_norm=0.5"] and row["side"] == "ptmkit" and row["sentences"] == 5
    assert "clip_norm = 0.5" in (tmp_path / "work" / "ptmkit-clip_norm_0.5-1" / "config.toml").read_text()
    assert json.loads((tmp_path / "work" / "rows" / "ptmkit-1.json").read_text()) == rows["ptmkit"]  # the defaults' row untouched
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import seq2seq_reference
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    both = seq2seq_reference.page([rows["ptmkit"], row, rows["transformers"]], [], argparse.Namespace(steps=10, test_sentences=5, quick=True))
    assert "| ptmkit (clip_norm=0.5) | 1 |" in both and f"ptmkit (clip_norm=0.5) {row['bleu']:.2f}" in both
    assert re.search(r"goal ptmkit >= transformers - 1: ptmkit (not )?met; ptmkit \(clip_norm=0.5\) (not )?met\.", both), both
    noted = seq2seq_reference.page([{**rows["ptmkit"], "note": "trained before X"}, rows["transformers"]], [], argparse.Namespace(steps=10, test_sentences=5, quick=True))
    assert noted.endswith("- ptmkit, seed 1: trained before X") and "Notes on rows" not in both  # a row file's note reaches the page
    paged = subprocess.run([*SCRIPT, "--work", str(tmp_path / "work"), "--kept-variant", "clip_norm=0.5", "--out", str(page)], env=env, capture_output=True, text=True, timeout=300)
    assert paged.returncode == 0, paged.stderr[-3000:]
    table = lambda text: [line for line in text.splitlines() if line.startswith(("|", "Mean BLEU"))]  # noqa: E731
    assert table(page.read_text()) == table(both)  # the defaults' row, the variant's kept row, the reference's: as page() drew them
    missing = subprocess.run([*SCRIPT, "--work", str(tmp_path / "work"), "--kept-variant", "init_std=0"], env=env, capture_output=True, text=True, timeout=300)
    assert missing.returncode != 0 and "ptmkit-init_std_0-1.json" in missing.stderr and "--kept-variant init_std=0" in missing.stderr and "--ptmkit-only --set init_std=0" in missing.stderr
    other = subprocess.run([*SCRIPT[:-4], "--test-sentences", "6", "--seeds", "1", "--work", str(tmp_path / "work")], env=env, capture_output=True, text=True, timeout=300)
    assert other.returncode != 0 and "runs made with" in other.stderr and "give another --work" in other.stderr


def test_a_resumed_run_keeps_its_checkpoint_interval_and_says_which_steps_it_timed(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import seq2seq_reference
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    full, quick = argparse.Namespace(quick=False), argparse.Namespace(quick=True)
    assert (seq2seq_reference.checkpoint_every(tmp_path, full), seq2seq_reference.checkpoint_every(tmp_path, quick)) == (100, 500)
    (tmp_path / "config.toml").write_text('family = "transformer"\n\n[model]\ncheckpoint_every = 500\n', encoding="utf-8")
    assert seq2seq_reference.checkpoint_every(tmp_path, full) == 500  # --resume refuses flags that differ from the stored config
    assert seq2seq_reference.train_seconds({"seconds": 1234.5, "resumed_from_step": 1500, "settings": {"steps": 2000}}) == "1234.5 (steps 1500-2000)"
    assert seq2seq_reference.train_seconds({"seconds": 62.9, "settings": {"steps": 2000}}) == "62.9"
