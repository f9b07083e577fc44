"""``benchmarks/compression.py --quick`` end to end (issue 20's table on the tiny pre-trained BERT of
``head_pruning.py --quick``, fine-tuned on a few hundred WordNet supersense glosses): every row but
the transformers anchor runs, and the table holds what the methods must give. No timings asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = [
    "teacher",
    "distil logits (blocks 1)",
    "distil tinybert (blocks 1)",
    "distil minilm (blocks 1)",
    "head pruning 50% (no retraining)",
    "magnitude pruning 50%",
    "QAT (int8 per-tensor)",
    "theseus 1 blocks",
    "shared all (mean, no retraining)",
]


@pytest.mark.slow  # ~95 s at load 5 on two shared cores; each row's method is tested on its own (test_distillation.py,
# test_layer_distillation.py, test_compress.py (head pruning, sharing), test_sparsity.py, test_qat.py, test_compress_theseus.py)
def test_compression_table_quick(tmp_path: Path) -> None:
    out = tmp_path / "table.md"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compression.py"), "--quick", "--rounds", "1", "--calls", "2",
                           "--work", str(tmp_path / "work"), "--out", str(out)], env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# Compression methods on one teacher (--quick: tiny BERT)")
    assert "Command: `python benchmarks/compression.py --quick --rounds 1 --calls 2 " in text
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {cells[0]: dict(zip(header, cells, strict=True)) for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}
    assert list(rows) == ROWS  # --quick: no transformers anchor

    def number(row: str, column: str) -> float:
        return float(rows[row][column].replace(",", ""))

    teacher = number("teacher", "parameters")
    for row in ("distil logits (blocks 1)", "theseus 1 blocks", "shared all (mean, no retraining)", "head pruning 50% (no retraining)"):
        assert number(row, "parameters") < teacher  # one block (or half the heads) fewer
    assert number("magnitude pruning 50%", "parameters") == teacher  # the zeros stay in dense kernels
    for row in rows:
        assert number(row, "int8 MB") < number(row, "fp32 MB")
        assert number(row, "int8 ms (1x128)") > 0
        for column in ("dev acc (int8)", "test acc (int8)", "dev agreement with teacher"):
            assert 0.0 <= number(row, column) <= 1.0
    assert number("teacher", "dev agreement with teacher") == 1.0
    assert number("teacher", "train s") > 0 and rows["shared all (mean, no retraining)"]["train s"] == "-"
