"""``benchmarks/transfer_stages.py --quick`` end to end (issue 21): single-task, two-stage and both
multi-task rows fine-tune the tiny random BERT (MiniLM's tokenizer) on polarity with the first
WordNet supersense glosses as the other task; the table has every row, each scored on what it
trained, and the multi-task rows sample both tasks. The accuracies of a random model mean nothing
and no timing is asserted."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmark_quick import run_quick

ROWS = ["polarity", "supersense>polarity", "multitask-proportional", "multitask-temperature"]


def test_transfer_stages_quick(tmp_path: Path) -> None:
    printed = run_quick("transfer_stages.py", "--work", str(tmp_path))
    assert re.search(
        r"^# Two-stage and multi-task fine-tuning against single-task \(--quick: tiny BERT\)$", printed, re.MULTILINE
    ), printed
    table = re.findall(r"^\| (\S+) \| ([\d.]+) \| ([\d.]+|-) \| (\d+) \| ([\d.]+)x \|$", printed, re.MULTILINE)
    assert [row[0] for row in table] == ROWS, printed
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["settings"] == {"supersense": 96, "supersense_dev": 40, "multitask_epochs": 1, "quick": True}
    anchor = saved["rows"]["polarity"]["seconds"]
    for name, polarity, supersense, _, ratio in table:
        assert 0.0 <= float(polarity) <= 1.0 and (supersense == "-") == (name == "polarity")
        assert ratio == f"{saved['rows'][name]['seconds'] / anchor:.2f}"
    stage_one = saved["rows"]["supersense>polarity"]["stage_one"]
    assert (stage_one["train_examples"], stage_one["dev_examples"], stage_one["epochs"]) == (96, 40, 1)
    labels = {line.split("\t")[0] for line in (tmp_path / "supersense-train.tsv").read_text().splitlines()[1:]}
    assert (
        stage_one["labels"] == len(labels) and saved["rows"]["polarity"]["metrics"]["epochs"] == 1
    )  # QUICK_RECIPE: one epoch
    for sampling in ("proportional", "temperature"):
        metrics = saved["rows"][f"multitask-{sampling}"]["metrics"]
        assert (
            metrics["task_sampling"] == sampling
            and set(metrics["tasks"]) == {"polarity", "supersense"}
            and metrics["steps"] > 0
        )
