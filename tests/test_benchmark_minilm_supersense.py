"""``benchmarks/minilm_supersense.py --quick`` end to end (issue 21): each stage, in its own process,
on the tiny random BERT (MiniLM's tokenizer) and the first WordNet glosses: ptmkit fine-tunes,
exports with int8 and scores the Keras model and both ONNX variants, transformers' ``Trainer``
fine-tunes the same checkpoint, the frozen baseline fits a logistic regression; the report shows
every row. The accuracies of a random model mean nothing and no timing is asserted."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmark_quick import run_quick

ROWS = [
    "HF transformers Trainer (torch fp32)",
    "ptmkit finetune (Keras)",
    "ptmkit export ONNX fp32",
    "ptmkit export ONNX int8",
    "frozen encoder + logistic regression",
]


def test_minilm_supersense_quick(tmp_path: Path) -> None:
    printed = run_quick("minilm_supersense.py", "--work", str(tmp_path))
    rows = {
        name.strip(): (float(dev), float(test))
        for name, dev, test in re.findall(r"^(.{40}) +([\d.]+) +([\d.]+)(?: +\d+| *)$", printed, re.MULTILINE)
    }
    assert list(rows) == ROWS, printed
    assert all(0.0 <= accuracy <= 1.0 for pair in rows.values() for accuracy in pair)
    splits = {
        name: (tmp_path / f"quick-{name}.tsv").read_text(encoding="utf-8").splitlines()
        for name in ("train", "dev", "test")
    }
    assert [len(lines) - 1 for lines in splits.values()] == [160, 40, 40]  # a header, then --quick's glosses
    labels = {line.split("\t")[0] for line in splits["train"][1:]}
    assert all(
        line.split("\t")[0] in labels for name in ("dev", "test") for line in splits[name][1:]
    )  # the Trainer knows every label
    results = {stage: json.loads((tmp_path / f"{stage}.json").read_text()) for stage in ("ptmkit", "hf", "frozen")}
    assert all(result["epochs"] == 1 for result in results.values())
    assert rows["ptmkit finetune (Keras)"] == (
        results["ptmkit"]["keras_dev_accuracy"],
        results["ptmkit"]["keras_test_accuracy"],
    )
    assert rows["HF transformers Trainer (torch fp32)"] == (
        results["hf"]["dev_accuracy"],
        results["hf"]["test_accuracy"],
    )
    assert 0.0 <= results["ptmkit"]["int8_dev_agreement_with_fp32"] <= 1.0 and results["hf"]["train_seconds"] > 0
    gap = re.search(r"^ptmkit - HF: dev ([+-][\d.]+) points, test ([+-][\d.]+) points", printed, re.MULTILINE)
    assert gap and float(gap.group(2)) == round(
        100 * (results["ptmkit"]["keras_test_accuracy"] - results["hf"]["test_accuracy"]), 2
    ), printed
