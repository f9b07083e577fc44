"""Running a benchmark script's ``--quick`` mode from a test (issue 21: every script in
``benchmarks/`` has one, run by the suite on a tiny input, so that the scripts cannot rot)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_quick(script: str, *args: str, timeout: int = 600) -> str:
    """The standard output of ``python benchmarks/SCRIPT --quick ARGS``, run with this checkout's
    packages first on ``PYTHONPATH``.

    Raises:
        AssertionError: the script exited non-zero (the message holds its last 3,000 characters of
            standard error).
        subprocess.TimeoutExpired: it ran past ``timeout`` seconds.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
