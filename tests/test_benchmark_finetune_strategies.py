"""``benchmarks/finetune_strategies.py --quick`` end to end (issue 21): the four ptmkit strategies
fine-tune the tiny random BERT (MiniLM's tokenizer, imported by ``import_hf``) with the quickstart's
recipe cut to one epoch, and each trains exactly the weights it should. The accuracies of a random
model mean nothing and no timing is asserted."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmark_quick import run_quick
from safetensors.numpy import load_file

HIDDEN, LAYERS, HEAD = 32, 2, 32 * 2 + 2  # minilm_inference.QUICK; a 2-label output layer


def test_finetune_strategies_quick(tmp_path: Path) -> None:
    printed = run_quick("finetune_strategies.py", "--work", str(tmp_path))
    rows = {
        name: json.loads(metrics)
        for name, metrics in re.findall(r"^(full|features|adapters|lora|peft-lora) (\{.*\})$", printed, re.MULTILINE)
    }
    assert list(rows) == ["full", "features", "adapters", "lora"], printed  # --quick: no peft anchor
    assert json.loads((tmp_path / "results.json").read_text()).keys() == rows.keys()
    checkpoint = sum(tensor.size for tensor in load_file(str(tmp_path / "tiny-bert" / "model.safetensors")).values())
    for name, metrics in rows.items():
        assert metrics["strategy"] == name and (
            metrics["train_examples"],
            metrics["dev_examples"],
            metrics["epochs"],
        ) == (160, 40, 1), metrics
        assert 0.0 <= metrics["dev_accuracy"] <= 1.0 and metrics["train_seconds"] > 0
    assert (
        rows["full"]["parameters"] == rows["full"]["trainable_parameters"] == checkpoint + HEAD
    )  # the whole tiny BERT, its pooler too
    assert rows["features"]["parameters"] == checkpoint + HEAD and rows["features"]["trainable_parameters"] == HEAD
    lora = LAYERS * 2 * 8 * (HIDDEN + HIDDEN)  # rank 8 factors of query and value in each layer
    assert (
        rows["lora"]["parameters"] == checkpoint + HEAD + lora and rows["lora"]["trainable_parameters"] == lora + HEAD
    )
    assert (
        rows["adapters"]["parameters"] > checkpoint + HEAD
        and HEAD < rows["adapters"]["trainable_parameters"] < rows["adapters"]["parameters"] / 10
    )
