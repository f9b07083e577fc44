"""Atomic file writes: a reader never sees a half-written file that looks whole."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ptmkit.errors import DataError, OutputError


def output_error(path: str | os.PathLike[str], exc: OSError) -> OutputError:
    """The one-line :class:`~ptmkit.errors.OutputError` for ``exc``, raised while writing ``path``
    (through a temporary file or directory beside it): it names ``path``, not the temporary."""
    path = Path(path)
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno == errno.ENOENT and path.parent.is_dir():
        reason = f"{path.parent} does not accept new files"  # /proc, /sys: the directory exists
    elif exc.errno in (errno.EEXIST, errno.ENOTDIR) and (file := next((p for p in path.parents if p.is_file()), None)):
        reason = f"{file} is a file, not a directory"  # mkdir's "File exists" named no file
    elif exc.errno == errno.ENOENT:
        reason = f"{reason}: {next((str(p) for p in path.parents if not p.exists() and p.parent.exists()), path.parent)}"
    return OutputError(f"{path}: cannot write ({reason})")


@contextlib.contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an ``OSError`` of the block into :func:`output_error` naming ``path``. For blocks that
    only create, write and rename files of the destination (not ones that read inputs)."""
    try:
        yield
    except OSError as exc:
        raise output_error(path, exc) from None


@contextlib.contextmanager
def staging_directory(target: str | os.PathLike[str], prefix: str) -> Iterator[str]:
    """A temporary directory beside ``target`` (same file system, so that the caller's final
    ``os.replace`` is atomic), removed on exit whatever happens.

    Raises:
        OutputError: ``target``'s directory cannot be created or written, naming ``target``.
    """
    target = Path(target)
    with writing(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp_name = tempfile.mkdtemp(prefix=prefix, dir=target.parent)
    try:
        yield tmp_name
    finally:
        shutil.rmtree(tmp_name, ignore_errors=True)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary file lives in the same directory (so ``os.replace`` is atomic) and keeps the
    final suffix (``suffix`` or ``path``'s own), because some writers (Keras' ``save_weights``)
    insist on it. On any exception the temporary file is removed and ``path`` is untouched.

    Raises:
        OutputError: ``path``'s directory cannot be created or written, the rename fails, or the
            block's writer fails on the temporary file or for lack of space, naming ``path``.
    """
    path = Path(path)
    if suffix is None:
        suffix = "".join(path.suffixes) or ""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name.split('.')[0]}.tmp-", suffix=suffix, dir=path.parent)
        os.close(fd)
    tmp = Path(tmp_name)
    try:
        with writing(path):
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a run directory is shared like any file
        try:
            yield tmp
        except OSError as exc:
            if exc.filename in (str(tmp), tmp) or exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS):
                raise output_error(path, exc) from None  # the writer's failure, told about the user's path
            raise
        with writing(path):
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


def read_json(path: str | os.PathLike[str], error: type[Exception] = DataError) -> Any:
    """The JSON value in the file at ``path``.

    Raises:
        ``error`` (default :class:`~ptmkit.errors.DataError`): the file cannot be read, is not
            UTF-8 or is not valid JSON; one line naming the file.
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not valid JSON ({exc})") from None


def read_utf8_lines(file: Path, keep_blank: bool = False) -> list[str]:
    """The non-blank lines of ``file`` as they are (strictly UTF-8; a leading byte-order mark is
    dropped): a ``--file`` of prompts or sentences. ``-`` reads standard input. ``keep_blank``
    keeps blank lines as ``""`` (for output that lines up with the input, line for line).

    Raises:
        DataError: a missing file, a directory, invalid UTF-8 (naming the line and byte), or a
            file without a non-blank line.
    """
    if str(file) == "-":
        import sys

        data = sys.stdin.buffer.read()
    elif file.is_dir():
        raise DataError(f"{file}: is a directory, not a file")
    elif not file.exists():
        raise DataError(f"{file}: no such file")
    else:  # a regular file, or a pipe such as the shell's <(command)
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise DataError(f"{file}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark (Windows editors write one)
    lines, texts = [], 0
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{file}:{number}: not valid UTF-8 (byte {exc.start + 1} of the line)") from None
        if line.strip():
            texts += 1
            lines.append(line)
        elif keep_blank:
            lines.append("")
    if not texts:
        raise DataError(f"{file}: no text in it (the file is empty or holds blank lines only)")
    return lines
