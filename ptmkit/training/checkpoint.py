"""Checkpoint and resume: the full training state every N steps.

A checkpoint holds every model variable (weights, and the dropout seed-generator states) and
every optimizer variable (moments and the iteration counter). Together with batches that are a
pure function of ``(seed, step)`` (:mod:`ptmkit.data.pretraining`), a run resumed from step k
continues exactly as the uninterrupted run did, even after ``SIGKILL``.

Files: ``checkpoints/ckpt-0000100.npz`` and ``checkpoints/latest.json`` (``{"step": 100, "file":
...}``), each written atomically; the two newest checkpoints are kept.
"""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np

from ptmkit.errors import Interrupted, RunDirError
from ptmkit.io import atomic_path, atomic_write_json

KEEP = 2


def save_state(model: Any, directory: Path, step: int) -> Path:
    """Write model and optimizer variables at ``step``; update ``latest.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {f"model/{i}": np.asarray(v.numpy()) for i, v in enumerate(model.variables)}
    arrays.update({f"optimizer/{i}": np.asarray(v.numpy()) for i, v in enumerate(model.optimizer.variables)})
    file = directory / f"ckpt-{step:07d}.npz"
    with atomic_path(file) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds too narrowly
    atomic_write_json(directory / "latest.json", {"step": step, "file": file.name})
    for old in sorted(directory.glob("ckpt-*.npz"))[:-KEEP]:
        old.unlink()
    return file


def latest_step(directory: Path) -> int:
    """The step of the newest checkpoint, 0 when there is none."""
    latest = directory / "latest.json"
    if not latest.exists():
        return 0
    return int(json.loads(latest.read_text())["step"])


def restore_state(model: Any, directory: Path) -> int:
    """Load the newest checkpoint into ``model`` (compiled) and its optimizer; return its step.

    Raises:
        RunDirError: the checkpoint is missing, unreadable, or does not fit the model.
    """
    latest = directory / "latest.json"
    if not latest.exists():
        return 0
    try:
        info = json.loads(latest.read_text())
        file = directory / info["file"]
        data = np.load(file)
    except Exception as exc:
        raise RunDirError(f"{latest}: cannot read the checkpoint it names ({exc})") from None
    model.optimizer.build(model.trainable_variables)
    for prefix, variables in (("model", model.variables), ("optimizer", model.optimizer.variables)):
        count = sum(1 for key in data.files if key.startswith(prefix + "/"))
        if count != len(variables):
            raise RunDirError(f"{file}: holds {count} {prefix} variables, the model has {len(variables)}; was the config changed?")
        for i, variable in enumerate(variables):
            value = data[f"{prefix}/{i}"]
            if tuple(value.shape) != tuple(variable.shape):
                raise RunDirError(f"{file}: {prefix} variable {variable.path} has shape {value.shape}, expected {tuple(variable.shape)}")
            variable.assign(value)
    return int(info["step"])


class CheckpointCallback(keras.callbacks.Callback):
    """Save the training state every ``every`` steps, at each epoch's end and at the last step.

    Args:
        directory: where checkpoints go.
        start_step: the global step the current ``fit`` starts from.
        total_steps: the last step of the run.
        every: steps between checkpoints.
        epoch_steps: steps per epoch (0: the run is not in epochs).
    """

    def __init__(self, directory: Path, start_step: int, total_steps: int, every: int, epoch_steps: int = 0) -> None:
        super().__init__()
        self.directory, self.start_step, self.total_steps, self.every = directory, start_step, total_steps, every
        self.epoch_steps = epoch_steps

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        step = self.start_step + batch + 1
        if step % self.every == 0 or step == self.total_steps or (self.epoch_steps and step % self.epoch_steps == 0):
            save_state(self.model, self.directory, step)


@contextlib.contextmanager
def interrupt_note(directory: Path, total_steps: int, command: list[str]) -> Iterator[None]:
    """Turn a ``KeyboardInterrupt`` inside the block into :class:`~ptmkit.errors.Interrupted`,
    whose message names the step the newest checkpoint in ``directory`` holds and ``command``
    (the arguments that continue the run)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):
            raise
        step, line = latest_step(directory), shlex.join(command)
        if step:
            note = f"the checkpoint in {directory} holds step {step} of {total_steps}; `{line}` continues from there"
        else:
            note = f"no checkpoint was saved yet (steps done are lost); `{line}` starts the training again"
        raise Interrupted(f"interrupted: {note} (the same --config/--set flags may stay on the line)") from None
