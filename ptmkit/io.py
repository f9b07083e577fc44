"""Atomic file writes: a reader never sees a half-written file that looks whole."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary file lives in the same directory (so ``os.replace`` is atomic) and keeps the
    final suffix (``suffix`` or ``path``'s own), because some writers (Keras' ``save_weights``)
    insist on it. On any exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix is None:
        suffix = "".join(path.suffixes) or ""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name.split('.')[0]}.tmp-", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a run directory is shared like any file
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")


def atomic_save(path: str | os.PathLike[str], save: Callable[[Path], object]) -> None:
    """Call ``save(tmp_path)`` and rename the result onto ``path`` atomically."""
    with atomic_path(path) as tmp:
        save(tmp)


def _json_default(value: Any) -> Any:
    # numpy scalars and paths appear in metrics and manifests.
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
