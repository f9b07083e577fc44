"""Fixtures of the gpt plugin's tests: one tiny pre-trained run for the whole session."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptmkit.testing import tiny_pretrain, write_tiny_corpus

#: A GPT small enough to pre-train in seconds; every line of the tiny corpus fits one window.
TINY_GPT = [
    "model.num_layers=2",
    "model.hidden_dim=32",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    "model.vocabulary_size=400",
    "model.max_sequence_length=64",
    "model.dropout=0.0",
    "train.sequence_length=64",
    "train.batch_size=8",
    "train.max_steps=6",
    "train.heldout_lines=12",
]


@pytest.fixture(scope="session")
def gpt_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """``(run, corpus, metrics)`` of a tiny pre-trained gpt run."""
    from inplugins import registered

    work = tmp_path_factory.mktemp("gpt")
    corpus = write_tiny_corpus(work / "corpus.txt", lines=120)
    with registered():
        metrics = tiny_pretrain("gpt", corpus, work / "run", TINY_GPT)
    return work / "run", corpus, metrics




@pytest.fixture(scope="session")
def gpt_export(gpt_run, tmp_path_factory: pytest.TempPathFactory):
    """``(run, export_dir, predictor, keras generator)``: the session run exported by the CLI."""
    from inplugins import registered

    from ptmkit.testing import main
    from ptmkit_export import Predictor
    from ptmkit_gpt.generate import TextGenerator

    run, _, _ = gpt_run
    out = tmp_path_factory.mktemp("gpt-export") / "export"
    with registered():
        assert main(["export", str(run), "--out", str(out)]) == 0
        return run, out, Predictor(out), TextGenerator(run)
