"""Paths of the shipped data and the tiny BERT settings the tests train with."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
#: Small fixtures shared by the core's tests and the tests beside the plugins.
TEST_DATA = REPO / "tests" / "data"

# A BERT small enough to pre-train in seconds; every code path is the real one.
TINY = [
    "model.num_layers=1",
    "model.hidden_dim=32",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    "model.vocabulary_size=600",
    "model.max_sequence_length=64",
    "train.batch_size=8",
    "train.sequence_length=32",
    "train.max_steps=8",
    "train.checkpoint_every=2",
    "train.heldout_lines=20",
    "train.learning_rate=1e-3",
]
