"""``benchmarks/objectives.py --quick`` end to end on three rows (no pre-training, dynamic MLM, RTD):
the script cannot rot, each row holds its figures, and the page states ELECTRA's claim from the
rows. No accuracy or timing is asserted (20 steps of a tiny BERT)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def objectives_module() -> Any:
    """``benchmarks/objectives.py`` imported as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("objectives_benchmark", ROOT / "benchmarks" / "objectives.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # 3-8 min on two shared cores; each objective's statistics and training are tested on its own (test_objective_training.py,
# test_objectives.py, test_objective_variants.py, test_rtd.py), and test_benchmark_scripts.py starts the script
def test_objectives_benchmark_quick(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "objectives.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "objectives.py"), "--quick", "--rows", "none,mlm-dynamic,rtd", "--work", str(tmp_path / "work"),
                           "--output", str(out)], env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {key: json.loads((tmp_path / "work" / "rows" / f"{key}.json").read_text()) for key in ("none", "mlm-dynamic", "rtd")}
    for result in results.values():
        assert 0.0 <= result["dev_accuracy"] <= 1.0 and 0.0 <= result["test_accuracy"] <= 1.0 and list(result["seeds"]) == ["1"]
        assert math.isfinite(result["heldout_loss"]) and result["parameters"] > 0
    assert results["rtd"]["parameters"] == results["mlm-dynamic"]["parameters"]  # the generator is dropped: the discriminator is the backbone
    text = out.read_text()
    assert f"| machine | {os.cpu_count()} CPU cores (" in text
    assert "| MLM, dynamic masking (RoBERTa) |" in text and "| RTD (ELECTRA) |" in text
    assert "ELECTRA's claim (replaced-token detection beats masked LM at equal compute) " in text


def test_a_kept_row_of_other_settings_is_refused_not_mixed_in(tmp_path: Path) -> None:
    """A row kept in --rows-dir is reused only by a run of the same settings: one of 20 steps
    would otherwise stand in a table of 250."""
    module = objectives_module()
    args = Namespace(steps=250, train_rows=20_000, epochs=2, seeds=[1, 2], quick=False, rows_dir=tmp_path)
    _, objectives, overrides = module.ROWS["none"]
    kept = {"label": "x", "dev_accuracy": 0.5, "objectives": objectives, "overrides": overrides, "settings": {**module.settings(args), "steps": 20}}
    (tmp_path / "none.json").write_text(json.dumps(kept))
    with pytest.raises(SystemExit, match=r"none\.json: a row made with \{'steps': 20, .*not this run's \{'steps': 250, .*give another --rows-dir"):
        module.row_result("none", args, tmp_path / "work")
    (tmp_path / "none.json").write_text(json.dumps({**kept, "settings": module.settings(args), "overrides": []}))  # a row of another recipe
    with pytest.raises(SystemExit, match=r"none\.json: a row made with .*\['mlm'\], \[\]\), not this run's .*'train.max_steps=1'"):
        module.row_result("none", args, tmp_path / "work")
    (tmp_path / "none.json").write_text(json.dumps({**kept, "settings": module.settings(args)}))
    assert module.row_result("none", args, tmp_path / "work") == {**kept, "settings": module.settings(args), "from_cache": True}
    args.seeds = [2, 1]  # the same seeds in another order
    assert module.row_result("none", args, tmp_path / "work")["from_cache"] is True


def test_runs_of_other_settings_in_work_are_refused(tmp_path: Path) -> None:
    """Pre-training and fine-tuning runs left in --work by a run of other settings (a --quick run
    before a full one) are not picked up as this run's."""
    module = objectives_module()
    args = Namespace(steps=250, train_rows=20_000, epochs=2, seeds=[1, 2], quick=False, rows_dir=tmp_path / "rows")
    (tmp_path / "work" / "none").mkdir(parents=True)
    (tmp_path / "work" / "none" / "settings.json").write_text(json.dumps({**module.settings(args), "quick": True, "steps": 20}))
    with pytest.raises(SystemExit, match=r"work/none: runs made with .*\"steps\": 20.*give another --work"):
        module.row_result("none", args, tmp_path / "work")
