"""Finished rows of a long benchmark, one JSON file each, kept beside its results page.

A benchmark of many hours (``objectives.py``, ``denoising.py``, ``seq2seq_reference.py``) runs one
row at a time; each finished row is written to ``ROWS_DIR/KEY.json`` (atomically) and committed
with the page, so that an interrupted benchmark resumes where it stopped, on the same machine or on
a fresh clone, and a later session can add the rows an earlier one had no time for.

A kept row records the settings it was made with (what its figures depend on besides the row's own
recipe) and when, where and under which load it ran. It is reused only by a run of the same
settings and the same recipe; anything else is refused in one line naming the file, never mixed
into a table of other settings. Work directories (the runs a row is made from) carry the same
settings in ``settings.json`` and are refused likewise.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


class KeptRows:
    """The rows kept in ``directory`` for a run of ``settings``.

    Args:
        directory: where ``KEY.json`` files are kept (created).
        settings: JSON-serialisable; a kept row is reused only when its ``settings`` equal these.
    """

    def __init__(self, directory: Path, settings: dict[str, Any]) -> None:
        self.directory = directory
        self.settings = settings
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        """The file of row ``key``."""
        return self.directory / f"{key}.json"

    def get(self, key: str, recipe: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Row ``key`` as kept (with ``from_cache: True``), or None when none is.

        Args:
            recipe: the row's own definition (e.g. its objectives and overrides), stored at the
                top level of the row; it must match too.

        Raises:
            SystemExit: the kept row was made with other settings or another recipe.
        """
        path = self.path(key)
        if not path.exists():
            return None
        kept = read_object(path, "a kept row")
        recipe = recipe or {}
        if kept.get("settings") != self.settings or any(kept.get(name) != value for name, value in recipe.items()):
            theirs = ", ".join(repr(kept.get(name)) for name in recipe)
            ours = ", ".join(repr(value) for value in recipe.values())
            raise SystemExit(
                f"{path}: a row made with {kept.get('settings')}{f' ({theirs})' if recipe else ''}, not this run's {self.settings}"
                f"{f' ({ours})' if recipe else ''}; give another --rows-dir (or remove the file to run the row again)"
            )
        return {**kept, "from_cache": True}

    def put(self, key: str, result: dict[str, Any], started: dict[str, Any]) -> dict[str, Any]:
        """Keep ``result`` as row ``key``, with this run's settings and ``ran`` (date, the commit
        and 1-minute load when the row started: ``started``, from :func:`start`; the load now);
        written whole or not at all. Returns what was kept."""
        ran = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": started["commit"], "load": f"{started['load']:.2f} to {os.getloadavg()[0]:.2f}"}
        kept = {**result, "settings": self.settings, "ran": ran}
        kept.pop("from_cache", None)
        atomic_write(self.path(key), json.dumps(kept, indent=1) + "\n")
        return kept

    def claim_work(self, directory: Path) -> None:
        """Mark ``directory`` (a row's runs) as made with this run's settings.

        Raises:
            SystemExit: it holds runs made with other settings (a ``--quick`` run's, say).
        """
        directory.mkdir(parents=True, exist_ok=True)
        marker = directory / "settings.json"
        if marker.exists() and read_object(marker, "a work directory's settings") != self.settings:
            raise SystemExit(
                f"{directory}: runs made with {marker.read_text(encoding='utf-8').strip()}, not this run's {self.settings}; "
                "give another --work (or remove that directory)"
            )
        marker.write_text(json.dumps(self.settings), encoding="utf-8")


def page_header(title: str, script: str, load_at_start: float) -> list[str]:
    """A results page's first lines: its title, then a table of date (UTC), commit, machine, load
    (1-minute, at ``load_at_start`` and now) and the command that made it (``script`` and this
    process's arguments)."""
    import sys

    command = f"python benchmarks/{script} {' '.join(sys.argv[1:])}".strip()
    return [
        f"# {title}", "", "| | |", "|---|---|", f"| date | {time.strftime('%Y-%m-%d', time.gmtime())} |", f"| commit | {git_commit()} |",
        f"| machine | {machine()} |", f"| load | 1-minute load average {load_at_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end |",
        f"| command | `{command}` |", "",
    ]


def start() -> dict[str, Any]:
    """What a row records of its start: this checkout's commit (``+dirty`` with uncommitted
    changes) and the 1-minute load average; give it to :meth:`KeptRows.put`."""
    if os.environ.get("PTMKIT_COMMIT"):
        return {"commit": os.environ["PTMKIT_COMMIT"], "load": os.getloadavg()[0]}
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git_commit() + ("+dirty" if dirty else ""), "load": os.getloadavg()[0]}


def read_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
        SystemExit: one line naming the file, when it is not a JSON object (truncated, hand-edited).
    """
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SystemExit(f"{path}: not readable as {what} ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); remove it to run the row again") from None
    if not isinstance(value, dict):
        raise SystemExit(f"{path}: not {what} (a JSON {type(value).__name__}, not an object); remove it to run the row again")
    return value


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a partial file, then a rename)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def git_commit() -> str:
    """The ``PTMKIT_COMMIT`` environment variable where set (a copy of the tree on another machine,
    whose ``.git`` may lag behind it), else this checkout's short commit hash ("" outside git)."""
    return os.environ.get("PTMKIT_COMMIT") or _git("rev-parse", "--short", "HEAD")


def _git(*args: str) -> str:
    """``git ARGS`` in this checkout: its stripped output, "" where git or the repository is missing."""
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def machine() -> str:
    """This machine's CPU model, core count and matrix extensions, from ``/proc/cpuinfo``."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return f"{os.cpu_count()} CPU cores"
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    extensions = [name for flag, name in (("avx512_vnni", "AVX-512 VNNI"), ("avx512_bf16", "AVX-512 BF16"), ("amx_bf16", "AMX")) if flag in flags]
    return f"{os.cpu_count()} CPU cores ({model}{', ' + ', '.join(extensions) if extensions else ''}), no GPU"
