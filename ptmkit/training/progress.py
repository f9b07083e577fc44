"""A progress bar for ``fit``: step, loss and metrics, tokens per second, time left.

On a terminal it is a live rich progress bar; elsewhere (CI, a log file) one line every
``log_every`` steps, with the seconds spent and the estimated seconds left.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ptmkit.console import default_console


def format_logs(logs: dict[str, Any] | None, keys: tuple[str, ...] | None = None) -> str:
    """``loss 2.31  mlm_accuracy 0.114`` from Keras logs."""
    if not logs:
        return ""
    items = [(k, v) for k, v in logs.items() if keys is None or k in keys]
    return "  ".join(f"{k} {float(v):.4g}" for k, v in items)


class ProgressCallback(keras.callbacks.Callback):
    """Show training progress.

    Args:
        description: what is being trained (``"pre-training"``).
        start_step: steps already done (a resumed run).
        total_steps: steps in the whole run.
        tokens_per_step: tokens processed per step, for the tokens/s column (0: not shown).
        console: where to draw (default: stderr).
        log_every: lines every N steps when not on a terminal.
        reset_metrics: reset the model's metrics every ``log_every`` steps, so that the figures
            shown are means over the last window (for runs of one long epoch).
        step_log: a JSON-lines file (the run's ``logs/steps.jsonl``) that gets, about 100 times per
            run and at the last step, ``{"step", "seconds", "tokens_per_second", "learning_rate",
            **logs}``: what ``ptmkit report`` draws. Appended to, so a resumed run continues it
            (the report keeps the last line of each step).
    """

    def __init__(
        self,
        description: str,
        start_step: int,
        total_steps: int,
        tokens_per_step: int = 0,
        console: Console | None = None,
        log_every: int = 0,
        reset_metrics: bool = False,
        step_log: Path | None = None,
    ) -> None:
        super().__init__()
        self.description = description
        self.start_step = start_step
        self.total_steps = total_steps
        self.tokens_per_step = tokens_per_step
        self.console = console or default_console()
        self.log_every = log_every or max(1, total_steps // 10)
        self.reset_metrics = reset_metrics
        self.step_log = step_log
        self.record_every = max(1, total_steps // 100)
        self.progress: Progress | None = None
        self.task: Any = None
        self.step = start_step
        self.epoch_steps = 0
        self.started = 0.0
        self.tokens_per_second = 0.0
        self.first_step_done = 0.0

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.started = time.perf_counter()
        self.step = self.start_step
        if self.console.is_terminal:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[metrics]}"),
                console=self.console,
            )
            self.progress.start()
            self.task = self.progress.add_task(self.description, total=self.total_steps, completed=self.start_step, metrics="")
        else:
            self.console.print(f"{self.description}: steps {self.start_step + 1}..{self.total_steps}")

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1
        now = time.perf_counter()
        elapsed = now - self.started
        done = self.step - self.start_step
        if done == 1:
            self.first_step_done = now  # the first step pays for tracing: leave it out of tokens/s
        elif self.tokens_per_step:
            self.tokens_per_second = (done - 1) * self.tokens_per_step / (now - self.first_step_done)
        metrics = format_logs(logs)
        if self.tokens_per_second:
            metrics += f"  {self.tokens_per_second / 1000:.1f}K tok/s"
        if self.progress is not None:
            self.progress.update(self.task, completed=self.step, metrics=metrics)
        elif self.step % self.log_every == 0 or self.step == self.total_steps:
            # the first step pays for tracing: the pace is that of the steps after it
            pace = (now - self.first_step_done) / (done - 1) if done > 1 else elapsed
            left = pace * (self.total_steps - self.step)
            self.console.print(f"{self.description} step {self.step}/{self.total_steps}  {metrics}  ({elapsed:.0f}s, about {left:.0f}s left)")
        if self.step_log is not None and (self.step % self.record_every == 0 or self.step == self.total_steps):
            self._record(elapsed, logs)
        if self.reset_metrics and self.step % self.log_every == 0:
            # Keras averages metrics since the start of the epoch (here: of the run); a window
            # mean shows where training is now.
            self.model.reset_metrics()

    def _record(self, elapsed: float, logs: dict[str, Any] | None) -> None:
        """Append this step's line to :attr:`step_log`."""
        assert self.step_log is not None
        record: dict[str, Any] = {"step": self.step, "seconds": round(elapsed, 3)}
        if self.tokens_per_second:
            record["tokens_per_second"] = round(self.tokens_per_second, 1)
        try:
            record["learning_rate"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        except (AttributeError, TypeError, ValueError):  # no optimizer (a model compiled without one)
            pass
        record |= {k: float(v) for k, v in (logs or {}).items() if np.ndim(v) == 0}
        append_json_line(self.step_log, record)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        validation = format_logs({k: v for k, v in (logs or {}).items() if k.startswith("val_")})
        if validation:
            self.console.print(f"{self.description} epoch {epoch + 1}: {validation}")

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self.progress is not None:
            self.progress.stop()


class DevAccuracyCallback(keras.callbacks.Callback):
    """Print dev accuracy at the end of each epoch of a ``fit`` over global steps (one Keras
    epoch of ``start_step .. total`` steps, as a resumable run trains).

    Args:
        x_dev: the dev inputs, each ``(examples, sequence_length)`` int32.
        y_dev: ``(examples,)`` int label ids.
        start_step: the global step the ``fit`` starts from.
        steps_per_epoch: steps in one pass over the training set.
        console: where the lines go.
        dev_log: a JSON-lines file (the run's ``logs/dev.jsonl``) that gets ``{"epoch", "step",
            "dev_accuracy"}`` per epoch, or None.
    """

    def __init__(
        self, x_dev: dict[str, np.ndarray], y_dev: np.ndarray, start_step: int, steps_per_epoch: int, console: Console, dev_log: Path | None = None
    ) -> None:
        super().__init__()
        self.x_dev, self.y_dev, self.start_step, self.steps_per_epoch, self.console = x_dev, y_dev, start_step, steps_per_epoch, console
        self.dev_log = dev_log

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        step = self.start_step + batch + 1
        if step % self.steps_per_epoch == 0:
            predictions = np.argmax(self.model.predict(self.x_dev, batch_size=128, verbose=0), axis=-1)
            accuracy = float(np.mean(predictions == self.y_dev))
            self.console.print(f"fine-tuning epoch {step // self.steps_per_epoch}: dev accuracy {accuracy:.4f}")
            if self.dev_log is not None:
                append_json_line(self.dev_log, {"epoch": step // self.steps_per_epoch, "step": step, "dev_accuracy": accuracy})


def append_json_line(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line to ``path`` (created with its directory), flushed at once:
    an interrupted run loses no line it wrote; a line cut by a crash is skipped by its readers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
