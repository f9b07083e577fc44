"""Every script in ``benchmarks/`` (all but the modules they share, :data:`MODULES`) starts: ``--help`` exits 0 with its usage, all of them run in one
child process (module-level imports of ptmkit names that moved, or a bad argparse setup, fail
here). The scripts that have a ``--quick`` mode run it in their own tests (some marked ``slow``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Modules of benchmarks/ that the scripts import, not scripts themselves.
MODULES = {"kept_rows.py"}
SCRIPTS = sorted(path for path in (ROOT / "benchmarks").glob("*.py") if path.name not in MODULES)

CHILD = """
import contextlib, io, json, runpy, sys
results = {}
for path in json.loads(sys.argv[1]):
    sys.argv = [path, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        results[path] = "no SystemExit"
    except SystemExit as stop:
        results[path] = "ok" if stop.code in (0, None) and "usage:" in out.getvalue() else f"exit {stop.code}: {out.getvalue()[-300:]}"
    except Exception as error:
        results[path] = f"{type(error).__name__}: {error}"
print(json.dumps(results))
"""


def test_every_benchmark_script_prints_its_usage() -> None:
    assert len(SCRIPTS) > 20
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps([str(p) for p in SCRIPTS])], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert {Path(p).name: r for p, r in results.items() if r != "ok"} == {}


def test_benchmarks_readme_lists_every_script() -> None:
    """benchmarks/README.md names every script (what it measures, its anchor, its command, its last
    result): a script missing there is one nobody reruns."""
    listed = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert [p.name for p in sorted((ROOT / "benchmarks").glob("*.py")) if f"`{p.name}`" not in listed] == []


def test_every_benchmark_script_has_a_quick_mode_that_a_test_runs() -> None:
    """Issue 21, section 5: each script takes ``--quick`` (its code on a tiny input) and a test
    runs it (a test file that names the script and runs a quick mode: ``run_quick``, ``--quick``,
    or gpu_check's ``--dry-run``), so that no script rots between its rare real runs."""
    tests = [path.read_text(encoding="utf-8") for path in [*(ROOT / "tests").glob("test_*.py"), *(ROOT / "plugins").glob("*/tests/test_*.py")]]
    assert [p.name for p in SCRIPTS if '"--quick"' not in p.read_text(encoding="utf-8")] == []
    runs_quick = ("run_quick(", '"--quick"', '"--dry-run"')
    assert [p.name for p in SCRIPTS if not any(p.name in text and any(mark in text for mark in runs_quick) for text in tests)] == []
