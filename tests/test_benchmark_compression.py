"""``benchmarks/compression_methods.py --quick`` end to end (the tiny pre-trained BERT of two blocks
that ``head_pruning.py --quick`` fine-tunes as its teacher): the scripts cannot rot, and the table
holds what the methods must give. No timings are asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HIDDEN, INTERMEDIATE = 32, 64  # the --quick BERT's sizes (tests/tinyconfig.py's)
ATTENTION = 4 * HIDDEN * HIDDEN + 4 * HIDDEN + 2 * HIDDEN  # q, k, v, output projections with biases; layer norm
FEED_FORWARD = 2 * HIDDEN * INTERMEDIATE + INTERMEDIATE + HIDDEN + 2 * HIDDEN  # two dense layers with biases; layer norm


@pytest.mark.slow  # ~50 s; tests/test_benchmark_scripts.py starts the script, each method it tables is tested on its own
# (test_compress.py, test_compress_theseus.py, test_prune_heads.py, test_qat.py, test_distillation.py)
def test_compression_methods_quick(tmp_path: Path) -> None:
    out = tmp_path / "table.md"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compression_methods.py"), "--quick", "--rounds", "1", "--calls", "2",
                           "--work", str(tmp_path / "work"), "--out", str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# Module replacement and cross-layer sharing: size, int8 latency, accuracy (--quick: tiny BERT)")
    assert "Command: `python benchmarks/compression_methods.py --quick --rounds 1 --calls 2 " in text
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {cells[0]: dict(zip(header, cells, strict=True)) for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}
    assert list(rows) == ["teacher", "theseus 1 blocks", "shared all (mean)"]  # --quick: one sharing row

    def number(row: str, column: str) -> float:
        return float(rows[row][column].replace(",", ""))

    teacher = number("teacher", "parameters")
    # one of the two blocks goes (replacement) or is tied to the other (sharing): exact drops
    assert teacher - number("theseus 1 blocks", "parameters") == ATTENTION + FEED_FORWARD
    assert teacher - number("shared all (mean)", "parameters") == ATTENTION + FEED_FORWARD
    for row in rows:
        assert number(row, "int8 MB") < number(row, "fp32 MB")  # the int8 file is smaller
        assert 0.0 <= number(row, "dev acc (int8)") <= 1.0 and 0.0 <= number(row, "agreement with teacher") <= 1.0
        assert number(row, "int8 ms (1x128)") > 0
        if row != "teacher":
            assert number(row, "fp32 MB") < number("teacher", "fp32 MB")  # shared weights are stored once
    assert number("teacher", "agreement with teacher") == 1.0
