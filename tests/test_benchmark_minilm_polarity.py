"""``benchmarks/minilm_polarity.py --quick`` end to end (issue 21): the tiny random BERT (MiniLM's
tokenizer) scored by cross-validation, frozen (logistic regression on its embeddings, all five
folds) and fine-tuned by ptmkit and by the torch reference (fold 1, the recipe cut to one epoch of
32 tokens, the same for both sides); the table's counts and intervals follow from the folds. The
accuracies of a random model mean nothing and no timing is asserted."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmark_quick import run_quick


def _wilson(correct: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    p = correct / total
    centre, half = (
        (p + z * z / (2 * total)) / (1 + z * z / total),
        z * (p * (1 - p) / total + z * z / (4 * total * total)) ** 0.5 / (1 + z * z / total),
    )
    return centre - half, centre + half


def test_minilm_polarity_quick(tmp_path: Path) -> None:
    printed = run_quick("minilm_polarity.py", "--work", str(tmp_path))
    pattern = r"^\| (frozen C=\S+|ptmkit|torch) \| (.+?) \| ([\d.]+) \((\d+)/(\d+)\) \| ([\d.]+)-([\d.]+) \| [^|]+ \| (\d+) \|$"
    rows = {
        name: (cells.split(" | "), *map(float, rest))
        for name, cells, *rest in re.findall(pattern, printed, re.MULTILINE)
    }
    assert list(rows) == ["frozen C=0.1", "frozen C=1", "frozen C=10", "ptmkit", "torch"], printed
    for name, (folds, pooled, correct, total, low, high, _) in rows.items():
        assert total == (200 if name.startswith("frozen") else 40), (
            name
        )  # 5 stratified folds of 40; --quick fine-tunes fold 1
        assert [cell != "-" for cell in folds] == (
            [True] * 5 if name.startswith("frozen") else [False, True, False, False, False]
        ), name
        assert pooled == round(correct / total, 3) and (low, high) == tuple(
            round(x, 3) for x in _wilson(int(correct), int(total))
        )
    assert len((tmp_path / "folds" / "1" / "train.txt").read_text().splitlines()) == 160
    assert len((tmp_path / "folds" / "1" / "dev.txt").read_text().splitlines()) == 40
    job = json.loads((tmp_path / "torch" / "fold1.json").read_text())  # what the torch side trained
    assert job["checkpoint"] == str(tmp_path / "tiny-bert") and (
        job["settings"]["epochs"],
        job["settings"]["sequence_length"],
    ) == (1, 32)
    assert (len(job["train"]), len(job["dev"])) == (160, 40)
