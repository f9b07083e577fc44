"""`--resume` after SIGKILL continues to the same result as an uninterrupted run with the same seed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from tinyconfig import TINY

# Runs the ptmkit command in argv[3:] and sends itself signal argv[1] at the end of step argv[2]
# (one step after a checkpoint, so that the resumed run must redo that step itself).
KILLER = """
import os, signal, sys
from ptmkit.training import progress
original = progress.ProgressCallback.on_train_batch_end
def on_train_batch_end(self, batch, logs=None):
    original(self, batch, logs)
    if self.step == int(sys.argv[2]):
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
progress.ProgressCallback.on_train_batch_end = on_train_batch_end
from ptmkit.cli import main
sys.exit(main(sys.argv[3:]))
"""


def weights(path: Path) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda name, item: arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
    return arrays


def _train_args(out: Path, corpus: Path) -> list[str]:
    args = ["train", "bert", "--corpus", str(corpus), "--out", str(out), "--objective", "mlm,nsp"]
    for item in TINY:
        args += ["--set", item]
    return args


@pytest.fixture(scope="module")
def interrupted(tiny_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int, str]]:
    """The two interrupted trainings, ``"SIGKILL"`` and ``"SIGINT"`` at the end of step 5, run side
    by side (each is mostly single-threaded: imports, tracing): {signal: (run directory, exit code,
    standard error)}. Each directory is resumed by one test only."""
    root = tmp_path_factory.mktemp("interrupted")
    running = {}
    try:
        for name in ("SIGKILL", "SIGINT"):
            with open(root / f"{name}.stderr", "wb") as stderr:
                argv = [sys.executable, "-c", KILLER, name, "5", *_train_args(root / name, tiny_corpus)]
                running[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=os.environ)
        codes = {name: process.wait(timeout=300) for name, process in running.items()}
    finally:
        for process in running.values():
            process.kill()  # a no-op once it has ended
    return {name: (root / name, code, (root / f"{name}.stderr").read_text(errors="replace")) for name, code in codes.items()}


def test_resume_after_sigkill_matches_uninterrupted_run(
    tiny_corpus: Path, tiny_pretrained: Path, interrupted: dict[str, tuple[Path, int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The killed child's run resumed in this process (:func:`ptmkit.testing.run_cli`)."""
    from ptmkit.testing import run_cli

    # The tokenizer is trained again: one corpus gives one vocabulary (tests/test_reproducibility.py).
    out, code, stderr = interrupted["SIGKILL"]
    assert code == -signal.SIGKILL, stderr
    assert json.loads((out / "checkpoints" / "latest.json").read_text())["step"] == 4
    assert not (out / "manifest.json").exists() and not (out / "backbone.weights.h5").exists()

    capsys.readouterr()
    assert run_cli(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(out), "--resume"]) == 0
    assert "resuming from step 4" in capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == 4 and metrics["steps"] == 8

    expected = weights(tiny_pretrained / "backbone.weights.h5")
    actual = weights(out / "backbone.weights.h5")
    assert expected.keys() == actual.keys() and len(expected) > 10
    worst = max(float(np.max(np.abs(expected[k] - actual[k]))) for k in expected)
    assert worst == 0.0, f"resumed run differs from the uninterrupted one by {worst}"
    reference = json.loads((tiny_pretrained / "metrics.json").read_text())
    assert metrics["heldout_mlm_loss"] == reference["heldout_mlm_loss"]


def test_ctrl_c_then_the_same_command_with_resume(
    tiny_corpus: Path, tiny_pretrained: Path, interrupted: dict[str, tuple[Path, int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C (in a child process) names the step the checkpoint holds; the command retyped with
    --resume (its --set flags included; in this process) continues to the uninterrupted run's
    weights; a flag that differs is refused, naming its key."""
    from ptmkit.testing import run_cli

    out, code, stderr = interrupted["SIGINT"]
    args = _train_args(out, tiny_corpus)
    assert code == 130, stderr
    assert f"the checkpoint in {out / 'checkpoints'} holds step 4 of 8" in stderr
    assert "--resume" in stderr.splitlines()[-1]

    capsys.readouterr()
    assert run_cli([*args, "--set", "train.max_steps=9", "--resume"]) == 2
    changed = capsys.readouterr().err
    assert "'train.max_steps' = 9, but the run in" in changed and "has 8" in changed
    assert run_cli([*args, "--resume"]) == 0
    assert "resuming from step 4" in capsys.readouterr().err
    expected, actual = weights(tiny_pretrained / "backbone.weights.h5"), weights(out / "backbone.weights.h5")
    assert all(np.array_equal(expected[k], actual[k]) for k in expected) and expected.keys() == actual.keys()


def test_resume_refuses_a_changed_config(tiny_corpus: Path, tmp_path: Path) -> None:
    from ptmkit.cli import main

    code = main(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(tmp_path / "none"), "--resume"])
    assert code == 2  # nothing to resume
    assert not (tmp_path / "none").exists()
