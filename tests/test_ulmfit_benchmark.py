"""``benchmarks/ulmfit_supersense.py --quick --rows full``: the ablation's code end to end on tiny
models (both LM stages, the full row's classifier, the results page), so that the script cannot
rot between runs. No accuracy is asserted beyond its range: the models are too small to learn.
(The other rows differ only in the LM run they start from and their finetune keys.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from inplugins import registered

ROOT = Path(__file__).resolve().parents[1]


def test_quick_ablation_runs_the_full_row(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("ulmfit_supersense", ROOT / "benchmarks" / "ulmfit_supersense.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with registered():
        assert module.main(["--quick", "--rows", "full", "--work", str(tmp_path), "--out", str(tmp_path / "page.md")]) == 0
    results = json.loads((tmp_path / "quick" / "results.json").read_text())
    assert list(results["rows"]) == ["full"] and sorted(results["lms"]) == ["general", "target"]
    for row in results["rows"].values():
        assert 0 <= row["dev_accuracy"] <= 1 and 0 <= row["test_accuracy"] <= 1 and row["train_examples"] == 300
    assert json.loads((tmp_path / "quick" / "target" / "manifest.json").read_text())["init"] == str(tmp_path / "quick" / "general")
    page = (tmp_path / "page.md").read_text()
    assert "--quick" in page and "commit" in page and "load average" in page and "| full |" in page and "| random |" not in page
