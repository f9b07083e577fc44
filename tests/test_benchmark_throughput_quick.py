"""The throughput benchmarks' ``--quick`` modes run end to end (tiny models, 2 steps): each prints
its table with a finite positive tokens/s per row and the ratio to its keras-hub anchor, so the
scripts cannot rot. No speed is asserted (timed assertions do not belong in tests)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


PLAIN_RATIO = r"ratio ptmkit / keras-hub: ([\d.]+)"


@pytest.mark.parametrize(("script", "rows", "ratio_pattern"), [
    ("xlnet_throughput.py", ("ptmkit", "keras-hub"), PLAIN_RATIO),
    ("transformer_throughput.py", ("ptmkit", "keras-hub"), PLAIN_RATIO),
    ("electra_throughput.py", ("keras-hub ElectraBackbone x2 + heads", "ptmkit electra + rtd"), r"^\| ptmkit electra \+ rtd \| [\d,]+ \| ([\d.]+)x \|"),
])
def test_throughput_benchmark_quick(script: str, rows: tuple[str, ...], ratio_pattern: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for row in rows:
        match = re.search(rf"^\| {re.escape(row)} \| ([\d,]+) \|", done.stdout, re.MULTILINE)
        assert match and float(match.group(1).replace(",", "")) > 0, (row, done.stdout[-1500:])
    ratio = re.search(ratio_pattern, done.stdout, re.MULTILINE)
    assert ratio and math.isfinite(float(ratio.group(1))) and float(ratio.group(1)) > 0, done.stdout[-1500:]
