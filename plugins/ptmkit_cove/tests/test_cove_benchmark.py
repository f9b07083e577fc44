"""``benchmarks/cove_supersense.py --quick`` on the session's tiny CoVe run: its three arms train
the same classifier on the same glosses, so that the script cannot rot between runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("in_tree_plugins")
ROOT = Path(__file__).resolve().parents[3]


def test_quick_benchmark_compares_the_three_arms(cove_run, cove_data, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("cove_supersense", ROOT / "benchmarks" / "cove_supersense.py")
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    run, _ = cove_run
    _, glove, _ = cove_data
    out = tmp_path / "page.md"
    rows = benchmark.main(["--quick", "--work", str(tmp_path / "work"), "--glove", str(glove), "--cove", str(run), "--out", str(out)])
    assert [rows[arm]["features"] for arm in benchmark.ARMS] == [8, 24, 24]  # GloVe 8, then [GloVe; 2 x 8]
    for row in rows.values():
        assert row["train"] == 64 and row["dev"] == 32 and 0.0 <= row["dev_accuracy"] <= 1.0 and 0.0 <= row["test_accuracy"] <= 1.0
    page = out.read_text(encoding="utf-8")
    assert "--quick" in page and "Commit:" in page and "Load average" in page and "| glove+random-cove | 24 |" in page
