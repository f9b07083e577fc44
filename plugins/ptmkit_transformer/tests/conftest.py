"""Fixtures of the transformer plugin's tests: 20 real English-German pairs and one tiny run
trained on them until it reproduces them, for the whole session."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformer_pairs import TINY_TRANSFORMER, short_pairs, write_pairs


@pytest.fixture(scope="session")
def pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pairs(tmp_path_factory.mktemp("pairs") / "pairs.tsv", short_pairs())


@pytest.fixture(scope="session")
def overfit_run(tmp_path_factory: pytest.TempPathFactory, pairs_file: Path) -> tuple[Path, dict]:
    """``(run, metrics)`` of the tiny model trained on :func:`short_pairs` (dev: the same pairs)."""
    import json

    from inplugins import registered

    from ptmkit.testing import main

    run = tmp_path_factory.mktemp("transformer") / "run"
    argv = ["train", "transformer", "--parallel", str(pairs_file), "--dev", str(pairs_file), "--out", str(run)]
    for override in TINY_TRANSFORMER:
        argv += ["--set", override]
    with registered():
        assert main(argv) == 0
    return run, json.loads((run / "metrics.json").read_text())
