"""Fixtures of the ulmfit plugin's tests: ULMFiT's three stages, tiny, once for the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptmkit.testing import tiny_pretrain, write_tiny_corpus, write_tiny_labelled

#: An AWD-LSTM small enough to train in seconds, every dropout on: every code path is the real one.
TINY_ULMFIT = [
    "model.vocabulary_size=200",
    "model.min_frequency=1",
    "model.embedding_dim=8",
    "model.hidden_dim=12",
    "model.num_layers=2",
    "model.weight_dropout=0.3",
    "train.sequence_length=24",
    "train.batch_size=8",
    "train.max_steps=3",
    "train.heldout_lines=12",
    "train.schedule=slanted_triangular",
]


@pytest.fixture(scope="session")
def ulmfit_stages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The directories and files of a tiny ULMFiT: ``general`` (stage 1), ``target`` (stage 2,
    ``--init general`` on the task's texts) and ``classifier`` (stage 3), with ``corpus``,
    ``train`` and ``dev``."""
    from inplugins import registered

    from ptmkit.testing import finetune, pretrain

    work = tmp_path_factory.mktemp("ulmfit")
    corpus = write_tiny_corpus(work / "corpus.txt", lines=80)
    train, dev = write_tiny_labelled(work, train=48, dev=16)
    with registered():
        tiny_pretrain("ulmfit", corpus, work / "general", TINY_ULMFIT)
        pretrain("ulmfit", train, work / "target", overrides=["train.max_steps=2", "train.heldout_lines=8"], init=work / "general")
        finetune(work / "target", train, dev, work / "classifier", overrides=["finetune.epochs=2", "finetune.batch_size=16", "finetune.sequence_length=16"])
    return {"general": work / "general", "target": work / "target", "classifier": work / "classifier", "corpus": corpus, "train": train, "dev": dev}
