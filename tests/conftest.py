"""Shared fixtures: the repository's real data, and one tiny pre-training run per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tinyconfig import DATA, TINY

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 400 paragraphs of the shipped Wikipedia corpus."""
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:400]
    path = tmp_path_factory.mktemp("corpus") / "wiki-400.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    """A finished tiny pre-training run (masked LM + NSP) made through the Python API."""
    from ptmkit.training.pretrain import pretrain

    out = tmp_path_factory.mktemp("runs") / "pretrain"
    pretrain("bert", tiny_corpus, out, overrides=TINY, objectives=["mlm", "nsp"])
    return out
