"""``benchmarks/word2vec_vs_gensim.py --quick``: the benchmark's code on 300 lines for one epoch, so
that the script cannot rot between runs (issue 21, section 5); no speed is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_quick_run_measures_both_toolkits_at_one_and_two_threads(tmp_path: Path) -> None:
    out = tmp_path / "w2v.md"
    command = [sys.executable, str(ROOT / "benchmarks" / "word2vec_vs_gensim.py"), "--quick", "--variants", "SGNS", "SG+HS", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    page = out.read_text(encoding="utf-8")
    for field in ("| date | 20", "| commit | ", "| load | load average (1, 5, 15 min) ", "| command | `python benchmarks/word2vec_vs_gensim.py --quick"):
        assert field in page, field
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines() if line.startswith("| SG")]
    assert [(row[0], row[1]) for row in rows] == [("SGNS", "1"), ("SGNS", "2"), ("SG+HS", "1"), ("SG+HS", "2")]
    for row in rows:
        gensim, ptmkit = (float(cell.replace(",", "")) for cell in row[2:4])
        assert gensim > 0 and ptmkit > 0, row
        assert -1 <= float(row[5].split()[0]) <= 1 and -1 <= float(row[6].split()[0]) <= 1, row
