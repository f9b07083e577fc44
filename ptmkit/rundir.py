"""The run directory: what training writes and fine-tuning and export read.

Layout::

    RUN_DIR/
      config.toml          the resolved run config (every default filled in)
      manifest.json        stage, family, plugin and versions, inputs/outputs, head, labels
      tokenizer.json       Hugging Face tokenizers file
      backbone.weights.h5  pre-training: the backbone's weights
      model.weights.h5     fine-tuning: backbone + head weights
      labels.json          fine-tuning: label names, index = class id
      pooling.json         sentence-embedding pooling (imported checkpoints; see ptmkit.embedding)
      metrics.json         measured numbers of the run
      checkpoints/         ckpt-STEP.npz + latest.json: model and optimizer state for --resume
      checkpoint/          state-EPOCH.npz + state.json: a self-training family's epoch
                           checkpoint (ptmkit.wordvectors.training.EpochCheckpoints)
      logs/                TensorBoard event files; steps.jsonl (step, seconds, tokens/s,
                           learning rate, loss and metrics, ~100 lines per run) and, fine-tuning,
                           dev.jsonl (dev accuracy per epoch): what ``ptmkit report`` draws
      tokens/              the tokenized corpus (pre-training)

Every file is written atomically (:mod:`ptmkit.io`), but the logs, which are appended to line by line. The manifest is written last: a directory
with a manifest is a finished run.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ptmkit.errors import RunDirError
from ptmkit.io import atomic_write_json

MANIFEST = "manifest.json"
CONFIG = "config.toml"
TOKENIZER = "tokenizer.json"
BACKBONE_WEIGHTS = "backbone.weights.h5"
MODEL_WEIGHTS = "model.weights.h5"
LABELS = "labels.json"
METRICS = "metrics.json"
POOLING = "pooling.json"
STEP_LOG = "logs/steps.jsonl"
DEV_LOG = "logs/dev.jsonl"
#: The folder of a self-training family's epoch checkpoints, and the file written last in it.
EPOCH_CHECKPOINTS = "checkpoint"
EPOCH_CHECKPOINT_STATE = "state.json"


class RunDir:
    """A run directory; see the module docstring for its files.

    Args:
        path: the directory.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def require(self, name: str, hint: str = "") -> Path:
        """Return the path of file ``name``; raise :class:`RunDirError` when it is missing."""
        if not self.path.is_dir():
            raise RunDirError(f"{self.path}: no such run directory")
        file = self.path / name
        if not file.exists():
            raise RunDirError(f"{file}: missing{hint or ' (is this a finished ptmkit run directory?)'}")
        return file

    def read_json(self, name: str) -> Any:
        """Read a JSON file of the run, naming it in the error when it is missing or invalid."""
        file = self.require(name)
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RunDirError(f"{file}: corrupted JSON ({exc})") from None

    def manifest(self) -> dict[str, Any]:
        """The run's manifest.

        Raises:
            RunDirError: no directory, no manifest (an unfinished run), invalid JSON, or an export's
                manifest (an export directory given where a run is needed).
        """
        manifest = self.read_json(MANIFEST)
        if isinstance(manifest, dict) and str(manifest.get("format", "")).startswith("ptmkit-export/"):
            raise RunDirError(f"{self.path}: an ONNX export, not a run directory; give the run it was exported from (translate, embed and serve read exports)")
        if not isinstance(manifest, dict) or "family" not in manifest or "stage" not in manifest:
            raise RunDirError(f"{self.path / MANIFEST}: not a ptmkit manifest (no 'family' or 'stage')")
        return manifest

    def write_json(self, name: str, data: Any) -> None:
        atomic_write_json(self.path / name, data)

    def write_manifest(self, **fields: Any) -> dict[str, Any]:
        """Write the manifest (last, so that its presence marks a finished run)."""
        import ptmkit

        manifest = {
            "format": "ptmkit-run/1",
            "ptmkit_version": ptmkit.__version__,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            **fields,
        }
        atomic_write_json(self.path / MANIFEST, manifest)
        return manifest

    def load_tokenizer(self) -> Any:
        """The run's ``tokenizer.json`` as a ``tokenizers.Tokenizer``."""
        from tokenizers import Tokenizer

        file = self.require(TOKENIZER)
        try:
            return Tokenizer.from_file(str(file))
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise RunDirError(f"{file}: cannot be read as a tokenizers file ({exc})") from None


def has_epoch_checkpoint(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a complete epoch checkpoint (its :data:`EPOCH_CHECKPOINT_STATE`,
    written last, exists)."""
    return (Path(run_dir) / EPOCH_CHECKPOINTS / EPOCH_CHECKPOINT_STATE).exists()


def load_weights(model: Any, file: Path) -> None:
    """Load Keras weights from ``file`` into ``model``.

    Raises:
        RunDirError: the file is missing, truncated or corrupted, or holds weights of another shape.
    """
    if not file.exists():
        raise RunDirError(f"{file}: missing weights file")
    try:
        model.load_weights(str(file))
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RunDirError(f"{file}: corrupted or incompatible weights file ({reason[:200]})") from None


def check_weights_file(file: Path) -> None:
    """Open ``file`` (``.weights.h5``) with h5py and read every dataset's header, without Keras or
    TensorFlow: a missing, truncated or garbled file is refused before a run imports them
    (:func:`load_weights` still refuses weights of another shape).

    Raises:
        RunDirError: the file is missing or not a readable HDF5 file (the message of :func:`load_weights`).
    """
    import h5py

    if not file.exists():
        raise RunDirError(f"{file}: missing weights file")
    shapes: list[tuple[int, ...]] = []  # reading each shape reads its header (visititems stops at a non-None return)
    try:
        with h5py.File(file, "r") as handle:
            handle.visititems(lambda _, item: shapes.append(item.shape) if isinstance(item, h5py.Dataset) else None)
    except Exception as exc:  # h5py raises OSError, KeyError or RuntimeError for damaged files
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RunDirError(f"{file}: corrupted or incompatible weights file ({reason[:200]})") from None


def save_model_weights(model: Any, file: Path) -> None:
    """Write ``model``'s weights, without its optimizer's state, to ``file`` (``.weights.h5``).

    ``keras.Model.save_weights`` of a compiled model also stores the optimizer's variables (Adam's
    two moments: a file three times the model's size) that nothing reads once training is done.
    The write is not atomic by itself: call it through :func:`ptmkit.io.atomic_save`.
    """
    from keras.src.saving import saving_lib  # save_weights' own writer; it takes what to skip

    optimizer = getattr(model, "optimizer", None)
    saving_lib.save_weights_only(model, str(file), objects_to_skip=[optimizer] if optimizer is not None else None)


@contextlib.contextmanager
def staged_run(target: str | Path, purpose: str) -> Iterator[RunDir]:
    """A run directory built beside ``target`` and moved into place only when the block ends
    without an exception, so a failure leaves nothing at ``target``.

    ``target`` must not exist, or be an empty directory (replaced). The staged directory gets the
    umask's permissions (not ``mkdtemp``'s 0700) before it moves.

    Args:
        purpose: a word for the staging directory's name (``.TARGET.PURPOSE-XXXX``).

    Raises:
        RunDirError: ``target`` exists and is not an empty directory.
        OutputError: ``target``'s directory cannot be written.
    """
    import os

    from ptmkit.io import staging_directory

    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RunDirError(f"{target}: exists and is not an empty directory; choose another --out")
    with staging_directory(target, f".{target.name}.{purpose}-") as staged:
        yield RunDir(staged)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staged, 0o777 & ~umask)
        if target.exists():
            target.rmdir()
        os.replace(staged, target)


def write_backbone_run(
    run: RunDir, registry: Any, family: str, config: dict[str, Any], tokenizer: Any, backbone: Any,
    tokenizer_file: Path | None = None, **manifest_fields: Any,
) -> dict[str, Any]:
    """Write a pre-trained run that is a backbone and its tokenizer (an imported checkpoint, a
    compressed run): ``config.toml`` (``config``, a run config as a dict), ``tokenizer.json``
    (``tokenizer_file`` copied as it is, else ``tokenizer`` saved), the backbone's weights, and
    last the manifest (stage ``pretrain``, no objectives or head, ``family``'s plugin, and
    ``manifest_fields``).

    Returns:
        the manifest.
    """
    import shutil

    from ptmkit.config import to_toml
    from ptmkit.io import atomic_save, atomic_write_text

    atomic_write_text(run / CONFIG, to_toml(config))
    if tokenizer_file is not None:
        shutil.copyfile(tokenizer_file, run / TOKENIZER)
    else:
        tokenizer.save(str(run / TOKENIZER))
    atomic_save(run / BACKBONE_WEIGHTS, lambda tmp: backbone.save_weights(str(tmp)))
    plugin = registry.owner("family", family)
    return run.write_manifest(
        stage="pretrain", family=family, plugin={"name": plugin.name, "distribution": plugin.distribution, "version": plugin.version},
        objectives=[], head=None, weights=BACKBONE_WEIGHTS, **manifest_fields,
    )
