"""Fixtures of the elmo plugin's tests: one tiny pre-trained run for the whole session."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptmkit.testing import tiny_pretrain, write_tiny_corpus

#: An ELMo small enough to pre-train in seconds: every code path is the real one.
TINY_ELMO = [
    "model.vocabulary_size=200",
    "model.min_frequency=1",
    "model.char_embedding_dim=4",
    "model.filter_widths=[1,2,3]",
    "model.filter_counts=[4,4,8]",
    "model.projection_dim=8",
    "model.lstm_dim=12",
    "model.dropout=0.0",
    "train.sequence_length=24",
    "train.batch_size=8",
    "train.max_steps=4",
    "train.checkpoint_every=2",
    "train.heldout_lines=12",
    "train.learning_rate=3e-3",
]


@pytest.fixture(scope="session")
def elmo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """``(run, corpus, metrics)`` of a tiny pre-trained elmo run."""
    from inplugins import registered

    work = tmp_path_factory.mktemp("elmo")
    corpus = write_tiny_corpus(work / "corpus.txt", lines=120)
    with registered():
        metrics = tiny_pretrain("elmo", corpus, work / "run", TINY_ELMO)
    return work / "run", corpus, metrics
