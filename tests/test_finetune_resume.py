"""`ptmkit finetune --resume` after SIGKILL continues to the weights of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_resume import KILLER, weights
from tinyconfig import DATA

# 160 examples in batches of 16: 10 steps per epoch, 20 in all; checkpoints at steps 3, 6, 9, 10 ...
SETTINGS = ["finetune.epochs=2", "finetune.batch_size=16", "finetune.sequence_length=32", "finetune.checkpoint_every=3", "finetune.learning_rate=5e-4"]


def _args(run: Path, out: Path) -> list[str]:
    args = ["finetune", str(run), "--train", str(DATA / "classify" / "polarity-200-train.txt"), "--dev", str(DATA / "classify" / "polarity-200-dev.txt"), "--out", str(out)]
    for item in SETTINGS:
        args += ["--set", item]
    return args


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ptmkit.cli", *args], capture_output=True, text=True, timeout=300, env=os.environ)


def _started(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` with its standard error going to ``log`` (not a pipe, which could fill while
    the other process is waited for)."""
    with open(log, "wb") as stderr:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=os.environ)


def test_finetune_resume_after_sigkill_matches_uninterrupted_run(tiny_pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The interrupted run in a child process (killed after step 13), the uninterrupted one in this
    process meanwhile; then the same command with --resume, here too."""
    from ptmkit.testing import run_cli

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    process = _started([sys.executable, "-c", KILLER, "SIGKILL", "13", *_args(tiny_pretrained, killed)], tmp_path / "killed.stderr")
    try:
        assert run_cli(_args(tiny_pretrained, whole)) == 0
        stopped = process.wait(timeout=300)
    finally:
        process.kill()  # a no-op once it has ended
    assert not (whole / "checkpoints").exists()  # a finished run keeps model.weights.h5 only

    assert stopped == -signal.SIGKILL, (tmp_path / "killed.stderr").read_text(errors="replace")
    assert json.loads((killed / "checkpoints" / "latest.json").read_text())["step"] == 12  # the every-3 checkpoint after epoch 1's
    assert not (killed / "manifest.json").exists()

    capsys.readouterr()
    assert run_cli([*_args(tiny_pretrained, killed), "--set", "finetune.learning_rate=1e-4", "--resume"]) == 2
    assert "'finetune.learning_rate' = 0.0001" in capsys.readouterr().err
    assert run_cli([*_args(tiny_pretrained, killed), "--resume"]) == 0  # the same command, retyped with --resume
    assert "resuming from step 12 of 20" in capsys.readouterr().err

    expected, actual = weights(whole / "model.weights.h5"), weights(killed / "model.weights.h5")
    assert expected.keys() == actual.keys() and len(expected) > 10
    for name in expected:
        assert np.array_equal(expected[name], actual[name]), f"{name}: the resumed fine-tuning differs from the uninterrupted one"
    metrics = [json.loads((run / "metrics.json").read_text()) for run in (whole, killed)]
    assert metrics[0]["dev_accuracy"] == metrics[1]["dev_accuracy"]


def test_finetune_resume_needs_an_interrupted_run(tiny_pretrained: Path, tmp_path: Path) -> None:
    nothing = _cli(*_args(tiny_pretrained, tmp_path / "none"), "--resume")
    assert nothing.returncode == 2 and "nothing to resume" in nothing.stderr
    assert not (tmp_path / "none").exists()
