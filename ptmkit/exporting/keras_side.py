"""Stages 1 and 2 of ``ptmkit export``, the only ones that need Keras: convert the run's model to
ONNX (:mod:`~ptmkit.exporting.convert`) and check the graph against it
(:mod:`~ptmkit.exporting.parity`), by default in a child process.

TensorFlow, Keras and keras-hub take about 0.8 GB once imported, and a process never hands that
back. In a child process that exits once ``model.onnx`` is written, the export's own process (which
builds and gates the int8, optimised and fp16 variants with ONNX Runtime) never imports them: the
export's peak is the larger of the two processes' peaks, not their sum
(``benchmarks/export_memory.py``). A process that has already imported TensorFlow (a notebook that
trained the model, the test suite) converts in-process instead: a child would hold a second copy
and cost another 5 s of imports. optimum exports in one process for the same reason it needs no
child: PyTorch's exporter runs where the model already lives.

The child runs :func:`main` with ``RUN_DIR MODEL.onnx RESULT.json [--merge-lora]``; its
result (the parity differences, or a ptmkit error's class and message) is written atomically to
``RESULT.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from ptmkit import errors
from ptmkit.exporting.convert import collections_skip_live_objects, convert_run, release_keras
from ptmkit.exporting.gate import open_session
from ptmkit.exporting.parity import check_parity, parity_shapes
from ptmkit.exporting.source import ExportSource, load_model, read_run


def convert_and_check(source: ExportSource, path: Path, console: Console, isolate: bool | None = None) -> dict[str, float]:
    """Convert the run's Keras model to ONNX at ``path`` and check it against Keras.

    Args:
        source: the run (:func:`ptmkit.exporting.source.read_run`).
        path: where ``model.onnx`` (fp32) is written.
        console: where the conversion's status line goes (in-process only; a child prints to the
            terminal this process was started from).
        isolate: run in a child process; None (default): when this process has not imported
            TensorFlow.

    Returns:
        ``{"BATCHxLENGTH": max abs difference}`` at the parity shapes
        (:func:`ptmkit.exporting.parity.check_parity`).

    Raises:
        ExportError: the conversion failed, or the child process died (its exit status or signal
            in the message; its traceback is printed above).
        RunDirError, ConfigError, PluginError: as :func:`~ptmkit.exporting.source.read_run`,
            re-raised from the child with the same message.
    """
    if isolate is None:
        isolate = "tensorflow" not in sys.modules
    if not isolate:
        from ptmkit.plugins import get_registry

        return _convert_and_check_here(source, load_model(source, get_registry()), path, console)
    return _in_child(source.run.path, path, source.merge_lora)


@collections_skip_live_objects()  # in the conversion's child process too
def _convert_and_check_here(source: ExportSource, model: Any, path: Path, console: Console) -> dict[str, float]:
    convert_run(model, path, source, console)
    session = open_session(path)
    shapes = parity_shapes(source.sequence_length, source.limits.max_sequence_length)
    try:
        return check_parity(model, session, shapes, source.vocabulary_size, source.padding_id, source.outputs or source.output, source.family.inputs, source.characters)
    finally:
        del model, session  # the Keras side is done: free its weights and traced graphs before the variants
        release_keras()


def _child_environment() -> dict[str, str]:
    """The environment with this process's import path: a directory a test or a notebook put on
    ``sys.path`` (plugins registered through its entry points) is on the child's too."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    extra = [p for p in sys.path if p and Path(p).is_dir() and not any(p.startswith(prefix) for prefix in prefixes)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*extra, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    return env


_CHILD = "import sys; from ptmkit.exporting.keras_side import main; sys.exit(main(sys.argv[1:]))"


def _in_child(run_dir: Path, path: Path, merge_lora: bool = False) -> dict[str, float]:
    result = path.with_name(path.name + ".result.json")
    command = [sys.executable, "-c", _CHILD, str(run_dir), str(path), str(result), *(["--merge-lora"] if merge_lora else [])]
    completed = subprocess.run(command, env=_child_environment(), check=False)
    try:
        answer = json.loads(result.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        answer = None
    finally:
        result.unlink(missing_ok=True)
    if completed.returncode != 0 or answer is None:
        how = f"was killed by signal {-completed.returncode}" if completed.returncode < 0 else f"exited with status {completed.returncode}"
        hint = " (out of memory?)" if completed.returncode == -9 else "; its error is printed above"
        raise errors.ExportError(f"ONNX conversion of {run_dir}: the conversion process {how}{hint}")
    if "error" in answer:
        kind = getattr(errors, answer["error"], errors.ExportError)
        raise (kind if isinstance(kind, type) and issubclass(kind, errors.PtmkitError) else errors.ExportError)(answer["message"])
    return {shape: float(diff) for shape, diff in answer["parity"].items()}


def main(argv: list[str]) -> int:
    """The child: ``RUN_DIR MODEL.onnx RESULT.json [--merge-lora]``; exit status 0 whenever RESULT.json was written."""
    from ptmkit.console import default_console
    from ptmkit.io import atomic_write_json
    from ptmkit.plugins import get_registry
    from ptmkit.training.setup import quiet_tensorflow

    quiet_tensorflow()  # the child's TensorFlow start-up chatter would land in the user's terminal
    run_dir, path, result = argv[:3]
    try:
        registry = get_registry()
        source = read_run(run_dir, registry, None, 0, [], merge_lora="--merge-lora" in argv[3:])
        answer: dict[str, Any] = {"parity": _convert_and_check_here(source, load_model(source, registry), Path(path), default_console())}
    except errors.PtmkitError as exc:
        answer = {"error": type(exc).__name__, "message": str(exc)}
    atomic_write_json(Path(result), answer)
    return 0
