"""Fixtures of the cove plugin's tests: real English-German pairs, a GloVe text file of their
English words, and one tiny run trained on them for the whole session."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cove_tiny import GLOVE_DIM, PAIRS, TINY_COVE
from tinyconfig import DATA


@pytest.fixture(scope="session")
def cove_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """``(pairs, glove, vectors)``: the first :data:`PAIRS` shipped pairs (header kept), a GloVe
    text file of random vectors for their English words (most frequent first), and those vectors."""
    from collections import Counter

    work = tmp_path_factory.mktemp("cove")
    lines = (DATA / "parallel" / "en-de-train-10k.tsv").read_text(encoding="utf-8").splitlines()[: PAIRS + 1]
    pairs = work / "pairs.tsv"
    pairs.write_text("\n".join(lines) + "\n", encoding="utf-8")
    counts = Counter(word for line in lines[1:] for word in line.split("\t")[0].split())
    rng = np.random.default_rng(3)
    vectors = {word: rng.normal(0, 0.5, GLOVE_DIM).astype(np.float32) for word, _ in counts.most_common()}
    glove = work / "glove.txt"
    glove.write_text("".join(f"{word} {' '.join(f'{v:.6f}' for v in vector)}\n" for word, vector in vectors.items()), encoding="utf-8")
    vectors = {word: np.asarray([float(f"{v:.6f}") for v in vector], np.float32) for word, vector in vectors.items()}  # as written
    return pairs, glove, vectors


@pytest.fixture(scope="session")
def cove_run(tmp_path_factory: pytest.TempPathFactory, cove_data: tuple[Path, Path, dict[str, np.ndarray]]) -> tuple[Path, dict]:
    """``(run, metrics)`` of the tiny model trained on the pairs (dev: the same pairs)."""
    from inplugins import registered

    from ptmkit.testing import main

    pairs, glove, _ = cove_data
    run = tmp_path_factory.mktemp("cove_run") / "run"
    argv = ["train", "cove", "--parallel", str(pairs), "--dev", str(pairs), "--out", str(run), "--set", f"model.glove={glove}"]
    for override in TINY_COVE:
        argv += ["--set", override]
    with registered():
        assert main(argv) == 0
    return run, json.loads((run / "metrics.json").read_text())
