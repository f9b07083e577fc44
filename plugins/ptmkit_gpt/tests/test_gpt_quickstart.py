"""``ptmkit quickstart --family gpt``, shrunk to a tiny GPT and a few steps (the real budget's
wall time is in benchmarks/results/quickstart.md)."""

from __future__ import annotations

import json

import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from tinyconfig import DATA

from ptmkit.api import QuickstartPlan

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

#: The conftest's tiny GPT, 4 steps.
TINY = [
    "model.num_layers=2", "model.hidden_dim=32", "model.num_heads=2", "model.intermediate_dim=64", "model.vocabulary_size=400",
    "model.max_sequence_length=64", "model.dropout=0.0", "train.sequence_length=64", "train.batch_size=8", "train.max_steps=4",
    "train.heldout_lines=12",
]  # fmt: skip


def test_gpt_quickstart_pretrains_reports_perplexity_exports_and_samples(tmp_path, monkeypatch, capsys) -> None:
    from ptmkit.testing import main
    from ptmkit_export import Predictor
    from ptmkit_gpt import quickstart

    data = tmp_path / "data"
    (data / "corpus").mkdir(parents=True)
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:300]
    (data / "corpus" / "enwiki-106.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    sample = {**quickstart.BUDGETS["small"].generate, "max_new_tokens": 6}
    monkeypatch.setitem(quickstart.BUDGETS, "small", QuickstartPlan(TINY, {"pretrain": 10, "export": 10, "sample": 1}, quickstart.PROMPTS, sample))
    out = tmp_path / "qs"
    assert main(["quickstart", "--family", "gpt", "--budget", "small", "--out", str(out), "--data", str(data)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["family"] == "gpt" and list(summary["stages"]) == ["pretrain", "export", "sample"]
    run = summary["runs"]["pretrain"]
    assert run["steps"] == 4 and run["heldout_word_perplexity"] > 1 and run["heldout_bits_per_byte"] > 0
    expected = Predictor(out / "pretrain" / "export").generate(quickstart.PROMPTS, **sample)
    assert [s["text"] for s in summary["samples"]] == expected  # the same seed, the same text
    assert [s["prompt"] for s in summary["samples"]] == quickstart.PROMPTS
    assert summary["export"]["variants"]["fp32"] is True and (out / "report.html").exists()
    printed = "".join(capsys.readouterr())
    assert "3/3 a generation sample" in printed and "heldout_word_perplexity" in printed
    # Again: every stage is reused.
    assert main(["quickstart", "--family", "gpt", "--budget", "small", "--out", str(out), "--data", str(data)]) == 0
    assert "already pre-trained, reusing it" in "".join(capsys.readouterr())


def test_quickstart_of_a_family_without_a_tour_names_those_with_one(tmp_path, capsys) -> None:
    from ptmkit.testing import main

    assert main(["quickstart", "--family", "word2vec", "--out", str(tmp_path / "qs")]) == 2
    error = capsys.readouterr().err.strip()
    assert "--family word2vec: has no quickstart of its own; families with one: gpt" in error and "\n" not in error
    assert main(["quickstart", "--family", "gpt", "--budget", "huge", "--out", str(tmp_path / "qs")]) == 2
    assert "--budget huge: the gpt quickstart has full, small" in capsys.readouterr().err
    assert not (tmp_path / "qs").exists()
