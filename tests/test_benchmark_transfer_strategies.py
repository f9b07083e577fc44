"""``benchmarks/transfer_strategies.py --quick`` end to end (issue 20's transfer table on the tiny
pre-trained BERT of ``compression.py --quick``, a few hundred WordNet supersense glosses): every
strategy row runs, is exported to int8, and the table holds what each strategy must give. No
timings asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = ["full", "features (last layer)", "features (scalar mix)", "adapters (m = 64)", "lora (r = 8, alpha = 16, query + value)"]


@pytest.mark.slow  # ~150 s at load 3 on two shared cores; each strategy is tested on its own (test_strategies.py: which
# weights train, the adapters' export, LoRA's merge parity), and test_benchmark_scripts.py starts the script
def test_transfer_table_quick(tmp_path: Path) -> None:
    out = tmp_path / "table.md"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "transfer_strategies.py"), "--quick", "--rounds", "1", "--calls", "2",
                           "--work", str(tmp_path / "work"), "--out", str(out)], env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# Fine-tuning strategies on WordNet supersenses (--quick: tiny BERT)")
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {cells[0]: dict(zip(header, cells, strict=True)) for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}
    assert list(rows) == ROWS  # --quick: no peft anchor

    def number(row: str, column: str) -> float:
        return float(rows[row][column].replace(",", "").rstrip("%"))

    full = number("full", "parameters")
    assert number("full", "trainable") == full and rows["full"]["trainable share"] == "100.00%"
    for row in ROWS[1:]:
        assert number(row, "trainable") < 0.35 * number(row, "parameters")
        assert abs(number(row, "trainable share") - 100 * number(row, "trainable") / number(row, "parameters")) < 0.01
    assert number("adapters (m = 64)", "parameters") > full and number("adapters (m = 64)", "fp32 MB") > number("full", "fp32 MB")
    # LoRA's factors are folded into the kernels by --merge-lora: the export has the base model's size
    assert abs(number("lora (r = 8, alpha = 16, query + value)", "fp32 MB") - number("full", "fp32 MB")) < 0.01 * number("full", "fp32 MB")
    for row in ROWS:
        assert number(row, "int8 MB") < number(row, "fp32 MB") and number(row, "int8 ms (1x128)") > 0 and number(row, "train s") > 0
        assert 0.0 <= number(row, "dev acc (int8)") <= 1.0 and 0.0 <= number(row, "test acc (int8)") <= 1.0
